// One GET of an http:// or https:// URL for image and video input (server/image_fetch), bounded
// in bytes and time. https (QS_HAVE_OPENSSL: CMake found libssl-dev) verifies the server's
// certificate chain against the system's CA store, or against `ca_file` when given
// (--remote-ca-file), and the certificate's host name against the URL's (SNI sent); a build
// without OpenSSL refuses https naming the missing library. Errors are kInvalidArgument with the
// cause (unreachable, timed out, HTTP status, certificate); a body over max_bytes is the message
// kRemoteTooLarge. Worker threads; no shared state (each fetch has its own io_context and TLS
// context).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace qs {

struct RemoteFetchLimits {
    int64_t max_bytes = 20 << 20;
    double timeout_s = 10.0;  // resolve + connect + TLS handshake + request + response
    std::string ca_file;      // PEM; empty: the system's CA store
};

inline constexpr const char* kRemoteTooLarge = "the response is larger than the byte limit";

// True when this build links OpenSSL (https URLs).
bool https_supported();

Result<std::string> fetch_remote(const std::string& url, const RemoteFetchLimits& limits);

}  // namespace qs
