/* libFuzzer target: the .safetensors reader on arbitrary bytes, from an
 * in-memory file and from a pipe. Properties as fuzz_npy.c: both ways agree
 * on success and content; a file that reads back is written with
 * attn_safetensors_write and read again with the same tensors. */
#include "attn.h"
#include "fuzz_files.h"

static int read_st(const uint8_t *data, size_t size, int piped, attn_safetensors *st,
                   attn_error *err)
{
    fuzz_file f;
    if (fuzz_file_open(&f, data, size, piped) != 0) abort();
    int s = attn_safetensors_read(f.path, st, err);
    fuzz_file_close(&f);
    return s;
}

static int same_sets(const attn_safetensors *a, const attn_safetensors *b)
{
    if (a->count != b->count) return 0;
    for (size_t i = 0; i < a->count; ++i) {
        const attn_array *x = &a->arrays[i], *y = attn_safetensors_find(b, x->name);
        if (!y || !fuzz_same_array(&x->t, &y->t)) return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    attn_safetensors mem = {0}, piped = {0};
    attn_error e1 = {0}, e2 = {0};
    int s1 = read_st(data, size, 0, &mem, &e1);
    int s2 = read_st(data, size, 1, &piped, &e2);
    if ((s1 == ATTN_OK) != (s2 == ATTN_OK)) abort();
    if (s1 == ATTN_OK) {
        if (!same_sets(&mem, &piped)) abort();
        const char **names = malloc((mem.count + 1) * sizeof *names);
        attn_tensor *ts = malloc((mem.count + 1) * sizeof *ts);
        if (!names || !ts) abort();
        for (size_t i = 0; i < mem.count; ++i) {
            names[i] = mem.arrays[i].name;
            ts[i] = mem.arrays[i].t;
        }
        char path[128];
        snprintf(path, sizeof path, "%s/round.safetensors", fuzz_scratch());
        attn_error we = {0};
        attn_safetensors back = {0};
        if (attn_safetensors_write(path, names, ts, mem.count, &we) != ATTN_OK ||
            attn_safetensors_read(path, &back, &we) != ATTN_OK || !same_sets(&mem, &back))
            abort();
        attn_safetensors_free(&back);
        free(names);
        free(ts);
    } else if (!e1.message[0] || !e2.message[0]) {
        abort();
    }
    attn_safetensors_free(&mem);
    attn_safetensors_free(&piped);
    return 0;
}
