/* Reading the input files a command names: "-" for standard input, one
 * line per problem naming the command and the option, a note when a
 * conversion rounded, and a hint when a file is of another kind than the
 * option expects. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STDIN_PATH "/dev/stdin"

/* Standard input can be read once per run. */
static bool stdin_taken;

/* One line on stderr: "attn CMD: ", the option that named path
 * ("--query ") else `fallback` (may be NULL), then fmt's text, in one
 * write: the ranks of `mpiexec attn ring` share stderr, and a line written
 * in pieces interleaves with theirs. */
static void input_error(const char *path, const char *fallback, const char *fmt, ...)
{
    const cli_args *a = cli_running();
    const char *option = fallback;
    for (int i = 0; a && i < a->count; ++i)
        if (a->values[i] == path || !strcmp(a->values[i], path)) {
            option = a->names[i];
            break;
        }
    char text[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(stderr, "attn%s%s: %s%s%s", a ? " " : "", a ? a->cmd->name : "", option ? option : "",
            option ? " " : "", text);
}

static const char *input_path(const char *path, bool *ok)
{
    *ok = true;
    if (strcmp(path, "-") != 0) return path;
    if (stdin_taken) {
        input_error(path, NULL, "-: standard input can be given for one input only\n");
        *ok = false;
    }
    stdin_taken = true;
    return STDIN_PATH;
}

/* The library's message about `read` (the path it was given) shown with
 * the path as the user wrote it. */
static void print_error(const char *path, const char *read, const attn_error *err)
{
    const char *msg = err->message[0] ? err->message : attn_status_string(err->status);
    const size_t n = strlen(read);
    if (!strncmp(msg, read, n))
        input_error(path, NULL, "%s%s%s\n", path, strcmp(path, "-") ? "" : " (standard input)",
                    msg + n);
    else
        input_error(path, NULL, "%s\n", msg);
}

static void note_rounding(const char *path, const attn_array *a)
{
    if (a->inexact > 0)
        fprintf(stderr, "attn: note: %s%s%s: %lld %s value%s rounded to the nearest float32\n",
                path, a->name ? ": tensor " : "", a->name ? a->name : "",
                (long long)a->inexact, a->file_dtype, a->inexact == 1 ? "" : "s");
}

static int read_npy(const char *path, const char *read, attn_array *out)
{
    attn_error err = {0};
    if (attn_npy_read(read, out, &err) != ATTN_OK) {
        print_error(path, read, &err);
        return cli_exit_code(err.status);
    }
    note_rounding(path, out);
    return CLI_OK;
}

int cli_load_npy(const char *path, attn_array *out)
{
    bool ok;
    const char *real = input_path(path, &ok);
    return ok ? read_npy(path, real, out) : CLI_USAGE;
}

/* .npy "<i8", "|u1"; safetensors "I64", "U8": integers. */
static bool integer_dtype(const char *file_dtype)
{
    const char c = file_dtype[0] == '<' || file_dtype[0] == '>' || file_dtype[0] == '|' ||
                           file_dtype[0] == '='
                       ? file_dtype[1]
                       : file_dtype[0];
    return c == 'i' || c == 'u' || c == 'I' || c == 'U';
}

int cli_load_mask(const char *path, attn_array *out)
{
    int rc = cli_load_npy(path, out);
    if (rc || !integer_dtype(out->file_dtype)) return rc;
    input_error(path, NULL,
                "%s: an integer mask (%s): masks must be bool or float, as in torch (for 0/1 "
                "values save a bool array)\n",
                path, out->file_dtype);
    attn_array_free(out);
    return CLI_USAGE;
}

/* What a file that is not safetensors looks like, from its first bytes. */
static const char *kind_of(const unsigned char *b, size_t n)
{
    if (n >= 6 && !memcmp(b, "\x93NUMPY", 6)) return "a .npy file";
    if (n >= 4 && !memcmp(b, "PK\x03\x04", 4)) return "a zip archive (torch.save's .pt format?)";
    if (n >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5) return "a Python pickle";
    if (n >= 1 && (b[0] == '{' || b[0] == '[')) return "a JSON or text file";
    return NULL;
}

static const char *sniff(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char b[8] = {0};
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    return kind_of(b, n);
}

static int read_safetensors(const char *option, const char *path, const char *read,
                            bool regular, attn_safetensors *out)
{
    attn_error err = {0};
    if (attn_safetensors_read(read, out, &err) != ATTN_OK) {
        const char *kind = err.status == ATTN_ERR_FORMAT && regular ? sniff(read) : NULL;
        if (kind) {
            input_error(path, option, "%s: is %s, not .safetensors\n", path, kind);
        } else {
            print_error(path, read, &err);
        }
        return cli_exit_code(err.status);
    }
    for (size_t i = 0; i < out->count; ++i) note_rounding(path, &out->arrays[i]);
    return CLI_OK;
}

int cli_load_safetensors(const char *option, const char *path, attn_safetensors *out)
{
    bool ok;
    const char *real = input_path(path, &ok);
    return ok ? read_safetensors(option, path, real, real == path, out) : CLI_USAGE;
}

/*
 * A file of either kind, opened once: a pipe or FIFO cannot be opened twice
 * or read back. Its first bytes tell the kind; a regular file is then read
 * by its path, anything else through a pipe that a thread feeds with those
 * bytes and the rest of the stream, so the readers meet the same bytes (and
 * the same bounded memory) as from the original.
 */
typedef struct {
    int from, to;
    const unsigned char *head;
    size_t nhead;
} feed;

static bool write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false; /* the reader stopped early: EPIPE */
        p += w, n -= (size_t)w;
    }
    return true;
}

static void *feed_pipe(void *arg)
{
    feed *f = arg;
    sigset_t pipe_signal;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, NULL);
    unsigned char buf[65536];
    bool ok = write_all(f->to, f->head, f->nhead);
    while (ok) {
        const ssize_t n = read(f->from, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        ok = n > 0 && write_all(f->to, buf, (size_t)n);
    }
    close(f->to);
    return NULL;
}

static size_t read_head(int fd, unsigned char *b, size_t cap)
{
    size_t got = 0;
    while (got < cap) {
        const ssize_t n = read(fd, b + got, cap - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    return got;
}

int cli_load_file(const char *path, bool *is_npy, attn_array *npy, attn_safetensors *st)
{
    bool ok;
    const char *real = input_path(path, &ok);
    if (!ok) return CLI_USAGE;
    const int fd = open(real, O_RDONLY);
    if (fd < 0) { /* the library words it */
        attn_error err = {0};
        attn_npy_read(real, npy, &err);
        print_error(path, real, &err);
        return cli_exit_code(err.status);
    }
    struct stat info;
    const bool regular = fstat(fd, &info) == 0 && !S_ISFIFO(info.st_mode) &&
                         !S_ISCHR(info.st_mode) && !S_ISSOCK(info.st_mode);
    unsigned char head[8];
    feed f = {.from = fd, .to = -1, .head = head, .nhead = read_head(fd, head, sizeof head)};
    *is_npy = f.nhead >= 6 && !memcmp(head, "\x93NUMPY", 6);
    int rc;
    if (regular) {
        close(fd);
        rc = *is_npy ? read_npy(path, real, npy) : read_safetensors(NULL, path, real, true, st);
        return rc;
    }
    int ends[2];
    pthread_t feeder;
    if (pipe(ends) != 0) {
        close(fd);
        input_error(path, NULL, "%s: cannot make a pipe: %s\n", path, strerror(errno));
        return CLI_FAIL;
    }
    f.to = ends[1];
    if (pthread_create(&feeder, NULL, feed_pipe, &f) != 0) {
        close(fd), close(ends[0]), close(ends[1]);
        input_error(path, NULL, "%s: cannot start a thread to read it\n", path);
        return CLI_FAIL;
    }
    char through[64];
    snprintf(through, sizeof through, "/proc/self/fd/%d", ends[0]);
    rc = *is_npy ? read_npy(path, through, npy) : read_safetensors(NULL, path, through, false, st);
    close(ends[0]); /* a feeder still writing gets EPIPE */
    pthread_join(feeder, NULL);
    close(fd);
    return rc;
}
