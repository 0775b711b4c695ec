// The interpreter's internal error: thrown inside the lexer, parser and evaluator and caught at
// the Template boundary (template.cpp), where it becomes a Status. It never leaves src/jinja.
#pragma once

#include <stdexcept>
#include <string>

namespace qs::jinja {

struct TemplateError : std::runtime_error {
    // line: 1-based template line, 0 when unknown. raised: from the template's own
    // raise_exception(msg), whose message is shown as it is.
    TemplateError(std::string message, int line, bool raised = false)
        : std::runtime_error(std::move(message)), line(line), raised(raised) {}
    int line;
    bool raised;
};

[[noreturn]] inline void fail(const std::string& message, int line) { throw TemplateError(message, line); }

}  // namespace qs::jinja
