/* Defect 8: libgomp ends the process when it cannot create a thread. Under
 * an address-space limit too small for the threads asked for (64 threads of
 * 8 MiB stacks in 256 MiB), every command must still finish, with results
 * bit-identical to one thread. The limit is set in the child with
 * setrlimit, as `prlimit --as` does. */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define LIMIT_BYTES (256ull << 20)

/* Runs the CLI with argv (NULL-terminated, without the program), under the
 * address-space limit when `limited`; returns the exit status (128 + signal). */
static int run_cli(const char *const *args, bool limited)
{
    const char *argv[64] = {ATTN_CLI};
    int n = 1;
    while (args[n - 1] && n < 63) {
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        if (limited) {
            struct rlimit r = {LIMIT_BYTES, LIMIT_BYTES};
            if (setrlimit(RLIMIT_AS, &r) != 0) _exit(126);
        }
        execv(ATTN_CLI, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static bool same_files(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = false;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void fill(float *x, size_t n, uint64_t seed)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (size_t i = 0; i < n; ++i) x[i] = (float)tu_rng_normal(&r);
}

static void write_inputs(void)
{
    static float q[2 * 4 * 96 * 32], k[2 * 4 * 96 * 32], v[2 * 4 * 96 * 32], x[2 * 48 * 32];
    fill(q, sizeof q / 4, 1);
    fill(k, sizeof k / 4, 2);
    fill(v, sizeof v / 4, 3);
    fill(x, sizeof x / 4, 4);
    attn_tensor tq = attn_tensor_4d(q, 2, 4, 96, 32), tk = attn_tensor_4d(k, 2, 4, 96, 32),
                tv = attn_tensor_4d(v, 2, 4, 96, 32), tx = attn_tensor_3d(x, 2, 48, 32);
    attn_npy_write("q.npy", &tq, NULL);
    attn_npy_write("k.npy", &tk, NULL);
    attn_npy_write("v.npy", &tv, NULL);
    attn_npy_write("x.npy", &tx, NULL);
    attn_mha_config cfg = {.embed_dim = 32, .num_heads = 4, .bias = true};
    attn_mha *m = NULL;
    if (attn_mha_create(&cfg, &m, NULL) != ATTN_OK) return;
    attn_mha_init(m, 7);
    const char *names[8];
    attn_tensor ts[8];
    int n = attn_mha_num_params(m);
    for (int i = 0; i < n; ++i) attn_mha_param_at(m, i, &names[i], &ts[i], NULL);
    attn_safetensors_write("p.safetensors", names, ts, (size_t)n, NULL);
    attn_mha_free(m);
}

typedef struct {
    const char *name;
    const char *args[24]; /* "OUT" is replaced by the output file */
} limit_case;

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 1, &opt)) return 2;
    tu_suite s = {0};
    tu_group g;
    tu_group_begin(&g, &s, "thread creation under RLIMIT_AS");
#ifdef TU_SANITIZED
    /* sanitizers reserve terabytes of shadow memory: no address-space limit */
    tu_group_skip(&g, "sanitizer build: RLIMIT_AS cannot be set");
    tu_group_end(&g);
    return tu_suite_finish(&s) == 0 || s.skipped ? 0 : 1;
#endif
    tu_scratch_dir("threads");
    write_inputs();
    static const limit_case cases[] = {
        {"sdpa", {"sdpa", "--query", "q.npy", "--key", "k.npy", "--value", "v.npy", "--causal",
                  "top-left", "--out", "OUT"}},
        {"sdpa reference", {"sdpa", "--query", "q.npy", "--key", "k.npy", "--value", "v.npy",
                            "--reference", "--out", "OUT"}},
        {"sdpa-backward", {"sdpa-backward", "--query", "q.npy", "--key", "k.npy", "--value",
                           "v.npy", "--grad-out", "q.npy", "--grad-key", "OUT"}},
        {"mha-backward", {"mha-backward", "--params", "p.safetensors", "--num-heads", "4",
                          "--query", "x.npy", "--grad-out", "x.npy", "--grads", "OUT"}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        const char *args[32];
        char out_limited[64], out_serial[64];
        snprintf(out_limited, sizeof out_limited, "limited%zu.out", c);
        snprintf(out_serial, sizeof out_serial, "serial%zu.out", c);
        for (int pass = 0; pass < 2; ++pass) {
            int n = 0;
            for (; cases[c].args[n]; ++n)
                args[n] = strcmp(cases[c].args[n], "OUT") ? cases[c].args[n]
                                                           : pass ? out_serial : out_limited;
            args[n++] = "--threads";
            args[n++] = pass ? "1" : "64";
            args[n] = NULL;
            int status = run_cli(args, pass == 0);
            tu_check(&g, status == 0, "%s with %s: exit status %d", cases[c].name,
                     pass ? "1 thread" : "64 threads in 256 MiB", status);
        }
        tu_check(&g, same_files(out_limited, out_serial),
                 "%s: 64 threads under the limit differ from 1 thread", cases[c].name);
    }
    tu_group_end(&g);
    return tu_suite_finish(&s);
}
