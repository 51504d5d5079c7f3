# Cross-compiling for IBM Z (s390x, 64-bit big-endian) with Debian's
# gcc-s390x-linux-gnu: the big-endian target on which the .npy and
# .safetensors readers and writers must swap bytes. Tests run under
# qemu-s390x. Usage as in aarch64-linux-gnu.cmake.
set(ATTN_CROSS_TRIPLE s390x-linux-gnu)
set(ATTN_CROSS_QEMU qemu-s390x)
include(${CMAKE_CURRENT_LIST_DIR}/cross-linux.cmake)
