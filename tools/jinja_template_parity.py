#!/usr/bin/env python3
"""Jinja interpreter parity: `qwenserve tokenize --chat --template jinja --chat-template F` against
jinja2 rendering the same template text in the environment transformers' apply_chat_template
uses (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, `tojson` =
json.dumps(ensure_ascii=False, ...), raise_exception, strftime_now) and with the variables it
passes: messages, tools (None when absent), documents (None), add_generation_prompt, the
tokenizer's special tokens (tokenizer_config.json), then every chat_template_kwargs key.
Tool-call arguments given as JSON strings are parsed first, as vLLM does.

For each template: seeded conversations of the shapes the template accepts (system prompt,
multi-turn, tool calls and results, parts content, whitespace and unicode, generation prompt on
and off, template kwargs) plus malformed ones it refuses. A case passes when both render the
same bytes, or both refuse; when the template itself raises (raise_exception), the messages must
match too. Fails when fewer than half the cases render text (the sweep would test nothing).

Usage: jinja_template_parity.py --binary build/qwenserve --tokenizer models/qwen36-tiny
                                 TEMPLATE.jinja[:kind] ... [--count 60]
kind (what conversations the template takes): plain (default), no_system, alternating,
tools, tools_id9 (Mistral's 9-character call ids), parts.
"""
import argparse
import json
import os
import random
import sys

from template_parity_common import make_env, reference_outcomes, run_tokenize_chat, score, \
    with_parsed_tool_arguments


TEXTS = ["hello", "  What is 2+2?  ", "\nexplain\tthis\n\n", "你好，世界", "héllo wörld 👍🏽", "line1\nline2",
         "a 'quote' \"dq\" \\ back", "\u00a0nbsp\u3000", "multi\n\n\nparagraph\n", "<think>hidden</think>answer",
         "x" * 40, "{{ not a tag }}", "ΣΊΣΥΦΟΣ ß"]
NAMES = ["get_weather", "search", "run_code", "calc"]


def rand_value(rng, depth=0):
    k = rng.randrange(8 if depth < 2 else 5)
    return [lambda: rng.choice(["Paris", "a b", "", "ünï", "line\nbreak", "42", "q\"uote"]),
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
             for i in range(rng.randint(0, 3))}
    fn = {"name": name, "description": rng.choice(["Get things.", "Search the web 🔍", ""]),
          "parameters": {"type": "object", "properties": props, "required": list(props)[:1]}}
    return {"type": "function", "function": fn}


def call_id(rng, kind):
    if kind == "tools_id9":
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(9))
    return rng.choice(["call_1", "call_abc123", "tool-7"])


def rand_content(rng, kind):
    if kind == "parts" and rng.random() < 0.3:
        parts = []
        for _ in range(rng.randint(1, 3)):
            parts.append({"type": "text", "text": rng.choice(TEXTS)} if rng.random() < 0.7
                         else {"type": "image"})
        return parts
    return rng.choice(TEXTS)


def rand_conversation(rng, kind):
    msgs = []
    if kind != "no_system" and rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(TEXTS)})
    tools_ok = kind in ("tools", "tools_id9")
    for turn in range(rng.randint(1, 3)):
        msgs.append({"role": "user", "content": rand_content(rng, kind)})
        if tools_ok and rng.random() < 0.3:
            n = 1 if rng.random() < 0.7 else 2
            calls = []
            for _ in range(n):
                args = {f"p{i}": rand_value(rng) for i in range(rng.randint(0, 3))}
                calls.append({"id": call_id(rng, kind), "type": "function",
                              "function": {"name": rng.choice(NAMES),
                                           "arguments": json.dumps(args, ensure_ascii=False) if rng.random() < 0.5
                                           else args}})
            msgs.append({"role": "assistant", "content": rng.choice(["", None, "Let me check."]), "tool_calls": calls})
            for c in calls:
                msgs.append({"role": "tool", "tool_call_id": c["id"], "content": rng.choice(TEXTS[:8])})
            msgs.append({"role": "assistant", "content": rng.choice(TEXTS)})
        elif rng.random() < 0.8 or turn < 2:
            msgs.append({"role": "assistant", "content": rand_content(rng, kind)})
    if msgs[-1]["role"] == "assistant" and rng.random() < 0.7:
        msgs.append({"role": "user", "content": rng.choice(TEXTS)})
    case = {"messages": msgs, "add_generation_prompt": rng.random() < 0.7}
    if tools_ok and rng.random() < 0.6:
        case["tools"] = [rand_tool(rng, n) for n in rng.sample(NAMES, rng.randint(1, 3))]
    kwargs = {}
    if rng.random() < 0.3:
        kwargs["date_string"] = "01 Jan 2030"
    if rng.random() < 0.3:
        kwargs["tools_in_user_message"] = rng.random() < 0.5
    if rng.random() < 0.2:
        kwargs["builtin_tools"] = ["brave_search", "wolfram_alpha"]
    if rng.random() < 0.3:
        kwargs["bos_token"] = "<s>"
        kwargs["eos_token"] = "</s>"
    if rng.random() < 0.2:
        kwargs["enable_thinking"] = rng.random() < 0.5
    if kwargs:
        case["chat_template_kwargs"] = kwargs
    return case


def malformed(rng, kind):
    case = rand_conversation(rng, kind)
    m = case["messages"]
    k = rng.randrange(4)
    if k == 0:
        m.append({"role": "system", "content": "late system"})
    elif k == 1:
        m.insert(0, {"role": "assistant", "content": "starts with assistant"})
    elif k == 2:
        m.append({"role": "user", "content": "two users"})
        m.append({"role": "user", "content": "in a row"})
    else:
        m.append({"role": "wizard", "content": "?"})
    return case


def special_tokens(tokenizer_dir):
    path = os.path.join(tokenizer_dir, "tokenizer_config.json")
    out = {}
    if not os.path.exists(path):
        return out
    cfg = json.load(open(path, encoding="utf-8"))
    for key in ("bos_token", "eos_token", "pad_token"):
        v = cfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[key] = v
    return out


def render_reference(template, case, specials):
    case = with_parsed_tool_arguments(case)
    variables = dict(specials)
    variables.update(case.get("chat_template_kwargs", {}))
    return template.render(messages=case["messages"], tools=case.get("tools"), documents=None,
                           add_generation_prompt=case.get("add_generation_prompt", True), **variables)


def run_template(args, spec, specials):
    path, _, kind = spec.partition(":")
    kind = kind or "plain"
    text = open(path, encoding="utf-8").read()
    template = make_env().from_string(text)
    rng = random.Random(sum(map(ord, os.path.basename(path))))
    cases = [rand_conversation(rng, kind) for _ in range(args.count)]
    cases += [malformed(rng, kind) for _ in range(max(5, args.count // 6))]
    want = reference_outcomes(cases, lambda c: render_reference(template, c, specials))
    got = run_tokenize_chat(args.binary, args.tokenizer, ["--template", "jinja", "--chat-template", path], cases)
    if got is None:
        return False
    passed, failed = score(path, cases, want, got)
    texts = sum(1 for w in want if w[0] == "text")
    raised = sum(1 for w in want if w[0] == "raised")
    print(f"{os.path.basename(path)} ({kind}): {len(cases)} cases ({texts} rendered, {raised} raise_exception, "
          f"{len(cases) - texts - raised} other errors): {passed} passed, {failed} failed")
    if texts < len(cases) // 2:
        print(f"  too few cases render text ({texts} of {len(cases)}): the conversations do not fit the template")
        return False
    return failed == 0 and len(got) == len(cases)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--tokenizer", required=True, help="a model directory with tokenizer.json")
    ap.add_argument("--count", type=int, default=60)
    ap.add_argument("templates", nargs="+")
    args = ap.parse_args()
    specials = special_tokens(args.tokenizer)
    ok = all([run_template(args, spec, specials) for spec in args.templates])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
