// Template (see template.h): lexer + parser at parse(), an Interpreter per render().
#include "jinja/template.h"

#include "jinja/interpreter.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace qs::jinja {

namespace {

std::string located(const TemplateError& e) {
    return e.line > 0 ? "line " + std::to_string(e.line) + ": " + e.what() : std::string(e.what());
}

}  // namespace

Result<Template> Template::parse(const std::string& source) {
    try {
        auto body = std::make_shared<Body>(jinja::parse(tokenize(source, LexOptions{})));
        return Template(std::move(body));
    } catch (const TemplateError& e) {
        return invalid_argument("template syntax: " + located(e));
    }
}

Result<std::string> Template::render(const nlohmann::ordered_json& context) const {
    if (!context.is_object()) return invalid_argument("template context must be an object");
    Value globals = Value::from_json(context);
    try {
        Interpreter interp(std::move(globals.as_dict()));
        return interp.render(*body_);
    } catch (const TemplateError& e) {
        if (e.raised) return invalid_argument(e.what());
        return invalid_argument("chat template " + located(e));
    } catch (const std::exception& e) {
        return invalid_argument(std::string("chat template: ") + e.what());
    }
}

}  // namespace qs::jinja
