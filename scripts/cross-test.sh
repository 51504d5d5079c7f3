#!/usr/bin/env bash
# Cross-builds attn for another architecture with Debian's cross gcc and runs
# its tests under qemu-user (cmake/toolchains; docs/PLATFORMS.md).
#
#   scripts/cross-test.sh aarch64 [ctest -R regex]   NEON and portable kernels
#   scripts/cross-test.sh s390x   [ctest -R regex]   big-endian: I/O and conformance
#
# Every test runs in its quick mode (ATTN_TEST_QUICK=1: fewer sizes and
# repeats, the same code paths; each suite prints what it shortens), both
# cores at once (ctest -j), the longest first (their COST in
# tests/CMakeLists.txt).
#
# aarch64: the whole suite with ATTN_ARCH=neon (the default there), then
# with ATTN_ARCH=generic every test but those for which the setting changes
# nothing: the suites that run every kernel table themselves (they set
# ATTN_ARCH per path or call each table: test_fused, test_gemm, test_lowp,
# test_stress, test_variants, test_bias_grad, test_numerics,
# test_special_values; test_bf16 runs the best engine only) and those that
# check files, arguments, allocation failures and installs, not results,
# and the CLI-level suites (the tutorial, training, scaling and explain
# commands, the CLI's agreement with the library: their few calls are those
# the library's suites make on the same table, and their outputs are
# checked byte for byte on the NEON run), and the MHA suites (their
# products and attention are test_gemm's and test_fused's, which run the
# portable table here themselves; x86 runs them on it natively).
# s390x: the file formats both ways and the conformance against PyTorch's
# fixtures (read from little-endian files) through the portable kernels.
# test_fused is left out there: its GEMM groups take over 15 minutes under
# qemu-s390x.
#
# A regex chooses other tests ('.' for the whole suite), run once per
# kernel table. MPI and Python tests are not built in cross builds (CMake
# says so); test_install skips itself (the host's cc cannot link the
# target's library). Build tree: build-<arch> (or $CROSS_BUILD). Prints the
# time of each step.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:?usage: scripts/cross-test.sh aarch64|s390x [ctest regex]}
same_on_every_table='test_fused|test_gemm|test_lowp|test_stress|test_variants|test_bias_grad|test_numerics|test_special_values|test_bf16'
no_kernels='test_byteorder|test_io|test_conversions|test_xmlcheck|test_install|test_cli_polish|test_cli_robustness|test_alloc_failure|test_output_safety'
case "$arch" in
aarch64)
  default='.'
  cli_level='test_tutorial|test_train|test_scaling|test_explain|test_heatmap|test_examples|test_cli_consistency'
  model_level='test_mha|test_mha_bf16'
  again_exclude="^($same_on_every_table|$no_kernels|$cli_level|$model_level)\$"
  archs=(neon generic) ;;
s390x)
  default='^(test_io|test_byteorder|test_conversions|test_torch_conformance|hello_attn)$'
  again_exclude=
  archs=(generic) ;;
*) echo "cross-test.sh: unknown architecture '$arch' (aarch64 or s390x)" >&2; exit 2 ;;
esac
regex=${2:-$default}
triple=$arch-linux-gnu
build=${CROSS_BUILD:-build-$arch}
command -v "$triple-gcc" >/dev/null || { echo "cross-test.sh: $triple-gcc is missing (apt-get install gcc-$triple)" >&2; exit 1; }
command -v "qemu-$arch" >/dev/null || { echo "cross-test.sh: qemu-$arch is missing (apt-get install qemu-user)" >&2; exit 1; }

step() { # name, command...
  local name=$1 t0=$SECONDS; shift
  echo "== $name =="
  "$@"
  echo "== $name: $((SECONDS - t0)) s =="
}

build_tests() {
  cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE="cmake/toolchains/$triple.cmake" \
    -DCMAKE_BUILD_TYPE=Release -DATTN_WERROR="${ATTN_WERROR:-ON}" >"$build.configure.log"
  grep -E "cross build|OpenMP|python tests|ring attention" "$build.configure.log" || true
  # only the programs the chosen tests need (the whole suite when asked)
  local targets=(attn)
  if [ "$regex" = "." ]; then targets=(all); else
    for t in $(echo "$regex" | tr -c 'a-z0-9_' ' '); do
      case $t in test_*|hello_attn|model_variants) targets+=("$t") ;; esac
    done
  fi
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$build.build.log" 2>&1 ||
    { tail -n 40 "$build.build.log"; exit 1; }
}

run_tests() { # ATTN_ARCH, ctest selection...
  local a=$1; shift
  (cd "$build" && ATTN_ARCH=$a ATTN_TEST_QUICK=1 ctest --output-on-failure -j "$(nproc)" \
    --timeout 1800 "$@")
}

step "$arch: cross-build ($triple-gcc)" build_tests
step "$arch: ctest under qemu-$arch, ATTN_ARCH=${archs[0]}" run_tests "${archs[0]}" -R "$regex"
if [ "${#archs[@]}" -gt 1 ]; then
  if [ -z "${2:-}" ]; then
    step "$arch: ctest under qemu-$arch, ATTN_ARCH=${archs[1]} (the suites it changes)" \
      run_tests "${archs[1]}" -E "$again_exclude"
  else
    step "$arch: ctest under qemu-$arch, ATTN_ARCH=${archs[1]}" run_tests "${archs[1]}" -R "$regex"
  fi
fi
