#!/usr/bin/env bash
# Cross-builds attn for another architecture with Debian's cross gcc and runs
# its tests under qemu-user (cmake/toolchains; docs/PLATFORMS.md).
#
#   scripts/cross-test.sh aarch64 [ctest -R regex]   NEON and portable kernels
#   scripts/cross-test.sh s390x   [ctest -R regex]   big-endian: I/O and conformance
#
# Under emulation every test is 20-50x slower than native, so by default a
# chosen set runs (CROSS_TESTS below, in the quick stress mode); pass a
# regex to choose others ('.' for the whole suite). On aarch64 the set runs
# twice, with ATTN_ARCH=neon (the default there) and ATTN_ARCH=generic.
# MPI and Python tests are not built in cross builds (CMake says so);
# test_install skips itself (the host's cc cannot link the target's library).
# Build trees: build-<arch>. Prints the time of each step.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:?usage: scripts/cross-test.sh aarch64|s390x [ctest regex]}
case "$arch" in
aarch64)
  # kernels (fused, decode, GEMM, special values), the SDPA suite, MHA, the
  # CLI's decode path, I/O, and the conformance against PyTorch's fixtures
  default='^(test_fused|test_gemm|test_special_values|test_sdpa|test_kvcache|test_decode_cli|test_io|test_byteorder|test_lse_merge|test_varlen|test_torch_conformance|hello_attn)$'
  archs=(neon generic) ;;
s390x)
  default='^(test_io|test_byteorder|test_conversions|test_torch_conformance|test_fused|hello_attn)$'
  archs=(generic) ;;
*) echo "cross-test.sh: unknown architecture '$arch' (aarch64 or s390x)" >&2; exit 2 ;;
esac
regex=${2:-$default}
triple=$arch-linux-gnu
build=build-$arch
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

run_tests() { # ATTN_ARCH
  (cd "$build" && ATTN_ARCH=$1 ATTN_TEST_QUICK=1 ctest --output-on-failure -j "$(nproc)" \
    --timeout 900 -R "$regex")
}

step "$arch: cross-build ($triple-gcc)" build_tests
for a in "${archs[@]}"; do
  step "$arch: ctest under qemu-$arch, ATTN_ARCH=$a" run_tests "$a"
done
