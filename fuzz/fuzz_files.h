/* Helpers for the file-reader fuzz targets: the input as a file the readers
 * open by path, either a regular in-memory file (memfd: its size is known)
 * or the read end of a pipe fed by a thread (size unknown, short reads), and
 * a scratch directory for the round trip. */
#ifndef ATTN_FUZZ_FILES_H
#define ATTN_FUZZ_FILES_H

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    int fd;          /* the readers' end */
    int write_fd;    /* pipe: the feeding end (closed by the feeder) */
    pthread_t feeder;
    const uint8_t *data;
    size_t size;
    char path[64];   /* /proc/self/fd/N */
} fuzz_file;

static void *fuzz_feed(void *arg)
{
    fuzz_file *f = arg;
    for (size_t done = 0; done < f->size;) {
        ssize_t w = write(f->write_fd, f->data + done, f->size - done);
        if (w <= 0) break; /* the reader stopped early: EPIPE */
        done += (size_t)w;
    }
    close(f->write_fd);
    return NULL;
}

/* piped = false: an in-memory regular file; true: a pipe. */
static int fuzz_file_open(fuzz_file *f, const uint8_t *data, size_t size, int piped)
{
    static int once;
    if (!once) {
        signal(SIGPIPE, SIG_IGN); /* a reader that stops early: the feeder gets EPIPE */
        once = 1;
    }
    memset(f, 0, sizeof *f);
    f->data = data;
    f->size = size;
    f->write_fd = -1;
    if (!piped) {
        f->fd = memfd_create("attn-fuzz", 0);
        if (f->fd < 0) return -1;
        if (size && write(f->fd, data, size) != (ssize_t)size) return -1;
    } else {
        int p[2];
        if (pipe(p) != 0) return -1;
        f->fd = p[0];
        f->write_fd = p[1];
        if (pthread_create(&f->feeder, NULL, fuzz_feed, f) != 0) return -1;
    }
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
    return 0;
}

static void fuzz_file_close(fuzz_file *f)
{
    close(f->fd); /* first: a feeder blocked on a full pipe gets EPIPE */
    if (f->write_fd >= 0) pthread_join(f->feeder, NULL);
}

/* A per-process scratch directory for round-trip outputs (files only),
 * removed when the fuzzer exits. */
static char fuzz_scratch_dir[64];

static void fuzz_scratch_remove(void)
{
    DIR *d = opendir(fuzz_scratch_dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    rmdir(fuzz_scratch_dir);
}

static const char *fuzz_scratch(void)
{
    if (!fuzz_scratch_dir[0]) {
        snprintf(fuzz_scratch_dir, sizeof fuzz_scratch_dir, "/tmp/attn-fuzz-XXXXXX");
        if (!mkdtemp(fuzz_scratch_dir)) abort();
        atexit(fuzz_scratch_remove);
    }
    return fuzz_scratch_dir;
}

static size_t fuzz_elsize(const attn_tensor *t)
{
    return t->dtype == ATTN_BOOL ? 1 : 4;
}

/* Same dtype, shape and bytes (contiguous arrays as the readers return). */
static int fuzz_same_array(const attn_tensor *a, const attn_tensor *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; ++d)
        if (a->shape[d] != b->shape[d]) return 0;
    size_t n = (size_t)attn_tensor_numel(a) * fuzz_elsize(a);
    return n == 0 || memcmp(a->data, b->data, n) == 0;
}

#endif
