// Names and exit codes for error kinds.
#include "core/status.h"

namespace qs {

const char* error_kind_name(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::kInvalidArgument: return "invalid_argument";
        case ErrorKind::kNotFound: return "not_found";
        case ErrorKind::kCorruptData: return "corrupt_data";
        case ErrorKind::kUnsupported: return "unsupported";
        case ErrorKind::kResourceExhausted: return "resource_exhausted";
        case ErrorKind::kIo: return "io_error";
        case ErrorKind::kInternal: return "internal_error";
    }
    return "unknown";
}

int exit_code_for(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::kInvalidArgument:
        case ErrorKind::kNotFound:
        case ErrorKind::kUnsupported: return 2;
        case ErrorKind::kCorruptData:
        case ErrorKind::kIo: return 3;
        case ErrorKind::kResourceExhausted: return 4;
        case ErrorKind::kInternal: return 1;
    }
    return 1;
}

}  // namespace qs
