/* LD_PRELOAD shim for test_output_safety: the Nth move of the process (a
 * rename() or link(), counted together) fails (ATTN_FAULT_RENAME_FAIL=N,
 * with EIO) or is preceded by a SIGTERM to the whole process and a pause
 * that leaves time for a handler on another thread to act
 * (ATTN_FAULT_RENAME_SIGNAL=N). A commit's moves are links (a replaced file
 * kept under a second name) and renames (a new file into place), so N = 1,
 * 2, ... reaches each in turn. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_int calls;

static int env_int(const char *name)
{
    const char *v = getenv(name);
    return v ? atoi(v) : 0;
}

/* 0 to go on with the real call, else the failure to return. */
static int fault(void)
{
    const int n = atomic_fetch_add(&calls, 1) + 1;
    if (n == env_int("ATTN_FAULT_RENAME_FAIL")) {
        errno = EIO;
        return -1;
    }
    if (n == env_int("ATTN_FAULT_RENAME_SIGNAL")) {
        kill(getpid(), SIGTERM);
        struct timespec pause = {0, 100 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    return 0;
}

int rename(const char *from, const char *to)
{
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    return fault() ? -1 : real(from, to);
}

int link(const char *from, const char *to)
{
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "link");
    return fault() ? -1 : real(from, to);
}
