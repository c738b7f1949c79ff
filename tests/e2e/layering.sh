#!/bin/sh
# layering.sh - the include graph keeps the seam's layering (issue 9), so an
# arrow the redesign removed cannot come back unnoticed. Checked with grep
# over the #include lines of the source tree:
#   core/      includes nothing from backends/cpu|cuda|hip/, convert/, cli/
#              (the seam header backends/backend.h is core's to use);
#   backends/  include only core's public types (error, config, dsr1,
#              dsr1file, numeric, moe) and the seam header: never convert/,
#              cli/, or core's engine, forward, model, kvcache internals;
#   convert/   may use core, never backends/cpu or cli/;
#   cli/       uses core's public API: never core's engine, forward, model,
#              kvcache or attention internals. The CPU backend's own
#              diagnostics (backends/cpu/hw.h, kernels.h) are used on
#              purpose by `dsr1 bench` and `dsr1 info --hw` only.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
[ -d core ] && [ -d backends ] || { echo "skip: source tree not found next to tests/"; exit 77; }
fail=0
# bad DIR PATTERN WHY: no #include line under DIR matches PATTERN.
bad() {
    hits=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' $1 2>/dev/null | grep -E "$2")
    if [ -n "$hits" ]; then
        echo "FAIL: $3:"
        echo "$hits"
        fail=1
    fi
}
bad "core/*.c core/*.h" '"(\.\./)?(backends/(cpu|cuda|hip)/|convert/|cli/)' "core/ reaches into a backend, convert/ or cli/"
bad "backends/*.c backends/*.h backends/*/*.c backends/*/*.h backends/*/*.cu backends/*/*.cpp" \
    '"(\.\./)*(convert/|cli/|core/(engine|forward|model|model_kvb|kvcache|attention|spec|par|tokenizer_internal)\.h)' \
    "a backend includes more than core's public types and the seam"
bad "convert/*.c convert/*.h" '"(\.\./)?(backends/cpu/|cli/)' "convert/ reaches into the CPU backend or cli/"
bad "cli/*.c cli/*.h" '"(\.\./)?core/(engine|forward|model|model_kvb|kvcache|attention|par)\.h' \
    "cli/ uses core internals instead of core/dsr1.h"
hits=$(grep -lE '#include "backends/' cli/*.c cli/*.h 2>/dev/null |
       grep -vE '^cli/(bench|bench_model|info_hw)\.c$')
[ -z "$hits" ] || { echo "FAIL: cli/ includes a backend outside bench and info --hw: $hits"; fail=1; }
# And the check itself sees the arrows it forbids (a broken grep passes all).
n=$(grep -cE '^#include "' core/forward.c)
[ "$n" -gt 0 ] || { echo "FAIL: no #include lines found in core/forward.c"; fail=1; }
exit $fail
