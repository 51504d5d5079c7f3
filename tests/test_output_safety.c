/* "Nothing lost": what the CLI and the output sets promise about files.
 * Every case starts from files holding known bytes and checks, after a
 * failed (or successful) command, what each file holds, its mode, its kind
 * (symlink kept), and that no temporary file is left in the directory. */
#include "clirun.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char OLD[] = "OLD CONTENT\n";

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* The whole file, NUL-terminated, or NULL. */
static char *slurp_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap + 1);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *grown = realloc(buf, 2 * cap + 1);
            if (!grown) break;
            buf = grown;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

static bool holds(const char *path, const char *text)
{
    char *got = slurp_file(path, NULL);
    bool same = got && !strcmp(got, text);
    free(got);
    return same;
}

static bool is_npy(const char *path)
{
    char *got = slurp_file(path, NULL);
    bool ok = got && !memcmp(got, "\x93NUMPY", 6);
    free(got);
    return ok;
}

/* Names starting with ".attn-" in dir (left-over temporaries). */
static int temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += !strncmp(e->d_name, ".attn-", 6);
    closedir(d);
    return n;
}

static bool run(clirun_result *r, const char *const *args)
{
    return clirun(ATTN_CLI, args, r);
}

#define SDPA_IN "sdpa", "--query", "q.npy", "--key", "k.npy", "--value", "v.npy"

static void check_failed(tu_group *g, clirun_result *r, const char *what, const char *contains)
{
    tu_check(g, r->status == 2, "%s: exit status %d, want 2 (stderr: %s)", what, r->status, r->err);
    tu_check(g, clirun_count_lines(r->err) == 1, "%s: want one line on stderr, got: %s", what,
             r->err);
    if (contains)
        tu_check(g, strstr(r->err, contains) != NULL, "%s: stderr lacks '%s': %s", what, contains,
                 r->err);
}

static void write_inputs(void)
{
    float q[2 * 3 * 4], k[2 * 5 * 4], v[2 * 5 * 4];
    for (int i = 0; i < 24; ++i) q[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    for (int i = 0; i < 40; ++i) k[i] = (float)((i * 5) % 13) / 6.0f - 1.0f;
    for (int i = 0; i < 40; ++i) v[i] = (float)((i * 3) % 7) / 3.0f - 1.0f;
    attn_tensor tq = attn_tensor_3d(q, 2, 3, 4), tk = attn_tensor_3d(k, 2, 5, 4),
                tv = attn_tensor_3d(v, 2, 5, 4);
    attn_npy_write("q.npy", &tq, NULL);
    attn_npy_write("k.npy", &tk, NULL);
    attn_npy_write("v.npy", &tv, NULL);
}

/* Defect 1: a bad second destination must fail before the first is touched. */
static void test_checked_up_front(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "every destination checked before writing");
    put("o.npy", OLD);
    mkdir("adir", 0755);
    clirun_result r;
    const char *a1[] = {SDPA_IN, "--out", "o.npy", "--lse", "adir", NULL};
    run(&r, a1);
    check_failed(&g, &r, "--lse a directory", "--lse adir: is a directory");
    tu_check(&g, holds("o.npy", OLD), "o.npy was changed");
    clirun_free(&r);
    const char *a2[] = {SDPA_IN, "--out", "o.npy", "--lse", "missing/l.npy", NULL};
    run(&r, a2);
    check_failed(&g, &r, "--lse in a missing directory", "--lse missing/l.npy");
    tu_check(&g, holds("o.npy", OLD), "o.npy was changed");
    clirun_free(&r);
    tu_check(&g, temporaries(".") == 0, "temporary files left behind");
    tu_group_end(&g);
}

/* Defect 2: one file named two ways. */
static void test_same_file(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "the same file under two names");
    put("o.npy", OLD);
    unlink("sym.npy");
    unlink("hard.npy");
    if (symlink("o.npy", "sym.npy") != 0 || link("o.npy", "hard.npy") != 0)
        tu_group_fail(&g, "cannot create links: %s", strerror(errno));
    const char *other[] = {"./o.npy", "sym.npy", "hard.npy", "../out/o.npy"};
    for (int i = 0; i < 4; ++i) {
        clirun_result r;
        const char *a[] = {SDPA_IN, "--out", "o.npy", "--lse", other[i], NULL};
        run(&r, a);
        check_failed(&g, &r, other[i], "the same file as --out o.npy");
        tu_check(&g, holds("o.npy", OLD), "%s: o.npy was changed", other[i]);
        clirun_free(&r);
    }
    /* a file that does not exist yet, twice */
    clirun_result r;
    const char *a[] = {SDPA_IN, "--out", "new.npy", "--attn-weights", "./new.npy", NULL};
    run(&r, a);
    check_failed(&g, &r, "new file twice", "the same file as --out new.npy");
    tu_check(&g, access("new.npy", F_OK) != 0, "new.npy was created");
    clirun_free(&r);
    /* sdpa-backward and mha-backward's --grads against the other outputs */
    const char *b[] = {"sdpa-backward", "--query", "q.npy", "--key", "k.npy", "--value", "v.npy",
                       "--grad-out", "q.npy", "--grad-query", "o.npy", "--out", "hard.npy", NULL};
    run(&r, b);
    check_failed(&g, &r, "sdpa-backward", "the same file as --grad-query o.npy");
    clirun_free(&r);
    const char *m[] = {"mha-backward", "--params", "p.safetensors", "--num-heads", "2",
                       "--query", "x.npy", "--grad-out", "x.npy", "--grads", "o.npy",
                       "--out", "sym.npy", NULL};
    run(&r, m);
    check_failed(&g, &r, "mha-backward --grads", "--out sym.npy: the same file as --grads o.npy");
    tu_check(&g, holds("o.npy", OLD), "mha-backward: o.npy was changed");
    clirun_free(&r);
    tu_check(&g, temporaries(".") == 0, "temporary files left behind");
    tu_group_end(&g);
}

/* Builds DIR/.../NAME of exactly 4095 bytes from 19 directories of `comp`
 * bytes and a 20th of `last` (created) and an existing file holding OLD. */
static bool long_path(char *path, size_t comp, size_t last, const char *cwd)
{
    size_t len = 0;
    bool ok = true;
    char part[256];
    memset(part, comp == 200 ? 'd' : 'e', comp);
    part[comp] = '\0';
    for (int i = 0; i < 20 && ok; ++i) {
        if (i == 19) {
            comp = last;
            part[comp] = '\0';
            memset(part, 'g', comp);
        }
        ok = (mkdir(part, 0755) == 0 || errno == EEXIST) && chdir(part) == 0;
        memcpy(path + len, part, comp);
        path[len + comp] = '/';
        len += comp + 1;
    }
    const size_t name_len = 4095 - len;
    memset(part, 'f', name_len);
    part[name_len] = '\0';
    memcpy(path + len, part, name_len + 1);
    if (ok) put(part, OLD);
    return chdir(cwd) == 0 && ok && strlen(path) == 4095;
}

/* Defect 3: a 4095-byte path. Its temporary name is never cut down to the
 * destination: it works when the directory leaves room, and fails cleanly
 * (the file kept) when it does not. */
static void test_long_path(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "a 4095-byte output path");
    char path[4096], cwd[4096];
    if (!getcwd(cwd, sizeof cwd) || !long_path(path, 200, 200, cwd)) {
        tu_group_fail(&g, "setup of the long path failed");
        tu_group_end(&g);
        return;
    }
    clirun_result r;
    const char *a[] = {SDPA_IN, "--out", path, NULL};
    run(&r, a);
    tu_check(&g, r.status == 0 && is_npy(path), "a 4095-byte path with room for a temporary "
             "name: status %d: %s", r.status, r.err);
    clirun_free(&r);
    /* A 4090-byte directory: even the shortest temporary name, of a one-digit
     * pid (".attn-1-0.tmp"), cannot fit. */
    if (!long_path(path, 203, 213, cwd))
        tu_group_fail(&g, "setup of the second long path failed");
    run(&r, a);
    check_failed(&g, &r, "4095-byte --out in a 4090-byte directory", "too long");
    tu_check(&g, holds(path, OLD), "the existing file at the long path was changed or removed");
    clirun_free(&r);
    tu_group_end(&g);
}

/* Defect 4: symlinks written through, special files refused, modes kept. */
static void test_kinds_and_modes(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "symlinks, special files and modes");
    put("target.npy", OLD);
    unlink("link.npy");
    unlink("dangling.npy");
    unlink("made.npy");
    symlink("target.npy", "link.npy");
    symlink("made.npy", "dangling.npy");
    clirun_result r;
    const char *a1[] = {SDPA_IN, "--out", "link.npy", "--lse", "dangling.npy", NULL};
    run(&r, a1);
    tu_check(&g, r.status == 0, "write through symlinks: status %d: %s", r.status, r.err);
    struct stat st;
    tu_check(&g, lstat("link.npy", &st) == 0 && S_ISLNK(st.st_mode), "link.npy is no longer a symlink");
    tu_check(&g, is_npy("target.npy"), "the symlink's target was not written");
    tu_check(&g, lstat("dangling.npy", &st) == 0 && S_ISLNK(st.st_mode) && is_npy("made.npy"),
             "a dangling symlink's target was not created");
    clirun_free(&r);

    unlink("fifo");
    mkfifo("fifo", 0644);
    const char *refused[] = {"fifo", "/dev/null", "/dev/stdout", "/proc/self/fd/1"};
    const char *why[] = {"is a FIFO", "character device", "open file descriptor",
                         "open file descriptor"};
    for (int i = 0; i < 4; ++i) {
        const char *a[] = {SDPA_IN, "--out", refused[i], NULL};
        run(&r, a);
        check_failed(&g, &r, refused[i], why[i]);
        clirun_free(&r);
    }
    tu_check(&g, lstat("fifo", &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was replaced");

    put("private.npy", OLD);
    chmod("private.npy", 0600);
    const char *a2[] = {SDPA_IN, "--out", "private.npy", NULL};
    run(&r, a2);
    tu_check(&g, r.status == 0 && stat("private.npy", &st) == 0 && (st.st_mode & 0777) == 0600,
             "a 0600 file did not stay 0600 (mode %o, status %d)", (unsigned)(st.st_mode & 0777),
             r.status);
    clirun_free(&r);
    put("readonly.npy", OLD);
    chmod("readonly.npy", 0444);
    const char *a3[] = {SDPA_IN, "--out", "readonly.npy", NULL};
    run(&r, a3);
    check_failed(&g, &r, "read-only file", "read-only");
    tu_check(&g, holds("readonly.npy", OLD), "a read-only file was replaced");
    clirun_free(&r);

    /* "-" is standard output, byte for byte the file's content */
    const char *a4[] = {SDPA_IN, "--out", "-", NULL};
    run(&r, a4);
    size_t flen = 0;
    char *file = slurp_file("target.npy", &flen);
    tu_check(&g, r.status == 0 && file && r.out_len == flen && !memcmp(r.out, file, flen),
             "--out - differs from the file output (status %d, %zu vs %zu bytes)", r.status,
             r.out_len, flen);
    free(file);
    clirun_free(&r);
    tu_check(&g, temporaries(".") == 0, "temporary files left behind");
    tu_group_end(&g);
}

/* The commit step undoes itself: the second rename fails (its temporary
 * file removed behind the set's back), the first output is restored. */
static void test_commit_rollback(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "a failed commit restores every output");
    mkdir("ra", 0755);
    mkdir("rb", 0755);
    put("ra/one.npy", OLD);
    float x[3] = {1, 2, 3};
    attn_tensor t = attn_tensor_1d(x, 3);
    attn_outputs *o = NULL;
    attn_error err = {0};
    int i0 = -1, i1 = -1;
    bool ok = attn_outputs_create(&o, &err) == ATTN_OK &&
              attn_outputs_add(o, "ra/one.npy", &i0, &err) == ATTN_OK &&
              attn_outputs_add(o, "rb/two.npy", &i1, &err) == ATTN_OK &&
              attn_outputs_write_npy(o, i0, &t, &err) == ATTN_OK &&
              attn_outputs_write_npy(o, i1, &t, &err) == ATTN_OK;
    tu_check(&g, ok, "setup: %s", err.message);
    tu_check(&g, temporaries("ra") == 1 && temporaries("rb") == 1,
             "one temporary file per output expected");
    DIR *d = opendir("rb");
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, ".attn-", 6)) {
            char p[300];
            snprintf(p, sizeof p, "rb/%s", e->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    attn_status st = o ? attn_outputs_commit(o, &err) : ATTN_ERR_NULL;
    tu_check(&g, st == ATTN_ERR_IO && strstr(err.message, "rb/two.npy"),
             "commit: status %d (%s), want an i/o error naming rb/two.npy", (int)st, err.message);
    tu_check(&g, holds("ra/one.npy", OLD), "ra/one.npy was not restored");
    tu_check(&g, access("rb/two.npy", F_OK) != 0, "rb/two.npy exists");
    tu_check(&g, temporaries("ra") == 0 && temporaries("rb") == 0, "temporary files left behind");
    attn_outputs_free(o);
    /* and a set freed without commit leaves nothing */
    ok = attn_outputs_create(&o, &err) == ATTN_OK &&
         attn_outputs_add(o, "ra/one.npy", NULL, &err) == ATTN_OK;
    attn_outputs_free(o);
    tu_check(&g, ok && temporaries("ra") == 0 && holds("ra/one.npy", OLD),
             "an uncommitted set left something behind");
    tu_group_end(&g);
}

/* Defect 11: SIGTERM / SIGINT during a run remove its temporary files. */
static void test_signals(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "SIGINT and SIGTERM remove temporaries");
    mkdir("sig", 0755);
    const int sigs[2] = {SIGTERM, SIGINT};
    for (int k = 0; k < 2; ++k) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            int null = open("/dev/null", O_WRONLY);
            dup2(null, 1);
            dup2(null, 2);
            execl(ATTN_CLI, ATTN_CLI, "train", "--steps", "100000000", "--quiet", "--save",
                  "sig/model.safetensors", "--plot", "sig/loss.svg", (char *)NULL);
            _exit(127);
        }
        /* wait until the run has created its temporaries (at most 20 s) */
        bool seen = false;
        for (int i = 0; i < 2000 && !seen; ++i) {
            seen = temporaries("sig") == 2;
            if (!seen) {
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        tu_check(&g, seen, "signal %d: the run never staged its two outputs", sigs[k]);
        kill(pid, sigs[k]);
        int status = 0;
        waitpid(pid, &status, 0);
        tu_check(&g, WIFSIGNALED(status) && WTERMSIG(status) == sigs[k],
                 "signal %d: the run did not end by it (status %d)", sigs[k], status);
        tu_check(&g, temporaries("sig") == 0, "signal %d: temporary files left behind", sigs[k]);
        tu_check(&g, access("sig/model.safetensors", F_OK) != 0, "signal %d: an output appeared",
                 sigs[k]);
    }
    tu_group_end(&g);
}

#ifdef ATTN_FAULTSHIM
/* Runs args under the rename() shim with VAR=N; returns the status (128 +
 * signal when killed). */
static int run_faulted(const char *var, int n, const char *const *args)
{
    const char *argv[32] = {ATTN_CLI};
    int k = 1;
    while (args[k - 1] && k < 31) argv[k] = args[k - 1], k++;
    argv[k] = NULL;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char value[16];
        snprintf(value, sizeof value, "%d", n);
        setenv(var, value, 1);
        setenv("LD_PRELOAD", ATTN_FAULTSHIM, 1);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execv(ATTN_CLI, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Defect: each move of a commit fails in turn, or a SIGTERM arrives during
 * it (on a process with idle OpenMP workers at 2 threads): every output is
 * all new or all old, nothing else is left. */
static void test_commit_faults(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "each commit move failed or signalled, 1 and 2 threads");
    mkdir("faults", 0755);
    static float q[2 * 256 * 16];
    for (int i = 0; i < 2 * 256 * 16; ++i) q[i] = (float)((i * 7) % 23) / 11.0f - 1.0f;
    attn_tensor tq = attn_tensor_3d(q, 2, 256, 16);
    attn_npy_write("faults/q.npy", &tq, NULL);
    const char *threads[2] = {"1", "2"}, *vars[2] = {"ATTN_FAULT_RENAME_FAIL",
                                                     "ATTN_FAULT_RENAME_SIGNAL"};
    for (int t = 0; t < 2; ++t)
        for (int v = 0; v < 2; ++v) {
            int reached = 0; /* moves the fault hit before the command got past them */
            for (int n = 1; n <= 6; ++n) {
                put("faults/o.npy", OLD);
                put("faults/l.npy", OLD);
                const char *args[] = {"sdpa", "--query", "faults/q.npy", "--key", "faults/q.npy",
                                      "--value", "faults/q.npy", "--out", "faults/o.npy", "--lse",
                                      "faults/l.npy", "--threads", threads[t], NULL};
                const int st = run_faulted(vars[v], n, args);
                const bool old = holds("faults/o.npy", OLD) && holds("faults/l.npy", OLD),
                           new = is_npy("faults/o.npy") && is_npy("faults/l.npy");
                const int want = v == 0 ? 2 : 128 + SIGTERM;
                if (st == want) reached++;
                tu_check(&g, st == 0 || st == want, "%s=%d, %s threads: status %d", vars[v], n,
                         threads[t], st);
                tu_check(&g, old || new, "%s=%d, %s threads: o.npy and l.npy split (o %s, l %s)",
                         vars[v], n, threads[t], is_npy("faults/o.npy") ? "new" : "old",
                         is_npy("faults/l.npy") ? "new" : "old");
                tu_check(&g, st != 0 || new, "%s=%d: status 0 without the outputs", vars[v], n);
                tu_check(&g, temporaries("faults") == 0, "%s=%d, %s threads: files left behind",
                         vars[v], n, threads[t]);
            }
            /* two existing outputs: two set aside, two moved in; a failed link
             * falls back to a rename, and a signal held until the commit ends
             * may lose the race with the exit that follows it (status 0, all
             * new): at least the two moves into place must be reached */
            tu_check(&g, reached >= 2, "%s, %s threads: only %d moves reached", vars[v], threads[t],
                     reached);
        }
    tu_group_end(&g);
}
#endif

/* "-" for standard input, from a real pipe; and defect 10: a pipe header
 * declaring ~9e10 elements fails as truncated, without allocating them. */
static void test_stdin(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "standard input and pipes");
    size_t qlen = 0;
    char *q = slurp_file("q.npy", &qlen);
    clirun_result r;
    const char *a[] = {"sdpa", "--query", "-", "--key", "k.npy", "--value", "v.npy", "--out",
                       "from_pipe.npy", NULL};
    clirun_input(ATTN_CLI, a, q, qlen, &r);
    clirun_free(&r);
    const char *b[] = {SDPA_IN, "--out", "from_file.npy", NULL};
    run(&r, b);
    clirun_free(&r);
    size_t l1 = 0, l2 = 0;
    char *o1 = slurp_file("from_pipe.npy", &l1), *o2 = slurp_file("from_file.npy", &l2);
    tu_check(&g, o1 && o2 && l1 == l2 && !memcmp(o1, o2, l1), "query from a pipe gives another output");
    free(o1);
    free(o2);
    free(q);

    const char hdr[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (300000, 300000), }";
    char file[128];
    size_t hlen = strlen(hdr), total = 10 + hlen + 1, pad = (64 - total % 64) % 64;
    memcpy(file, "\x93NUMPY\x01\x00", 8);
    file[8] = (char)(hlen + pad + 1);
    file[9] = 0;
    memcpy(file + 10, hdr, hlen);
    memset(file + 10 + hlen, ' ', pad);
    file[10 + hlen + pad] = '\n';
    clirun_input(ATTN_CLI, a, file, total + pad, &r);
    check_failed(&g, &r, "a huge declared array from a pipe", "truncated");
    tu_check(&g, !strstr(r.err, "memory"), "it tried to allocate the declared size: %s", r.err);
    clirun_free(&r);
    const char *c[] = {"sdpa", "--query", "-", "--key", "-", "--value", "v.npy", "--out",
                       "x.npy", NULL};
    clirun_input(ATTN_CLI, c, "", 0, &r);
    tu_check(&g, r.status == 2, "two inputs from standard input: status %d", r.status);
    clirun_free(&r);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 1, &opt)) return 2;
    tu_scratch_dir("outputs");
    mkdir("out", 0755);
    if (chdir("out") != 0) return 1;
    write_inputs();
    /* MHA parameters and input for mha-backward */
    attn_mha_config cfg = {.embed_dim = 4, .num_heads = 2, .bias = true};
    attn_mha *m = NULL;
    if (attn_mha_create(&cfg, &m, NULL) == ATTN_OK) {
        attn_mha_init(m, 1);
        const char *names[8];
        attn_tensor ts[8];
        int n = attn_mha_num_params(m);
        for (int i = 0; i < n; ++i) attn_mha_param_at(m, i, &names[i], &ts[i], NULL);
        attn_safetensors_write("p.safetensors", names, ts, (size_t)n, NULL);
        float x[12] = {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f, 0.7f, 0.8f, -0.9f, 1.0f, 1.1f, 1.2f};
        attn_tensor tx = attn_tensor_2d(x, 3, 4);
        attn_npy_write("x.npy", &tx, NULL);
        attn_mha_free(m);
    }
    tu_suite s = {0};
    test_checked_up_front(&s);
    test_same_file(&s);
    test_long_path(&s);
    test_kinds_and_modes(&s);
    test_commit_rollback(&s);
    test_signals(&s);
#ifdef ATTN_FAULTSHIM
    test_commit_faults(&s);
#endif
    test_stdin(&s);
    return tu_suite_finish(&s);
}
