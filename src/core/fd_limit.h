// Raises the soft limit on open file descriptors to the hard limit: a server or load generator
// with thousands of sockets needs more than the usual soft limit of 1024. Any thread, at start.
#pragma once

#include <cstdint>

namespace qs {

// Returns the soft limit in force afterwards (-1 when it cannot be read).
int64_t raise_fd_limit();

}  // namespace qs
