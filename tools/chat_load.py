"""Concurrent streaming chat load against a running `qwenserve serve` (or any OpenAI server).

    .venv/bin/python tools/chat_load.py --base http://127.0.0.1:18080/v1 --model qwen36-tiny \
        --concurrency 64 --max-tokens 32

Starts all requests at once (one asyncio task each, the official openai client), each a
different question so the prompts are not all prefix-cache hits of one another. Prints
requests/s (completed / wall from the first send to the last [DONE]), completion tokens/s (from
the usage chunk), TTFT p50/p99 (send to the first chunk carrying text or reasoning) and the
finish reasons. Needs only the test venv (openai, httpx).
"""
import argparse
import asyncio
import statistics
import time

import openai

TOPICS = ["json.dumps", "os.path.join", "shutil.copyfile", "re.compile", "textwrap.dedent", "heapq.heappush",
          "functools.lru_cache", "itertools.chain", "collections.Counter", "pathlib.Path.glob", "csv.reader",
          "random.choice", "string.Template", "bisect.insort", "logging.getLogger", "argparse.ArgumentParser"]


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def one(client, model, i, max_tokens, thinking):
    question = f"Explain the function `{TOPICS[i % len(TOPICS)]}` (question {i})."
    t0 = time.perf_counter()
    ttft, usage, finish = None, None, None
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}], max_tokens=max_tokens, temperature=0,
        stream=True, stream_options={"include_usage": True},
        extra_body={"chat_template_kwargs": {"enable_thinking": thinking}})
    async for chunk in stream:
        for ch in chunk.choices:
            if ttft is None and (ch.delta.content or getattr(ch.delta, "reasoning_content", None)):
                ttft = time.perf_counter() - t0
            finish = ch.finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    return ttft, usage.completion_tokens, finish


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="http://127.0.0.1:18080/v1")
    ap.add_argument("--model", default="qwen36-tiny")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--no-thinking", action="store_true")
    a = ap.parse_args()
    import httpx
    client = openai.AsyncOpenAI(base_url=a.base, api_key="unused", max_retries=0, timeout=300,
                                http_client=openai.DefaultAsyncHttpxClient(
                                    limits=httpx.Limits(max_connections=a.concurrency + 8)))
    t0 = time.perf_counter()
    results = await asyncio.gather(*(one(client, a.model, i, a.max_tokens, not a.no_thinking)
                                     for i in range(a.concurrency)))
    wall = time.perf_counter() - t0
    ttfts = [r[0] for r in results if r[0] is not None]
    tokens = sum(r[1] for r in results)
    finishes = {}
    for r in results:
        finishes[r[2]] = finishes.get(r[2], 0) + 1
    print(f"requests {len(results)}  wall {wall:.2f} s  requests/s {len(results) / wall:.1f}  "
          f"completion tokens {tokens}  tokens/s {tokens / wall:.0f}")
    print(f"TTFT p50 {statistics.median(ttfts) * 1000:.0f} ms  p99 {percentile(ttfts, 99) * 1000:.0f} ms  "
          f"finish reasons {finishes}")


if __name__ == "__main__":
    asyncio.run(main())
