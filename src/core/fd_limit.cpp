// raise_fd_limit (see fd_limit.h).
#include "core/fd_limit.h"

#include <sys/resource.h>

namespace qs {

int64_t raise_fd_limit() {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur == RLIM_INFINITY ? INT64_MAX : int64_t(rl.rlim_cur);
}

}  // namespace qs
