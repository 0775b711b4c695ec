#!/usr/bin/env python3
"""Chat-template parity: `qwenserve tokenize --chat` against jinja2 rendering the template text,
in the environment transformers' apply_chat_template uses (sandboxed, trim_blocks,
lstrip_blocks, loopcontrols, `tojson` = json.dumps(ensure_ascii=False), raise_exception).

Generates N varied conversations (seeded): system prompts, tools, string and list-of-parts
content, whitespace to trim, reasoning_content / inline <think>, tool calls with arguments of
every JSON type (as objects and as JSON strings, which are parsed first as vLLM does), grouped
tool results, enable_thinking / preserve_thinking / add_vision_id / add_generation_prompt, and
malformed inputs where the template raises. A case passes when both render the same text, or
both refuse. Prints "N passed, N failed".

Usage: chat_template_parity.py --binary build/qwenserve --template-file F --format qwen3|qwen3.6
                               --tokenizer DIR_OR_JSON [--count 300]
"""
import argparse
import json
import random
import sys

from template_parity_common import make_env, reference_outcomes, run_tokenize_chat, score, \
    with_parsed_tool_arguments


TEXTS = ["hello", "  What is 2+2?  ", "\nexplain\tthis\n\n", "你好，世界", "héllo wörld 👍🏽",
         "line1\nline2", "", "   ", "<tool_response>\nfake\n</tool_response>", "a 'quote' \"dq\"",
         "\u00a0nbsp\u3000", "multi\n\n\nparagraph\n", "<think>inline</think>", "x" * 40]
REASONING = ["Let me think.", "\nstep 1\nstep 2\n", "", "  spaced  ", "思考中……"]
NAMES = ["get_weather", "search", "run_code", "calc"]


def rand_value(rng, depth=0):
    k = rng.randrange(8 if depth < 2 else 5)
    return [lambda: rng.choice(["Paris", "a b", "", "ünï", "line\nbreak", "42"]),
            lambda: rng.randint(-1000, 10 ** 6),
            lambda: rng.choice([0.5, 1e-05, 3.0, 1e16, -2.25, 123456.789, 1e22]),
            lambda: rng.choice([True, False]),
            lambda: None,
            lambda: [rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))],
            lambda: {f"k{i}": rand_value(rng, depth + 1) for i in range(rng.randint(0, 3))},
            lambda: rng.choice(["x<y", "{\"j\": 1}"])][k]()


def rand_tool(rng, name):
    props = {f"p{i}": {"type": rng.choice(["string", "number", "integer", "boolean", "object", "array"]),
                       "description": rng.choice(["a value", "ünïcode desc", "x"])}
             for i in range(rng.randint(0, 4))}
    fn = {"name": name, "description": rng.choice(["Get things.", "Search the web 🔍", ""]),
          "parameters": {"type": "object", "properties": props, "required": list(props)[:1]}}
    return {"type": "function", "function": fn}


def rand_content(rng, parts_ok):
    r = rng.random()
    if parts_ok and r < 0.2:
        parts = []
        for _ in range(rng.randint(1, 4)):
            kind = rng.randrange(4)
            if kind == 0:
                parts.append({"type": "text", "text": rng.choice(TEXTS)})
            elif kind == 1:
                parts.append({"type": "image", "image": "file://a.png"})
            elif kind == 2:
                parts.append({"type": "image_url", "image_url": {"url": "http://x/y.png"}})
            else:
                parts.append({"type": "video", "video": "file://v.mp4"})
        return parts
    return rng.choice(TEXTS)


def rand_tool_call(rng, as_string):
    args = {f"p{i}": rand_value(rng) for i in range(rng.randint(0, 4))}
    fn = {"name": rng.choice(NAMES), "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}
    return {"id": "call_1", "type": "function", "function": fn} if rng.random() < 0.8 else fn


def rand_conversation(rng, fmt):
    parts_ok = fmt != "qwen3"
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rand_content(rng, parts_ok)})
    for _ in range(rng.randint(1, 4)):
        msgs.append({"role": "user", "content": rand_content(rng, parts_ok)})
        if rng.random() < 0.75:
            a = {"role": "assistant", "content": rng.choice(TEXTS)}
            r = rng.random()
            if r < 0.3:
                a["reasoning_content"] = rng.choice(REASONING)
            elif r < 0.45:
                a["content"] = "<think>\n" + rng.choice(REASONING) + "\n</think>\n\n" + a["content"]
            elif r < 0.5:
                a["reasoning_content"] = None
            if rng.random() < 0.35:
                a["tool_calls"] = [rand_tool_call(rng, rng.random() < 0.5) for _ in range(rng.randint(1, 3))]
                msgs.append(a)
                for _ in range(rng.randint(1, 3)):
                    msgs.append({"role": "tool", "content": rng.choice(TEXTS[:8])})
                if rng.random() < 0.5:
                    msgs.append({"role": "assistant", "content": rng.choice(TEXTS),
                                 "reasoning_content": rng.choice(REASONING)})
            else:
                msgs.append(a)
    case = {"messages": msgs}
    if rng.random() < 0.4:
        case["tools"] = [rand_tool(rng, n) for n in rng.sample(NAMES, rng.randint(1, 3))]
    for key in ("add_generation_prompt", "enable_thinking", "preserve_thinking", "add_vision_id"):
        if rng.random() < 0.5:
            case[key] = rng.random() < 0.5
    return case


def malformed(rng, fmt):
    base = rand_conversation(rng, fmt)
    k = rng.randrange(6)
    m = base["messages"]
    if k == 0:
        base["messages"] = []
    elif k == 1:
        m.append({"role": "system", "content": "late system"})
    elif k == 2:
        m.insert(len(m) - 1, {"role": "wizard", "content": "?"})
    elif k == 3:
        m[-1]["content"] = 12345
    elif k == 4:
        base["messages"] = [x for x in m if x["role"] != "user"] or [{"role": "assistant", "content": "x"}]
    else:
        m.append({"role": "assistant", "content": "c",
                  "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{not json"}}]})
    return base


def render_reference(template, case, fmt):
    if fmt != "qwen3":  # vLLM parses JSON-string tool arguments before templating
        case = with_parsed_tool_arguments(case)
    kwargs = {k: v for k, v in case.items() if k != "messages"}
    kwargs.setdefault("add_generation_prompt", True)
    return template.render(messages=case["messages"], **kwargs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--template-file", required=True)
    ap.add_argument("--format", required=True, choices=["qwen3", "qwen3.6"])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--count", type=int, default=300)
    args = ap.parse_args()

    text = open(args.template_file, encoding="utf-8").read()
    if args.template_file.endswith(".json"):
        text = json.loads(text)["chat_template"]
    template = make_env().from_string(text)
    rng = random.Random(1234 if args.format == "qwen3" else 5678)
    cases = [rand_conversation(rng, args.format) for _ in range(args.count)]
    cases += [malformed(rng, args.format) for _ in range(max(20, args.count // 10))]

    # The native renderers' refusals need not word raise_exception's message as the template does.
    want = [("error", w[1]) if w[0] == "raised" else w
            for w in reference_outcomes(cases, lambda c: render_reference(template, c, args.format))]
    got = run_tokenize_chat(args.binary, args.tokenizer, ["--template", args.format], cases)
    if got is None:
        sys.exit(1)
    passed, failed = score(args.format, cases, want, got, show=5)
    errors = sum(1 for w in want if w[0] == "error")
    print(f"{args.format}: {len(cases)} conversations ({errors} the template refuses)")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or len(got) != len(cases) else 0)


if __name__ == "__main__":
    main()
