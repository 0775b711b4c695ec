// The parsed template: expression and statement trees (parser.cpp builds them, interpreter.cpp
// walks them). Immutable after parsing; one tree is shared by every render of a template.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace qs::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    enum class Kind {
        kLiteral,  // literal
        kName,     // name
        kGetAttr,  // args[0].name
        kGetItem,  // args[0][args[1]]
        kSlice,    // args[0][args[1]:args[2]:args[3]] (null parts omitted)
        kCall,     // args[0](args[1..], kwargs)
        kFilter,   // args[0] | name(args[1..], kwargs); args[0] null inside {% filter %}
        kTest,     // args[0] is [not] name(args[1..])
        kUnary,    // name ("-", "+", "not") args[0]
        kBinary,   // args[0] name args[1]: + - * / // % ** ~ == != < <= > >= in "not in"
        kAnd,
        kOr,
        kCond,     // args[1] if args[0] else args[2] (args[2] null: undefined)
        kList,     // [args...]
        kTuple,    // (args...) - a list at run time
        kDict,     // {args[0]: args[1], args[2]: args[3], ...}
    };
    Kind kind;
    int line = 0;
    Value literal;
    std::string name;
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    bool negated = false;  // kTest: `is not`
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
    enum class Kind {
        kText,         // text
        kOutput,       // {{ expr }}
        kIf,           // branches (a null condition: else)
        kFor,          // {% for targets in expr [if cond] %} body [else else_body]
        kSet,          // {% set targets = expr %} or {% set targets[0].attr = expr %}
        kSetBlock,     // {% set targets[0] %} body {% endset %}
        kMacro,        // {% macro name(params) %} body
        kBreak,
        kContinue,
        kFilterBlock,  // {% filter expr %} body
        kScope,        // body in its own scope ({% generation %}: HF's assistant-mask marker)
    };
    Kind kind;
    int line = 0;
    std::string text;
    ExprPtr expr;
    ExprPtr cond;
    std::vector<std::pair<ExprPtr, Body>> branches;
    std::vector<std::string> targets;
    std::string attr;  // kSet on a namespace attribute
    std::string name;
    std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: name, default (may be null)
    Body body;
    Body else_body;
};

}  // namespace qs::jinja
