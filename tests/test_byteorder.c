/*
 * Byte order of the file formats on any host: .npy and .safetensors are
 * little-endian on disk. tests/fixtures/byteorder holds files written by
 * NumPy (scripts/gen_byteorder_fixtures.py), never by attn. On every host
 * (x86-64, aarch64, and big-endian s390x under qemu in CI):
 *   - reading a fixture gives the values below;
 *   - writing those values gives the fixture's data bytes exactly (float32,
 *     float16 and bfloat16), so a file written on one host reads the same
 *     on any other.
 */
#include "attn.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURES ATTN_SOURCE_DIR "/tests/fixtures/byteorder/"
enum { N = 8 };
static const float VALUES[N] = {1.0f, -2.5f, 3.1415927f, 1e-3f, -65504.0f, 0x1p-20f, 12345.678f, 0.0f};

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = malloc(1 << 16);
    *len = buf ? fread(buf, 1, 1 << 16, f) : 0;
    fclose(f);
    return buf;
}

/* The last `tail` bytes of two files (the data sections) are equal. */
static bool same_tail(tu_group *g, const char *a, const char *b, size_t tail)
{
    size_t la = 0, lb = 0;
    unsigned char *x = slurp(a, &la), *y = slurp(b, &lb);
    bool ok = x && y && la >= tail && lb >= tail && memcmp(x + la - tail, y + lb - tail, tail) == 0;
    if (!ok && x && y && la >= tail && lb >= tail)
        for (size_t i = 0; i < tail; ++i)
            if (x[la - tail + i] != y[lb - tail + i]) {
                tu_check(g, false, "%s vs %s: data byte %zu is %02x, NumPy wrote %02x", a, b, i,
                         x[la - tail + i], y[lb - tail + i]);
                break;
            }
    free(x);
    free(y);
    return ok;
}

/* The float32 values of an array equal want (to the bit, after rounding to
 * dtype t: the values held as 16-bit round-trip exactly). */
static bool same_values(const attn_array *a, attn_dtype t)
{
    if (attn_tensor_numel(&a->t) != N || a->t.dtype != ATTN_F32) return false;
    uint16_t h[N];
    float want[N];
    attn_tensor src = attn_tensor_1d((float *)VALUES, N), half = attn_tensor_make(h, t, 1, (int64_t[]){N}),
                back = attn_tensor_1d(want, N);
    if (t != ATTN_F32) {
        attn_error err = {0};
        if (attn_tensor_convert(&src, &half, &err) != ATTN_OK ||
            attn_tensor_convert(&half, &back, &err) != ATTN_OK)
            return false;
    } else {
        memcpy(want, VALUES, sizeof want);
    }
    return memcmp(a->t.data, want, sizeof want) == 0;
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 1, &opt)) return 2;
    const char *dir = tu_scratch_dir("byteorder");
    char path[128];
    tu_suite s = {0};
    tu_group g;
    attn_error err = {0};

    tu_group_begin(&g, &s, ".npy written by NumPy, read");
    static const struct {
        const char *file;
        attn_dtype t;
    } npys[] = {{"values_f4.npy", ATTN_F32}, {"values_f2.npy", ATTN_F16}};
    for (int i = 0; i < 2; ++i) {
        attn_array a = {0};
        attn_status st = attn_npy_read(i == 0 ? FIXTURES "values_f4.npy" : FIXTURES "values_f2.npy",
                                       &a, &err);
        tu_check(&g, st == ATTN_OK && same_values(&a, npys[i].t), "%s: %s", npys[i].file,
                 st == ATTN_OK ? "values differ" : err.message);
        attn_array_free(&a);
    }
    tu_group_end(&g);

    tu_group_begin(&g, &s, ".npy written by attn, NumPy's bytes");
    {
        float v[N];
        uint16_t h[N];
        memcpy(v, VALUES, sizeof v);
        const int64_t shape[2] = {2, 4};
        attn_tensor t32 = attn_tensor_make(v, ATTN_F32, 2, shape), t16 = attn_tensor_make(h, ATTN_F16, 2, shape);
        bool ok = attn_tensor_convert(&t32, &t16, &err) == ATTN_OK;
        snprintf(path, sizeof path, "%s/f4.npy", dir);
        ok = ok && attn_npy_write(path, &t32, &err) == ATTN_OK;
        tu_check(&g, ok && same_tail(&g, path, FIXTURES "values_f4.npy", sizeof v), "float32: %s",
                 ok ? "data bytes differ" : err.message);
        snprintf(path, sizeof path, "%s/f2.npy", dir);
        ok = attn_npy_write(path, &t16, &err) == ATTN_OK;
        tu_check(&g, ok && same_tail(&g, path, FIXTURES "values_f2.npy", sizeof h), "float16: %s",
                 ok ? "data bytes differ" : err.message);
    }
    tu_group_end(&g);

    tu_group_begin(&g, &s, ".safetensors: NumPy's file read, attn's data bytes the same");
    {
        attn_safetensors st = {0};
        bool ok = attn_safetensors_read(FIXTURES "values.safetensors", &st, &err) == ATTN_OK;
        static const char *const names[3] = {"a", "b", "c"};
        static const attn_dtype types[3] = {ATTN_F32, ATTN_F16, ATTN_BF16};
        for (int i = 0; ok && i < 3; ++i) {
            const attn_array *a = attn_safetensors_find(&st, names[i]);
            tu_check(&g, a && same_values(a, types[i]), "tensor %s: values differ", names[i]);
        }
        if (!ok) tu_check(&g, false, "read: %s", err.message);
        attn_safetensors_free(&st);

        float v[N];
        uint16_t h[N], b[N];
        memcpy(v, VALUES, sizeof v);
        const int64_t shape[2] = {2, 4};
        attn_tensor ts[3] = {attn_tensor_make(v, ATTN_F32, 2, shape), attn_tensor_make(h, ATTN_F16, 2, shape),
                             attn_tensor_make(b, ATTN_BF16, 2, shape)};
        ok = attn_tensor_convert(&ts[0], &ts[1], &err) == ATTN_OK &&
             attn_tensor_convert(&ts[0], &ts[2], &err) == ATTN_OK;
        snprintf(path, sizeof path, "%s/v.safetensors", dir);
        ok = ok && attn_safetensors_write(path, names, ts, 3, &err) == ATTN_OK;
        tu_check(&g, ok && same_tail(&g, path, FIXTURES "values.safetensors", sizeof v + sizeof h + sizeof b),
                 "write: %s", ok ? "data bytes differ" : err.message);
    }
    tu_group_end(&g);

    return tu_suite_finish(&s);
}
