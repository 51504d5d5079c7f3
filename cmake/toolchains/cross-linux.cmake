# Shared part of the Linux cross toolchains: ATTN_CROSS_TRIPLE names the
# Debian cross gcc (gcc-TRIPLE, its libc in /usr/TRIPLE) and ATTN_CROSS_QEMU
# the qemu-user binary that runs the target's programs (tests, ctest).
set(CMAKE_SYSTEM_NAME Linux)
string(REGEX REPLACE "-.*" "" CMAKE_SYSTEM_PROCESSOR "${ATTN_CROSS_TRIPLE}")
set(CMAKE_C_COMPILER ${ATTN_CROSS_TRIPLE}-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/${ATTN_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# -L: the target's dynamic loader and libraries (the same as QEMU_LD_PREFIX).
set(CMAKE_CROSSCOMPILING_EMULATOR ${ATTN_CROSS_QEMU} -L /usr/${ATTN_CROSS_TRIPLE})
