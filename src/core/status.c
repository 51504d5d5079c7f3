/* Status names and the error-message sink. */
#include "internal.h"

#include <stdio.h>

static const char *const status_names[ATTN_STATUS_COUNT] = {
    [ATTN_OK] = "ok",
    [ATTN_ERR_NULL] = "null pointer",
    [ATTN_ERR_SHAPE] = "shape mismatch",
    [ATTN_ERR_STRIDE] = "invalid stride",
    [ATTN_ERR_DTYPE] = "wrong dtype",
    [ATTN_ERR_ARG] = "invalid argument",
    [ATTN_ERR_OVERFLOW] = "size overflow",
    [ATTN_ERR_ALLOC] = "out of memory",
    [ATTN_ERR_WORKSPACE] = "workspace too small",
    [ATTN_ERR_IO] = "i/o error",
    [ATTN_ERR_FORMAT] = "malformed file",
    [ATTN_ERR_UNSUPPORTED] = "unsupported",
};

const char *attn_status_string(attn_status status)
{
    if ((unsigned)status >= ATTN_STATUS_COUNT) return "unknown status";
    return status_names[status];
}

attn_status attn_fail(attn_error *err, attn_status status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->status = status;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}
