/* Opening inputs and reading declared lengths in bounded steps. */
#include "input.h"

#include "atomic_file.h" /* attn_errno_text */

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#define FIRST_CHUNK ((size_t)1 << 20)

size_t attn_read_retrying(FILE *fp, void *buf, size_t bytes)
{
    size_t got = 0;
    for (;;) {
        got += fread((unsigned char *)buf + got, 1, bytes - got, fp);
        if (got == bytes || !ferror(fp) || errno != EINTR) return got;
        clearerr(fp); /* interrupted, not failed: the bytes read so far are kept */
    }
}

int attn_getc_retrying(FILE *fp)
{
    for (;;) {
        const int c = fgetc(fp);
        if (c != EOF || !ferror(fp) || errno != EINTR) return c;
        clearerr(fp);
    }
}

attn_status attn_open_input(const char *path, FILE **fp, int64_t *file_size, attn_error *err)
{
    char text[96];
    *fp = fopen(path, "rb");
    RETURN_IF(!*fp, err, errno == ENOMEM ? ATTN_ERR_ALLOC : ATTN_ERR_IO, "%s: cannot open: %s",
              path, attn_errno_text(errno, text, sizeof text));
    struct stat info;
    if (fstat(fileno(*fp), &info) == 0 && S_ISDIR(info.st_mode)) {
        fclose(*fp);
        *fp = NULL;
        return attn_fail(err, ATTN_ERR_IO, "%s: is a directory", path);
    }
    *file_size = fstat(fileno(*fp), &info) == 0 && S_ISREG(info.st_mode) ? info.st_size : -1;
    return ATTN_OK;
}

static attn_status short_read(FILE *fp, const char *path, const char *what, size_t got,
                              size_t bytes, attn_error *err)
{
    if (ferror(fp)) {
        char text[96];
        return attn_fail(err, ATTN_ERR_IO, "%s: read error in the %s: %s", path, what,
                         attn_errno_text(errno ? errno : EIO, text, sizeof text));
    }
    return attn_fail(err, ATTN_ERR_FORMAT,
                     "%s: file is truncated: it ends inside the %s (%zu of %zu bytes)", path, what,
                     got, bytes);
}

attn_status attn_read_bounded(FILE *fp, const char *path, size_t bytes, bool known_size,
                              const char *what, unsigned char **out, attn_error *err)
{
    *out = NULL;
    size_t cap = known_size || bytes <= FIRST_CHUNK ? bytes : FIRST_CHUNK;
    unsigned char *buf = malloc(cap ? cap : 1);
    RETURN_IF(!buf, err, ATTN_ERR_ALLOC, "%s: out of memory for the %s (%zu bytes)", path, what,
              cap);
    size_t got = 0;
    for (;;) {
        size_t n = attn_read_retrying(fp, buf + got, cap - got);
        got += n;
        if (got < cap) {
            free(buf);
            return short_read(fp, path, what, got, bytes, err);
        }
        if (got == bytes) break;
        /* the data is really coming: grow, never past the declared size */
        size_t next = cap > bytes / 2 ? bytes : cap * 2;
        unsigned char *grown = realloc(buf, next);
        if (!grown) {
            free(buf);
            return attn_fail(err, ATTN_ERR_ALLOC, "%s: out of memory for the %s (%zu bytes)",
                             path, what, next);
        }
        buf = grown;
        cap = next;
    }
    *out = buf;
    return ATTN_OK;
}
