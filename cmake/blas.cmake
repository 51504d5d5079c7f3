# CBLAS for attn_sgemm (src/core/gemm*.c): the MHA projections and nn layers.
#
#   -DATTN_CBLAS=AUTO  (default) use OpenBLAS or BLIS when found, else our own
#                      packed SIMD GEMM (src/core/gemm_packed.c)
#   -DATTN_CBLAS=ON    require one (configure fails without it)
#   -DATTN_CBLAS=OFF   never; our packed GEMM only
#   ATTN_CBLAS_LIBRARY / ATTN_CBLAS_INCLUDE_DIR point at another CBLAS.
#
# AUTO follows issue 3 ("use a CBLAS when the build finds one"). Determinism
# holds either way: attn's thread count never reaches the CBLAS, which splits
# its own work over M and N only, so results are bit-identical for any attn
# thread count (test_gemm, test_train check it with the CBLAS in use). What
# changes: the CBLAS runs its own thread count (OPENBLAS_NUM_THREADS etc.),
# and results differ in the last bits from a build without it. At run time,
# ATTN_GEMM=packed selects our engine instead.
set(ATTN_CBLAS "AUTO" CACHE STRING "Use a CBLAS for attn_sgemm: AUTO, ON or OFF")
set_property(CACHE ATTN_CBLAS PROPERTY STRINGS AUTO ON OFF)

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
