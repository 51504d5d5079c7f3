#!/usr/bin/env bash
# Cross-builds attn for another architecture with Debian's cross gcc and runs
# its tests under qemu-user (cmake/toolchains; docs/PLATFORMS.md).
#
#   scripts/cross-test.sh aarch64 [ctest -R regex]   NEON and portable kernels
#   scripts/cross-test.sh s390x   [ctest -R regex]   big-endian: I/O and conformance
#
# Under emulation every test is 20-50x slower than native, so by default a
# chosen set runs (below, in the quick mode); pass a regex to choose others
# ('.' for the whole suite). On aarch64 it runs with ATTN_ARCH=neon (the
# default there), then the tests that do not already run every kernel table
# themselves (test_fused and test_gemm do) again with ATTN_ARCH=generic.
# MPI and Python tests are not built in cross builds (CMake says so);
# test_install skips itself (the host's cc cannot link the target's library).
# Build tree: build-<arch> (or $CROSS_BUILD). Prints the time of each step.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:?usage: scripts/cross-test.sh aarch64|s390x [ctest regex]}
case "$arch" in
aarch64)
  # the kernels (each table's exp, tanh, GEMM, softmax, decode scores,
  # bitwise across threads), the SDPA suite, decoding, special values
  default='^(test_fused|test_gemm|test_sdpa|test_kvcache|test_special_values|test_byteorder|hello_attn)$'
  again='^(test_sdpa|test_kvcache|test_special_values|hello_attn)$'
  archs=(neon generic) ;;
s390x)
  # big-endian: the file formats both ways, and the conformance against
  # PyTorch's fixtures (read from little-endian files) through the portable
  # kernels (test_fused is left out: its GEMM groups take over 15 minutes
  # under qemu-s390x)
  default='^(test_io|test_byteorder|test_conversions|test_torch_conformance|hello_attn)$'
  again=
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

run_tests() { # ATTN_ARCH, regex
  (cd "$build" && ATTN_ARCH=$1 ATTN_TEST_QUICK=1 ctest --output-on-failure -j "$(nproc)" \
    --timeout 900 -R "$2")
}

step "$arch: cross-build ($triple-gcc)" build_tests
step "$arch: ctest under qemu-$arch, ATTN_ARCH=${archs[0]}" run_tests "${archs[0]}" "$regex"
if [ -z "${2:-}" ] && [ -n "$again" ]; then
  step "$arch: ctest under qemu-$arch, ATTN_ARCH=${archs[1]}" run_tests "${archs[1]}" "$again"
elif [ "${#archs[@]}" -gt 1 ]; then
  step "$arch: ctest under qemu-$arch, ATTN_ARCH=${archs[1]}" run_tests "${archs[1]}" "$regex"
fi
