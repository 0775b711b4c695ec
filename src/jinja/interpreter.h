// The tree-walking evaluator: renders a parsed template body against a context of variables.
// Scopes follow jinja2: a for-loop body and a macro call have their own scope (a {% set %}
// inside does not leak out; namespace() objects carry values out), if-blocks do not. One
// Interpreter per render, on the calling thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace qs::jinja {

class Interpreter {
public:
    // globals: the render's variables (messages, tools, kwargs...) over the built-in globals.
    explicit Interpreter(Dict globals);
    // Clears every frame still alive: a macro's callable holds the frame it was defined in, which
    // holds the macro (a shared_ptr cycle that would otherwise leak).
    ~Interpreter();
    Interpreter(const Interpreter&) = delete;
    Interpreter& operator=(const Interpreter&) = delete;

    // Throws TemplateError.
    std::string render(const Body& body);

    Value eval(const Expr& e);
    // Calls a filter by name on a value (map('lower') and friends go through here).
    Value call_filter(const std::string& name, const Value& subject, CallArgs& args);

private:
    struct Frame {
        std::map<std::string, Value> vars;
        std::shared_ptr<Frame> parent;
    };
    enum class Flow { kNormal, kBreak, kContinue };

    Flow exec_body(const Body& body, std::string& out);
    Flow exec(const Stmt& s, std::string& out);
    void exec_for(const Stmt& s, std::string& out);
    void exec_set(const Stmt& s, const Value& v);
    Value define_macro(const Stmt& s);
    Value lookup(const std::string& name) const;
    void assign(const std::string& name, Value v) { frame_->vars[name] = std::move(v); }
    Value eval_binary(const Expr& e);
    CallArgs eval_args(const Expr& e, size_t first);
    Value builtin_global(const std::string& name) const;

    std::shared_ptr<Frame> frame_;
    std::vector<std::weak_ptr<Frame>> frames_;  // every frame made, for the destructor
    std::shared_ptr<Frame> make_frame(std::shared_ptr<Frame> parent);
    int depth_ = 0;  // macro call depth (recursion guard)
};

}  // namespace qs::jinja
