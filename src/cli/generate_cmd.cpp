// `qwenserve generate`: greedy decoding from prompt ids on the CPU backend.
#include "cli/commands.h"

namespace qs::cli {
int run_generate(int argc, char** argv) { return fail("generate", unsupported("not implemented yet")); }
}  // namespace qs::cli
