// The evaluator (see interpreter.h): statements write into an output string, expressions
// produce Values with Python's semantics.
#include "jinja/interpreter.h"

#include <cmath>
#include <ctime>

#include "jinja/builtins.h"
#include "jinja/error.h"

namespace qs::jinja {

namespace {

constexpr int kMaxMacroDepth = 200;
constexpr int64_t kMaxRange = 1'000'000;

int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

}  // namespace

Interpreter::Interpreter(Dict globals) {
    auto builtins = make_frame(nullptr);
    for (const char* name : {"range", "namespace", "dict", "raise_exception", "strftime_now"})
        builtins->vars[name] = builtin_global(name);
    frame_ = make_frame(builtins);
    for (auto& [k, v] : globals.entries) frame_->vars[k] = std::move(v);
}

Interpreter::~Interpreter() {
    frame_.reset();
    for (const auto& w : frames_)
        if (auto f = w.lock()) {
            f->vars.clear();
            f->parent.reset();
        }
}

std::shared_ptr<Interpreter::Frame> Interpreter::make_frame(std::shared_ptr<Frame> parent) {
    auto f = std::make_shared<Frame>(Frame{{}, std::move(parent)});
    frames_.push_back(f);
    return f;
}

Value Interpreter::builtin_global(const std::string& name) const {
    if (name == "range")
        return Value::callable(
            [](CallArgs& a) {
                for (const Value& v : a.positional)
                    if (!v.is_int()) fail("range() takes integers, not '" + v.type_name() + "'", a.line);
                int64_t start = 0, stop = 0, step = 1;
                if (a.positional.size() == 1) stop = a.positional[0].as_int();
                else if (a.positional.size() >= 2) {
                    start = a.positional[0].as_int();
                    stop = a.positional[1].as_int();
                    if (a.positional.size() >= 3) step = a.positional[2].as_int();
                } else fail("range() takes 1 to 3 arguments", a.line);
                if (step == 0) fail("range() step must not be zero", a.line);
                List out;
                for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                    if (int64_t(out.size()) >= kMaxRange) fail("range() is too long", a.line);
                    out.emplace_back(i);
                }
                return Value(std::move(out));
            },
            "range");
    if (name == "namespace" || name == "dict")
        return Value::callable(
            [ns = name == "namespace"](CallArgs& a) {
                Dict d;
                d.is_namespace = ns;
                for (const Value& p : a.positional) {
                    if (!p.is_dict()) fail("namespace()/dict() take keyword arguments or a dict", a.line);
                    for (const auto& [k, v] : p.as_dict().entries) d.set(k, v);
                }
                for (auto& [k, v] : a.keyword) d.set(k, v);
                return Value(std::move(d));
            },
            name);
    if (name == "raise_exception")
        return Value::callable(
            [](CallArgs& a) -> Value {
                const Value* m = a.get(0, "message");
                throw TemplateError(m ? m->str() : std::string("raise_exception() was called"), a.line, true);
            },
            name);
    if (name == "strftime_now")
        return Value::callable(
            [](CallArgs& a) {
                const Value* f = a.get(0, "format");
                if (!f || !f->is_string()) fail("strftime_now() takes a format string", a.line);
                const std::time_t now = std::time(nullptr);
                std::tm tm{};
                localtime_r(&now, &tm);
                char buf[256];
                const size_t n = std::strftime(buf, sizeof buf, f->as_string().c_str(), &tm);
                return Value(std::string(buf, n));
            },
            name);
    return Value();
}

std::string Interpreter::render(const Body& body) {
    std::string out;
    if (exec_body(body, out) != Flow::kNormal) fail("{% break %} or {% continue %} outside a for loop", 0);
    return out;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, std::string& out) {
    for (const auto& s : body) {
        const Flow f = exec(*s, out);
        if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, std::string& out) {
    switch (s.kind) {
        case Stmt::Kind::kText: out += s.text; return Flow::kNormal;
        case Stmt::Kind::kOutput: out += eval(*s.expr).str(); return Flow::kNormal;
        case Stmt::Kind::kIf:
            for (const auto& [cond, body] : s.branches)
                if (!cond || eval(*cond).truthy()) return exec_body(body, out);
            return Flow::kNormal;
        case Stmt::Kind::kFor: exec_for(s, out); return Flow::kNormal;
        case Stmt::Kind::kSet: exec_set(s, eval(*s.expr)); return Flow::kNormal;
        case Stmt::Kind::kSetBlock: {
            std::string captured;
            exec_body(s.body, captured);
            assign(s.targets[0], Value(std::move(captured)));
            return Flow::kNormal;
        }
        case Stmt::Kind::kMacro: assign(s.name, define_macro(s)); return Flow::kNormal;
        case Stmt::Kind::kBreak: return Flow::kBreak;
        case Stmt::Kind::kContinue: return Flow::kContinue;
        case Stmt::Kind::kFilterBlock: {
            std::string captured;
            exec_body(s.body, captured);
            // s.expr is a chain of filters whose innermost subject is null: apply inside out.
            std::vector<const Expr*> chain;
            for (const Expr* e = s.expr.get(); e; e = e->args.empty() ? nullptr : e->args[0].get()) chain.push_back(e);
            Value v(std::move(captured));
            for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
                if ((*it)->kind != Expr::Kind::kFilter) fail("a {% filter %} block takes filters", s.line);
                CallArgs args = eval_args(**it, 1);
                v = call_filter((*it)->name, v, args);
            }
            out += v.str();
            return Flow::kNormal;
        }
        case Stmt::Kind::kScope: {
            auto saved = frame_;
            frame_ = make_frame(saved);
            const Flow f = exec_body(s.body, out);
            frame_ = saved;
            return f;
        }
    }
    return Flow::kNormal;
}

void Interpreter::exec_set(const Stmt& s, const Value& v) {
    if (!s.attr.empty()) {
        Value target = lookup(s.targets[0]);
        if (!target.is_dict() || !target.as_dict().is_namespace)
            fail("cannot assign the attribute '" + s.attr + "' of '" + s.targets[0] +
                     "': only namespace() objects take attribute assignment",
                 s.line);
        target.as_dict().set(s.attr, v);
        return;
    }
    if (s.targets.size() == 1) {
        assign(s.targets[0], v);
        return;
    }
    const List items = iterate(v, s.line);
    if (items.size() != s.targets.size())
        fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(s.targets.size()) +
                 " names",
             s.line);
    for (size_t i = 0; i < items.size(); ++i) assign(s.targets[i], items[i]);
}

void Interpreter::exec_for(const Stmt& s, std::string& out) {
    const List all = iterate(eval(*s.expr), s.line);
    auto saved = frame_;
    frame_ = make_frame(saved);
    auto bind = [&](const Value& item) {
        if (s.targets.size() == 1) {
            assign(s.targets[0], item);
            return;
        }
        const List parts = iterate(item, s.line);
        if (parts.size() != s.targets.size())
            fail("cannot unpack " + std::to_string(parts.size()) + " values into " +
                     std::to_string(s.targets.size()) + " loop variables",
                 s.line);
        for (size_t i = 0; i < parts.size(); ++i) assign(s.targets[i], parts[i]);
    };
    // The loop filter (`for x in xs if cond`) runs before the loop: loop.length counts the kept items.
    List items;
    if (s.cond) {
        for (const Value& item : all) {
            bind(item);
            if (eval(*s.cond).truthy()) items.push_back(item);
        }
    } else {
        items = all;
    }
    const int64_t n = int64_t(items.size());
    for (int64_t i = 0; i < n; ++i) {
        frame_ = make_frame(saved);
        Dict loop;
        loop.set("index0", Value(i));
        loop.set("index", Value(i + 1));
        loop.set("revindex0", Value(n - i - 1));
        loop.set("revindex", Value(n - i));
        loop.set("first", Value(i == 0));
        loop.set("last", Value(i == n - 1));
        loop.set("length", Value(n));
        loop.set("depth", Value(int64_t{1}));
        loop.set("depth0", Value(int64_t{0}));
        loop.set("previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("loop.previtem"));
        loop.set("nextitem", i + 1 < n ? items[size_t(i + 1)] : Value::undefined("loop.nextitem"));
        loop.set("cycle", Value::callable(
                              [i](CallArgs& a) {
                                  if (a.positional.empty()) fail("loop.cycle() needs arguments", a.line);
                                  return a.positional[size_t(i) % a.positional.size()];
                              },
                              "loop.cycle"));
        assign("loop", Value(std::move(loop)));
        bind(items[size_t(i)]);
        if (exec_body(s.body, out) == Flow::kBreak) break;
    }
    frame_ = saved;
    if (n == 0 && !s.else_body.empty()) exec_body(s.else_body, out);
}

Value Interpreter::define_macro(const Stmt& s) {
    std::shared_ptr<Frame> defined_in = frame_;
    const Stmt* macro = &s;
    return Value::callable(
        [this, defined_in, macro](CallArgs& a) {
            if (a.positional.size() > macro->params.size())
                fail("macro '" + macro->name + "' takes " + std::to_string(macro->params.size()) +
                         " arguments, got " + std::to_string(a.positional.size()),
                     a.line);
            if (++depth_ > kMaxMacroDepth) fail("macro recursion is too deep", a.line);
            auto saved = frame_;
            frame_ = make_frame(defined_in);
            for (size_t i = 0; i < macro->params.size(); ++i) {
                const auto& [pname, def] = macro->params[i];
                const Value* given = nullptr;
                for (const auto& [k, v] : a.keyword)
                    if (k == pname) given = &v;
                if (!given && i < a.positional.size()) given = &a.positional[i];
                assign(pname, given ? *given : def ? eval(*def) : Value::undefined(pname));
            }
            for (const auto& [k, v] : a.keyword) {
                bool known = false;
                for (const auto& p : macro->params) known = known || p.first == k;
                if (!known) fail("macro '" + macro->name + "' takes no argument '" + k + "'", a.line);
            }
            std::string out;
            exec_body(macro->body, out);
            frame_ = saved;
            --depth_;
            return Value(std::move(out));
        },
        s.name);
}

Value Interpreter::lookup(const std::string& name) const {
    for (const Frame* f = frame_.get(); f; f = f->parent.get()) {
        auto it = f->vars.find(name);
        if (it != f->vars.end()) return it->second;
    }
    return Value::undefined(name);
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first) {
    CallArgs a;
    a.line = e.line;
    for (size_t i = first; i < e.args.size(); ++i) a.positional.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, eval(*v));
    return a;
}

Value Interpreter::call_filter(const std::string& name, const Value& subject, CallArgs& args) {
    return apply_filter(name, subject, args, *this);
}

Value Interpreter::eval(const Expr& e) {
    switch (e.kind) {
        case Expr::Kind::kLiteral: return e.literal;
        case Expr::Kind::kName: return lookup(e.name);
        case Expr::Kind::kGetAttr: return get_attr(eval(*e.args[0]), e.name, e.line);
        case Expr::Kind::kGetItem: return get_item(eval(*e.args[0]), eval(*e.args[1]), e.line);
        case Expr::Kind::kSlice: {
            auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i]) : Value::none(); };
            return get_slice(eval(*e.args[0]), part(1), part(2), part(3), e.line);
        }
        case Expr::Kind::kCall: {
            const Value callee = eval(*e.args[0]);
            if (!callee.is_callable()) {
                if (callee.is_undefined())
                    fail("'" + callee.undefined_hint() + "' is undefined (called as a function)", e.line);
                fail("'" + callee.type_name() + "' object is not callable", e.line);
            }
            CallArgs args = eval_args(e, 1);
            return callee.call(args);
        }
        case Expr::Kind::kFilter: {
            const Value subject = eval(*e.args[0]);
            CallArgs args = eval_args(e, 1);
            return call_filter(e.name, subject, args);
        }
        case Expr::Kind::kTest: {
            if (!has_test(e.name)) fail("unsupported test 'is " + e.name + "'", e.line);
            const Value subject = eval(*e.args[0]);
            CallArgs args = eval_args(e, 1);
            return Value(apply_test(e.name, subject, args) != e.negated);
        }
        case Expr::Kind::kUnary: {
            const Value v = eval(*e.args[0]);
            if (e.name == "not") return Value(!v.truthy());
            if (!v.is_number()) fail("bad operand type for unary " + e.name + ": '" + v.type_name() + "'", e.line);
            if (e.name == "+") return v.is_int() ? Value(v.as_int()) : v;
            return v.is_int() ? Value(-v.as_int()) : Value(-v.as_double());
        }
        case Expr::Kind::kAnd: {
            Value a = eval(*e.args[0]);
            return a.truthy() ? eval(*e.args[1]) : a;
        }
        case Expr::Kind::kOr: {
            Value a = eval(*e.args[0]);
            return a.truthy() ? a : eval(*e.args[1]);
        }
        case Expr::Kind::kCond:
            if (eval(*e.args[0]).truthy()) return eval(*e.args[1]);
            return e.args[2] ? eval(*e.args[2]) : Value::undefined("conditional expression without else");
        case Expr::Kind::kList:
        case Expr::Kind::kTuple: {
            List l;
            for (const auto& a : e.args) l.push_back(eval(*a));
            return e.kind == Expr::Kind::kTuple ? Value::tuple(std::move(l)) : Value(std::move(l));
        }
        case Expr::Kind::kDict: {
            Dict d;
            for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                const Value k = eval(*e.args[i]);
                if (!k.is_string()) fail("dict literal keys must be strings", e.line);
                d.set(k.as_string(), eval(*e.args[i + 1]));
            }
            return Value(std::move(d));
        }
        case Expr::Kind::kBinary: return eval_binary(e);
    }
    return Value();
}

Value Interpreter::eval_binary(const Expr& e) {
    const Value a = eval(*e.args[0]);
    const Value b = eval(*e.args[1]);
    const std::string& op = e.name;
    const int line = e.line;
    if (op == "~") return Value(a.str() + b.str());
    if (op == "==") return Value(values_equal(a, b));
    if (op == "!=") return Value(!values_equal(a, b));
    if (op == "<") return Value(values_compare(a, b, line) < 0);
    if (op == "<=") return Value(values_compare(a, b, line) <= 0);
    if (op == ">") return Value(values_compare(a, b, line) > 0);
    if (op == ">=") return Value(values_compare(a, b, line) >= 0);
    if (op == "in" || op == "not in") {
        bool found = false;
        if (b.is_string()) {
            if (!a.is_string()) fail("'in <string>' requires a string on the left, not '" + a.type_name() + "'", line);
            found = b.as_string().find(a.as_string()) != std::string::npos;
        } else if (b.is_dict()) {
            found = a.is_string() && b.as_dict().find(a.as_string()) != nullptr;
        } else if (b.is_list()) {
            for (const Value& x : b.as_list()) found = found || values_equal(x, a);
        } else if (!b.is_undefined()) {
            fail("argument of type '" + b.type_name() + "' is not iterable", line);
        }
        return Value(op == "in" ? found : !found);
    }
    auto bad = [&]() -> Value {
        fail("unsupported operand types for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'", line);
    };
    if (op == "+") {
        if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
        if (a.is_list() && b.is_list()) {
            List l = a.as_list();
            l.insert(l.end(), b.as_list().begin(), b.as_list().end());
            return Value(std::move(l));
        }
    }
    if (op == "*") {
        const Value* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
        const Value* count = seq == &a ? &b : &a;
        if (seq && count->is_int()) {
            const int64_t n = std::max<int64_t>(0, count->as_int());
            if (seq->is_string()) {
                std::string s;
                for (int64_t i = 0; i < n; ++i) s += seq->as_string();
                return Value(std::move(s));
            }
            List l;
            for (int64_t i = 0; i < n; ++i) l.insert(l.end(), seq->as_list().begin(), seq->as_list().end());
            return Value(std::move(l));
        }
    }
    if (op == "%" && a.is_string()) return Value(py_percent_format(a.as_string(), b, line));
    if (!a.is_number() || !b.is_number()) return bad();
    const bool ints = a.is_int() && b.is_int();
    if (op == "+") return ints ? Value(a.as_int() + b.as_int()) : Value(a.as_double() + b.as_double());
    if (op == "-") return ints ? Value(a.as_int() - b.as_int()) : Value(a.as_double() - b.as_double());
    if (op == "*") return ints ? Value(a.as_int() * b.as_int()) : Value(a.as_double() * b.as_double());
    if (op == "/") {
        if (b.as_double() == 0) fail("division by zero", line);
        return Value(a.as_double() / b.as_double());
    }
    if (op == "//" || op == "%") {
        if (b.as_double() == 0) fail("integer division or modulo by zero", line);
        if (ints) {
            const int64_t q = floor_div(a.as_int(), b.as_int());
            return op == "//" ? Value(q) : Value(a.as_int() - q * b.as_int());
        }
        const double q = std::floor(a.as_double() / b.as_double());
        return op == "//" ? Value(q) : Value(a.as_double() - q * b.as_double());
    }
    if (op == "**") {
        if (ints && b.as_int() >= 0) {
            int64_t r = 1;
            for (int64_t i = 0; i < b.as_int() && i < 64; ++i) r *= a.as_int();
            return Value(r);
        }
        return Value(std::pow(a.as_double(), b.as_double()));
    }
    return bad();
}

}  // namespace qs::jinja
