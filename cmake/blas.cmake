# Optional CBLAS for attn_sgemm (src/core/gemm*.c): the MHA projections and nn layers.
#
#   -DATTN_CBLAS=OFF   (default) our packed SIMD GEMM only (src/core/gemm_packed.c)
#   -DATTN_CBLAS=AUTO  use OpenBLAS or BLIS when found, else the packed GEMM
#   -DATTN_CBLAS=ON    require one (configure fails without it)
#   ATTN_CBLAS_LIBRARY / ATTN_CBLAS_INCLUDE_DIR point at another CBLAS.
# In a CBLAS build, ATTN_GEMM=packed in the environment selects ours at run time.
#
# Why OFF by default (measured on the 2-core Zen machine, 2 threads, quiet):
#  - speed: the packed GEMM matches OpenBLAS 0.3.21 on the MHA shapes
#    (2048x512x512: 145 vs 159 GFLOP/s; 2048x1536x512: 163 vs 144), and MHA
#    forward is faster with it (99 ms vs 121-145 ms): OpenBLAS's own pthreads
#    and attn's spinning OpenMP threads take turns on the same two cores
#    (with OMP_WAIT_POLICY=passive both give 96 ms);
#  - determinism: OpenBLAS ignores attn's per-call thread count, and its
#    results change with its own (OPENBLAS_NUM_THREADS=1 and 2 give different
#    bits for the same sgemm), so "bit-identical for any thread count" would
#    hold only while OPENBLAS_NUM_THREADS stays fixed. The packed GEMM gives
#    the same bits for every thread count (per kernel ISA).
# With a CBLAS in use, results still do not depend on attn's thread count
# (test_gemm and test_train pass with it), but differ in the last bits from a
# build without it.
set(ATTN_CBLAS "OFF" CACHE STRING "Use a CBLAS for attn_sgemm: OFF, AUTO or ON")
set_property(CACHE ATTN_CBLAS PROPERTY STRINGS OFF AUTO ON)

if(NOT ATTN_CBLAS STREQUAL "OFF")
  # Optimised libraries only: a reference BLAS would be slower than ours.
  find_library(ATTN_CBLAS_LIBRARY NAMES openblas blis-mt blis
    DOC "CBLAS library for attn_sgemm (OpenBLAS or BLIS)")
  find_path(ATTN_CBLAS_INCLUDE_DIR cblas.h
    PATH_SUFFIXES openblas-pthread openblas-openmp openblas blis
    DOC "Directory holding that library's cblas.h")
  if(ATTN_CBLAS_LIBRARY AND ATTN_CBLAS_INCLUDE_DIR)
    include(CheckCSourceCompiles)
    set(CMAKE_REQUIRED_INCLUDES ${ATTN_CBLAS_INCLUDE_DIR})
    set(CMAKE_REQUIRED_LIBRARIES ${ATTN_CBLAS_LIBRARY})
    set(CMAKE_REQUIRED_QUIET ON)
    unset(ATTN_CBLAS_LINKS CACHE) # re-check when the library or header changes
    check_c_source_compiles([[
#include <cblas.h>
int main(void)
{
    float a = 2.0f, b = 3.0f, c = 0.0f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
    return c != 6.0f;
}]] ATTN_CBLAS_LINKS)
    unset(CMAKE_REQUIRED_INCLUDES)
    unset(CMAKE_REQUIRED_LIBRARIES)
    unset(CMAKE_REQUIRED_QUIET)
  endif()
  if(ATTN_CBLAS_LINKS)
    target_compile_definitions(attn_objects PRIVATE ATTN_HAVE_CBLAS)
    target_include_directories(attn_objects PRIVATE ${ATTN_CBLAS_INCLUDE_DIR})
    target_link_libraries(attn_objects PUBLIC ${ATTN_CBLAS_LIBRARY})
    message(STATUS "attn_sgemm: CBLAS ${ATTN_CBLAS_LIBRARY} (ATTN_CBLAS=${ATTN_CBLAS})")
  elseif(ATTN_CBLAS STREQUAL "ON")
    message(FATAL_ERROR "ATTN_CBLAS=ON but no usable CBLAS (OpenBLAS or BLIS) was found; "
      "set ATTN_CBLAS_LIBRARY and ATTN_CBLAS_INCLUDE_DIR, or use ATTN_CBLAS=AUTO or OFF")
  else()
    message(STATUS "attn_sgemm: no CBLAS found, packed SIMD GEMM only")
  endif()
else()
  message(STATUS "attn_sgemm: ATTN_CBLAS=OFF, packed SIMD GEMM only")
endif()
