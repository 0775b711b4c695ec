// A Jinja template: parsed once (syntax errors and unsupported tags reported then, with their
// line), rendered many times against a JSON context. The environment is the one transformers'
// apply_chat_template uses: trim_blocks, lstrip_blocks, loop controls, `tojson` as
// json.dumps(ensure_ascii=False), the globals raise_exception(msg) and strftime_now(fmt), and
// an immutable sandbox (lists and dicts cannot be modified). Undefined values print as nothing.
// Immutable after parse: render() may run on many threads at once.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace qs::jinja {

struct Stmt;

class Template {
public:
    // kInvalidArgument naming the line and the problem ("line 3: unsupported template tag
    // '{% include %}'").
    static Result<Template> parse(const std::string& source);

    // context: an object whose keys become the template's variables. Errors are
    // kInvalidArgument: the template's own raise_exception(message) gives its message as it is;
    // anything else names the line ("line 12: unsupported filter 'wordwrap'").
    Result<std::string> render(const nlohmann::ordered_json& context) const;

private:
    explicit Template(std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body) : body_(std::move(body)) {}
    std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
};

}  // namespace qs::jinja
