#!/bin/sh
# Builds bench/ggml/flash_attn.c against ggml's CPU backend compiled from
# source, for bench/run.sh's side-by-side ggml rows. Nothing of ggml is
# committed: the npm package node-llama-cpp carries llama.cpp's whole source
# tree as a git bundle (llama/gitRelease.bundle, what it builds from when it
# has no prebuilt binary), and ggml/ in it is built with ggml's own CMake.
#
#   bench/ggml/build.sh [OUT_DIR]     default build-bench/ggml; prints the binary's path
#
# Environment: NODE_LLAMA_CPP (package version, default 3.21.1), CC.
# Needs npm, git, cmake and the npm registry (once: the tarball is kept in
# OUT_DIR). Compiled as upstream's default CPU build is (Release,
# GGML_NATIVE: -march=native, OpenMP threads), without BLAS, which only
# serves mul_mat and not flash attention.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$HERE/../../build-bench/ggml}
VERSION=${NODE_LLAMA_CPP:-3.21.1}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TGZ=$OUT/node-llama-cpp-$VERSION.tgz
SRC=$OUT/llama.cpp-$VERSION

[ -f "$TGZ" ] || (cd "$OUT" && npm pack --silent "node-llama-cpp@$VERSION" >/dev/null)
if [ ! -d "$SRC/ggml" ]; then
    tar xzf "$TGZ" -C "$OUT" package/llama/gitRelease.bundle
    rm -rf "$SRC"
    git clone --quiet "$OUT/package/llama/gitRelease.bundle" "$SRC" 2>/dev/null
    rm -rf "$OUT/package"
fi
# Configured from llama.cpp's top level (the bundle leaves out ggml's
# standalone-only files), building the ggml targets alone.
cmake -S "$SRC" -B "$OUT/obj" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DGGML_BLAS=OFF -DLLAMA_BUILD_COMMON=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF >/dev/null
cmake --build "$OUT/obj" -j2 --target ggml >/dev/null
L=$OUT/obj/ggml/src
${CC:-cc} -std=c11 -O2 -fopenmp -I"$SRC/ggml/include" \
    -DGGML_SOURCE="\"llama.cpp source in npm node-llama-cpp@$VERSION\"" "$HERE/flash_attn.c" -o "$OUT/ggml_flash_attn" \
    "$L/libggml.a" "$L/libggml-cpu.a" "$L/libggml-base.a" -lstdc++ -lm
echo "$OUT/ggml_flash_attn"
