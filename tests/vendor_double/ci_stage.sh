#!/usr/bin/env bash
# .ci/run stage: the ascend backend, i.e. the C-ABI shim compiled against the vendor
# double exactly as on an Ascend host, then driven by the package's own test suite.
#
#   bash tests/vendor_double/ci_stage.sh OUT_DIR
#
# 1. a fake toolkit in OUT_DIR/toolkit (build_toolkit.py) and the shim built against
#    it by the same function setup.py calls (build_shim.build);
# 2. the raw-cffi smoke run (smoke.py) in the toolkit's environment (set_env.sh);
# 3. the whole test suite with LLM_DATADIST_FFI_BACKEND=ascend: the same tests as on
#    the mock, same results; tests marked mock_only are skipped with their reason
#    (tests/abi/test_shim.py and tests/abi/test_shim_parity.py are left out: they build
#    their own toolkits, do not depend on the backend, and ran already; so is tests/cpp,
#    whose C++ programs run over the mock whatever the backend, in a stage of their own);
# 4. the shim, the double and the mock rebuilt with ASan + UBSan, and the smoke run,
#    the suite and the differential test (test_shim_parity.py) repeated under them.
# Runs in the caller's Python environment (.ci/run's virtual environment).
set -euo pipefail
out=${1:?usage: ci_stage.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)

build() {   # build DIR [--sanitize]: toolkit in DIR/toolkit, shim in DIR/shim
    local dir=$1; shift
    python "$here/build_toolkit.py" "$dir/toolkit" "$@" >/dev/null
    python "$root/llm_datadist_ffi/_shim/build_shim.py" "$dir/shim" --toolkit "$dir/toolkit" "$@" >/dev/null
}

run_stage() {   # run_stage DIR SMOKE_FLAGS [pytest args...]: smoke + suite in DIR's toolkit environment
    local dir=$1 smoke_flags=$2; shift 2
    (
        # shellcheck disable=SC1091
        . "$dir/toolkit/set_env.sh"
        python "$here/smoke.py" "$dir/shim/libllm_datadist_ffi_shim.so" \
            --mock-lib "$(readlink -f "$dir/toolkit/lib64/libacl_rt.so")" $smoke_flags
        cd "$root"
        LLM_DATADIST_FFI_BACKEND=ascend \
        LLM_DATADIST_FFI_SHIM_LIB="$dir/shim/libllm_datadist_ffi_shim.so" \
            pytest -p no:cacheprovider -q --ignore=tests/abi/test_shim.py --ignore=tests/abi/test_shim_parity.py \
                --deselect tests/cpp "$@"   # the C++ programs use the mock whatever the backend
    )
}

echo "-- shim + vendor double"
build "$out/plain"
run_stage "$out/plain" ""

echo "-- shim + vendor double under AddressSanitizer + UndefinedBehaviorSanitizer"
build "$out/asan" --sanitize
cxx=${CXX:-g++}
export LD_PRELOAD="$($cxx -print-file-name=libasan.so) $($cxx -print-file-name=libubsan.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
run_stage "$out/asan" --no-bad-alloc   # ASan's operator new aborts rather than throw

echo "-- the differential test against the mock, sanitizer builds on both sides"
LLDD_SHIM_PARITY_TOOLKIT="$out/asan/toolkit" LLDD_SHIM_PARITY_SHIM="$out/asan/shim/libllm_datadist_ffi_shim.so" \
    pytest -p no:cacheprovider -q "$root/tests/abi/test_shim_parity.py"
