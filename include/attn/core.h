/*
 * attn/core.h — status codes, tensor views, the seeded generator and runtime
 * information: what every other part of libattn's public API builds on.
 *
 * Conventions
 *   - Every fallible call returns an attn_status and takes a last argument
 *     `attn_error *err` that may be NULL; on failure it receives a one-line
 *     message naming the offending argument. The library never prints, exits
 *     or aborts, and has no global mutable state: calls are thread-safe as
 *     long as they do not write the same buffers.
 *   - Tensors are strided views (attn_tensor): shape and element strides per
 *     dimension, so (B,N,H,D) buffers straight out of a projection are valid
 *     (B,H,N,D) views without a copy. Strides may be 0 (broadcast) for inputs.
 *   - float32 data and float32 accumulation. Boolean tensors are one byte per
 *     element, 0 or 1.
 *   - Each forward has a backward with a mirrored signature. Backward calls
 *     OVERWRITE input gradients (dQ, dK, dV, d query...). MHA parameter
 *     gradients ACCUMULATE into the module's gradient buffer (zero it with
 *     attn_mha_zero_grad), so several backward calls can form one batch.
 *
 * The API is split by layer, each header self-contained:
 *   attn/core.h     status, tensors, dtypes, random numbers, runtime info
 *   attn/sdpa.h     scaled dot-product attention, LSE merge, varlen
 *   attn/kvcache.h  the KV cache and decode
 *   attn/mha.h      multi-head attention (nn.MultiheadAttention)
 *   attn/io.h       .npy and .safetensors files, all-or-nothing output sets
 *   attn/train.h    layers, optimizers, tasks, the model and the trainer
 * <attn.h> includes them all.
 */
#ifndef ATTN_CORE_H
#define ATTN_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_VERSION_MAJOR 0
#define ATTN_VERSION_MINOR 3
#define ATTN_VERSION_PATCH 0
#define ATTN_VERSION_STRING "0.3.0"

/* ------------------------------------------------------------------ status */

typedef enum {
    ATTN_OK = 0,
    ATTN_ERR_NULL,        /* a required pointer was NULL */
    ATTN_ERR_SHAPE,       /* shapes are inconsistent or unsupported */
    ATTN_ERR_STRIDE,      /* a stride is invalid (e.g. broadcast in an output) */
    ATTN_ERR_DTYPE,       /* wrong element type */
    ATTN_ERR_ARG,         /* an option has an invalid value */
    ATTN_ERR_OVERFLOW,    /* a size computation would overflow */
    ATTN_ERR_ALLOC,       /* out of memory */
    ATTN_ERR_WORKSPACE,   /* caller-provided workspace too small */
    ATTN_ERR_IO,          /* a file could not be opened, read or written */
    ATTN_ERR_FORMAT,      /* a file is malformed */
    ATTN_ERR_UNSUPPORTED, /* valid input this build does not support */
    ATTN_STATUS_COUNT
} attn_status;

/* Receives the message of a failed call. */
typedef struct {
    attn_status status;
    char message[256];
} attn_error;

/* Stable name of a status, e.g. "shape mismatch". Never NULL. */
const char *attn_status_string(attn_status status);

/* ----------------------------------------------------------------- tensors */

#define ATTN_MAX_DIMS 8

typedef enum {
    ATTN_F32 = 0, /* float */
    ATTN_BOOL,    /* uint8_t, 0 or 1 */
    ATTN_BF16,    /* bfloat16 (uint16_t bits: the top half of a float32) */
    ATTN_F16,     /* IEEE binary16 (uint16_t bits) */
} attn_dtype;

/* Bytes per element (0 for an unknown dtype) and a stable name:
 * "float32", "bool", "bfloat16", "float16" ("unknown" otherwise). */
size_t attn_dtype_size(attn_dtype dtype);
const char *attn_dtype_name(attn_dtype dtype);

/* A strided view. Strides are in elements, not bytes. */
typedef struct {
    void *data;
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    int64_t stride[ATTN_MAX_DIMS];
} attn_tensor;

/* Contiguous (C-order) views. */
attn_tensor attn_tensor_1d(float *data, int64_t n0);
attn_tensor attn_tensor_2d(float *data, int64_t n0, int64_t n1);
attn_tensor attn_tensor_3d(float *data, int64_t n0, int64_t n1, int64_t n2);
attn_tensor attn_tensor_4d(float *data, int64_t n0, int64_t n1, int64_t n2, int64_t n3);
/* Contiguous view of any rank and dtype. */
attn_tensor attn_tensor_make(void *data, attn_dtype dtype, int ndim, const int64_t *shape);
/* Number of elements (product of the shape), 0 for an invalid shape. */
int64_t attn_tensor_numel(const attn_tensor *t);
/* Swap two dimensions of a view (no data moves). */
attn_tensor attn_tensor_transpose(attn_tensor t, int dim0, int dim1);
/* Copies src into dst (same shape, any strides, dst not overlapping src),
 * converting between ATTN_F32, ATTN_BF16 and ATTN_F16: widening is exact,
 * narrowing rounds to nearest even (overflow to ±inf, NaN stays NaN), as
 * torch's Tensor.to(dtype). */
attn_status attn_tensor_convert(const attn_tensor *src, attn_tensor *dst, attn_error *err);

/* -------------------------------------------------------- random numbers */

/* attn's seeded generator: xoshiro256** (Blackman & Vigna) seeded through
 * splitmix64. The same seed gives the same numbers on every platform and
 * build (it is not torch's stream). The library initialises parameters with
 * it; programs on attn.h (the CLI among them) can share it. */
typedef struct {
    uint64_t s[4];
} attn_rng;

void attn_rng_seed(attn_rng *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t attn_rng_u64(attn_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double attn_rng_uniform(attn_rng *r);
/* Standard normal N(0, 1) (Box–Muller; one draw per call). */
double attn_rng_normal(attn_rng *r);

/* ----------------------------------------------------------- runtime info */

/* The instruction set the fused kernels use: "avx512", "avx2", "generic", or
 * "reference" when ATTN_ARCH=reference. */
const char *attn_isa(void);
/* Threads a call with num_threads = 0 uses: ATTN_NUM_THREADS when it holds
 * an integer from 1 to ATTN_MAX_THREADS (1024), else every core; any other
 * value of ATTN_NUM_THREADS ("abc", "0", "4x") is ignored, as if unset
 * (the attn command refuses it with a message instead). Under a finite RLIMIT_AS (or,
 * for non-root, RLIMIT_NPROC) a call first creates the OpenMP threads it
 * will use, keeping half the free address space for its own allocations,
 * and uses fewer if they do not fit: OpenMP would otherwise end the
 * process. Results do not depend on the count. (Each calling thread keeps
 * a note of the team it created, the one piece of per-thread state.) */
int attn_default_threads(void);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_CORE_H */
