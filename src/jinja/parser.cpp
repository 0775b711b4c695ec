// Jinja parser (see parser.h): recursive descent in jinja2's precedence order.
#include "jinja/parser.h"

#include <algorithm>

#include "jinja/error.h"

namespace qs::jinja {

namespace {

ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
}

class Parser {
public:
    explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

    Body parse_template() {
        std::string end;
        Body body = parse_body({}, end);
        return body;
    }

private:
    const Token& cur() const { return t_[i_]; }
    const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
    bool is_op(const char* op) const { return cur().type == TokenType::kOp && cur().text == op; }
    bool is_name(const char* n) const { return cur().type == TokenType::kName && cur().text == n; }
    void expect_op(const char* op) {
        if (!is_op(op)) fail(std::string("expected '") + op + "', found " + describe(cur()), cur().line);
        ++i_;
    }
    std::string expect_name() {
        if (cur().type != TokenType::kName) fail("expected a name, found " + describe(cur()), cur().line);
        return t_[i_++].text;
    }
    void expect_block_end() {
        if (cur().type != TokenType::kBlockEnd) fail("expected the end of the tag, found " + describe(cur()), cur().line);
        ++i_;
    }
    static std::string describe(const Token& t) {
        switch (t.type) {
            case TokenType::kText: return "text";
            case TokenType::kVarBegin: return "'{{'";
            case TokenType::kVarEnd: return "'}}'";
            case TokenType::kBlockBegin: return "'{%'";
            case TokenType::kBlockEnd: return "'%}'";
            case TokenType::kName: return "'" + t.text + "'";
            case TokenType::kString: return "a string";
            case TokenType::kInt:
            case TokenType::kFloat: return "a number";
            case TokenType::kOp: return "'" + t.text + "'";
            case TokenType::kEof: return "the end of the template";
        }
        return "?";
    }

    // Statements until one of `ends` opens a block tag; `end` receives its name (left after it).
    Body parse_body(const std::vector<std::string>& ends, std::string& end) {
        Body body;
        while (true) {
            const Token& tok = cur();
            if (tok.type == TokenType::kEof) {
                if (!ends.empty()) fail("unexpected end of template: missing {% " + ends.back() + " %}", tok.line);
                return body;
            }
            if (tok.type == TokenType::kText) {
                auto s = std::make_unique<Stmt>();
                s->kind = Stmt::Kind::kText;
                s->line = tok.line;
                s->text = tok.text;
                body.push_back(std::move(s));
                ++i_;
            } else if (tok.type == TokenType::kVarBegin) {
                ++i_;
                auto s = std::make_unique<Stmt>();
                s->kind = Stmt::Kind::kOutput;
                s->line = tok.line;
                s->expr = parse_tuple_or_expr();
                if (cur().type != TokenType::kVarEnd) fail("expected '}}', found " + describe(cur()), cur().line);
                ++i_;
                body.push_back(std::move(s));
            } else if (tok.type == TokenType::kBlockBegin) {
                ++i_;
                if (cur().type != TokenType::kName) fail("expected a tag name after '{%'", cur().line);
                const std::string name = cur().text;
                if (std::find(ends.begin(), ends.end(), name) != ends.end()) {
                    ++i_;
                    end = name;
                    return body;
                }
                body.push_back(parse_statement());
            } else {
                fail("unexpected " + describe(tok), tok.line);
            }
        }
    }

    StmtPtr parse_statement() {
        const int line = cur().line;
        const std::string name = expect_name();
        auto s = std::make_unique<Stmt>();
        s->line = line;
        if (name == "if") {
            s->kind = Stmt::Kind::kIf;
            ExprPtr cond = parse_tuple_or_expr();
            expect_block_end();
            while (true) {
                std::string end;
                Body body = parse_body({"elif", "else", "endif"}, end);
                s->branches.emplace_back(std::move(cond), std::move(body));
                if (end == "endif") break;
                if (end == "elif") {
                    cond = parse_tuple_or_expr();
                } else {
                    cond = nullptr;
                    expect_block_end();
                    std::string e2;
                    Body else_body = parse_body({"endif"}, e2);
                    s->branches.emplace_back(nullptr, std::move(else_body));
                    break;
                }
                expect_block_end();
            }
            expect_block_end();
        } else if (name == "for") {
            s->kind = Stmt::Kind::kFor;
            s->targets.push_back(expect_name());
            while (is_op(",")) {
                ++i_;
                s->targets.push_back(expect_name());
            }
            if (!is_name("in")) fail("expected 'in' in the for tag", cur().line);
            ++i_;
            s->expr = parse_tuple_or_expr(/*no_cond=*/true);
            if (is_name("if")) {
                ++i_;
                s->cond = parse_expression(true);
            }
            if (is_name("recursive")) fail("unsupported: recursive for loops", cur().line);
            expect_block_end();
            std::string end;
            s->body = parse_body({"else", "endfor"}, end);
            if (end == "else") {
                expect_block_end();
                s->else_body = parse_body({"endfor"}, end);
            }
            expect_block_end();
        } else if (name == "set") {
            s->kind = Stmt::Kind::kSet;
            s->targets.push_back(expect_name());
            if (is_op(".")) {
                ++i_;
                s->attr = expect_name();
            }
            while (is_op(",")) {
                ++i_;
                s->targets.push_back(expect_name());
            }
            if (cur().type == TokenType::kBlockEnd) {
                if (s->targets.size() != 1 || !s->attr.empty()) fail("a block set takes one name", line);
                ++i_;
                s->kind = Stmt::Kind::kSetBlock;
                std::string end;
                s->body = parse_body({"endset"}, end);
                expect_block_end();
                return s;
            }
            expect_op("=");
            s->expr = parse_tuple_or_expr();
            expect_block_end();
        } else if (name == "macro") {
            s->kind = Stmt::Kind::kMacro;
            s->name = expect_name();
            expect_op("(");
            while (!is_op(")")) {
                std::string param = expect_name();
                ExprPtr def;
                if (is_op("=")) {
                    ++i_;
                    def = parse_expression();
                }
                s->params.emplace_back(std::move(param), std::move(def));
                if (!is_op(",")) break;
                ++i_;
            }
            expect_op(")");
            expect_block_end();
            std::string end;
            s->body = parse_body({"endmacro"}, end);
            if (cur().type == TokenType::kName) ++i_;  // {% endmacro name %}
            expect_block_end();
        } else if (name == "break" || name == "continue") {
            s->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
            expect_block_end();
        } else if (name == "filter") {
            s->kind = Stmt::Kind::kFilterBlock;
            s->expr = parse_filter_chain(nullptr);
            expect_block_end();
            std::string end;
            s->body = parse_body({"endfilter"}, end);
            expect_block_end();
        } else if (name == "generation") {
            s->kind = Stmt::Kind::kScope;
            expect_block_end();
            std::string end;
            s->body = parse_body({"endgeneration"}, end);
            expect_block_end();
        } else {
            fail("unsupported template tag '{% " + name + " %}'", line);
        }
        return s;
    }

    // An expression, or a bare tuple `a, b` (set and for values, output).
    ExprPtr parse_tuple_or_expr(bool no_cond = false) {
        const int line = cur().line;
        ExprPtr first = parse_expression(!no_cond);
        if (!is_op(",")) return first;
        auto tuple = make(Expr::Kind::kTuple, line);
        tuple->args.push_back(std::move(first));
        while (is_op(",")) {
            ++i_;
            if (cur().type == TokenType::kBlockEnd || cur().type == TokenType::kVarEnd) break;
            tuple->args.push_back(parse_expression(!no_cond));
        }
        return tuple;
    }

    ExprPtr parse_expression(bool with_cond = true) {
        ExprPtr e = parse_or();
        if (!with_cond) return e;
        while (is_name("if")) {
            const int line = cur().line;
            ++i_;
            auto c = make(Expr::Kind::kCond, line);
            c->args.push_back(parse_or());
            c->args.push_back(std::move(e));
            if (is_name("else")) {
                ++i_;
                c->args.push_back(parse_expression());
            } else {
                c->args.push_back(nullptr);
            }
            e = std::move(c);
        }
        return e;
    }

    ExprPtr binary(Expr::Kind kind, const std::string& op, ExprPtr a, ExprPtr b, int line) {
        auto e = make(kind, line);
        e->name = op;
        e->args.push_back(std::move(a));
        e->args.push_back(std::move(b));
        return e;
    }

    ExprPtr parse_or() {
        ExprPtr e = parse_and();
        while (is_name("or")) {
            const int line = cur().line;
            ++i_;
            e = binary(Expr::Kind::kOr, "or", std::move(e), parse_and(), line);
        }
        return e;
    }

    ExprPtr parse_and() {
        ExprPtr e = parse_not();
        while (is_name("and")) {
            const int line = cur().line;
            ++i_;
            e = binary(Expr::Kind::kAnd, "and", std::move(e), parse_not(), line);
        }
        return e;
    }

    ExprPtr parse_not() {
        if (is_name("not")) {
            const int line = cur().line;
            ++i_;
            auto e = make(Expr::Kind::kUnary, line);
            e->name = "not";
            e->args.push_back(parse_not());
            return e;
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        ExprPtr e = parse_math1();
        while (true) {
            const int line = cur().line;
            std::string op;
            if (cur().type == TokenType::kOp &&
                (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">="))) {
                op = cur().text;
                ++i_;
            } else if (is_name("in")) {
                op = "in";
                ++i_;
            } else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
                op = "not in";
                i_ += 2;
            } else {
                return e;
            }
            e = binary(Expr::Kind::kBinary, op, std::move(e), parse_math1(), line);
        }
    }

    ExprPtr parse_math1() {
        ExprPtr e = parse_concat();
        while (is_op("+") || is_op("-")) {
            const int line = cur().line;
            const std::string op = t_[i_++].text;
            e = binary(Expr::Kind::kBinary, op, std::move(e), parse_concat(), line);
        }
        return e;
    }

    ExprPtr parse_concat() {
        ExprPtr e = parse_math2();
        while (is_op("~")) {
            const int line = cur().line;
            ++i_;
            e = binary(Expr::Kind::kBinary, "~", std::move(e), parse_math2(), line);
        }
        return e;
    }

    ExprPtr parse_math2() {
        ExprPtr e = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const int line = cur().line;
            const std::string op = t_[i_++].text;
            e = binary(Expr::Kind::kBinary, op, std::move(e), parse_pow(), line);
        }
        return e;
    }

    ExprPtr parse_pow() {
        ExprPtr e = parse_unary(true);
        while (is_op("**")) {
            const int line = cur().line;
            ++i_;
            e = binary(Expr::Kind::kBinary, "**", std::move(e), parse_unary(true), line);
        }
        return e;
    }

    ExprPtr parse_unary(bool with_filter) {
        const int line = cur().line;
        ExprPtr e;
        if (is_op("-") || is_op("+")) {
            e = make(Expr::Kind::kUnary, line);
            e->name = t_[i_++].text;
            e->args.push_back(parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_chain(std::move(e));
        return e;
    }

    ExprPtr parse_primary() {
        const Token& tok = cur();
        const int line = tok.line;
        auto lit = [&](Value v) {
            auto e = make(Expr::Kind::kLiteral, line);
            e->literal = std::move(v);
            return e;
        };
        switch (tok.type) {
            case TokenType::kName: {
                ++i_;
                if (tok.text == "true" || tok.text == "True") return lit(Value(true));
                if (tok.text == "false" || tok.text == "False") return lit(Value(false));
                if (tok.text == "none" || tok.text == "None") return lit(Value::none());
                auto e = make(Expr::Kind::kName, line);
                e->name = tok.text;
                return e;
            }
            case TokenType::kString: {
                std::string s;
                while (cur().type == TokenType::kString) s += t_[i_++].text;
                return lit(Value(std::move(s)));
            }
            case TokenType::kInt: ++i_; return lit(Value(tok.int_value));
            case TokenType::kFloat: ++i_; return lit(Value(tok.float_value));
            case TokenType::kOp:
                if (tok.text == "(") {
                    ++i_;
                    if (is_op(")")) {
                        ++i_;
                        return make(Expr::Kind::kTuple, line);
                    }
                    ExprPtr e = parse_expression();
                    if (is_op(",")) {
                        auto tuple = make(Expr::Kind::kTuple, line);
                        tuple->args.push_back(std::move(e));
                        while (is_op(",")) {
                            ++i_;
                            if (is_op(")")) break;
                            tuple->args.push_back(parse_expression());
                        }
                        e = std::move(tuple);
                    }
                    expect_op(")");
                    return e;
                }
                if (tok.text == "[") {
                    ++i_;
                    auto e = make(Expr::Kind::kList, line);
                    while (!is_op("]")) {
                        e->args.push_back(parse_expression());
                        if (!is_op(",")) break;
                        ++i_;
                    }
                    expect_op("]");
                    return e;
                }
                if (tok.text == "{") {
                    ++i_;
                    auto e = make(Expr::Kind::kDict, line);
                    while (!is_op("}")) {
                        e->args.push_back(parse_expression());
                        expect_op(":");
                        e->args.push_back(parse_expression());
                        if (!is_op(",")) break;
                        ++i_;
                    }
                    expect_op("}");
                    return e;
                }
                break;
            default: break;
        }
        fail("unexpected " + describe(tok) + " in an expression", line);
    }

    ExprPtr parse_postfix(ExprPtr e) {
        while (true) {
            const int line = cur().line;
            if (is_op(".")) {
                ++i_;
                if (cur().type == TokenType::kInt) {
                    auto g = make(Expr::Kind::kGetItem, line);
                    g->args.push_back(std::move(e));
                    auto idx = make(Expr::Kind::kLiteral, line);
                    idx->literal = Value(t_[i_++].int_value);
                    g->args.push_back(std::move(idx));
                    e = std::move(g);
                    continue;
                }
                auto g = make(Expr::Kind::kGetAttr, line);
                g->name = expect_name();
                g->args.push_back(std::move(e));
                e = std::move(g);
            } else if (is_op("[")) {
                ++i_;
                e = parse_subscript(std::move(e), line);
            } else if (is_op("(")) {
                e = parse_call(std::move(e), Expr::Kind::kCall, "");
            } else {
                return e;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr obj, int line) {
        ExprPtr parts[3];
        int n = 0;
        bool slice = false;
        while (true) {
            if (!is_op(":") && !is_op("]")) parts[n] = parse_expression();
            if (is_op(":")) {
                slice = true;
                if (++n > 2) fail("a slice has at most three parts", line);
                ++i_;
                continue;
            }
            break;
        }
        expect_op("]");
        if (!slice) {
            auto g = make(Expr::Kind::kGetItem, line);
            g->args.push_back(std::move(obj));
            g->args.push_back(std::move(parts[0]));
            return g;
        }
        auto s = make(Expr::Kind::kSlice, line);
        s->args.push_back(std::move(obj));
        for (auto& p : parts) s->args.push_back(std::move(p));
        return s;
    }

    // `(args)` after a callee, filter or test; the node's args[0] is `subject`.
    ExprPtr parse_call(ExprPtr subject, Expr::Kind kind, const std::string& name) {
        auto c = make(kind, cur().line);
        c->name = name;
        c->args.push_back(std::move(subject));
        expect_op("(");
        while (!is_op(")")) {
            if (is_op("*") || is_op("**")) fail("unsupported: *args / **kwargs in a call", cur().line);
            if (cur().type == TokenType::kName && peek().type == TokenType::kOp && peek().text == "=") {
                std::string key = t_[i_].text;
                i_ += 2;
                c->kwargs.emplace_back(std::move(key), parse_expression());
            } else {
                if (!c->kwargs.empty()) fail("a positional argument follows a keyword argument", cur().line);
                c->args.push_back(parse_expression());
            }
            if (!is_op(",")) break;
            ++i_;
        }
        expect_op(")");
        return c;
    }

    // `| filter(args)` and `is [not] test args`, repeated.
    ExprPtr parse_filter_chain(ExprPtr e) {
        bool first_bare = e == nullptr;  // {% filter name %}: no leading '|'
        while (true) {
            const int line = cur().line;
            if (is_op("|") || first_bare) {
                if (!first_bare) ++i_;
                first_bare = false;
                std::string name = expect_name();
                while (is_op(".")) {
                    ++i_;
                    name += "." + expect_name();
                }
                if (is_op("(")) {
                    e = parse_call(std::move(e), Expr::Kind::kFilter, name);
                } else {
                    auto f = make(Expr::Kind::kFilter, line);
                    f->name = name;
                    f->args.push_back(std::move(e));
                    e = std::move(f);
                }
            } else if (is_name("is")) {
                ++i_;
                bool negated = false;
                if (is_name("not")) {
                    negated = true;
                    ++i_;
                }
                std::string name = expect_name();
                ExprPtr t;
                if (is_op("(")) {
                    t = parse_call(std::move(e), Expr::Kind::kTest, name);
                } else {
                    t = make(Expr::Kind::kTest, line);
                    t->name = name;
                    t->args.push_back(std::move(e));
                    const Token& n = cur();
                    const bool starts_arg = n.type == TokenType::kString || n.type == TokenType::kInt ||
                                            n.type == TokenType::kFloat ||
                                            (n.type == TokenType::kName && n.text != "else" && n.text != "or" &&
                                             n.text != "and" && n.text != "if" && n.text != "is" &&
                                             n.text != "in" && n.text != "not") ||
                                            (n.type == TokenType::kOp && (n.text == "[" || n.text == "{"));
                    if (starts_arg) t->args.push_back(parse_postfix(parse_primary()));
                }
                t->negated = negated;
                e = std::move(t);
            } else if (is_op("(") && e && e->kind == Expr::Kind::kFilter) {
                e = parse_call(std::move(e), Expr::Kind::kCall, "");
            } else {
                return e;
            }
        }
    }

    const std::vector<Token>& t_;
    size_t i_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace qs::jinja
