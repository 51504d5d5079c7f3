/* Small CLI promises: `attn help CMD`, `attn info`, options refused up
 * front with one line naming them, help text printed as written, and the
 * exit-status rule (2: something to change in the command; 1: resources). */
#include "clirun.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *name;
    const char *args[16];
    int status;
    const char *out_has, *err_has; /* NULL: not checked */
} polish_case;

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 1, &opt)) return 2;
    tu_scratch_dir("polish");
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    attn_tensor t = attn_tensor_2d(x, 2, 4);
    attn_npy_write("x.npy", &t, NULL);
    FILE *f = fopen("model.pt", "wb");
    if (f) {
        fwrite("PK\x03\x04 not really a zip", 1, 22, f);
        fclose(f);
    }
    static const polish_case cases[] = {
        {"help CMD", {"help", "sdpa", NULL}, 0, "usage: attn sdpa", NULL},
        {"help unknown", {"help", "nope", NULL}, 2, NULL, "unknown command 'nope'"},
        {"sdpa --help prints one %", {"sdpa", "--help", NULL}, 0, "Hq % Hkv", NULL},
        {"info .npy", {"info", "x.npy", NULL}, 0, "(2, 4)", NULL},
        {"info safetensors", {"info", ATTN_SOURCE_DIR "/examples/numpy_seed42.safetensors", NULL},
         0, "W_Q", NULL},
        {"info missing", {"info", "missing.npy", NULL}, 2, NULL, "missing.npy: cannot open"},
        {"--scale 0", {"sdpa", "--query", "x.npy", "--key", "x.npy", "--value", "x.npy",
                       "--out", "o.npy", "--scale", "0", NULL},
         2, NULL, "--scale: must be a positive number, got 0"},
        {"--scale -1", {"sdpa", "--query", "x.npy", "--key", "x.npy", "--value", "x.npy",
                        "--out", "o.npy", "--scale", "-1", NULL},
         2, NULL, "--scale: must be a positive number"},
        {"train --lr 0", {"train", "--lr", "0", NULL}, 2, NULL, "--lr: must be > 0"},
        {"train --min-lr above --lr", {"train", "--lr", "1e-3", "--min-lr", "1e-2", NULL}, 2,
         NULL, "--min-lr 0.01 is above the peak --lr 0.001"},
        {"--params a .npy", {"mha", "--params", "x.npy", "--num-heads", "1", "--query", "x.npy",
                             "--out", "o.npy", NULL},
         2, NULL, "--params x.npy: is a .npy file, not .safetensors"},
        {"bench: a window side of INT64_MAX is unbounded",
         {"bench", "--seq", "16", "--head-dim", "8", "--heads", "1", "--runs", "1", "--warmup", "0",
          "--window", "9223372036854775807,9223372036854775807", NULL},
         0, "visible=1.0000", NULL},
        {"--params a zip", {"mha", "--params", "model.pt", "--num-heads", "1", "--query", "x.npy",
                            "--out", "o.npy", NULL},
         2, NULL, "is a zip archive"},
    };
    tu_suite s = {0};
    tu_group g;
    tu_group_begin(&g, &s, "help, info and up-front checks");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const polish_case *c = &cases[i];
        clirun_result r;
        clirun(ATTN_CLI, c->args, &r);
        tu_check(&g, r.status == c->status, "%s: status %d, want %d (%s)", c->name, r.status,
                 c->status, r.err);
        if (c->out_has)
            tu_check(&g, strstr(r.out, c->out_has) != NULL, "%s: stdout lacks '%s'", c->name,
                     c->out_has);
        if (c->err_has)
            tu_check(&g, strstr(r.err, c->err_has) && clirun_count_lines(r.err) == 1,
                     "%s: want one stderr line with '%s', got: %s", c->name, c->err_has, r.err);
        if (!strcmp(c->name, "sdpa --help prints one %"))
            tu_check(&g, !strstr(r.out, "%%"), "sdpa --help prints '%%%%'");
        clirun_free(&r);
    }
    tu_check(&g, access("o.npy", F_OK) != 0, "a refused command wrote o.npy");
    tu_group_end(&g);
    return tu_suite_finish(&s);
}
