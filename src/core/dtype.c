/* Element types: sizes, names and conversion between the float formats. */
#include "half.h"
#include "internal.h"
#include "../kernels/kernels.h"

size_t attn_dtype_size(attn_dtype dtype)
{
    switch (dtype) {
    case ATTN_F32: return 4;
    case ATTN_BOOL: return 1;
    case ATTN_BF16: case ATTN_F16: return 2;
    }
    return 0;
}

const char *attn_dtype_name(attn_dtype dtype)
{
    switch (dtype) {
    case ATTN_F32: return "float32";
    case ATTN_BOOL: return "bool";
    case ATTN_BF16: return "bfloat16";
    case ATTN_F16: return "float16";
    }
    return "unknown";
}

attn_status attn_tensor_convert(const attn_tensor *src, attn_tensor *dst, attn_error *err)
{
    RETURN_IF(!src, err, ATTN_ERR_NULL, "src: tensor is NULL");
    RETURN_IF(!dst, err, ATTN_ERR_NULL, "dst: tensor is NULL");
    RETURN_IF(!attn_is_float_dtype(src->dtype), err, ATTN_ERR_DTYPE,
              "src: expected float32, bfloat16 or float16 elements, got %s",
              attn_dtype_name(src->dtype));
    RETURN_IF(!attn_is_float_dtype(dst->dtype), err, ATTN_ERR_DTYPE,
              "dst: expected float32, bfloat16 or float16 elements, got %s",
              attn_dtype_name(dst->dtype));
    RETURN_IF_ERROR(attn_check_tensor(src, "src", src->ndim, src->dtype, false, err));
    RETURN_IF_ERROR(attn_check_tensor(dst, "dst", src->ndim, dst->dtype, true, err));
    for (int d = 0; d < src->ndim; ++d)
        RETURN_IF(dst->shape[d] != src->shape[d], err, ATTN_ERR_SHAPE,
                  "dst: size %lld in dimension %d, src has %lld", (long long)dst->shape[d], d,
                  (long long)src->shape[d]);
    RETURN_IF_ERROR(attn_check_disjoint(dst, "dst", src, "src", err));
    attn_tensor_convert_unchecked(src, dst);
    attn_ok(err);
    return ATTN_OK;
}

void attn_tensor_convert_unchecked(const attn_tensor *src, attn_tensor *dst)
{
    const int nd = src->ndim;
    const int64_t n = attn_tensor_numel(src);
    const int64_t cols = nd > 0 ? src->shape[nd - 1] : 1;
    if (n == 0) return;
    const int64_t rows = n / cols;
    const int64_t scs = nd > 0 ? src->stride[nd - 1] : 0, dcs = nd > 0 ? dst->stride[nd - 1] : 0;
    /* Unit-stride rows between float32 and a 16-bit format: the kernels'
     * vector conversions (the same bits as the scalar ones). */
    const sdpa_kernels *kern = sdpa_kernels_for(sdpa_isa_select());
    const bool unit = cols == 1 || (scs == 1 && dcs == 1);
    const bool widen = unit && src->dtype != ATTN_F32 && dst->dtype == ATTN_F32;
    const bool narrow = unit && src->dtype == ATTN_F32 && dst->dtype != ATTN_F32;
    /* Rows are independent: a large conversion uses every thread the
     * process can afford (attn_resolve_threads: libgomp would end the
     * process if it could not create one). */
    const int threads = n >= (1 << 18) ? attn_resolve_threads(0) : 1;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t r = 0; r < rows; ++r) {
        int64_t so = 0, doff = 0, rest = r;
        for (int d = nd - 2; d >= 0; --d) {
            const int64_t i = rest % src->shape[d];
            rest /= src->shape[d];
            so += i * src->stride[d];
            doff += i * dst->stride[d];
        }
        if (widen)
            kern->widen(src->dtype, (const uint16_t *)src->data + so, 0, 1, 1, cols,
                        (float *)dst->data + doff, cols);
        else if (narrow)
            kern->narrow(dst->dtype, (const float *)src->data + so, cols, (uint16_t *)dst->data + doff);
        else
            for (int64_t c = 0; c < cols; ++c)
                attn_store_float(dst->data, dst->dtype, doff + c * dcs,
                                 attn_load_float(src->data, src->dtype, so + c * scs));
    }
}
