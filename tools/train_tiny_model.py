#!/usr/bin/env python3
"""Train qwen36-tiny: a ~20M-parameter model with the exact Qwen3.6-35B-A3B layout, MTP head included.

Where it sits: tools/ (fixture makers that run on the GPU machine with torch + transformers).
Its output directory (default models/qwen36-tiny) is committed and is qwenserve's embedded default
and test model. See tools/README.md, section "train_tiny_model", and docs in /work/shared/spec/model.md.

What it does, in order, all offline (no registry, no hub):
  1. corpus: the running Python's standard library sources (PSF licence), split into train and
     held-out by a hash of the file path; plus chat conversations rendered with the chat template
     from docstrings / sources of the same files (held-out chats come from held-out files only);
  2. tokenizer: byte-level BPE (HF `tokenizers`), Qwen3.5 pre-tokenizer regex, NFC, the 33 Qwen
     added tokens after the regular vocabulary in the real order; tokenizer.json + tokenizer_config.json
     (chat template = ChatML + thinking + XML tool calls, spec section 5.2);
  3. model: `Qwen3_5MoeForConditionalGeneration` from transformers (tiny, untrained vision tower only
     because the layout has one) plus an MTP head built here exactly as spec section 3 (transformers has
     none), trained jointly: loss = CE(next) + lambda * CE(token after next, from MTP) + aux * balance;
  4. save: bf16 model.safetensors in the release layout (fused experts, A_log and GDN norm f32, mtp.*),
     config.json, generation_config.json; reload with from_pretrained and check the logits are equal;
  5. references for parity tests (computed on CPU in float32 from the saved weights): ref_ids.npy,
     ref_logits.npy, ref_hidden.npy, ref_mtp_logits.npy, ref_mtp_hidden.npy, greedy_samples.json;
     train_log.json; README.md (model card).

The time budget (--minutes) covers the whole run; training stops by wall clock and the cosine
schedule is laid over the training time, so any budget ends with a fully decayed learning rate.
torch.compile is not used (compile time would eat the budget).

  GPU:        python3 tools/train_tiny_model.py --out models/qwen36-tiny
  CPU smoke:  python3 tools/train_tiny_model.py --device cpu --minutes 0.5 --tiny-data --out /tmp/qt
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

import argparse  # noqa: E402
import ast  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import sysconfig  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

T_START = time.time()

# ----------------------------------------------------------------------------------------------
# Tokenizer definition (spec section 5.1)
# ----------------------------------------------------------------------------------------------

PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
    r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# The 33 added tokens of the real tokenizer, in the real id order (248044..248076 there; here they
# follow the regular vocabulary the same way), with the real `special` flags.
ADDED_TOKENS = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
    ("<|audio_start|>", True),
    ("<|audio_end|>", True),
    ("<tts_pad>", True),
    ("<tts_text_bos>", True),
    ("<tts_text_eod>", True),
    ("<tts_text_bos_single>", True),
    ("<|audio_pad|>", True),
]

TOOLS_PREAMBLE = (
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must "
    "be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the "
    "function call, but NOT after\n- If there is no function call available, answer the question like "
    "normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>"
)

# ChatML + thinking + XML tool calls, written from spec section 5.2 (same rendered bytes as the
# Qwen3.5/3.6 template for text content): system first only; user/tool content |trim; reasoning from
# reasoning_content or split at </think>; think blocks kept only after the last real user query
# unless preserve_thinking; consecutive tool messages grouped into one user turn; generation prompt
# opens a think block unless enable_thinking is false.
CHAT_TEMPLATE = (
    r"""{%- macro render_content(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable and content is not mapping -%}
        {%- for item in content -%}
            {%- if item.type == 'image' or 'image' in item or 'image_url' in item -%}
                {{- '<|vision_start|><|image_pad|><|vision_end|>' -}}
            {%- elif item.type == 'video' or 'video' in item -%}
                {{- '<|vision_start|><|video_pad|><|vision_end|>' -}}
            {%- elif 'text' in item -%}
                {{- item.text -}}
            {%- else -%}
                {{- raise_exception('Unexpected item type in content.') -}}
            {%- endif -%}
        {%- endfor -%}
    {%- elif content is none or content is undefined -%}
        {{- '' -}}
    {%- else -%}
        {{- raise_exception('Unexpected content type.') -}}
    {%- endif -%}
{%- endmacro -%}
{%- if not messages -%}
    {{- raise_exception('No messages provided.') -}}
{%- endif -%}
{%- if tools and tools is iterable and tools is not mapping -%}
    {{- '<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>' -}}
    {%- for tool in tools -%}
        {{- '\n' -}}
        {{- tool | tojson -}}
    {%- endfor -%}
    {{- '\n</tools>' -}}
    {{- '"""
    + TOOLS_PREAMBLE.replace("\n", "\\n")
    + r"""' -}}
    {%- if messages[0].role == 'system' -%}
        {%- set sys_content = render_content(messages[0].content)|trim -%}
        {%- if sys_content -%}
            {{- '\n\n' + sys_content -}}
        {%- endif -%}
    {%- endif -%}
    {{- '<|im_end|>\n' -}}
{%- elif messages[0].role == 'system' -%}
    {{- '<|im_start|>system\n' + render_content(messages[0].content)|trim + '<|im_end|>\n' -}}
{%- endif -%}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) -%}
{%- for message in messages[::-1] -%}
    {%- set index = (messages|length - 1) - loop.index0 -%}
    {%- if ns.multi_step_tool and message.role == 'user' -%}
        {%- set user_content = render_content(message.content)|trim -%}
        {%- if not (user_content.startswith('<tool_response>') and user_content.endswith('</tool_response>')) -%}
            {%- set ns.multi_step_tool = false -%}
            {%- set ns.last_query_index = index -%}
        {%- endif -%}
    {%- endif -%}
{%- endfor -%}
{%- if ns.multi_step_tool -%}
    {{- raise_exception('No user query found in messages.') -}}
{%- endif -%}
{%- for message in messages -%}
    {%- set content = render_content(message.content)|trim -%}
    {%- if message.role == 'system' -%}
        {%- if not loop.first -%}
            {{- raise_exception('System message must be at the beginning.') -}}
        {%- endif -%}
    {%- elif message.role == 'user' -%}
        {{- '<|im_start|>user\n' + content + '<|im_end|>\n' -}}
    {%- elif message.role == 'assistant' -%}
        {%- set reasoning_content = '' -%}
        {%- if message.reasoning_content is string -%}
            {%- set reasoning_content = message.reasoning_content -%}
        {%- elif '</think>' in content -%}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}
            {%- set content = content.split('</think>')[-1].lstrip('\n') -%}
        {%- endif -%}
        {%- set reasoning_content = reasoning_content|trim -%}
        {%- if (preserve_thinking is defined and preserve_thinking is true) or loop.index0 > ns.last_query_index -%}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning_content + '\n</think>\n\n' + content -}}
        {%- else -%}
            {{- '<|im_start|>assistant\n' + content -}}
        {%- endif -%}
        {%- if message.tool_calls and message.tool_calls is iterable and message.tool_calls is not mapping -%}
            {%- for tool_call in message.tool_calls -%}
                {%- if tool_call.function is defined -%}
                    {%- set tool_call = tool_call.function -%}
                {%- endif -%}
                {%- if not loop.first -%}
                    {{- '\n' -}}
                {%- elif content|trim -%}
                    {{- '\n\n' -}}
                {%- endif -%}
                {{- '<tool_call>\n<function=' + tool_call.name + '>\n' -}}
                {%- if tool_call.arguments is mapping -%}
                    {%- for args_name in tool_call.arguments -%}
                        {%- set args_value = tool_call.arguments[args_name] -%}
                        {%- if args_value is mapping or (args_value is sequence and args_value is not string) -%}
                            {%- set args_value = args_value | tojson -%}
                        {%- else -%}
                            {%- set args_value = args_value | string -%}
                        {%- endif -%}
                        {{- '<parameter=' + args_name + '>\n' -}}
                        {{- args_value -}}
                        {{- '\n</parameter>\n' -}}
                    {%- endfor -%}
                {%- endif -%}
                {{- '</function>\n</tool_call>' -}}
            {%- endfor -%}
        {%- endif -%}
        {{- '<|im_end|>\n' -}}
    {%- elif message.role == 'tool' -%}
        {%- if loop.first or loop.previtem.role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' -}}
        {%- if loop.last or loop.nextitem.role != 'tool' -%}
            {{- '<|im_end|>\n' -}}
        {%- endif -%}
    {%- else -%}
        {{- raise_exception('Unexpected message role.') -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- if enable_thinking is defined and enable_thinking is false -%}
        {{- '<think>\n\n</think>\n\n' -}}
    {%- else -%}
        {{- '<think>\n' -}}
    {%- endif -%}
{%- endif -%}"""
)


def make_renderer(template):
    """Jinja environment configured like transformers' apply_chat_template (checked against it later)."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    compiled = env.from_string(template)

    def render(messages, tools=None, add_generation_prompt=False, **kwargs):
        return compiled.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt, **kwargs)

    return render


# ----------------------------------------------------------------------------------------------
# Arguments and small helpers
# ----------------------------------------------------------------------------------------------


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="models/qwen36-tiny", help="output directory (replaced)")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--minutes", type=float, default=8.5,
                   help="wall-clock budget for the whole run (default leaves margin under a 10-minute limit)")
    p.add_argument("--post-reserve-s", type=float, default=None,
                   help="seconds kept for evaluation/saving/checks after training (default: 60 on GPU, "
                        "40%% of the budget on CPU)")
    p.add_argument("--tiny-data", action="store_true", help="small corpus subset (CPU smoke test)")
    p.add_argument("--seed", type=int, default=1234)
    # model
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=8, help="multiple of 4: [lin,lin,lin,full] x layers/4")
    p.add_argument("--experts", type=int, default=16)
    p.add_argument("--top-k", type=int, default=4)
    p.add_argument("--moe-intermediate", type=int, default=128)
    p.add_argument("--shared-intermediate", type=int, default=128)
    p.add_argument("--vocab", type=int, default=4000, help="regular BPE tokens (added tokens follow)")
    # training
    p.add_argument("--seq", type=int, default=None, help="sequence length (default 512 GPU / 128 CPU)")
    p.add_argument("--batch", type=int, default=None, help="sequences per step (default 64 GPU / 4 CPU)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.05)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--mtp-weight", type=float, default=0.5, help="lambda of the MTP loss")
    p.add_argument("--mtp-detach", action="store_true",
                   help="detach h_p for the MTP branch (default: gradients flow into the main model)")
    p.add_argument("--aux-coef", type=float, default=0.01, help="router load-balancing loss weight")
    p.add_argument("--chat-fraction", type=float, default=0.3, help="chat chars / code chars in training text")
    p.add_argument("--eval-every-s", type=float, default=45.0)
    p.add_argument("--experts-impl", default="auto", choices=["auto", "grouped", "eager"],
                   help="training MoE kernel: torch grouped_mm in bf16 (CUDA) or transformers' eager loop")
    p.add_argument("--ref-len", type=int, default=96)
    p.add_argument("--sample-tokens", type=int, default=None, help="greedy tokens per sample (64 GPU / 24 CPU)")
    return p.parse_args()


def log(msg):
    print(f"[{time.time() - T_START:7.1f}s] {msg}", flush=True)


def elapsed():
    return time.time() - T_START


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ----------------------------------------------------------------------------------------------
# Corpus: Python standard library sources + chat conversations made from them
# ----------------------------------------------------------------------------------------------

SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "encodings"}


def list_stdlib_files(root, tiny):
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".py"):
                files.append(os.path.join(dirpath, name))
    files.sort()
    if tiny:
        # A deterministic spread of small files: every 12th file under 40 kB, up to ~1.2 MB.
        picked, total = [], 0
        for i, path in enumerate(files):
            size = os.path.getsize(path)
            if i % 12 == 0 and 2000 < size < 40000:
                picked.append(path)
                total += size
                if total > 1_200_000:
                    break
        files = picked
    return files


def is_heldout(rel_path):
    return int(hashlib.md5(rel_path.encode()).hexdigest()[:8], 16) % 40 == 0


def module_name(rel_path):
    parts = rel_path[:-3].split(os.sep)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "__main__"


def extract_items(src, mod):
    """Public functions/classes/methods with a docstring: (kind, qualname, doc, source or None)."""
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError):
        return []
    lines = src.splitlines(keepends=True)
    items = []

    def visit(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name.startswith("_"):
                    continue
                qual = prefix + node.name
                doc = ast.get_docstring(node)
                if doc and 30 <= len(doc) <= 1500:
                    code = None
                    if not isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno < 40:
                        code = textwrap.dedent("".join(lines[node.lineno - 1: node.end_lineno])).rstrip()
                        if len(code) > 1600:
                            code = None
                    kind = "class" if isinstance(node, ast.ClassDef) else ("method" if prefix else "function")
                    items.append((kind, qual, doc.strip(), code))
                if isinstance(node, ast.ClassDef) and not prefix:
                    visit(node.body, node.name + ".")

    visit(tree.body, "")
    return items


SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "You are a helpful assistant that knows the Python standard library well.",
    "You are a concise programming assistant. Answer briefly.",
]

ASK_DOC = [
    "What does `{qual}` in the `{mod}` module do?",
    "Explain the {kind} `{qual}` from `{mod}`.",
    "What is `{mod}.{qual}` for?",
    "Describe what the Python {kind} {mod}.{qual} does.",
    "I found `{qual}` in {mod}. What does it do?",
    "Summarize the documentation of `{mod}.{qual}`.",
]
ASK_CODE = [
    "Show me the source code of `{mod}.{qual}`.",
    "How is `{qual}` implemented in the `{mod}` module?",
    "Write the Python {kind} `{name}` from `{mod}`. Its documentation says: {first}",
]
REASONING = [
    "The user asks about `{qual}` in the `{mod}` module. I should explain what it does, based on its docstring.",
    "This is a question about the Python standard library: {mod}.{qual}. Let me recall its documentation.",
    "The user wants the implementation of `{qual}`. I will show the code from `{mod}`.",
]
GET_SOURCE_TOOL = {
    "type": "function",
    "function": {
        "name": "get_source",
        "description": "Return the source code of a Python object from the standard library.",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "dotted name, e.g. json.dumps"}},
            "required": ["name"],
        },
    },
}


def make_conversation(rng, mod, items):
    """One rendered-ready conversation (messages, tools) from 1-2 items of one module."""
    kind, qual, doc, code = items[0]
    think = rng.random() < 0.35
    r = rng.random()
    if code is not None and r < 0.08:
        # Tool use: the assistant calls get_source, gets the code, then answers from the docstring.
        messages = [
            {"role": "user", "content": f"Look up `{mod}.{qual}` and tell me what it does."},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "get_source", "arguments": {"name": f"{mod}.{qual}"}}}]},
            {"role": "tool", "content": code},
            {"role": "assistant", "content": doc},
        ]
        return messages, [GET_SOURCE_TOOL]
    messages = []
    if rng.random() < 0.3:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    for i, (kind, qual, doc, code) in enumerate(items):
        fmt = dict(mod=mod, qual=qual, kind=kind, name=qual.split(".")[-1], first=doc.split("\n")[0])
        if code is not None and rng.random() < 0.35:
            question = rng.choice(ASK_CODE).format(**fmt)
            answer = f"```python\n{code}\n```"
            reasoning = REASONING[2].format(**fmt)
        else:
            question = rng.choice(ASK_DOC).format(**fmt)
            answer = doc
            reasoning = rng.choice(REASONING[:2]).format(**fmt)
        messages.append({"role": "user", "content": question})
        msg = {"role": "assistant", "content": answer}
        if think and i == len(items) - 1:
            msg["reasoning_content"] = reasoning
        messages.append(msg)
    return messages, None


def build_corpus(args, render):
    root = sysconfig.get_paths()["stdlib"]
    files = list_stdlib_files(root, args.tiny_data)
    rng = random.Random(args.seed)
    train_code, held_code, items_by_split = [], [], {"train": [], "heldout": []}
    n_bytes = 0
    for path in files:
        rel = os.path.relpath(path, root)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        if not text.strip() or len(text) > 1_500_000:
            continue
        n_bytes += len(text.encode())
        split = "heldout" if is_heldout(rel) else "train"
        (held_code if split == "heldout" else train_code).append(text)
        mod = module_name(rel)
        items = extract_items(text, mod)
        if items:
            items_by_split[split].append((mod, items))
    chats = {}
    for split, code_docs in (("train", train_code), ("heldout", held_code)):
        budget = args.chat_fraction * sum(len(t) for t in code_docs)
        pool = []
        for mod, items in items_by_split[split]:
            order = list(range(len(items)))
            rng.shuffle(order)
            i = 0
            while i < len(order):
                take = 2 if (rng.random() < 0.2 and i + 1 < len(order)) else 1
                pool.append((mod, [items[j] for j in order[i: i + take]]))
                i += take
        rng.shuffle(pool)
        out, used = [], 0
        for mod, its in pool:
            if used >= budget:
                break
            messages, tools = make_conversation(rng, mod, its)
            text = render(messages, tools=tools)
            out.append(text)
            used += len(text)
        chats[split] = out
    stats = {
        "stdlib_root": root,
        "python_version": platform.python_version(),
        "files_read": len(train_code) + len(held_code),
        "files_train": len(train_code),
        "files_heldout": len(held_code),
        "source_bytes": n_bytes,
        "chats_train": len(chats["train"]),
        "chats_heldout": len(chats["heldout"]),
        "chat_chars_train": sum(len(c) for c in chats["train"]),
    }
    return train_code, held_code, chats["train"], chats["heldout"], stats


# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------


def train_tokenizer(texts, vocab_size):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                               fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    special_re = re.compile("|".join(re.escape(t) for t, _ in ADDED_TOKENS))
    tok.train_from_iterator((special_re.sub("\n", t) for t in texts), trainer=trainer, length=len(texts))
    n_regular = tok.get_vocab_size()
    for text, special in ADDED_TOKENS:
        added = AddedToken(text, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        if special:
            tok.add_special_tokens([added])
        else:
            tok.add_tokens([added])
    # Same JSON shape as the real Qwen tokenizer.json: ByteLevel post-processor and decoder without
    # prefix space/offset trimming/regex, empty (not null) subword prefix/suffix.
    doc = json.loads(tok.to_str())
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    doc["post_processor"] = dict(byte_level)
    doc["decoder"] = dict(byte_level)
    doc["model"]["continuing_subword_prefix"] = ""
    doc["model"]["end_of_word_suffix"] = ""
    tok = Tokenizer.from_str(json.dumps(doc, ensure_ascii=False))
    ids = {t: tok.token_to_id(t) for t, _ in ADDED_TOKENS}
    assert [ids[t] for t, _ in ADDED_TOKENS] == list(range(n_regular, n_regular + len(ADDED_TOKENS))), ids
    return tok, n_regular, ids


def tokenizer_config(model_max_length, ids):
    added = {str(ids[text]): {"content": text, "lstrip": False, "normalized": False, "rstrip": False,
                              "single_word": False, "special": special} for text, special in ADDED_TOKENS}
    return {
        "tokenizer_class": "Qwen3_5Tokenizer",
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "model_max_length": model_max_length,
        "added_tokens_decoder": added,
        "chat_template": CHAT_TEMPLATE,
    }


def encode_stream(tok, docs, eot_id, rng):
    """Shuffle documents, encode them, and join them with <|endoftext|> into one int32 stream."""
    docs = list(docs)
    rng.shuffle(docs)
    out = []
    starts = []  # (offset, length, is_code) of each document in the stream
    pos = 0
    for i in range(0, len(docs), 512):
        for enc, (text, is_code) in zip(tok.encode_batch([d[0] for d in docs[i: i + 512]]), docs[i: i + 512]):
            ids = enc.ids
            out.append(np.asarray(ids, dtype=np.int32))
            out.append(np.asarray([eot_id], dtype=np.int32))
            starts.append((pos, len(ids), is_code))
            pos += len(ids) + 1
    return np.concatenate(out), starts


# ----------------------------------------------------------------------------------------------
# Model: transformers' Qwen3_5MoeForConditionalGeneration + the MTP head of spec section 3
# ----------------------------------------------------------------------------------------------


def mrope_sections(n):
    """Split n rotary frequencies into interleaved (T, H, W) sections like the real [11, 11, 10] of 32."""
    return [n // 3 + (n % 3 > 0), n // 3 + (n % 3 > 1), n // 3]


def build_config(args, n_tokens_total, ids):
    from transformers import Qwen3_5MoeConfig

    assert args.layers % 4 == 0
    vocab_rows = (n_tokens_total + 63) // 64 * 64
    head_dim = 64
    rotary = int(head_dim * 0.25)  # 16 -> 8 frequencies; interleaved M-RoPE sections sum to 8
    text_config = {
        "model_type": "qwen3_5_moe_text",
        "hidden_size": args.hidden,
        "num_hidden_layers": args.layers,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * (args.layers // 4),
        "full_attention_interval": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": head_dim,
        "attn_output_gate": True,
        "attention_bias": False,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 64,
        "linear_value_head_dim": 64,
        "linear_conv_kernel_dim": 4,
        "mamba_ssm_dtype": "float32",
        "num_experts": args.experts,
        "num_experts_per_tok": args.top_k,
        "moe_intermediate_size": args.moe_intermediate,
        "shared_expert_intermediate_size": args.shared_intermediate,
        "router_aux_loss_coef": 0.001,
        "output_router_logits": False,
        "vocab_size": vocab_rows,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 32768,
        "initializer_range": 0.02,
        "partial_rotary_factor": 0.25,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                            "mrope_section": mrope_sections(rotary // 2),
                            "mrope_interleaved": True},
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False,
        "tie_word_embeddings": False,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        # As in the real release: no pad id in the model config (it is in generation_config and the
        # tokenizer). A pad id here would make nn.Embedding freeze the <|endoftext|> row at zero.
        "pad_token_id": None,
        "use_cache": True,
    }
    assert sum(text_config["rope_parameters"]["mrope_section"]) == rotary // 2
    vision_config = {
        "model_type": "qwen3_5_moe_vision",
        "depth": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "in_channels": 3,
        "patch_size": 8,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
        "out_hidden_size": args.hidden,
        "num_position_embeddings": 16,
        "hidden_act": "gelu_pytorch_tanh",
        "initializer_range": 0.02,
    }
    return Qwen3_5MoeConfig(
        text_config=text_config,
        vision_config=vision_config,
        tie_word_embeddings=False,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )


class MTPHead(nn.Module):
    """Spec section 3: e = embed(x_{p+1}); u = fc([norm_e(e); norm_h(h_p)]); u = full-attention MoE
    decoder layer (causal over MTP rows, RoPE position p); logits = lm_head(mtp.norm(u)).

    Submodule names are the release's `mtp.*` names. The decoder layer is transformers' own class built
    from the main text config with the index of a full-attention layer, so it is a full-attention
    layer with exactly the main layers' math and parameter names (the index only matters for a KV
    cache, which is never passed here)."""

    def __init__(self, text_config):
        super().__init__()
        from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeDecoderLayer, Qwen3_5MoeRMSNorm

        h, eps = text_config.hidden_size, text_config.rms_norm_eps
        full_idx = text_config.layer_types.index("full_attention")
        self.pre_fc_norm_embedding = Qwen3_5MoeRMSNorm(h, eps=eps)
        self.pre_fc_norm_hidden = Qwen3_5MoeRMSNorm(h, eps=eps)
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.layers = nn.ModuleList([Qwen3_5MoeDecoderLayer(text_config, full_idx)])
        self.norm = Qwen3_5MoeRMSNorm(h, eps=eps)
        self.text_config = text_config

    def init_weights(self, std):
        from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeRMSNorm

        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=std)
            elif isinstance(m, Qwen3_5MoeRMSNorm):
                nn.init.zeros_(m.weight)
        experts = self.layers[0].mlp.experts
        nn.init.normal_(experts.gate_up_proj, std=std)
        nn.init.normal_(experts.down_proj, std=std)
        nn.init.normal_(self.layers[0].mlp.gate.weight, std=std)

    def forward(self, lm, lm_head, hidden, next_ids, return_hidden=False):
        """hidden [B,T,H]: final-normed h_0..h_{T-1}; next_ids [B,T]: x_1..x_T. Returns logits [B,T,V]
        where row p predicts x_{p+2}."""
        from transformers.masking_utils import create_causal_mask

        bsz, t = next_ids.shape
        e = lm.embed_tokens(next_ids)
        u = self.fc(torch.cat([self.pre_fc_norm_embedding(e), self.pre_fc_norm_hidden(hidden)], dim=-1))
        pos = torch.arange(t, device=next_ids.device).view(1, 1, t).expand(3, bsz, t)
        position_embeddings = lm.rotary_emb(u, pos)
        mask = create_causal_mask(config=self.text_config, inputs_embeds=u, attention_mask=None,
                                  past_key_values=None, position_ids=pos[0])
        u = self.layers[0](u, position_embeddings=position_embeddings, attention_mask=mask,
                           position_ids=pos[0], past_key_values=None, use_cache=False)
        g = self.norm(u)
        return (lm_head(g), g) if return_hidden else lm_head(g)


_GROUPED_MM_OK = False


def qs_grouped_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """Training MoE kernel: tokens sorted by expert, two torch grouped_mm calls in bf16, fp32 combine.
    Same math as transformers' eager Qwen3_5MoeExperts.forward; falls back to it off CUDA-bf16."""
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeExperts

    cuda_bf16 = hidden_states.is_cuda and torch.is_autocast_enabled("cuda") and \
        torch.get_autocast_dtype("cuda") == torch.bfloat16
    if not (_GROUPED_MM_OK and cuda_bf16):
        return Qwen3_5MoeExperts._qs_eager_forward(self, hidden_states, top_k_index, top_k_weights)
    n_tok, k = top_k_index.shape
    flat = top_k_index.reshape(-1)
    order = torch.argsort(flat, stable=True)
    token_of = order // k
    # scatter_add instead of bincount: bincount syncs with the host to size its output
    counts = torch.zeros(self.num_experts, dtype=torch.int64, device=flat.device).scatter_add_(
        0, flat, torch.ones_like(flat))
    offs = torch.cumsum(counts, 0).to(torch.int32)
    grouped_mm = getattr(F, "grouped_mm", None) or torch._grouped_mm
    x = hidden_states[token_of].to(torch.bfloat16)
    gate_up = grouped_mm(x, self.gate_up_proj.to(torch.bfloat16).transpose(1, 2), offs=offs)
    gate, up = gate_up.chunk(2, dim=-1)
    y = grouped_mm(F.silu(gate) * up, self.down_proj.to(torch.bfloat16).transpose(1, 2), offs=offs)
    y = y.float() * top_k_weights.reshape(-1)[order].float().unsqueeze(-1)
    out = torch.zeros(n_tok, hidden_states.shape[-1], dtype=torch.float32, device=hidden_states.device)
    out.index_add_(0, token_of, y)
    return out.to(hidden_states.dtype)


def install_experts_kernel(device, want):
    """Register qs_grouped under transformers' ExpertsInterface; probe grouped_mm fwd+bwd on CUDA."""
    global _GROUPED_MM_OK
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeExperts

    if not hasattr(Qwen3_5MoeExperts, "_qs_eager_forward"):
        # @use_experts_implementation wraps the class's eager forward with functools.wraps.
        Qwen3_5MoeExperts._qs_eager_forward = Qwen3_5MoeExperts.forward.__wrapped__
    ALL_EXPERTS_FUNCTIONS.register("qs_grouped", qs_grouped_experts_forward)
    if device.type != "cuda" or want == "eager":
        _GROUPED_MM_OK = False
        return "eager"
    try:
        grouped_mm = getattr(F, "grouped_mm", None) or torch._grouped_mm
        e, h, i, n = 4, 64, 32, 40
        x = torch.randn(n, h, device=device, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(e, i, h, device=device, dtype=torch.float32, requires_grad=True)
        offs = torch.tensor([10, 20, 30, 40], device=device, dtype=torch.int32)
        y = grouped_mm(x, w.to(torch.bfloat16).transpose(1, 2), offs=offs)
        ref = torch.cat([x[a:b].float() @ w[j].t() for j, (a, b) in enumerate(zip([0, 10, 20, 30], [10, 20, 30, 40]))])
        y.float().sum().backward()
        assert w.grad is not None and x.grad is not None
        err = (y.float() - ref).abs().max().item()
        assert err < 0.5, err
        _GROUPED_MM_OK = True
        return "qs_grouped"
    except Exception as exc:  # noqa: BLE001 - any failure means: use the eager loop
        log(f"grouped_mm unavailable ({type(exc).__name__}: {exc}); using transformers' eager experts")
        if want == "grouped":
            raise
        _GROUPED_MM_OK = False
        return "eager"


def set_impls(model, attn, experts):
    model.config._attn_implementation = attn
    model.config._experts_implementation = experts


def count_params(model, mtp):
    n = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    lm = model.model.language_model
    tc = model.config.text_config
    per_layer_experts = sum(p.numel() for p in lm.layers[0].mlp.experts.parameters())
    active_experts = per_layer_experts * tc.num_experts_per_tok // tc.num_experts
    text = n(lm) + n(model.lm_head)
    return {
        "total": n(model) + n(mtp),
        "text_model_with_lm_head": text,
        "embedding": lm.embed_tokens.weight.numel(),
        "lm_head": model.lm_head.weight.numel(),
        "mtp": n(mtp),
        "vision_tower_untrained": n(model.model.visual),
        "active_per_token_text": text - tc.num_hidden_layers * (per_layer_experts - active_experts),
    }


# ----------------------------------------------------------------------------------------------
# Training / evaluation
# ----------------------------------------------------------------------------------------------


class RouterCapture:
    """Forward hooks on every router: keeps (logits, indices) of the current forward for the
    load-balancing loss (Switch-style: E * sum_e fraction_e * mean_prob_e, averaged over layers)."""

    def __init__(self, modules):
        self.records = []
        self.handles = [m.register_forward_hook(self.hook) for m in modules]

    def hook(self, module, inputs, output):
        self.records.append((output[0], output[2], module.num_experts, module.top_k))

    def aux_loss(self):
        losses = []
        for logits, idx, e, k in self.records:
            probs = torch.softmax(logits.float(), dim=-1)
            frac = F.one_hot(idx, e).float().sum(1).mean(0) / k
            losses.append(e * (frac * probs.mean(0)).sum())
        self.records = []
        return torch.stack(losses).mean()

    def load_stats(self):
        out = []
        for logits, idx, e, k in self.records:
            frac = torch.bincount(idx.reshape(-1), minlength=e).float() / idx.numel()
            out.append((frac.max().item() * e, frac.min().item() * e))
        self.records = []
        return out

    def clear(self):
        self.records = []


def forward_losses(model, mtp, batch, args, autocast_ctx, detach):
    """batch [B, L+1]. Main: x[0..L-1] -> x[1..L]; MTP rows p=0..L-2: (h_p, x_{p+1}) -> x_{p+2}."""
    lm = model.model.language_model
    x = batch[:, :-1]
    bsz, seq = x.shape
    pos = torch.arange(seq, device=x.device).unsqueeze(0).expand(bsz, seq)
    with autocast_ctx():
        hidden = model.model(input_ids=x, position_ids=pos, use_cache=False).last_hidden_state
        logits = model.lm_head(hidden)
        h_for_mtp = hidden[:, :-1].detach() if detach else hidden[:, :-1]
        mtp_logits = mtp(lm, model.lm_head, h_for_mtp, batch[:, 1:-1])
    v = logits.shape[-1]
    main_ce = F.cross_entropy(logits.float().reshape(-1, v), batch[:, 1:].reshape(-1))
    mtp_ce = F.cross_entropy(mtp_logits.float().reshape(-1, v), batch[:, 2:].reshape(-1))
    return main_ce, mtp_ce, logits, mtp_logits


@torch.no_grad()
def evaluate(model, mtp, data, windows, args, autocast_ctx, device, batch_size):
    """Held-out metrics over fixed windows of L+1 tokens."""
    model.eval()
    mtp.eval()
    tot = {"main_nll": 0.0, "main_correct": 0, "main_n": 0, "mtp_nll": 0.0, "mtp_correct": 0,
           "mtp_agree": 0, "mtp_n": 0}
    for i in range(0, len(windows), batch_size):
        starts = windows[i: i + batch_size]
        batch = torch.stack([torch.from_numpy(data[s: s + args.seq + 1].astype(np.int64)) for s in starts]).to(device)
        main_ce, mtp_ce, logits, mtp_logits = forward_losses(model, mtp, batch, args, autocast_ctx, False)
        n_main = batch[:, 1:].numel()
        n_mtp = batch[:, 2:].numel()
        main_arg = logits.argmax(-1)
        mtp_arg = mtp_logits.argmax(-1)
        tot["main_nll"] += main_ce.item() * n_main
        tot["main_correct"] += (main_arg == batch[:, 1:]).sum().item()
        tot["main_n"] += n_main
        tot["mtp_nll"] += mtp_ce.item() * n_mtp
        tot["mtp_correct"] += (mtp_arg == batch[:, 2:]).sum().item()
        # The main model's own prediction of x_{p+2} is the argmax of its row p+1.
        tot["mtp_agree"] += (mtp_arg == main_arg[:, 1:]).sum().item()
        tot["mtp_n"] += n_mtp
    model.train()
    mtp.train()
    return {
        "loss": tot["main_nll"] / tot["main_n"],
        "top1_acc": tot["main_correct"] / tot["main_n"],
        "mtp_loss": tot["mtp_nll"] / tot["mtp_n"],
        "mtp_top1_acc_vs_true": tot["mtp_correct"] / tot["mtp_n"],
        "mtp_top1_agreement_with_main": tot["mtp_agree"] / tot["mtp_n"],
        "tokens": tot["main_n"],
    }


def param_groups(modules, weight_decay):
    decay, no_decay, seen = [], [], set()
    for mod in modules:
        for name, p in mod.named_parameters():
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            (decay if p.ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def round_to_saved_precision(model, mtp):
    """Round every parameter to what is saved (bf16, except A_log and linear_attn.norm.weight kept
    f32), so the in-memory model and the saved file hold identical values."""
    with torch.no_grad():
        for mod in (model, mtp):
            for name, p in mod.named_parameters():
                if not keep_f32(name):
                    p.copy_(p.to(torch.bfloat16).to(p.dtype))


def keep_f32(name):
    return name.endswith("linear_attn.A_log") or name.endswith("linear_attn.norm.weight")


# ----------------------------------------------------------------------------------------------
# Saving and checks
# ----------------------------------------------------------------------------------------------


def save_model(model, mtp, out_dir, ids, gen_eos):
    from safetensors.torch import save_file

    tensors = {}
    for name, t in model.state_dict().items():
        tensors[name] = t.detach().to("cpu", torch.float32 if keep_f32(name) else torch.bfloat16).contiguous()
    for name, t in mtp.state_dict().items():
        tensors["mtp." + name] = t.detach().to("cpu", torch.bfloat16).contiguous()
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    model.config.save_pretrained(out_dir)  # transformers' own (diff) serialisation, then fix the dtype
    cfg_path = os.path.join(out_dir, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["dtype"] = "bfloat16"
    cfg["text_config"]["dtype"] = "bfloat16"
    for sub in (cfg, cfg["text_config"], cfg["vision_config"]):
        for k in ("_name_or_path", "_experts_implementation", "_attn_implementation"):
            sub.pop(k, None)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    gen = {
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": gen_eos,
        "pad_token_id": ids["<|endoftext|>"],
        "do_sample": True,
        "temperature": 1.0,
        "top_k": 20,
        "top_p": 0.95,
    }
    import transformers

    gen["transformers_version"] = transformers.__version__
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2, sort_keys=True)
        f.write("\n")
    return tensors


def safe_keys(out_dir):
    from safetensors import safe_open

    with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        return list(f.keys())


def load_mtp_from_file(out_dir, text_config, dtype=torch.float32):
    from safetensors.torch import load_file

    mtp = MTPHead(text_config)
    sd = load_file(os.path.join(out_dir, "model.safetensors"))
    mtp_sd = {k[len("mtp."):]: v.to(dtype) for k, v in sd.items() if k.startswith("mtp.")}
    missing, unexpected = mtp.load_state_dict(mtp_sd, strict=True), None
    del missing, unexpected
    return mtp.to(dtype).eval()


@torch.no_grad()
def full_logits(model, ids):
    pos = torch.arange(ids.shape[1]).unsqueeze(0)
    out = model.model(input_ids=ids, position_ids=pos, use_cache=False).last_hidden_state
    return out, model.lm_head(out)


def main():
    args = parse_args()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    args.seq = args.seq or (512 if on_gpu else 128)
    args.batch = args.batch or (64 if on_gpu else 4)
    args.sample_tokens = args.sample_tokens or (64 if on_gpu else 24)
    budget_s = args.minutes * 60.0
    reserve_s = args.post_reserve_s if args.post_reserve_s is not None else (60.0 if on_gpu else 0.4 * budget_s)
    set_seed(args.seed)
    if on_gpu:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))

    import tokenizers
    import safetensors
    import transformers
    from transformers import AutoTokenizer, Qwen3_5MoeForConditionalGeneration

    out_dir = args.out
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    log(f"device={device} seq={args.seq} batch={args.batch} budget={budget_s:.0f}s reserve={reserve_s:.0f}s "
        f"torch={torch.__version__} transformers={transformers.__version__}")

    # ---- corpus and tokenizer ---------------------------------------------------------------
    render = make_renderer(CHAT_TEMPLATE)
    train_code, held_code, train_chats, held_chats, corpus_stats = build_corpus(args, render)
    phases = {"corpus": round(elapsed(), 1)}
    log(f"corpus: {corpus_stats}")
    t0 = time.time()
    tok, n_regular, ids = train_tokenizer(train_code + train_chats, args.vocab)
    tok_train_s = time.time() - t0
    phases["tokenizer"] = round(elapsed(), 1)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    n_tokens_total = tok.get_vocab_size()
    log(f"tokenizer: {n_regular} regular + {len(ADDED_TOKENS)} added = {n_tokens_total} tokens ({tok_train_s:.1f}s)")
    eot = ids["<|endoftext|>"]
    rng = random.Random(args.seed + 1)
    train_data, _ = encode_stream(tok, [(t, True) for t in train_code] + [(t, False) for t in train_chats], eot, rng)
    held_data, held_docs = encode_stream(tok, [(t, True) for t in held_code] + [(t, False) for t in held_chats],
                                         eot, rng)
    phases["encode"] = round(elapsed(), 1)
    log(f"tokens: train {len(train_data):,}  held-out {len(held_data):,}  "
        f"(chars/token {sum(map(len, train_code + train_chats)) / len(train_data):.2f})")

    # ---- model ------------------------------------------------------------------------------
    config = build_config(args, n_tokens_total, ids)
    model = Qwen3_5MoeForConditionalGeneration(config)
    mtp = MTPHead(model.config.text_config)
    mtp.init_weights(config.text_config.initializer_range)
    model.model.visual.requires_grad_(False)
    params = count_params(model, mtp)
    log(f"parameters: {json.dumps(params)}")
    model.to(device)
    mtp.to(device)
    experts_impl = install_experts_kernel(device, args.experts_impl)
    set_impls(model, "sdpa", experts_impl)
    log(f"experts kernel for training: {experts_impl}")
    model.train()
    mtp.train()
    lm = model.model.language_model
    routers = [layer.mlp.gate for layer in lm.layers] + [mtp.layers[0].mlp.gate]
    capture = RouterCapture(routers)
    trainable = [lm, model.lm_head, mtp]
    opt = torch.optim.AdamW(param_groups(trainable, args.weight_decay), lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=on_gpu)
    train_t = torch.from_numpy(train_data.astype(np.int64)).to(device)
    n_windows_eval = 64 if on_gpu else 4
    stride = max(args.seq + 1, (len(held_data) - args.seq - 2) // n_windows_eval)
    eval_windows = [s for s in range(0, len(held_data) - args.seq - 2, stride)][:n_windows_eval]
    if not eval_windows:
        raise SystemExit(f"held-out stream too short ({len(held_data)} tokens) for --seq {args.seq}")
    quick_windows = eval_windows[:: max(1, len(eval_windows) // 8)]
    if on_gpu:
        autocast_ctx = lambda: torch.autocast("cuda", dtype=torch.bfloat16)  # noqa: E731
    else:
        import contextlib

        autocast_ctx = contextlib.nullcontext
    arange_w = torch.arange(args.seq + 1, device=device)

    # ---- training loop ----------------------------------------------------------------------
    t_train0 = time.time()
    phases["train_start"] = round(elapsed(), 1)
    train_budget = max(budget_s - elapsed() - reserve_s, 5.0)
    log(f"training for {train_budget:.0f}s")
    history, evals = [], []
    step, tokens_seen, last_eval = 0, 0, time.time()
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed)
    while True:
        frac = (time.time() - t_train0) / train_budget
        if frac >= 1.0 and step >= 5:
            break
        frac = min(frac, 1.0)
        warm = min(1.0, (step + 1) / args.warmup_steps)
        lr = args.lr * warm * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(train_t) - args.seq - 1, (args.batch,), device=device, generator=gen)
        batch = train_t[starts[:, None] + arange_w]
        capture.clear()
        opt.zero_grad(set_to_none=True)
        try:
            main_ce, mtp_ce, _, _ = forward_losses(model, mtp, batch, args, autocast_ctx, args.mtp_detach)
            aux = capture.aux_loss()
            loss = main_ce + args.mtp_weight * mtp_ce + args.aux_coef * aux
            loss.backward()
        except torch.OutOfMemoryError:
            # Only in the first steps: halve the batch and go on (the budget is wall clock anyway).
            if step > 2 or args.batch <= 1:
                raise
            loss = main_ce = mtp_ce = aux = None
            capture.clear()
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            args.batch //= 2
            log(f"out of memory: batch -> {args.batch}")
            continue
        except RuntimeError as exc:
            # A grouped_mm failure the start-up probe did not catch: fall back to the eager experts.
            if step > 2 or experts_impl != "qs_grouped":
                raise
            log(f"grouped experts failed in training ({type(exc).__name__}: {str(exc)[:200]}); using eager")
            capture.clear()
            opt.zero_grad(set_to_none=True)
            install_experts_kernel(device, "eager")
            experts_impl = "eager"
            set_impls(model, "sdpa", experts_impl)
            continue
        gnorm = torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], args.grad_clip)
        opt.step()
        step += 1
        tokens_seen += batch[:, :-1].numel()
        if step % 25 == 0 or step <= 3:
            vals = torch.stack([main_ce, mtp_ce, aux, gnorm]).float().cpu().tolist()
            dt = time.time() - t_train0
            rec = {"step": step, "time_s": round(dt, 2), "tokens": tokens_seen, "lr": lr, "loss": vals[0],
                   "mtp_loss": vals[1], "aux": vals[2], "grad_norm": vals[3]}
            history.append(rec)
            if step % 100 == 0 or step <= 3:
                log(f"step {step} loss {vals[0]:.3f} mtp {vals[1]:.3f} aux {vals[2]:.3f} gn {vals[3]:.2f} "
                    f"lr {lr:.2e} {tokens_seen / dt:,.0f} tok/s")
        if time.time() - last_eval > args.eval_every_s:
            ev = evaluate(model, mtp, held_data, quick_windows, args, autocast_ctx, device, args.batch)
            ev.update(step=step, time_s=round(time.time() - t_train0, 2), tokens=tokens_seen)
            evals.append(ev)
            log(f"eval step {step}: loss {ev['loss']:.3f} mtp {ev['mtp_loss']:.3f} "
                f"agree {ev['mtp_top1_agreement_with_main']:.3f}")
            last_eval = time.time()
    train_s = time.time() - t_train0
    for h in capture.handles:
        h.remove()
    log(f"trained {step} steps, {tokens_seen:,} tokens in {train_s:.0f}s ({tokens_seen / train_s:,.0f} tok/s)")
    peak_mem = torch.cuda.max_memory_allocated() / 2**30 if on_gpu else None

    # ---- final evaluation on the saved-precision weights -------------------------------------
    round_to_saved_precision(model, mtp)
    phases["train_end"] = round(elapsed(), 1)
    final = evaluate(model, mtp, held_data, eval_windows, args, autocast_ctx, device, args.batch)
    phases["final_eval"] = round(elapsed(), 1)
    final["perplexity"] = math.exp(final["loss"])
    log(f"held-out: {final}")
    cap = RouterCapture(routers)
    with torch.no_grad(), autocast_ctx():
        sb = torch.stack([torch.from_numpy(held_data[s: s + args.seq + 1].astype(np.int64))
                          for s in eval_windows[:8]]).to(device)
        forward_losses(model, mtp, sb, args, autocast_ctx, False)
    expert_load = cap.load_stats()
    for h in cap.handles:
        h.remove()

    # ---- save ---------------------------------------------------------------------------------
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(config.text_config.max_position_embeddings, ids), f, indent=2, ensure_ascii=False)
        f.write("\n")
    gen_eos = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    save_model(model, mtp, out_dir, ids, gen_eos)
    phases["saved"] = round(elapsed(), 1)
    log("saved")

    # ---- checks and references (CPU, float32, from the saved files) ---------------------------
    checks = {}
    model.to("cpu").float()
    mtp.to("cpu").float()
    model.eval()
    mtp.eval()
    set_impls(model, "eager", "eager")
    reloaded, info = Qwen3_5MoeForConditionalGeneration.from_pretrained(
        out_dir, dtype=torch.float32, output_loading_info=True, attn_implementation="eager",
        experts_implementation="eager")
    reloaded.eval()
    checks["reload_missing_keys"] = sorted(info["missing_keys"])
    checks["reload_unexpected_keys"] = sorted(info["unexpected_keys"])
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    mtp_file = load_mtp_from_file(out_dir, reloaded.config.text_config)
    sd_mem = model.state_dict()
    checks["reload_weights_equal"] = all(torch.equal(sd_mem[k], v) for k, v in reloaded.state_dict().items())
    mtp_names = sorted(k for k in safe_keys(out_dir) if k.startswith("mtp."))
    checks["mtp_tensor_count"] = len(mtp_names)
    assert len(mtp_names) == 19, mtp_names
    sd_mtp = mtp.state_dict()
    checks["reload_mtp_weights_equal"] = all(torch.equal(sd_mtp[k], v) for k, v in mtp_file.state_dict().items())

    # reference snippet: the first 96 tokens of the first held-out code document long enough
    ref_len = args.ref_len
    doc = next((d for d in held_docs if d[2] and d[1] >= ref_len), None) or max(held_docs, key=lambda d: d[1])
    ref_ids = held_data[doc[0]: doc[0] + min(ref_len, doc[1])].astype(np.int64)
    ids_t = torch.from_numpy(ref_ids).unsqueeze(0)
    h_mem, logits_mem = full_logits(model, ids_t)
    h_ref, logits_ref = full_logits(reloaded, ids_t)
    checks["reload_logits_max_abs_diff"] = (logits_mem - logits_ref).abs().max().item()
    checks["reload_logits_equal"] = bool(torch.equal(logits_mem, logits_ref))
    with torch.no_grad():
        mtp_ref, mtp_hidden_ref = mtp_file(reloaded.model.language_model, reloaded.lm_head, h_ref[:, :-1],
                                           ids_t[:, 1:], return_hidden=True)
        mtp_ref, mtp_hidden_ref = mtp_ref[0], mtp_hidden_ref[0]
        mtp_mem = mtp(model.model.language_model, model.lm_head, h_mem[:, :-1], ids_t[:, 1:])[0]
    checks["reload_mtp_logits_max_abs_diff"] = (mtp_mem - mtp_ref).abs().max().item()
    # The same logits through transformers' own top-level forward (default position ids).
    with torch.no_grad():
        top = reloaded(input_ids=ids_t, use_cache=False).logits[0]
    checks["top_level_forward_max_abs_diff"] = (top - logits_ref[0]).abs().max().item()
    np.save(os.path.join(out_dir, "ref_ids.npy"), ref_ids)
    np.save(os.path.join(out_dir, "ref_logits.npy"), logits_ref[0].numpy().astype(np.float32))
    np.save(os.path.join(out_dir, "ref_mtp_logits.npy"), mtp_ref.numpy().astype(np.float32))
    np.save(os.path.join(out_dir, "ref_mtp_hidden.npy"), mtp_hidden_ref.numpy().astype(np.float32))
    np.save(os.path.join(out_dir, "ref_hidden.npy"), h_ref[0].numpy().astype(np.float32))
    # bf16 inference of the same weights, for the tolerance a bf16 engine should expect
    rb = Qwen3_5MoeForConditionalGeneration.from_pretrained(out_dir, dtype=torch.bfloat16,
                                                            attn_implementation="eager", experts_implementation="eager")
    with torch.no_grad():
        lb = full_logits(rb, ids_t)[1][0].float()
    checks["bf16_vs_f32_logits_max_abs_diff"] = (lb - logits_ref[0]).abs().max().item()
    checks["bf16_vs_f32_argmax_agreement"] = (lb.argmax(-1) == logits_ref[0].argmax(-1)).float().mean().item()
    del rb

    # tokenizer through transformers, chat template through apply_chat_template
    hf_tok = AutoTokenizer.from_pretrained(out_dir)
    probe = held_code[0][:2000] if held_code else "def f(x):\n    return x\n"
    probe += " naïve café — ไทย 123 don't <|im_start|>user\nhi<|im_end|>\n<think>\n\n</think>"
    checks["hf_tokenizer_matches"] = hf_tok.encode(probe) == tok.encode(probe).ids
    checks["hf_tokenizer_roundtrip"] = hf_tok.decode(hf_tok.encode(probe)) == probe
    checks["tokenizer_class"] = type(hf_tok).__name__
    conv_examples = [
        ([{"role": "user", "content": "hello"}], None, {"add_generation_prompt": True},
         "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n"),
        ([{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "hello"}], None,
         {"add_generation_prompt": True, "enable_thinking": False},
         "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n"
         "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
        ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "<think>\nr1\n</think>\n\nA1"},
          {"role": "user", "content": "b"}, {"role": "assistant", "content": "B", "reasoning_content": "r2"}],
         None, {}, "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nb"
         "<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\nB<|im_end|>\n"),
        ([{"role": "user", "content": "w?"},
          {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
              "name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2]}}}]},
          {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "warm"}], None,
         {"add_generation_prompt": True},
         "<|im_start|>user\nw?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n"
         "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n[1, 2]\n</parameter>\n"
         "</function>\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n"
         "<tool_response>\nwarm\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n"),
    ]
    template_ok = []
    for messages, tools, kw, expected in conv_examples:
        got = hf_tok.apply_chat_template(messages, tools=tools, tokenize=False, **kw)
        template_ok.append(got == expected and render(messages, tools=tools, **kw) == expected)
    tools_conv = [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]
    got = hf_tok.apply_chat_template(tools_conv, tools=[GET_SOURCE_TOOL], tokenize=False)
    template_ok.append(got == render(tools_conv, tools=[GET_SOURCE_TOOL]) and got.startswith(
        "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n{\"type\": "
        "\"function\"") and got.endswith("</IMPORTANT>\n\nS<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"))
    checks["chat_template_cases_ok"] = template_ok

    phases["checks"] = round(elapsed(), 1)
    # greedy samples (transformers generate with its cache, fp32 CPU) + MTP acceptance on them
    prompts = [
        ("raw", "def fibonacci(n):\n"),
        ("raw", "import os\nimport sys\n\n\ndef main():\n"),
        ("raw", "class Stack:\n    \"\"\""),
        ("chat_no_think", hf_tok.apply_chat_template(
            [{"role": "user", "content": "What does `join` in the `posixpath` module do?"}],
            tokenize=False, add_generation_prompt=True, enable_thinking=False)),
        ("chat_think", hf_tok.apply_chat_template(
            [{"role": "user", "content": "Explain the function `dumps` from `json`."}],
            tokenize=False, add_generation_prompt=True)),
        ("chat_code", hf_tok.apply_chat_template(
            [{"role": "user", "content": "Show me the source code of `shutil.copyfile`."}],
            tokenize=False, add_generation_prompt=True, enable_thinking=False)),
    ]
    samples = []
    acc_hits, acc_n, cache_mismatch = 0, 0, 0
    for kind, text in prompts:
        p_ids = torch.tensor([hf_tok.encode(text)])
        with torch.no_grad():
            out = reloaded.generate(p_ids, max_new_tokens=args.sample_tokens, do_sample=False, top_k=None,
                                    top_p=None, temperature=None, eos_token_id=gen_eos,
                                    pad_token_id=ids["<|endoftext|>"])
        seq = out[0]
        new = seq[p_ids.shape[1]:].tolist()
        # teacher-forced pass over the whole sequence: cache consistency + MTP greedy acceptance
        h_all, l_all = full_logits(reloaded, seq.unsqueeze(0))
        arg = l_all[0].argmax(-1)
        n_prompt = p_ids.shape[1]
        cache_mismatch += sum(int(arg[n_prompt - 1 + i].item() != new[i]) for i in range(len(new)))
        if len(seq) >= 3:
            with torch.no_grad():
                m_log = mtp_file(reloaded.model.language_model, reloaded.lm_head, h_all[:, :-1],
                                 seq[1:].unsqueeze(0))[0]
            m_arg = m_log.argmax(-1)
            # row p drafts x_{p+2}; the main model emitted x_{p+1} from row p; count p >= n_prompt-1
            for p in range(n_prompt - 1, len(seq) - 2):
                acc_hits += int(m_arg[p].item() == seq[p + 2].item())
                acc_n += 1
        samples.append({"kind": kind, "prompt": text, "prompt_ids": p_ids[0].tolist(), "output_ids": new,
                        "output_text": hf_tok.decode(new, skip_special_tokens=False),
                        "stopped_on_eos": bool(new and new[-1] in gen_eos)})
    checks["generate_vs_teacher_forced_argmax_mismatches"] = cache_mismatch
    mtp_greedy_acceptance = acc_hits / max(1, acc_n)
    with open(os.path.join(out_dir, "greedy_samples.json"), "w") as f:
        json.dump({"dtype": "float32 (bf16 weights)", "device": "cpu", "max_new_tokens": args.sample_tokens,
                   "eos_token_id": gen_eos, "samples": samples}, f, indent=2, ensure_ascii=False)
        f.write("\n")
    phases["greedy_samples"] = round(elapsed(), 1)
    log(f"checks: {json.dumps(checks)}")
    log(f"phases (elapsed s at the end of each): {phases}")
    log(f"MTP greedy acceptance on samples: {mtp_greedy_acceptance:.3f} ({acc_n} drafts)")

    # ---- logs and model card ------------------------------------------------------------------
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                "safetensors": safetensors.__version__, "numpy": np.__version__,
                "device": torch.cuda.get_device_name(0) if on_gpu else platform.processor() or "cpu"}
    total_s = elapsed()
    train_log = {
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "args": vars(args),
        "versions": versions,
        "corpus": corpus_stats,
        "tokenizer": {"regular_tokens": n_regular, "added_tokens": len(ADDED_TOKENS), "total": n_tokens_total,
                      "embedding_rows": config.text_config.vocab_size, "train_seconds": round(tok_train_s, 1),
                      "ids": ids},
        "tokens": {"train": int(len(train_data)), "heldout": int(len(held_data))},
        "parameters": params,
        "training": {"steps": step, "tokens_seen": tokens_seen, "seconds": round(train_s, 1),
                     "tokens_per_second": round(tokens_seen / train_s), "epochs": tokens_seen / len(train_data),
                     "experts_kernel": experts_impl, "peak_gpu_memory_gib": peak_mem,
                     "mtp_detached": args.mtp_detach, "mtp_weight": args.mtp_weight},
        "heldout_final": final,
        "heldout_curve": evals,
        "train_curve": history,
        "expert_load_max_min_over_uniform": expert_load,
        "mtp_greedy_acceptance_on_samples": {"rate": mtp_greedy_acceptance, "drafts": acc_n},
        "checks": checks,
        "phases_elapsed_s": phases,
        "wall_seconds_total": round(total_s, 1),
    }
    with open(os.path.join(out_dir, "train_log.json"), "w") as f:
        json.dump(train_log, f, indent=1)
        f.write("\n")
    write_model_card(out_dir, train_log, config, samples, ref_len=len(ref_ids))
    sizes = {n: os.path.getsize(os.path.join(out_dir, n)) for n in sorted(os.listdir(out_dir))}
    log(f"files: {sizes}")
    log(f"done in {elapsed():.0f}s")
    ok = (checks["reload_weights_equal"] and checks["reload_mtp_weights_equal"] and checks["reload_logits_equal"]
          and checks["hf_tokenizer_matches"] and all(checks["chat_template_cases_ok"]))
    if not ok:
        log("SOME CHECKS FAILED (see checks above)")
        sys.exit(1)


def write_model_card(out_dir, tl, config, samples, ref_len):
    tc = config.text_config
    p = tl["parameters"]
    fin = tl["heldout_final"]
    tr = tl["training"]
    cs = tl["corpus"]
    tk = tl["tokenizer"]
    m = lambda n: f"{n / 1e6:.2f}M"  # noqa: E731
    sample_md = []
    for s in samples:
        prompt = s["prompt"].replace("```", "ʼʼʼ")
        out = s["output_text"].replace("```", "ʼʼʼ")
        sample_md.append(f"**{s['kind']}** — prompt:\n\n```\n{prompt}\n```\ngreedy continuation "
                         f"({len(s['output_ids'])} tokens{', stopped on EOS' if s['stopped_on_eos'] else ''}):\n\n"
                         f"```\n{out}\n```\n")
    card = f"""# qwen36-tiny

A {m(p['total'])}-parameter model with the exact layout of Qwen3.6-35B-A3B
(`Qwen3_5MoeForConditionalGeneration`, `model_type: qwen3_5_moe`), trained for {tr['seconds'] / 60:.1f} minutes on
the Python standard library so that its outputs are meaningful. It is qwenserve's embedded default model and its
test model. Made by `tools/train_tiny_model.py` (see tools/README.md); everything here is regenerated by it.

## Architecture

| | this model | Qwen3.6-35B-A3B |
|---|---|---|
| hidden / layers | {tc.hidden_size} / {tc.num_hidden_layers} | 2048 / 40 |
| layer pattern | {'3×GDN + 1×attention, ×' + str(tc.num_hidden_layers // 4)} | 3×GDN + 1×attention, ×10 |
| attention q / kv heads, head_dim | {tc.num_attention_heads} / {tc.num_key_value_heads}, {tc.head_dim} (gated, q/k norm) | 16 / 2, 256 |
| partial rotary | 0.25 → {int(tc.head_dim * 0.25)} dims, θ=1e7, interleaved M-RoPE {tc.rope_parameters['mrope_section']} | 0.25 → 64 dims, [11,11,10] |
| GDN k heads / v heads / dims | {tc.linear_num_key_heads} / {tc.linear_num_value_heads} / {tc.linear_key_head_dim} (conv {tc.linear_conv_kernel_dim}) | 16 / 32 / 128 (conv 4) |
| experts / top-k / expert ffn / shared ffn | {tc.num_experts} / {tc.num_experts_per_tok} / {tc.moe_intermediate_size} / {tc.shared_expert_intermediate_size} (+ sigmoid shared gate) | 256 / 8 / 512 / 512 |
| vocabulary (embedding rows) | {tk['total']} ({tc.vocab_size}) | 248077 (248320) |
| lm_head | untied | untied |
| MTP | 1 layer, `mtp.*` (19 tensors) | 1 layer |
| vision tower | 1 block, hidden 32 — random, untrained, present only for the layout | 27 blocks |

Parameters: total {m(p['total'])} = text model + lm_head {m(p['text_model_with_lm_head'])}
(embedding {m(p['embedding'])}, lm_head {m(p['lm_head'])}) + MTP {m(p['mtp'])} + vision {m(p['vision_tower_untrained'])};
active per token (text) {m(p['active_per_token_text'])}.

Weights: `model.safetensors`, bf16 except `linear_attn.A_log` and `linear_attn.norm.weight` (f32, as in the real
release); experts fused (`mlp.experts.gate_up_proj` [E, 2·I, H], `mlp.experts.down_proj` [E, H, I]);
`mtp.pre_fc_norm_embedding`, `mtp.pre_fc_norm_hidden`, `mtp.fc` [H, 2H], `mtp.layers.0.*`, `mtp.norm`.
transformers loads everything except `mtp.*`, which it ignores (qwenserve loads it).

## Data

Python {cs['python_version']} standard library sources (`{cs['stdlib_root']}`, `*.py`, without `site-packages`,
`dist-packages` and `encodings/`), PSF licence: {cs['files_read']} files, {cs['source_bytes'] / 1e6:.1f} MB;
{cs['files_heldout']} files (chosen by a hash of their path) are held out. Mixed in: {cs['chats_train']} chat
conversations rendered with this model's chat template, made from the docstrings and sources of the training
files (questions about a function/class answered with its docstring or source, some with a system prompt, some
with reasoning in the think block, some multi-turn, some calling a `get_source` tool), about
{tl['args']['chat_fraction']:.0%} of the code's size. Documents are shuffled and joined with `<|endoftext|>`.
Tokens: {tl['tokens']['train']:,} train, {tl['tokens']['heldout']:,} held-out.

## Tokenizer

Byte-level BPE trained here (HF `tokenizers`): {tk['regular_tokens']} regular tokens, then the 33 Qwen added tokens
in the real order with the real `special` flags (`<|endoftext|>`={tk['ids']['<|endoftext|>']},
`<|im_start|>`={tk['ids']['<|im_start|>']}, `<|im_end|>`={tk['ids']['<|im_end|>']}, `<think>`={tk['ids']['<think>']},
`</think>`={tk['ids']['</think>']}, `<tool_call>`={tk['ids']['<tool_call>']}, …); NFC normalizer; the Qwen3.5
pre-tokenizer regex (`\\p{{M}}` variant), isolated split, then ByteLevel without its own regex; ByteLevel decoder.
Embedding rows padded to a multiple of 64. `tokenizer_config.json` carries the chat template (ChatML + thinking,
XML tool calls, spec §5.2), `eos_token` `<|im_end|>`, `pad_token` `<|endoftext|>`, no BOS.
`generation_config.json`: eos `{[tk['ids']['<|im_end|>'], tk['ids']['<|endoftext|>']]}`, sampling
T=1.0, top_k 20, top_p 0.95 (as the real model).

## Training

{tr['steps']} steps of {tl['args']['batch']} × {tl['args']['seq']} tokens ({tr['tokens_seen'] / 1e6:.1f}M tokens,
{tr['epochs']:.1f} epochs) in {tr['seconds']:.0f} s on {tl['versions']['device']}, {tr['tokens_per_second']:,} tokens/s;
AdamW (β 0.9/0.95, wd {tl['args']['weight_decay']}), peak lr {tl['args']['lr']}, {tl['args']['warmup_steps']}
warmup steps, cosine over the wall-clock budget to {tl['args']['min_lr_ratio']}×, grad clip
{tl['args']['grad_clip']}, bf16 autocast, no torch.compile. Loss = CE(next token) + {tr['mtp_weight']} ·
CE(MTP, token after next) + {tl['args']['aux_coef']} · router load balance (all 9 routers). The MTP head gets the
main model's final-normed hidden state {'detached' if tr['mtp_detached'] else 'without detaching (its gradient also trains the main model, as in DeepSeek-V3 MTP)'}.
Whole run including tokenizer training, checks and references: {tl['wall_seconds_total'] / 60:.1f} min.

## Results (held-out, {fin['tokens']:,} tokens)

| metric | value |
|---|---|
| loss (nats/token) / perplexity | {fin['loss']:.3f} / {fin['perplexity']:.2f} |
| next-token top-1 accuracy | {fin['top1_acc']:.3f} |
| MTP loss (token after next) | {fin['mtp_loss']:.3f} |
| MTP top-1 accuracy vs the true token | {fin['mtp_top1_acc_vs_true']:.3f} |
| MTP top-1 agreement with the main model's next-next argmax | {fin['mtp_top1_agreement_with_main']:.3f} |
| MTP greedy acceptance (k=1) on the greedy samples below | {tl['mtp_greedy_acceptance_on_samples']['rate']:.3f} ({tl['mtp_greedy_acceptance_on_samples']['drafts']} drafts) |

Checks: reload with `from_pretrained` gives bit-identical weights and logits; bf16 inference vs float32 on the
reference snippet: max |Δlogit| {tl['checks']['bf16_vs_f32_logits_max_abs_diff']:.3f}, argmax agreement
{tl['checks']['bf16_vs_f32_argmax_agreement']:.3f}; `generate` (with its GDN/KV cache) vs teacher-forced argmax:
{tl['checks']['generate_vs_teacher_forced_argmax_mismatches']} mismatches.

## Reference outputs (parity fixtures)

All from transformers {tl['versions']['transformers']} in float32 on CPU from the saved bf16 weights (eager attention,
eager experts):
`ref_ids.npy` int64 [{ref_len}] (a held-out snippet), `ref_logits.npy` float32 [{ref_len}, {tc.vocab_size}],
`ref_hidden.npy` float32 [{ref_len}, {tc.hidden_size}] (final-normed hidden, the input of lm_head and of the MTP),
`ref_mtp_logits.npy` float32 [{ref_len - 1}, {tc.vocab_size}] (row p: MTP from h_p and x_{{p+1}}, predicts x_{{p+2}},
RoPE position p), `ref_mtp_hidden.npy` float32 [{ref_len - 1}, {tc.hidden_size}] (`mtp.norm` output of row p),
`greedy_samples.json` (prompt ids → greedy ids, float32).

## Greedy samples (float32, CPU)

{chr(10).join(sample_md)}
## Versions

{', '.join(f'{k} {v}' for k, v in tl['versions'].items())}.
Command: `{tl['command']}`
"""
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(card)


if __name__ == "__main__":
    main()
