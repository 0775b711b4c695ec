// `qwenserve logits`: float32 .npy logits from the CPU reference forward.
#include "cli/commands.h"

namespace qs::cli {
int run_logits(int argc, char** argv) { return fail("logits", unsupported("not implemented yet")); }
}  // namespace qs::cli
