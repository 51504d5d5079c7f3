/* Resolving and checking an output path (symlinks, file type, identity). */
#include "destination.h"

#include "atomic_file.h" /* attn_errno_text */

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/magic.h>
#include <sys/vfs.h>
#endif

#define MAX_SYMLINK_HOPS 40 /* what Linux allows before ELOOP */

static const char *file_kind(mode_t mode)
{
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

static attn_status errno_fail(const attn_destination *d, attn_error *err, int errnum,
                              const char *what)
{
    char text[96];
    return attn_fail(err, errnum == ENOMEM ? ATTN_ERR_ALLOC : ATTN_ERR_IO, "%s: %s%s%s", d->shown,
                     what, *what ? ": " : "", attn_errno_text(errnum, text, sizeof text));
}

static size_t dir_part(const char *p);

/* Is the directory of `p` on procfs (or, without statfs, named /proc)? */
static bool in_proc(const char *p)
{
#ifdef __linux__
    struct statfs fs;
    char *dir = strndup(p, dir_part(p) ? dir_part(p) : 1);
    if (!dir) return false;
    if (!dir_part(p)) dir[0] = '.';
    bool proc = statfs(dir, &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC;
    free(dir);
    return proc;
#else
    return strncmp(p, "/proc/", 6) == 0;
#endif
}

/* Length of the directory part of p including its trailing '/', 0 for none. */
static size_t dir_part(const char *p)
{
    const char *slash = strrchr(p, '/');
    return slash ? (size_t)(slash - p) + 1 : 0;
}

/* The path a symlink at `link` points to, relative to the link's directory. */
static char *follow(const char *link, size_t link_size, int *errnum)
{
    size_t cap = link_size > 0 ? link_size + 1 : 256;
    for (;;) {
        char *buf = malloc(cap);
        if (!buf) {
            *errnum = ENOMEM;
            return NULL;
        }
        ssize_t n = readlink(link, buf, cap);
        if (n < 0) {
            *errnum = errno;
            free(buf);
            return NULL;
        }
        if ((size_t)n < cap) {
            buf[n] = '\0';
            if (buf[0] == '/') return buf;
            size_t dl = dir_part(link);
            char *joined = malloc(dl + (size_t)n + 1);
            if (!joined) {
                *errnum = ENOMEM;
                free(buf);
                return NULL;
            }
            memcpy(joined, link, dl);
            memcpy(joined + dl, buf, (size_t)n + 1);
            free(buf);
            return joined;
        }
        free(buf);
        if (cap > (size_t)1 << 20) {
            *errnum = ENAMETOOLONG;
            return NULL;
        }
        cap *= 2;
    }
}

attn_status attn_destination_resolve(const char *path, attn_destination *d, attn_error *err)
{
    memset(d, 0, sizeof *d);
    d->path = path ? path : "(null)";
    /* a message must keep its reason: a 4 kB path is shown by its end */
    size_t len = strlen(d->path);
    if (len < sizeof d->shown) memcpy(d->shown, d->path, len + 1);
    else snprintf(d->shown, sizeof d->shown, "...%s", d->path + len - (sizeof d->shown - 4));
    RETURN_IF(!path, err, ATTN_ERR_NULL, "output path is NULL");
    RETURN_IF(!*path, err, ATTN_ERR_ARG, "output path is empty");
    if (strcmp(path, "-") == 0) {
        d->is_stdout = true;
        return ATTN_OK;
    }
    char *cur = strdup(path);
    RETURN_IF(!cur, err, ATTN_ERR_ALLOC, "%s: out of memory", d->shown);
    struct stat st;
    int hops = 0;
    for (;;) {
        if (lstat(cur, &st) != 0) {
            int errnum = errno;
            if (errnum == ENOENT) break; /* a new file (its directory is checked below) */
            free(cur);
            return errno_fail(d, err, errnum, "cannot use it");
        }
        if (!S_ISLNK(st.st_mode)) {
            d->exists = true;
            break;
        }
        /* /dev/stdout and friends lead to /proc/self/fd/N: an open
         * descriptor, not a file to replace */
        if (in_proc(cur)) {
            free(cur);
            return attn_fail(err, ATTN_ERR_IO,
                             "%s: is an open file descriptor (a link under /proc); attn writes "
                             "regular files only (give - for standard output)",
                             d->shown);
        }
        int errnum = 0;
        char *next = hops < MAX_SYMLINK_HOPS ? follow(cur, (size_t)st.st_size, &errnum) : NULL;
        free(cur);
        if (!next)
            return errno_fail(d, err, hops < MAX_SYMLINK_HOPS ? errnum : ELOOP,
                              "cannot follow the symbolic link");
        cur = next;
        hops++;
    }
    d->target = cur;
    d->dir_len = dir_part(cur);
    const char *base = cur + d->dir_len;
    if (d->exists && S_ISDIR(st.st_mode))
        return attn_fail(err, ATTN_ERR_IO, "%s: is a directory", d->shown);
    if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
        return attn_fail(err, ATTN_ERR_IO, "%s: names a directory, not a file", d->shown);
    if (d->exists) {
        RETURN_IF(!S_ISREG(st.st_mode), err, ATTN_ERR_IO,
                  "%s: is %s; attn writes regular files only (give - for standard output)", d->shown,
                  file_kind(st.st_mode));
        RETURN_IF((st.st_mode & 0222) == 0 || access(cur, W_OK) != 0, err, ATTN_ERR_IO,
                  "%s: is read-only; attn does not replace it", d->shown);
        d->dev = st.st_dev;
        d->ino = st.st_ino;
        d->mode = st.st_mode & 07777;
        d->uid = st.st_uid;
        d->gid = st.st_gid;
    }
    /* The directory: "." for a bare name. */
    char *dir = d->dir_len ? strndup(cur, d->dir_len) : strdup(".");
    RETURN_IF(!dir, err, ATTN_ERR_ALLOC, "%s: out of memory", d->shown);
    int rc = stat(dir, &st), errnum = errno;
    free(dir);
    if (rc != 0) return errno_fail(d, err, errnum, "its directory cannot be used");
    RETURN_IF(!S_ISDIR(st.st_mode), err, ATTN_ERR_IO, "%s: its directory is not a directory",
              d->shown);
    RETURN_IF(in_proc(cur), err, ATTN_ERR_IO,
              "%s: is under /proc; attn writes regular files only (give - for standard output)",
              d->shown);
    d->dir_dev = st.st_dev;
    d->dir_ino = st.st_ino;
    return ATTN_OK;
}

bool attn_destination_same(const attn_destination *a, const attn_destination *b)
{
    if (a->is_stdout || b->is_stdout) return a->is_stdout && b->is_stdout;
    if (a->exists != b->exists) return false;
    if (a->exists) return a->dev == b->dev && a->ino == b->ino;
    return a->dir_dev == b->dir_dev && a->dir_ino == b->dir_ino &&
           strcmp(a->target + a->dir_len, b->target + b->dir_len) == 0;
}

void attn_destination_free(attn_destination *d)
{
    free(d->target);
    d->target = NULL;
}
