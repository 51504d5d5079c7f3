/* Output files written to a temporary name and renamed into place. */
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tries this many temporary names before giving up (O_EXCL makes each try safe
 * against concurrent writers; collisions only come from stale files). */
#define TEMP_NAME_ATTEMPTS 1000

const char *attn_errno_text(int errnum, char *buf, size_t size)
{
    if (strerror_r(errnum, buf, size) != 0) snprintf(buf, size, "error %d", errnum);
    return buf;
}

static attn_status fail_errno(attn_atomic_file *f, attn_error *err, int errnum, const char *what)
{
    char text[96];
    f->status = attn_fail(err, ATTN_ERR_IO, "%s: %s: %s", f->path, what,
                          attn_errno_text(errnum, text, sizeof text));
    return f->status;
}

attn_status attn_atomic_open(attn_atomic_file *f, const char *path, attn_error *err)
{
    memset(f, 0, sizeof *f);
    f->path = path ? path : "(null)";
    if (!path) return f->status = attn_fail(err, ATTN_ERR_NULL, "output path is NULL");
    if (!*path) return f->status = attn_fail(err, ATTN_ERR_ARG, "output path is empty");

    /* Same directory as the destination: "dir/" prefix, or none for a bare name. */
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
    size_t size = dir_len + 64;
    f->temp_path = malloc(size);
    if (!f->temp_path)
        return f->status = attn_fail(err, ATTN_ERR_ALLOC, "%s: out of memory", path);
    memcpy(f->temp_path, path, dir_len);

    int fd = -1, errnum = 0;
    long pid = (long)getpid();
    for (int attempt = 0; attempt < TEMP_NAME_ATTEMPTS && fd < 0; ++attempt) {
        snprintf(f->temp_path + dir_len, size - dir_len, ".attn-%ld-%d.tmp", pid, attempt);
        fd = open(f->temp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        errnum = errno;
        if (fd < 0 && errnum != EEXIST) break;
    }
    if (fd < 0) {
        free(f->temp_path);
        f->temp_path = NULL;
        return fail_errno(f, err, errnum, "cannot create a temporary file next to it");
    }
    f->fp = fdopen(fd, "wb");
    if (!f->fp) {
        errnum = errno;
        close(fd);
        attn_atomic_abort(f);
        return fail_errno(f, err, errnum, "cannot open the temporary file");
    }
    attn_ok(err);
    return ATTN_OK;
}

attn_status attn_atomic_write(attn_atomic_file *f, const void *data, size_t bytes, attn_error *err)
{
    if (f->status != ATTN_OK) return f->status;
    if (bytes == 0) return ATTN_OK;
    if (fwrite(data, 1, bytes, f->fp) != bytes)
        return fail_errno(f, err, errno ? errno : EIO, "write failed");
    return ATTN_OK;
}

attn_status attn_atomic_write_tensor(attn_atomic_file *f, const attn_tensor *t,
                                     const char *what, attn_error *err)
{
    if (f->status != ATTN_OK) return f->status;
    int64_t numel = attn_tensor_numel(t);
    if (numel == 0) return ATTN_OK;

    const bool is_bool = t->dtype == ATTN_BOOL;
    const size_t elsize = is_bool ? 1 : sizeof(float);
    const int nd = t->ndim;
    /* 0-d: one element; otherwise the last dimension is the inner loop. */
    const int64_t inner = nd > 0 ? t->shape[nd - 1] : 1;
    const int64_t inner_stride = nd > 0 ? t->stride[nd - 1] : 0;
    const unsigned char *base = t->data;

    unsigned char chunk[16384];
    size_t used = 0;
    int64_t index[ATTN_MAX_DIMS] = {0};
    int64_t written = 0;
    for (;;) {
        int64_t offset = 0; /* in elements, from the outer indices */
        for (int d = 0; d + 1 < nd; ++d) offset += index[d] * t->stride[d];
        for (int64_t i = 0; i < inner; ++i, ++written) {
            const unsigned char *src = base + (offset + i * inner_stride) * (int64_t)elsize;
            if (is_bool && *src > 1) {
                f->status = attn_fail(err, ATTN_ERR_ARG,
                                      "%s: %s%sbool element %lld is %u, must be 0 or 1", f->path,
                                      what ? what : "", what ? ": " : "", (long long)written,
                                      (unsigned)*src);
                return f->status;
            }
            memcpy(chunk + used, src, elsize);
            used += elsize;
            if (used == sizeof chunk) {
                RETURN_IF_ERROR(attn_atomic_write(f, chunk, used, err));
                used = 0;
            }
        }
        /* Odometer over the outer dimensions. */
        int d = nd - 2;
        while (d >= 0 && ++index[d] == t->shape[d]) index[d--] = 0;
        if (d < 0) break;
    }
    return attn_atomic_write(f, chunk, used, err);
}

attn_status attn_atomic_commit(attn_atomic_file *f, attn_error *err)
{
    if (f->status != ATTN_OK) {
        attn_atomic_abort(f);
        return f->status;
    }
    int failed_write = ferror(f->fp);
    int close_result = fclose(f->fp);
    int errnum = errno;
    f->fp = NULL;
    if (failed_write || close_result != 0) {
        attn_atomic_abort(f);
        return fail_errno(f, err, failed_write ? EIO : errnum, "write failed");
    }
    if (rename(f->temp_path, f->path) != 0) {
        errnum = errno;
        attn_atomic_abort(f);
        return fail_errno(f, err, errnum, "cannot rename the temporary file into place");
    }
    free(f->temp_path);
    f->temp_path = NULL;
    attn_ok(err);
    return ATTN_OK;
}

void attn_atomic_abort(attn_atomic_file *f)
{
    if (f->fp) fclose(f->fp);
    f->fp = NULL;
    if (f->temp_path) unlink(f->temp_path);
    free(f->temp_path);
    f->temp_path = NULL;
}

attn_status attn_open_input(const char *path, FILE **fp, int64_t *file_size, attn_error *err)
{
    char text[96];
    *fp = fopen(path, "rb");
    RETURN_IF(!*fp, err, ATTN_ERR_IO, "%s: cannot open: %s", path,
              attn_errno_text(errno, text, sizeof text));
    struct stat info;
    *file_size = fstat(fileno(*fp), &info) == 0 && S_ISREG(info.st_mode) ? info.st_size : -1;
    return ATTN_OK;
}
