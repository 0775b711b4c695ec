// Status and Result<T>: errors that a user, a request or a file can cause. They carry a kind
// (which the server maps to an HTTP status and the CLI to an exit code) and a message that
// names the problem. No exceptions cross module boundaries.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "core/check.h"

namespace qs {

enum class ErrorKind {
    kInvalidArgument,  // bad user input (HTTP 400, exit 2)
    kNotFound,         // missing file / model / tensor (HTTP 404, exit 2)
    kCorruptData,      // a file that does not parse or is inconsistent (exit 3)
    kUnsupported,      // valid but not implemented (HTTP 400/501, exit 2)
    kResourceExhausted,// out of memory / capacity (HTTP 429/503, exit 4)
    kIo,               // an OS-level read/write failure (exit 3)
    kInternal,         // a bug (HTTP 500, exit 1)
};

const char* error_kind_name(ErrorKind kind);

class Status {
public:
    Status() = default;
    Status(ErrorKind kind, std::string message) : error_(Error{kind, std::move(message)}) {}

    static Status ok() { return Status(); }
    bool is_ok() const { return !error_.has_value(); }
    explicit operator bool() const { return is_ok(); }
    ErrorKind kind() const { QS_CHECK(!is_ok()); return error_->kind; }
    const std::string& message() const { QS_CHECK(!is_ok()); return error_->message; }

    // Prepends context ("loading model.safetensors: ") to the message of an error.
    Status with_context(const std::string& context) const {
        if (is_ok()) return *this;
        return Status(error_->kind, context + ": " + error_->message);
    }

private:
    struct Error {
        ErrorKind kind;
        std::string message;
    };
    std::optional<Error> error_;
};

inline Status invalid_argument(std::string msg) { return {ErrorKind::kInvalidArgument, std::move(msg)}; }
inline Status not_found(std::string msg) { return {ErrorKind::kNotFound, std::move(msg)}; }
inline Status corrupt_data(std::string msg) { return {ErrorKind::kCorruptData, std::move(msg)}; }
inline Status unsupported(std::string msg) { return {ErrorKind::kUnsupported, std::move(msg)}; }
inline Status io_error(std::string msg) { return {ErrorKind::kIo, std::move(msg)}; }
inline Status internal_error(std::string msg) { return {ErrorKind::kInternal, std::move(msg)}; }

template <typename T>
class Result {
public:
    Result(T value) : v_(std::move(value)) {}              // NOLINT: implicit by design
    Result(Status status) : v_(std::move(status)) {         // NOLINT
        QS_CHECK_MSG(!std::get<Status>(v_).is_ok(), "Result built from an ok Status");
    }

    bool is_ok() const { return std::holds_alternative<T>(v_); }
    explicit operator bool() const { return is_ok(); }
    const Status& status() const {
        static const Status kOk;
        return is_ok() ? kOk : std::get<Status>(v_);
    }
    T& value() & { QS_CHECK_MSG(is_ok(), status().message().c_str()); return std::get<T>(v_); }
    const T& value() const& { QS_CHECK_MSG(is_ok(), status().message().c_str()); return std::get<T>(v_); }
    T&& value() && { QS_CHECK_MSG(is_ok(), status().message().c_str()); return std::get<T>(std::move(v_)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() { return value(); }

private:
    std::variant<T, Status> v_;
};

// Exit code a CLI should use for an error of this kind.
int exit_code_for(ErrorKind kind);

}  // namespace qs

// Early-return helpers for functions that return Status or Result<T>.
#define QS_RETURN_IF_ERROR(expr)                 \
    do {                                         \
        ::qs::Status qs_status_ = (expr);        \
        if (!qs_status_.is_ok()) return qs_status_; \
    } while (0)

#define QS_CONCAT_INNER(a, b) a##b
#define QS_CONCAT(a, b) QS_CONCAT_INNER(a, b)
#define QS_ASSIGN_OR_RETURN(lhs, expr) QS_ASSIGN_OR_RETURN_IMPL(QS_CONCAT(qs_result_, __LINE__), lhs, expr)
#define QS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
    auto tmp = (expr);                           \
    if (!tmp.is_ok()) return tmp.status();       \
    lhs = std::move(tmp).value()
