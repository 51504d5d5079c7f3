/* Running the attn CLI from tests: fork + execv with stdout and stderr sent
 * to temporary files, then read back. */
#include "clirun.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Reads a whole file descriptor from offset 0. */
static char *slurp(int fd, size_t *len)
{
    size_t cap = 1 << 14, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    lseek(fd, 0, SEEK_SET);
    for (;;) {
        if (n + 1 >= cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                return NULL;
            }
            buf = b;
        }
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int temp_fd(void)
{
    const char *dir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/attn-clirun-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd >= 0) unlink(path); /* anonymous: gone when closed */
    return fd;
}

static bool run_with(const char *program, const char *const *args, const void *in,
                     size_t in_len, bool piped, clirun_result *r);

bool clirun(const char *program, const char *const *args, clirun_result *r)
{
    return run_with(program, args, NULL, 0, false, r);
}

bool clirun_input(const char *program, const char *const *args, const void *in, size_t in_len,
                  clirun_result *r)
{
    return run_with(program, args, in, in_len, true, r);
}

static bool run_with(const char *program, const char *const *args, const void *in,
                     size_t in_len, bool piped, clirun_result *r)
{
    memset(r, 0, sizeof *r);
    r->status = -1;
    int n = 0;
    while (args[n]) ++n;
    char **argv = calloc((size_t)n + 2, sizeof *argv);
    int out = temp_fd(), err = temp_fd();
    if (!argv || out < 0 || err < 0) {
        free(argv);
        if (out >= 0) close(out);
        if (err >= 0) close(err);
        return false;
    }
    argv[0] = (char *)program;
    for (int i = 0; i < n; ++i) argv[i + 1] = (char *)args[i];
    fflush(stdout);
    fflush(stderr);
    int feed[2] = {-1, -1};
    if (piped && pipe(feed) != 0) piped = false;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out, STDOUT_FILENO);
        dup2(err, STDERR_FILENO);
        if (piped) {
            dup2(feed[0], STDIN_FILENO);
            close(feed[0]);
            close(feed[1]);
        } else {
            int devnull = open("/dev/null", O_RDONLY);
            if (devnull >= 0) dup2(devnull, STDIN_FILENO);
        }
#ifdef ATTN_SOURCE_DIR
        setenv("ATTN_EXAMPLES_DIR", ATTN_SOURCE_DIR "/examples", 1);
#endif
        execv(program, argv);
        _exit(127);
    }
    free(argv);
    if (piped) {
        /* written from here: the child reads as we write (EPIPE if it stops) */
        close(feed[0]);
        void (*old)(int) = signal(SIGPIPE, SIG_IGN);
        const unsigned char *p = in;
        for (size_t done = 0; pid > 0 && done < in_len;) {
            ssize_t w = write(feed[1], p + done, in_len - done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            done += (size_t)w;
        }
        close(feed[1]);
        signal(SIGPIPE, old);
    }
    bool ran = pid > 0;
    int status = 0;
    while (ran && waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            ran = false;
            break;
        }
    }
    if (ran) r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r->out = slurp(out, &r->out_len);
    r->err = slurp(err, &r->err_len);
    close(out);
    close(err);
    if (!r->out) r->out = calloc(1, 1);
    if (!r->err) r->err = calloc(1, 1);
    return ran && r->out && r->err;
}

bool clirunf(clirun_result *r, const char *fmt, ...)
{
#ifdef ATTN_CLI
    char text[16384];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (len < 0 || len >= (int)sizeof text) {
        memset(r, 0, sizeof *r);
        r->status = -1;
        return false;
    }
    const char *args[256];
    int n = 0;
    char *p = text;
    while (n < 255) {
        args[n++] = p;
        char *sep = strchr(p, '\x1f');
        if (!sep) break;
        *sep = '\0';
        p = sep + 1;
    }
    args[n] = NULL;
    return clirun(ATTN_CLI, args, r);
#else
    (void)fmt;
    memset(r, 0, sizeof *r);
    r->status = -1;
    return false;
#endif
}

void clirun_free(clirun_result *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

int clirun_count_lines(const char *s)
{
    int n = 0;
    for (const char *p = s; *p; ++p)
        if (*p == '\n') ++n;
    size_t len = strlen(s);
    if (len && s[len - 1] != '\n') ++n;
    return n;
}

bool clirun_numbers_after(const char *text, const char *label, double *out, int count)
{
    const char *s = strstr(text, label);
    if (!s) return false;
    s = strchr(s, '\n');
    if (!s) return false;
    ++s;
    int got = 0;
    while (got < count && *s) {
        if (s[0] == '\n' && s[1] == '\n') return false; /* end of the block */
        /* a number starts at a digit, or a sign/point followed by a digit,
         * and not inside a word */
        bool word_before = s > text && (isalpha((unsigned char)s[-1]) || s[-1] == '_');
        bool starts_number = isdigit((unsigned char)s[0]) ||
                             ((s[0] == '-' || s[0] == '+' || s[0] == '.') &&
                              (isdigit((unsigned char)s[1]) ||
                               (s[1] == '.' && isdigit((unsigned char)s[2]))));
        if (!word_before && starts_number) {
            char *end;
            out[got++] = strtod(s, &end);
            s = end;
            continue;
        }
        if (!word_before && (!strncmp(s, "inf", 3) || !strncmp(s, "-inf", 4))) {
            bool neg = *s == '-';
            out[got++] = neg ? -INFINITY : INFINITY;
            s += neg ? 4 : 3;
            continue;
        }
        if (isalpha((unsigned char)*s)) { /* skip a whole word, digits included */
            while (*s && !isspace((unsigned char)*s)) ++s;
            continue;
        }
        ++s;
    }
    return got == count;
}

void clirun_strip_ansi(char *s)
{
    char *w = s;
    for (const char *p = s; *p;) {
        if (p[0] == '\x1b' && p[1] == '[') {
            p += 2;
            while (*p && !isalpha((unsigned char)*p)) ++p;
            if (*p) ++p;
            continue;
        }
        *w++ = *p++;
    }
    *w = '\0';
}
