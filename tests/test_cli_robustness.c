/* The CLI and the readers under hostile conditions, one regression each:
 * integer masks refused on every mask option; a full standard output and a
 * file-size limit reported (exit non-zero, one line, no temporaries); an
 * address-space limit that libgomp would die of; empty list fields; a value
 * overflowing float32 named as an overflow; pipes, /dev/stdin and FIFOs
 * read once by attn info; reads resumed after EINTR; 2^64 - 1 in a <u8
 * file; ATTN_NUM_THREADS=abc; `attn help --help`; a missing input naming
 * the command and the option. */
#include "clirun.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* A .npy of raw elements (attn_npy_write has no integer types). */
static void write_raw_npy(const char *path, const char *descr, const char *shape, const void *data,
                          size_t bytes)
{
    char hdr[128];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, shape);
    while (n < 117) hdr[n++] = ' ';
    hdr[117] = '\n';
    FILE *f = fopen(path, "wb");
    fwrite("\x93NUMPY\x01\x00\x76\x00", 1, 10, f);
    fwrite(hdr, 1, 118, f);
    fwrite(data, 1, bytes, f);
    fclose(f);
}

static int temporaries(void)
{
    DIR *d = opendir(".");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, ".attn-", 6);
    if (d) closedir(d);
    return n;
}

/* Runs attn with stdout to out_path (NULL: /dev/null), stderr captured into
 * err (cap bytes), under the given resource limit (resource < 0: none) and
 * extra environment variable (NULL: none). Returns the exit status (128 +
 * signal when killed). */
static int run_with(const char *out_path, int resource, rlim_t limit, const char *env,
                    char *err, size_t cap, const char *const *args)
{
    const char *argv[40] = {ATTN_CLI};
    int n = 1;
    while (args[n - 1] && n < 39) argv[n] = args[n - 1], n++;
    argv[n] = NULL;
    int ep[2];
    if (pipe(ep) != 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(out_path ? out_path : "/dev/null", O_WRONLY);
        dup2(o, 1);
        dup2(ep[1], 2);
        close(ep[0]);
        if (env) {
            char name[64];
            const size_t eq = strcspn(env, "=");
            snprintf(name, sizeof name, "%.*s", (int)eq, env);
            setenv(name, env + eq + 1, 1);
        }
        alarm(60); /* a hang (a FIFO opened twice) ends as a failure */
        if (resource >= 0) {
            struct rlimit r = {limit, limit};
            if (setrlimit(resource, &r) != 0) _exit(126);
        }
        execv(ATTN_CLI, (char *const *)argv);
        _exit(127);
    }
    close(ep[1]);
    size_t got = 0;
    for (ssize_t k; got + 1 < cap && (k = read(ep[0], err + got, cap - 1 - got)) > 0;)
        got += (size_t)k;
    err[got] = '\0';
    char sink[256];
    while (read(ep[0], sink, sizeof sink) > 0) {
    }
    close(ep[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void fill(float *x, size_t n, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (size_t i = 0; i < n; ++i) x[i] = (float)tu_rng_range(&r, -1, 1);
}

static void test_integer_masks(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "integer masks refused (bool or float only)");
    const uint8_t u[16] = {1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 0, 1, 1};
    const int64_t wide[6] = {1, 0, 1, 1, 1, 0};
    write_raw_npy("m_u8.npy", "|u1", "(4, 4)", u, 16);
    write_raw_npy("m_i8.npy", "|i1", "(4, 4)", u, 16);
    write_raw_npy("kpm_i64.npy", "<i8", "(2, 3)", wide, sizeof wide); /* (B, S) of x.npy */
    write_raw_npy("m_u8_33.npy", "|u1", "(3, 3)", u, 9);               /* (L, S) */
    write_raw_npy("m_bool.npy", "|b1", "(4, 4)", u, 16);
    const char *const sdpa[] = {"sdpa", "--query", "q.npy", "--key", "q.npy", "--value", "q.npy",
                                "--out", "mo.npy", "--attn-mask", NULL, NULL};
    const char *files[2] = {"m_u8.npy", "m_i8.npy"};
    char err[4096], want[128];
    for (int i = 0; i < 2; ++i) {
        const char *args[12];
        memcpy(args, sdpa, sizeof sdpa);
        args[10] = files[i];
        int st = run_with(NULL, -1, 0, NULL, err, sizeof err, args);
        snprintf(want, sizeof want, "attn sdpa: --attn-mask %s: an integer mask", files[i]);
        tu_check(&g, st == 2 && strstr(err, want) && strstr(err, "bool or float") &&
                         clirun_count_lines(err) == 1,
                 "sdpa --attn-mask %s: status %d, stderr: %s", files[i], st, err);
    }
    const char *ok[12];
    memcpy(ok, sdpa, sizeof sdpa);
    ok[10] = "m_bool.npy";
    int st = run_with(NULL, -1, 0, NULL, err, sizeof err, ok);
    tu_check(&g, st == 0, "a bool mask: status %d, %s", st, err);
    const char *const mha[] = {"mha", "--params", "params.safetensors", "--num-heads", "2",
                               "--query", "x.npy", "--out", "y.npy", "--key-padding-mask",
                               "kpm_i64.npy", NULL};
    st = run_with(NULL, -1, 0, NULL, err, sizeof err, mha);
    tu_check(&g, st == 2 && strstr(err, "attn mha: --key-padding-mask kpm_i64.npy: an integer "
                                        "mask (<i8)"),
             "mha --key-padding-mask int64: status %d, stderr: %s", st, err);
    const char *const mha_mask[] = {"mha", "--params", "params.safetensors", "--num-heads", "2",
                                    "--query", "x.npy", "--out", "y.npy", "--attn-mask",
                                    "m_u8_33.npy", NULL};
    st = run_with(NULL, -1, 0, NULL, err, sizeof err, mha_mask);
    tu_check(&g, st == 2 && strstr(err, "--attn-mask m_u8_33.npy: an integer mask"),
             "mha --attn-mask uint8: status %d, stderr: %s", st, err);
    tu_group_end(&g);
}

static void test_full_stdout(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "a full standard output fails the command");
    const char *const cases[][12] = {
        {"info", "q.npy", NULL},
        {"--version", NULL},
        {"example", "all", NULL},
        {"bench", "--seq", "16", "--head-dim", "8", "--heads", "1", "--runs", "1", "--warmup",
         "0", NULL},
        {"--help", NULL},
        {"sdpa", "--query", "q.npy", "--key", "q.npy", "--value", "q.npy", "--out", "-", NULL},
    };
    char err[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        int st = run_with("/dev/full", -1, 0, NULL, err, sizeof err, cases[i]);
        tu_check(&g, st == 2 && strstr(err, "standard output: ") && clirun_count_lines(err) == 1,
                 "attn %s > /dev/full: status %d, stderr: %s", cases[i][0], st, err);
    }
    const char *const json[] = {"bench", "--seq", "16", "--head-dim", "8", "--heads", "1",
                                "--runs", "1", "--warmup", "0", "--json", NULL};
    int st = run_with("/dev/full", -1, 0, NULL, err, sizeof err, json);
    tu_check(&g, st != 0 && strstr(err, "standard output"), "bench --json > /dev/full: %d %s", st,
             err);
    tu_group_end(&g);
}

static void test_limits(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "ulimit -f and ulimit -v: reported, nothing left behind");
    char err[4096];
    /* q = k = v (big.npy): an 8 MiB output past a 1 MiB file limit */
    const char *const big[] = {"sdpa", "--query", "big.npy", "--key", "big.npy", "--value",
                               "big.npy", "--out", "big_o.npy", "--threads", "2", NULL};
    int st = run_with(NULL, RLIMIT_FSIZE, 1 << 20, NULL, err, sizeof err, big);
    tu_check(&g, st == 2 && strstr(err, "--out big_o.npy") && strstr(err, "too large"),
             "SIGXFSZ: status %d, stderr: %s", st, err);
    tu_check(&g, temporaries() == 0 && access("big_o.npy", F_OK) != 0,
             "ulimit -f left a temporary or an output");
    /* bf16 and f16 conversions under a 40 MB address space: libgomp must not
     * end it (sanitizer builds leave this out: their shadow memory needs more) */
    const char *dts[2] = {"bf16", "f16"};
#ifdef TU_SANITIZED
    const int ndts = 0;
#else
    const int ndts = 2;
#endif
    for (int i = 0; i < ndts; ++i) {
        const char *const conv[] = {"sdpa", "--query", "big.npy", "--key", "big.npy", "--value",
                                    "big.npy", "--out", "big_o.npy", "--dtype", dts[i], NULL};
        st = run_with(NULL, RLIMIT_AS, 40000ull * 1024, NULL, err, sizeof err, conv);
        tu_check(&g, (st == 0 || st == 1) && !strstr(err, "libgomp") && temporaries() == 0,
                 "ulimit -v, --dtype %s: status %d, stderr: %s", dts[i], st, err);
        remove("big_o.npy");
    }
    tu_group_end(&g);
}

static void test_messages(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "one clear line for bad arguments and environment");
    struct {
        const char *args[14];
        int status;
        const char *env, *err_has;
    } cases[] = {
        {{"bench", "--seq", "", NULL}, 2, NULL, "--seq: expected integers"},
        {{"bench", "--head-dim", "", NULL}, 2, NULL, "--head-dim: expected integers"},
        {{"bench", "--dim", "", NULL}, 2, NULL, "--dim: expected integers"},
        {{"bench", "--mode", "varlen", "--seq-lens", "", NULL}, 2, NULL, "--seq-lens: expected"},
        {{"bench", "--seq", "5,", NULL}, 2, NULL, "no empty fields"},
        /* one integer rule everywhere: no blank, no '+' */
        {{"bench", "--threads", " 4", NULL}, 2, NULL, "--threads: expected an integer"},
        {{"bench", "--threads", "+4", NULL}, 2, NULL, "--threads: expected an integer"},
        {{"bench", "--seq", " 16", NULL}, 2, NULL, "--seq: expected integers"},
        {{"bench", "--seq", ",5", NULL}, 2, NULL, "no empty fields"},
        {{"bench", "--seq", "5,,6", NULL}, 2, NULL, "no empty fields"},
        {{"bench", "--mode", "decode", "--cache-dtype", "int8,,q4_0", NULL}, 2, NULL, "--cache-dtype: empty field"},
        {{"bench", "--mode", "decode", "--cache-dtype", "q4_0,", NULL}, 2, NULL, "--cache-dtype: empty field"},
        {{"bench", "--mode", "decode", "--cache-dtype", ",int8", NULL}, 2, NULL, "--cache-dtype: empty field"},
        {{"bench", "--mode", "decode", "--cache-dtype", "int8:fast", NULL}, 2, NULL, "after int8, got ':fast'"},
        {{"bench", "--mode", "decode", "--cache-dtype", "f32:", NULL}, 2, NULL, "after f32, got ':'"},
        {{"info", "q.npy", NULL}, 2, "ATTN_NUM_THREADS=abc", "ATTN_NUM_THREADS=abc: expected an integer"},
        {{"info", "q.npy", NULL}, 2, "ATTN_NUM_THREADS= 4", "ATTN_NUM_THREADS= 4: expected an integer"},
        {{"sdpa", "--query", "missing.npy", "--key", "q.npy", "--value", "q.npy", "--out",
          "o.npy", NULL},
         2, NULL, "attn sdpa: --query missing.npy: cannot open"},
        {{"sdpa", "--query", "q.npy", "--key", "q.npy", "--value", "q.npy", "--out", "o.npy",
          "--sinks", "missing.npy", NULL},
         2, NULL, "attn sdpa: --sinks missing.npy: cannot open"},
        {{"explain", "--weights", ATTN_SOURCE_DIR "/examples/numpy_seed42.safetensors", "--x",
          "3e38,2,3;3,3,2", NULL},
         2, NULL, "float32 overflow"},
    };
    char err[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        int st = run_with(NULL, -1, 0, cases[i].env, err, sizeof err, cases[i].args);
        tu_check(&g, st == cases[i].status && strstr(err, cases[i].err_has) &&
                         clirun_count_lines(err) == 1,
                 "attn %s %s%s: status %d, stderr: %s", cases[i].args[0],
                 cases[i].args[1] ? cases[i].args[1] : "", cases[i].env ? " (env)" : "", st, err);
    }
    clirun_result r;
    const char *help[] = {"help", "--help", NULL};
    clirun(ATTN_CLI, help, &r);
    tu_check(&g, r.status == 0 && strstr(r.out, "usage: attn COMMAND"), "attn help --help: %d %s",
             r.status, r.err);
    clirun_free(&r);
    tu_group_end(&g);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

static void test_info_streams(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "attn info on pipes, /dev/stdin and FIFOs");
    const char *files[2] = {"q.npy", "params.safetensors"}, *want[2] = {".npy, 1 array",
                                                                        ".safetensors, "};
    for (int i = 0; i < 2; ++i) {
        size_t len = 0;
        char *data = slurp(files[i], &len);
        const char *paths[2] = {"-", "/dev/stdin"};
        for (int p = 0; p < 2; ++p) {
            clirun_result r;
            const char *args[] = {"info", paths[p], NULL};
            clirun_input(ATTN_CLI, args, data, len, &r);
            tu_check(&g, r.status == 0 && strstr(r.out, want[i]),
                     "%s piped to attn info %s: status %d, out %s err %s", files[i], paths[p],
                     r.status, r.out, r.err);
            clirun_free(&r);
        }
        /* a FIFO: opened once (a second open would wait for a second writer) */
        unlink("fifo");
        mkfifo("fifo", 0600);
        fflush(stdout);
        pid_t writer = fork();
        if (writer == 0) {
            int fd = open("fifo", O_WRONLY);
            ssize_t w = fd >= 0 ? write(fd, data, len) : -1;
            _exit(w == (ssize_t)len ? 0 : 1);
        }
        char err[4096];
        const char *args[] = {"info", "fifo", NULL};
        int st = run_with(NULL, -1, 0, NULL, err, sizeof err, args);
        kill(writer, SIGKILL);
        waitpid(writer, NULL, 0);
        tu_check(&g, st == 0, "attn info FIFO holding %s: status %d, %s", files[i], st, err);
        free(data);
    }
    tu_group_end(&g);
}

/* A slow pipe and a signal handler without SA_RESTART: the reader resumes. */
typedef struct {
    int fd;
    const char *data;
    size_t len;
} slow_feed;

static void *feed_slowly(void *arg)
{
    slow_feed *f = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* the alarms interrupt the reader */
    for (size_t at = 0; at < f->len; at += 64) {
        size_t n = f->len - at < 64 ? f->len - at : 64;
        if (write(f->fd, f->data + at, n) != (ssize_t)n) break;
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    close(f->fd);
    return NULL;
}

static void on_alarm(int sig)
{
    (void)sig;
}

static void test_eintr(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "reads resume after EINTR");
    size_t len = 0;
    char *data = slurp("q.npy", &len);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm; /* no SA_RESTART: reads fail with EINTR */
    sigaction(SIGALRM, &sa, &old);
    struct itimerval every = {{0, 500}, {0, 500}}, off = {{0, 0}, {0, 0}};
    int ok = 0;
    for (int trial = 0; trial < 3; ++trial) {
        int ends[2];
        if (pipe(ends) != 0) break;
        slow_feed f = {ends[1], data, len};
        pthread_t t;
        pthread_create(&t, NULL, feed_slowly, &f);
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", ends[0]);
        setitimer(ITIMER_REAL, &every, NULL);
        attn_array a = {0};
        attn_error e = {0};
        attn_status st = attn_npy_read(path, &a, &e);
        setitimer(ITIMER_REAL, &off, NULL);
        close(ends[0]);
        pthread_join(t, NULL);
        if (tu_check(&g, st == ATTN_OK, "trial %d: %s", trial, e.message)) ok++;
        attn_array_free(&a);
    }
    sigaction(SIGALRM, &old, NULL);
    tu_check(&g, ok == 3, "%d of 3 reads from a slow pipe succeeded", ok);
    free(data);
    tu_group_end(&g);
}

static void test_u64(tu_suite *s)
{
    tu_group g;
    tu_group_begin(&g, s, "<u8 2^64-1 rounds to 2^64 (counted inexact)");
    const uint64_t v[3] = {UINT64_MAX, 5, (1ull << 63) + 1};
    write_raw_npy("u64.npy", "<u8", "(3,)", v, sizeof v);
    attn_array a = {0};
    attn_error e = {0};
    bool ok = attn_npy_read("u64.npy", &a, &e) == ATTN_OK;
    const float *x = ok ? a.t.data : NULL;
    tu_check(&g, ok && x[0] == 18446744073709551616.0f && x[1] == 5.0f &&
                     x[2] == 9223372036854775808.0f && a.inexact == 2,
             "read %s: %g %g %g, inexact %lld", e.message, x ? x[0] : 0.0, x ? x[1] : 0.0,
             x ? x[2] : 0.0, (long long)a.inexact);
    attn_array_free(&a);
    tu_group_end(&g);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 1, &opt)) return 2;
    tu_scratch_dir("robust");
    static float q[2 * 4 * 4], x[2 * 3 * 4];
    fill(q, 32, 1), fill(x, 24, 2);
    attn_tensor qt = attn_tensor_3d(q, 2, 4, 4), xt = attn_tensor_3d(x, 2, 3, 4);
    attn_npy_write("q.npy", &qt, NULL);
    attn_npy_write("x.npy", &xt, NULL);
    attn_mha_config cfg = {.embed_dim = 4, .num_heads = 2, .bias = true};
    attn_mha *m = NULL;
    attn_mha_create(&cfg, &m, NULL);
    attn_mha_init(m, 3);
    const char *names[8];
    attn_tensor ts[8];
    const int np = attn_mha_num_params(m);
    for (int i = 0; i < np && i < 8; ++i) attn_mha_param_at(m, i, &names[i], &ts[i], NULL);
    attn_safetensors_write("params.safetensors", names, ts, (size_t)np, NULL);
    attn_mha_free(m);
    /* big.npy: 8 MiB, past the 1 MiB file limit. The quick mode (qemu, the
     * sanitizers) keeps the bytes with 512 heads of 64 rows instead of 8 of
     * 4096: the same checks with 1/64 of the score arithmetic. */
    const int64_t heads = opt.quick ? 512 : 8, rows = opt.quick ? 64 : 4096;
    if (opt.quick) printf("quick mode: big.npy is (1, 512, 64, 64), not (1, 8, 4096, 64)\n");
    const size_t nbig = (size_t)heads * (size_t)rows * 64;
    float *big = malloc(sizeof(float) * nbig);
    fill(big, nbig, 4);
    attn_tensor bt = attn_tensor_4d(big, 1, heads, rows, 64);
    attn_npy_write("big.npy", &bt, NULL);
    free(big);

    tu_suite s = {0};
    test_integer_masks(&s);
    test_full_stdout(&s);
    test_limits(&s);
    test_messages(&s);
    test_info_streams(&s);
    test_eintr(&s);
    test_u64(&s);
    return tu_suite_finish(&s);
}
