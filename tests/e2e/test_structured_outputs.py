# Structured outputs, end to end: the official openai client against `qwenserve serve` on the
# REAL engine with models/qwen36-tiny (MTP on: constrained sequences do not draft, the others
# do). The tiny model's replies are junk unless constrained, so every reply that conforms does
# so because of the grammar. Oracles are independent of the server: the PyPI `jsonschema`
# package (Draft 2020-12) for JSON schemas, json.loads, Python's re for regexes and grammars.
# Covered: response_format json_schema (strict and not) over 36 schemas (nested objects, arrays
# with bounds, enums, const, numbers with ranges, string patterns and lengths, anyOf, $ref/$defs,
# nullable types, optional properties), json_object, vLLM's structured_outputs {json, regex,
# choice, grammar} and guided_json / guided_regex / guided_choice / guided_grammar, completions,
# streaming, n > 1, tool_choice required and named (arguments valid under each tool's schema),
# max_tokens before the grammar completes ("length", no hang), and 400s naming the problem.
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

from conftest import BINARY, free_port, server_output, spawn, wait_healthy

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
MODEL_DIR = os.path.join(REPO, "models", "qwen36-tiny")
MODEL = "qwen36-tiny"
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}

pytestmark = pytest.mark.skipif(not os.path.isdir(MODEL_DIR), reason=f"{MODEL_DIR} is absent (trained test model)")


@pytest.fixture(scope="module")
def server():
    port = free_port()
    args = [BINARY, "serve", "--model", MODEL_DIR, "--served-model-name", MODEL, "--num-speculative-tokens", "2",
            "--port", str(port), "--worker-threads", "4"]
    proc = spawn(args)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(proc, base, 60)
    yield base
    proc.terminate()
    assert proc.wait(timeout=30) == 0, server_output(proc)


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=300)


NAME = {"type": "string", "minLength": 1, "maxLength": 12}
SCHEMAS = [
    ("flat_object", {"type": "object", "properties": {"name": NAME, "age": {"type": "integer"}},
                     "required": ["name", "age"], "additionalProperties": False}),
    ("integer_range", {"type": "object", "properties": {"n": {"type": "integer", "minimum": -5, "maximum": 17}},
                       "required": ["n"]}),
    ("exclusive_range", {"type": "object", "properties": {
        "n": {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 20}}, "required": ["n"]}),
    ("number_range", {"type": "object", "properties": {"x": {"type": "number", "minimum": 0.5, "maximum": 99.5}},
                      "required": ["x"]}),
    ("negative_numbers", {"type": "object", "properties": {
        "t": {"type": "number", "minimum": -273.15, "maximum": -1}}, "required": ["t"]}),
    ("boolean_and_null", {"type": "object", "properties": {"ok": {"type": "boolean"}, "nothing": {"type": "null"}},
                          "required": ["ok", "nothing"]}),
    ("string_enum", {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
                     "required": ["color"]}),
    ("mixed_enum", {"type": "object", "properties": {"v": {"enum": [1, "two", None, True, 3.5]}},
                    "required": ["v"]}),
    ("const", {"type": "object", "properties": {"kind": {"const": "point"}, "x": {"type": "integer"}},
               "required": ["kind", "x"]}),
    ("string_lengths", {"type": "object", "properties": {"code": {"type": "string", "minLength": 3, "maxLength": 5}},
                        "required": ["code"]}),
    ("string_pattern", {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"}},
                        "required": ["id"]}),
    ("pattern_alternatives", {"type": "object", "properties": {
        "unit": {"type": "string", "pattern": "^(kg|g|mg)$"}}, "required": ["unit"]}),
    ("array_bounds", {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
                      "minItems": 2, "maxItems": 4}),
    ("array_of_objects", {"type": "array", "minItems": 1, "maxItems": 3, "items": {
        "type": "object", "properties": {"k": NAME, "v": {"type": "integer"}}, "required": ["k", "v"]}}),
    ("array_in_object", {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3}},
        "required": ["tags"]}),
    ("prefix_items", {"type": "array", "prefixItems": [{"type": "string", "maxLength": 8}, {"type": "integer"},
                                                        {"type": "boolean"}], "items": False}),
    ("nested_objects", {"type": "object", "properties": {
        "user": {"type": "object", "properties": {
            "name": NAME, "address": {"type": "object", "properties": {
                "city": NAME, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city", "zip"]}},
            "required": ["name", "address"]}}, "required": ["user"]}),
    ("deep_nesting", {"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "object", "properties": {"c": {"type": "array", "maxItems": 2, "items": {
            "type": "object", "properties": {"d": {"type": "integer"}}, "required": ["d"]}}},
            "required": ["c"]}}, "required": ["b"]}}, "required": ["a"]}),
    ("any_of", {"type": "object", "properties": {
        "value": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "string", "maxLength": 4}]}},
        "required": ["value"]}),
    ("any_of_objects", {"anyOf": [
        {"type": "object", "properties": {"circle": {"type": "number", "minimum": 0, "maximum": 10}},
         "required": ["circle"], "additionalProperties": False},
        {"type": "object", "properties": {"square": {"type": "integer", "minimum": 0, "maximum": 10}},
         "required": ["square"], "additionalProperties": False}]}),
    ("one_of_discriminated", {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer", "minimum": 1,
                                                                           "maximum": 9}},
         "required": ["kind", "lives"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
         "required": ["kind", "good"], "additionalProperties": False}]}),
    ("nullable_type_array", {"type": "object", "properties": {"maybe": {"type": ["string", "null"], "maxLength": 6}},
                             "required": ["maybe"]}),
    ("ref_defs", {"$defs": {"point": {"type": "object", "properties": {
        "x": {"type": "integer", "minimum": -9, "maximum": 9}, "y": {"type": "integer", "minimum": -9, "maximum": 9}},
        "required": ["x", "y"]}},
        "type": "object", "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}},
        "required": ["a", "b"]}),
    ("ref_in_array", {"$defs": {"item": {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[a-z]{3}$"},
                                                                        "qty": {"type": "integer", "minimum": 1, "maximum": 5}},
                                         "required": ["sku", "qty"]}},
                      "type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1, "maxItems": 2}),
    ("recursive_ref", {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer", "minimum": 0, "maximum": 9},
        "kids": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
        "$ref": "#/$defs/node"}),
    ("definitions_keyword", {"definitions": {"flag": {"type": "boolean"}}, "type": "object",
                             "properties": {"f": {"$ref": "#/definitions/flag"}}, "required": ["f"]}),
    ("optional_properties", {"type": "object", "properties": {"a": {"type": "integer"}, "b": NAME,
                                                              "c": {"type": "boolean"}}, "required": ["a"]}),
    ("no_required", {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 3}}}),
    ("top_level_string", {"type": "string", "minLength": 2, "maxLength": 10}),
    ("top_level_integer", {"type": "integer", "minimum": 100, "maximum": 999}),
    ("top_level_enum", {"enum": ["north", "south", "east", "west"]}),
    ("date_format", {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}, "required": ["d"]}),
    ("email_like_pattern", {"type": "object", "properties": {
        "email": {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.(com|org)$"}}, "required": ["email"]}),
    ("matrix", {"type": "array", "minItems": 2, "maxItems": 2, "items": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": 0, "maximum": 9}}}),
    ("min_max_properties", {"type": "object", "additionalProperties": {"type": "integer"},
                            "propertyNames": {"pattern": "^[a-z]{1,6}$"}, "minProperties": 1, "maxProperties": 2}),
    ("order_record", {"type": "object", "properties": {
        "order_id": {"type": "string", "pattern": "^ORD[0-9]{4}$"},
        "status": {"enum": ["open", "shipped", "closed"]},
        "items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "object", "properties": {
            "name": NAME, "price": {"type": "number", "minimum": 0, "maximum": 1000}}, "required": ["name", "price"]}},
        "gift": {"type": "boolean"}},
        "required": ["order_id", "status", "items"], "additionalProperties": False}),
]
assert len(SCHEMAS) >= 30
# The tiny model likes whitespace (up to 16 characters in a row between JSON tokens) and long
# strings: room for the larger schemas to complete.
MAX_TOKENS = 700


def chat(client, **kw):
    kw.setdefault("model", MODEL)
    kw.setdefault("messages", [{"role": "user", "content": "Describe a thing as JSON."}])
    extra = dict(NO_THINK)
    extra.update(kw.pop("extra_body", {}))
    return client.chat.completions.create(extra_body=extra, **kw)


def parallel(fn, items, workers=8):
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))


@pytest.mark.parametrize("strict", [True, False])
def test_json_schema_replies_validate(client, strict):
    # strict does not change the grammar (schemas are always compiled strictly): every schema
    # with strict, a third of them without.
    items = [(i, s) for i, s in enumerate(SCHEMAS) if strict or i % 3 == 1]

    def one(item):
        i, (name, schema) = item
        r = chat(client, response_format={"type": "json_schema",
                                          "json_schema": {"name": name, "schema": schema, "strict": strict}},
                 max_tokens=MAX_TOKENS, seed=100 + i, temperature=0 if i % 3 == 0 else 1.0)
        return name, schema, r.choices[0]

    failures = []
    for name, schema, choice in parallel(one, items):
        if choice.finish_reason != "stop":
            failures.append(f"{name}: finish_reason {choice.finish_reason}: {choice.message.content!r}")
            continue
        try:
            jsonschema.Draft202012Validator(schema).validate(json.loads(choice.message.content))
        except (ValueError, jsonschema.ValidationError) as e:
            failures.append(f"{name}: {choice.message.content!r}: {e}")
    assert not failures, "\n".join(failures)


def test_vllm_json_fields_and_streaming(client):
    schema = dict(SCHEMAS[0][1])
    for extra in ({"structured_outputs": {"json": schema}}, {"guided_json": schema},
                  {"guided_json": json.dumps(schema)}, {"structured_outputs": {"json": schema,
                                                                             "disable_any_whitespace": True}}):
        r = chat(client, max_tokens=MAX_TOKENS, seed=7, extra_body=extra)
        assert r.choices[0].finish_reason == "stop", (extra, r.choices[0].message.content)
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    content, finish = "", None
    for chunk in chat(client, max_tokens=MAX_TOKENS, seed=8, stream=True,
                      response_format={"type": "json_schema", "json_schema": {"name": "o", "schema": schema}}):
        for ch in chunk.choices:
            content += ch.delta.content or ""
            finish = ch.finish_reason or finish
    assert finish == "stop"
    jsonschema.validate(json.loads(content), schema)


def test_json_object_replies_parse(client):
    prompts = ['Reply with {"ok": true} as JSON.', "Give me a JSON object.", "Describe a cat in JSON."]

    def one(i):
        return chat(client, response_format={"type": "json_object"}, max_tokens=MAX_TOKENS, seed=i,
                    temperature=0 if i == 0 else 1.0,
                    messages=[{"role": "user", "content": prompts[i % len(prompts)]}]).choices[0]

    for c in parallel(one, range(9)):
        assert c.finish_reason == "stop", c.message.content
        assert isinstance(json.loads(c.message.content), dict)
    # vLLM's spelling of the same.
    r = chat(client, max_tokens=MAX_TOKENS, seed=3, messages=[{"role": "user", "content": prompts[0]}],
             extra_body={"structured_outputs": {"json_object": True}})
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_regex_choice_and_grammar(client):
    regex = r"[A-Z][a-z]{2,8} (19|20)[0-9]{2}"
    for extra in ({"structured_outputs": {"regex": regex}}, {"guided_regex": regex}):
        for seed in range(3):
            r = chat(client, max_tokens=40, seed=seed, extra_body=extra)
            assert r.choices[0].finish_reason == "stop"
            assert re.fullmatch(regex, r.choices[0].message.content), r.choices[0].message.content
    choices = ["positive", "negative", "neutral ground"]
    for extra in ({"structured_outputs": {"choice": choices}}, {"guided_choice": choices}):
        r = chat(client, max_tokens=20, n=3, seed=5, extra_body=extra)
        assert [c.message.content for c in r.choices if c.message.content in choices] == \
               [c.message.content for c in r.choices]
        assert all(c.finish_reason == "stop" for c in r.choices)
    grammar = 'root ::= "(" num (("+" | "*") num)* ")"\nnum ::= [1-9] [0-9]*'
    for extra in ({"structured_outputs": {"grammar": grammar}}, {"guided_grammar": grammar}):
        r = chat(client, max_tokens=60, seed=11, extra_body=extra)
        if r.choices[0].finish_reason == "stop":
            assert re.fullmatch(r"\([1-9][0-9]*([+*][1-9][0-9]*)*\)", r.choices[0].message.content)
        else:  # the model may keep adding terms: then every prefix is still a prefix of the language
            assert re.fullmatch(r"\(([1-9][0-9]*([+*][1-9][0-9]*)*[+*]?)?", r.choices[0].message.content)


def test_completions_endpoint(client):
    schema = SCHEMAS[0][1]
    r = client.completions.create(model=MODEL, prompt="import json\n", max_tokens=200, seed=1,
                                  extra_body={"guided_json": schema})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].text), schema)
    r = client.completions.create(model=MODEL, prompt="x = ", max_tokens=10, seed=1,
                                  extra_body={"guided_choice": ["True", "False"]})
    assert r.choices[0].text in ("True", "False")


def test_max_tokens_first_ends_with_length(client):
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 40}
    r = chat(client, max_tokens=6, response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 6
    assert r.choices[0].message.content.startswith("[")


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {
        "type": "object", "properties": {
            "city": {"type": "string", "maxLength": 20},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "days", "unit"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "number", "minimum": -100, "maximum": 100},
                                         "b": {"type": "number", "minimum": -100, "maximum": 100}},
        "required": ["a", "b"]}}},
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def test_tool_choice_named_and_required(client):
    msgs = [{"role": "user", "content": "What is the weather in Paris for the next three days?"}]

    def one(item):
        i, choice = item
        return choice, chat(client, messages=msgs, tools=TOOLS, tool_choice=choice, max_tokens=300, seed=i,
                            temperature=0 if i % 2 else 1.0)

    cases = [{"type": "function", "function": {"name": n}} for n in PARAMS] * 2 + ["required"] * 6
    for choice, r in parallel(one, list(enumerate(cases))):
        c = r.choices[0]
        # "required" allows several calls (parallel_tool_calls): the tiny model may go on adding
        # calls until max_tokens; every call it completed is returned and must be valid.
        assert c.finish_reason in (("tool_calls", "stop") if isinstance(choice, dict)
                                   else ("tool_calls", "stop", "length")), (choice, c)
        calls = c.message.tool_calls
        assert calls, (choice, c.message.content)
        if isinstance(choice, dict):
            assert len(calls) == 1 and calls[0].function.name == choice["function"]["name"]
        for call in calls:
            assert call.function.name in PARAMS
            jsonschema.validate(json.loads(call.function.arguments), PARAMS[call.function.name])
    # strict tools are accepted when the calls are constrained.
    strict_tools = [dict(TOOLS[1], function=dict(TOOLS[1]["function"], strict=True))]
    r = chat(client, messages=msgs, tools=strict_tools, tool_choice="required", max_tokens=200, seed=3)
    jsonschema.validate(json.loads(r.choices[0].message.tool_calls[0].function.arguments), PARAMS["add"])


@pytest.mark.parametrize("kw, param, needle", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "not": {"required": ["a"]}}}}}, "response_format", "not"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "$ref": "#/$defs/missing"}}}}, "response_format", "missing"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema",
     "schema"),
    ({"extra_body": {"guided_json": {"type": "object", "properties": {"v": {"oneOf": [
        {"type": "string", "maxLength": 3}, {"type": "integer"}]}}}}}, "guided_json", "oneOf"),
    ({"extra_body": {"structured_outputs": {"json": {"type": "array", "uniqueItems": True}}}}, "structured_outputs",
     "uniqueItems"),
    ({"extra_body": {"guided_regex": "(unclosed"}}, "guided_regex", "regex"),
    ({"extra_body": {"guided_grammar": "root ::= undefined_rule"}}, "guided_grammar", "grammar"),
    ({"extra_body": {"structured_outputs": {"regex": "a+", "choice": ["a"]}}}, "structured_outputs", "exactly one"),
    ({"extra_body": {"guided_json": "{not json"}}, "guided_json", "JSON"),
    ({"extra_body": {"guided_choice": []}}, "guided_choice", "non-empty"),
    ({"response_format": {"type": "json_object"}, "extra_body": {"guided_regex": "a+"}}, "guided_regex", "both"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "nope"),
    ({"tools": [dict(TOOLS[2], function=dict(TOOLS[2]["function"], strict=True))]}, "tools[0].function.strict",
     "strict"),
])
def test_bad_constraints_are_400s_naming_the_field(client, kw, param, needle):
    # Twice: the second time the compiled grammar cache must not let a refused schema through.
    for _ in range(2):
        with pytest.raises(openai.BadRequestError) as e:
            chat(client, max_tokens=5, **kw)
        err = e.value.body
        assert e.value.status_code == 400
        assert err["param"] == param, err
        assert needle in err["message"], err
