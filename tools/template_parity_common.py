"""What the two chat-template parity tools share: the jinja2 environment transformers'
apply_chat_template renders in, vLLM's parsing of JSON-string tool arguments, running
`qwenserve tokenize --chat` over a batch of cases, and scoring its replies against jinja2's.

A reference outcome is ("text", rendered), ("raised", message: the template's raise_exception)
or ("error", description: jinja2 itself refused). Ours passes a "text" case with the same bytes,
a "raised" case with the same message, an "error" case with any error.
"""
import copy
import datetime
import json
import subprocess

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class RaisedByTemplate(Exception):
    pass


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise RaisedByTemplate(message)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def with_parsed_tool_arguments(case):
    """A copy of the case whose JSON-string tool-call arguments are parsed, as vLLM does."""
    case = copy.deepcopy(case)
    for m in case.get("messages", []):
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function", tc)
            if isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.loads(fn["arguments"])
    return case


def reference_outcomes(cases, render):
    want = []
    for case in cases:
        try:
            want.append(("text", render(case)))
        except RaisedByTemplate as e:
            want.append(("raised", str(e)))
        except Exception as e:  # jinja2 refuses (a malformed case, a type error): ours must refuse too
            want.append(("error", f"{type(e).__name__}: {e}"))
    return want


def run_tokenize_chat(binary, tokenizer, template_args, cases):
    """Our rendering of each case (one JSON reply per line), or None with the reason printed."""
    proc = subprocess.run([binary, "tokenize", "--tokenizer", tokenizer, "--chat"] + template_args,
                          input="".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases).encode(),
                          capture_output=True, check=False)
    if proc.returncode != 0:
        print(f"qwenserve tokenize --chat {' '.join(template_args)} failed: {proc.stderr.decode()}")
        return None
    return [json.loads(line) for line in proc.stdout.decode().split("\n") if line]


def score(label, cases, want, got, show=3):
    """(passed, failed) over the cases; prints the first `show` failures."""
    passed = failed = 0
    for case, w, g in zip(cases, want, got):
        if w[0] == "text":
            ok = g.get("text") == w[1]
        elif w[0] == "raised":
            ok = g.get("error") == w[1]
        else:
            ok = "error" in g
        if ok:
            passed += 1
            continue
        failed += 1
        if failed <= show:
            print("FAIL", label, json.dumps(case, ensure_ascii=False)[:600])
            print("  want", w[0], repr(w[1])[:800])
            print("  got ", repr(g)[:800])
    return passed, failed
