// The Jinja interpreter (src/jinja): small templates whose expected output is what jinja2 3.1.6
// renders in transformers' environment (trim_blocks, lstrip_blocks; checked with
// tools/jinja_template_parity.py's environment when written), and the errors for constructs it
// does not support. The sweep over real chat templates against jinja2 itself is
// tools/jinja_template_parity.py (ctest jinja_template_parity).
#include <gtest/gtest.h>

#include "jinja/template.h"

namespace qs::jinja {
namespace {

using Json = nlohmann::ordered_json;

std::string render(const std::string& source, const char* context = "{}") {
    auto t = Template::parse(source);
    EXPECT_TRUE(t.is_ok()) << (t.is_ok() ? "" : t.status().message());
    if (!t.is_ok()) return "<parse error>";
    auto r = t.value().render(Json::parse(context));
    EXPECT_TRUE(r.is_ok()) << (r.is_ok() ? "" : r.status().message());
    return r.is_ok() ? r.value() : "<render error>";
}

std::string render_error(const std::string& source, const char* context = "{}") {
    auto t = Template::parse(source);
    if (!t.is_ok()) return t.status().message();
    auto r = t.value().render(Json::parse(context));
    EXPECT_FALSE(r.is_ok()) << source;
    return r.is_ok() ? "" : r.status().message();
}

TEST(JinjaTemplate, WhitespaceControlAsTransformers) {
    // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
    EXPECT_EQ(render("{% if true %}\n    a\n    {% endif %}\nb"), "    a\nb");
    EXPECT_EQ(render("x  {%- if true -%}  y  {%- endif -%}  z"), "xyz");
    EXPECT_EQ(render("{{ 'a' }}\n{{ 'b' -}}\n  c"), "a\nbc");
    EXPECT_EQ(render("a\n{# comment #}\nb\n"), "a\nb");  // one trailing newline dropped
    EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
}

TEST(JinjaTemplate, LoopsScopesAndNamespaces) {
    EXPECT_EQ(render("{% for x in xs %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}"
                     "{{ loop.length }};{% endfor %}",
                     R"({"xs": ["a", "b"]})"),
              "01TrueFalse2;12FalseTrue2;");
    EXPECT_EQ(render("{% set n = 1 %}{% for x in [1, 2] %}{% set n = n + x %}{% endfor %}{{ n }}"), "1");
    EXPECT_EQ(render("{% set ns = namespace(n=1) %}{% for x in [1, 2] %}{% set ns.n = ns.n + x %}{% endfor %}"
                     "{{ ns.n }}"),
              "4");
    EXPECT_EQ(render("{% for x in range(5) if x is odd %}{{ x }}{% else %}none{% endfor %}"), "13");
    EXPECT_EQ(render("{% for x in [] %}{{ x }}{% else %}none{% endfor %}"), "none");
    EXPECT_EQ(render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}"), "13");
    EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", R"({"d": {"b": 1, "a": [1, "x"]}})"),
              "b=1,a=[1, 'x'],");
}

TEST(JinjaTemplate, MacrosAndFilters) {
    EXPECT_EQ(render("{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}"), "[1B][23]");
    EXPECT_EQ(render("{{ '  x ' | trim }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}|{{ [1, 2] | length }}|"
                     "{{ ['a', 'b'] | join(', ') }}|{{ xs | first }}{{ xs | last }}|{{ missing | default('d') }}",
                     R"({"xs": [3, 4]})"),
              "x|ABab|2|a, b|34|d");
    EXPECT_EQ(render("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }}",
                     R"({"ms": [{"role": "user", "c": 1}, {"role": "bot", "c": 2}, {"role": "user", "c": 3}]})"),
              "[1, 3]");
    EXPECT_EQ(render("{{ d | tojson }}|{{ d | tojson(indent=2) }}", R"({"d": {"a": [1, 2.5, null, true], "é": "\n"}})"),
              "{\"a\": [1, 2.5, null, true], \"é\": \"\\n\"}|{\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n"
              "  \"é\": \"\\n\"\n}");
    EXPECT_EQ(render("{{ '3' | int + 1 }}|{{ 1 | string ~ 'x' }}|{{ 'a-b c' | title }}|{{ 'abc'[::-1] }}"), "4|1x|A-B C|cba");
}

TEST(JinjaTemplate, ExpressionsAndMethods) {
    EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 7 / 2 }} {{ 2 ** 3 }} {{ 'ab' * 2 }}"), "3 -4 1 3.5 8 abab");
    EXPECT_EQ(render("{{ 'a' in 'cat' }} {{ 2 not in [1] }} {{ 'k' in {'k': 1} }} {{ 1 == 1.0 }} {{ none is none }}"),
              "True True True True True");
    EXPECT_EQ(render("{{ s.startswith('<th') }} {{ s.split('>')[-1] }} {{ s.strip('<') }} {{ s.replace('a', 'o') }}",
                     R"({"s": "<think>a</think>tail"})"),
              "True tail think>a</think>tail <think>o</think>toil");
    EXPECT_EQ(render("{{ x if x else 'no' }} {{ x is defined }} {{ y is string }} {{ y is mapping }} {{ [] is iterable }}",
                     R"({"y": {}})"),
              "no False False True True");
    EXPECT_EQ(render("{{ m.get('a', 5) }} {{ m.b }} [{{ m.c }}] {{ m['b'] }}", R"({"m": {"b": "B"}})"), "5 B [] B");
    EXPECT_EQ(render("{{ '%s-%d' % ('a', 3) }}|{{ '%.2f|%r|%%' % (1.5, 'x') }}|{{ '%s and %s'|format('a', 2) }}"),
              "a-3|1.50|'x'|%|a and 2");
}

TEST(JinjaTemplate, RaiseExceptionGivesItsMessage) {
    EXPECT_EQ(render_error("{% if true %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}"),
              "Conversation roles must alternate");
}

TEST(JinjaTemplate, UnsupportedConstructsNameTheConstructAndLine) {
    auto parse_error = [](const std::string& source) {
        auto t = Template::parse(source);
        EXPECT_FALSE(t.is_ok()) << source;
        return t.is_ok() ? std::string() : t.status().message();
    };
    EXPECT_EQ(parse_error("a\n{% include 'x.jinja' %}"), "template syntax: line 2: unsupported template tag '{% include %}'");
    EXPECT_EQ(parse_error("{% if x %}"), "template syntax: line 1: unexpected end of template: missing {% endif %}");
    EXPECT_EQ(parse_error("{{ x "), "template syntax: line 1: unclosed tag: '{{' opened on line 1 has no '}}'");
    EXPECT_EQ(render_error("\n\n{{ x | wordwrap }}"), "chat template line 3: unsupported filter 'wordwrap'");
    EXPECT_EQ(render_error("{{ x is prime }}"), "chat template line 1: unsupported test 'is prime'");
    EXPECT_EQ(render_error("{{ xs.append(1) }}", R"({"xs": []})"),
              "chat template line 1: access to attribute 'append' of a 'list' object is unsafe (the template "
              "environment is immutable)");
    EXPECT_EQ(render_error("{{ m.content.strip() }}", R"({"m": {}})"),
              "chat template line 1: 'content' is undefined (reading its attribute 'strip')");
    EXPECT_EQ(render_error("{{ 1 + 'a' }}"), "chat template line 1: unsupported operand types for +: 'int' and 'str'");
}

}  // namespace
}  // namespace qs::jinja
