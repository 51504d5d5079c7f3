/* Outputs staged in a temporary file and moved into place. */
#include "atomic_file.h"
#include "byteorder.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
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
    f->status = attn_fail(err, errnum == ENOMEM ? ATTN_ERR_ALLOC : ATTN_ERR_IO, "%s: %s: %s",
                          f->dest.shown, what, attn_errno_text(errnum, text, sizeof text));
    return f->status;
}

/* "DIR/.attn-PID-N.SUFFIX" for the first N that `make` can create; returns
 * the malloc'd name or NULL with *errnum set. Sized exactly: never cut. */
static char *unique_name(const attn_destination *d, const char *suffix,
                         int (*make)(const char *name, void *ctx), void *ctx, int *errnum)
{
    const size_t size = d->dir_len + 64;
    char *name = malloc(size);
    if (!name) {
        *errnum = ENOMEM;
        return NULL;
    }
    memcpy(name, d->target, d->dir_len);
    const long pid = (long)getpid();
    for (int attempt = 0; attempt < TEMP_NAME_ATTEMPTS; ++attempt) {
        snprintf(name + d->dir_len, size - d->dir_len, ".attn-%ld-%d.%s", pid, attempt, suffix);
        if (make(name, ctx) == 0) return name;
        *errnum = errno;
        if (*errnum != EEXIST) break;
    }
    free(name);
    return NULL;
}

typedef struct {
    int fd;
    mode_t mode;
    attn_atomic_file *file;
} create_ctx;

/* Creates the temporary file, its name published to a signal handler
 * (attn_atomic_remove_signal_safe) before the file exists: a signal that
 * arrives between open() and the bookkeeping after it still removes the
 * file (publishing after open() left one behind in 2 of 30 runs of
 * test_output_safety under ASan).
 * If open() fails, the name is withdrawn before the next attempt reuses
 * the buffer; a signal in between may remove an existing file of that
 * name, which carries this process's id: another of its own temporaries,
 * or one a dead process with the same id left behind. */
static int create_temp(const char *name, void *ctx)
{
    create_ctx *c = ctx;
    attn_atomic_file *f = c->file;
    const int before = f->state;
    f->temp_path = (char *)name; /* unique_name returns this very buffer */
    atomic_signal_fence(memory_order_seq_cst);
    f->state = ATOMIC_CREATING;
    atomic_signal_fence(memory_order_seq_cst);
    c->fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, c->mode);
    if (c->fd < 0) {
        const int errnum = errno;
        f->state = before;
        atomic_signal_fence(memory_order_seq_cst);
        f->temp_path = NULL;
        atomic_signal_fence(memory_order_seq_cst);
        errno = errnum;
        return -1;
    }
    f->state = ATOMIC_WRITING;
    return 0;
}

/* Drops the temporary file's name: hidden from a signal handler before the
 * memory is freed. */
static void forget_temp(attn_atomic_file *f)
{
    char *t = f->temp_path;
    f->temp_path = NULL;
    atomic_signal_fence(memory_order_seq_cst);
    free(t);
}

static int link_backup(const char *name, void *ctx)
{
    return link((const char *)ctx, name);
}

/* Without hard links (some file systems): claim a free name, then rename
 * the old file over it. */
static int move_aside(const char *name, void *ctx)
{
    int fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    close(fd);
    if (rename((const char *)ctx, name) == 0) return 0;
    int errnum = errno;
    unlink(name);
    errno = errnum == EEXIST ? EIO : errnum;
    return -1;
}

attn_status attn_atomic_open(attn_atomic_file *f, const char *path, attn_error *err)
{
    memset(f, 0, sizeof *f);
    f->state = ATOMIC_DONE;
    f->status = attn_destination_resolve(path, &f->dest, err);
    if (f->status != ATTN_OK) {
        attn_destination_free(&f->dest);
        return f->status;
    }
    if (f->dest.is_stdout) {
        f->fp = tmpfile(); /* unnamed: nothing to clean up after a kill */
        if (!f->fp) return fail_errno(f, err, errno, "cannot create a temporary file");
    } else {
        /* A file that replaces another starts private and takes the old mode
         * at finish; a new one gets the usual 0666 & ~umask. */
        create_ctx c = {.fd = -1, .mode = f->dest.exists ? 0600 : 0666, .file = f};
        int errnum = 0;
        f->temp_path = unique_name(&f->dest, "tmp", create_temp, &c, &errnum);
        if (!f->temp_path) {
            fail_errno(f, err, errnum, "cannot create a temporary file next to it");
            attn_destination_free(&f->dest);
            return f->status;
        }
        f->fp = fdopen(c.fd, "wb");
        if (!f->fp) {
            errnum = errno;
            close(c.fd);
            unlink(f->temp_path);
            forget_temp(f);
            f->state = ATOMIC_DONE;
            fail_errno(f, err, errnum, "cannot open the temporary file");
            attn_destination_free(&f->dest);
            return f->status;
        }
    }
    f->state = ATOMIC_WRITING;
    attn_ok(err);
    return ATTN_OK;
}

attn_status attn_atomic_write(attn_atomic_file *f, const void *data, size_t bytes, attn_error *err)
{
    if (f->status != ATTN_OK) return f->status;
    if (f->state != ATOMIC_WRITING)
        return f->status = attn_fail(err, ATTN_ERR_ARG, "%s: written after it was closed",
                                     f->dest.shown);
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
    const size_t elsize = attn_dtype_size(t->dtype);
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
                                      "%s: %s%sbool element %lld is %u, must be 0 or 1", f->dest.shown,
                                      what ? what : "", what ? ": " : "", (long long)written,
                                      (unsigned)*src);
                return f->status;
            }
            memcpy(chunk + used, src, elsize);
            attn_host_to_le(chunk + used, elsize, 1); /* the formats' order */
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

attn_status attn_atomic_finish(attn_atomic_file *f, attn_error *err)
{
    if (f->status != ATTN_OK) return f->status;
    if (f->state != ATOMIC_WRITING) return ATTN_OK;
    int errnum = 0;
    if (fflush(f->fp) != 0 || ferror(f->fp)) errnum = errno ? errno : EIO;
    if (f->dest.is_stdout) {
        if (errnum) return fail_errno(f, err, errnum, "write failed");
        f->state = ATOMIC_FINISHED;
        return ATTN_OK;
    }
    if (!errnum && f->dest.exists) {
        const int fd = fileno(f->fp);
        /* root replacing someone else's file keeps the owner (best effort);
         * chown first, as it clears set-id bits */
        if (geteuid() == 0 && (f->dest.uid != geteuid() || f->dest.gid != getegid()))
            (void)!fchown(fd, f->dest.uid, f->dest.gid);
        if (fchmod(fd, f->dest.mode) != 0) errnum = errno;
    }
    if (fclose(f->fp) != 0 && !errnum) errnum = errno ? errno : EIO;
    f->fp = NULL;
    if (errnum) return fail_errno(f, err, errnum, "write failed");
    f->state = ATOMIC_FINISHED;
    return ATTN_OK;
}

static attn_status copy_to_stdout(attn_atomic_file *f, attn_error *err)
{
    char buf[65536];
    rewind(f->fp);
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f->fp)) > 0)
        if (fwrite(buf, 1, n, stdout) != n) break;
    int errnum = ferror(f->fp) || ferror(stdout) || fflush(stdout) != 0 ? (errno ? errno : EIO) : 0;
    fclose(f->fp);
    f->fp = NULL;
    if (errnum) return fail_errno(f, err, errnum, "cannot write to standard output");
    return ATTN_OK;
}

attn_status attn_atomic_swap(attn_atomic_file *f, attn_error *err)
{
    if (f->status != ATTN_OK) return f->status;
    if (f->state != ATOMIC_FINISHED)
        return f->status = attn_fail(err, ATTN_ERR_ARG, "%s: not ready to commit", f->dest.shown);
    if (f->dest.is_stdout) {
        RETURN_IF_ERROR(copy_to_stdout(f, err));
        f->state = ATOMIC_SWAPPED;
        return ATTN_OK;
    }
    const char *target = f->dest.target;
    int errnum = 0;
    bool moved_aside = false;
    if (f->dest.exists) {
        /* Keep the replaced file under a second name until the whole set is
         * in place; without hard links, move it aside instead. */
        f->backup_path = unique_name(&f->dest, "old", link_backup, (void *)target, &errnum);
        if (!f->backup_path && errnum != ENOMEM) {
            f->backup_path = unique_name(&f->dest, "old", move_aside, (void *)target, &errnum);
            moved_aside = f->backup_path != NULL;
        }
        if (!f->backup_path) return fail_errno(f, err, errnum, "cannot keep the file it replaces");
    }
    if (rename(f->temp_path, target) != 0) {
        errnum = errno;
        if (moved_aside) (void)rename(f->backup_path, target);
        else if (f->backup_path) unlink(f->backup_path);
        free(f->backup_path);
        f->backup_path = NULL;
        return fail_errno(f, err, errnum, "cannot rename the temporary file into place");
    }
    forget_temp(f);
    f->state = ATOMIC_SWAPPED;
    return ATTN_OK;
}

void attn_atomic_undo(attn_atomic_file *f)
{
    if (f->state != ATOMIC_SWAPPED || f->dest.is_stdout) return;
    if (f->backup_path) (void)rename(f->backup_path, f->dest.target);
    else unlink(f->dest.target);
    free(f->backup_path);
    f->backup_path = NULL;
    f->state = ATOMIC_DONE;
}

void attn_atomic_forget(attn_atomic_file *f)
{
    if (f->state != ATOMIC_SWAPPED) return;
    if (f->backup_path) unlink(f->backup_path);
    free(f->backup_path);
    f->backup_path = NULL;
    f->state = ATOMIC_DONE;
}

attn_status attn_atomic_commit(attn_atomic_file *f, attn_error *err)
{
    attn_status st = attn_atomic_finish(f, err);
    if (st == ATTN_OK) st = attn_atomic_swap(f, err);
    if (st == ATTN_OK) attn_atomic_forget(f);
    attn_atomic_abort(f);
    if (st == ATTN_OK) attn_ok(err);
    return st;
}

void attn_atomic_abort(attn_atomic_file *f)
{
    attn_atomic_undo(f);
    if (f->fp) fclose(f->fp);
    f->fp = NULL;
    if (f->temp_path) unlink(f->temp_path);
    forget_temp(f);
    free(f->backup_path);
    f->backup_path = NULL;
    attn_destination_free(&f->dest);
    f->state = ATOMIC_DONE;
}

void attn_atomic_remove_signal_safe(const attn_atomic_file *f)
{
    const char *t = f->temp_path; /* read once: the main code may be dropping it */
    const int st = f->state;
    if (t && (st == ATOMIC_CREATING || st == ATOMIC_WRITING || st == ATOMIC_FINISHED)) unlink(t);
}
