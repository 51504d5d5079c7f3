# Cross-compiling for 64-bit ARM Linux with Debian's gcc-aarch64-linux-gnu
# (libc in /usr/aarch64-linux-gnu). Tests run under qemu-aarch64, which
# CMake puts in front of every test command (CMAKE_CROSSCOMPILING_EMULATOR).
# Usage: cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
set(ATTN_CROSS_TRIPLE aarch64-linux-gnu)
set(ATTN_CROSS_QEMU qemu-aarch64)
include(${CMAKE_CURRENT_LIST_DIR}/cross-linux.cmake)
