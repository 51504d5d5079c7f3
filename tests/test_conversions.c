/* Element conversions of the readers (src/io/convert.c): <f2, integers of
 * every width in .npy and .safetensors, the count of integers float32 had to
 * round, and the CLI's note about it. Expected values are written out here,
 * not computed by the code under test. */
#include "../src/io/byteorder.h"
#include "clirun.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A version 1.0 .npy of `n` elements of `item` bytes. */
static bool write_npy(const char *path, const char *descr, const char *shape, const void *data,
                      size_t bytes)
{
    char header[256];
    int len = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                       descr, shape);
    size_t total = 10 + (size_t)len + 1, pad = (64 - total % 64) % 64;
    memset(header + len, ' ', pad);
    header[len + pad] = '\n';
    size_t hlen = (size_t)len + pad + 1;
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)hlen, 0};
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, hlen, f) == hlen &&
              fwrite(data, 1, bytes, f) == bytes;
    return fclose(f) == 0 && ok;
}

static void expect_values(tu_group *g, const char *what, const attn_array *a, const float *want,
                          int n, int64_t inexact)
{
    bool same = a->t.dtype == ATTN_F32 && attn_tensor_numel(&a->t) == n;
    for (int i = 0; same && i < n; ++i) same = ((const float *)a->t.data)[i] == want[i];
    tu_check(g, same, "%s: values differ", what);
    tu_check(g, a->inexact == inexact, "%s: %lld rounded, want %lld", what, (long long)a->inexact,
             (long long)inexact);
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 1, &opt)) return 2;
    tu_scratch_dir("conv");
    tu_suite s = {0};
    tu_group g;
    tu_group_begin(&g, &s, ".npy integer and half inputs");
    attn_array a;
    attn_error err;
    /* little-endian bytes written by hand */
    const unsigned char i8[4] = {0x80, 0xff, 0x00, 0x7f};
    const float i8_want[4] = {-128, -1, 0, 127};
    const unsigned char u16[4] = {0xff, 0xff, 0x01, 0x00};
    const float u16_want[2] = {65535, 1};
    const unsigned char f2[6] = {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00}; /* 1, -2, 2^-24 */
    const float f2_want[3] = {1.0f, -2.0f, 5.9604644775390625e-08f};
    /* int64: 2^24 + 1 rounds, -2^40 does not, INT64_MIN does not (a power of 2) */
    int64_t i64v[3] = {16777217, -1099511627776LL, INT64_MIN};
    const float i64_want[3] = {16777216.0f, -1099511627776.0f, -9223372036854775808.0f};
    uint32_t u32v[2] = {4294967295u, 16777215u};
    attn_host_to_le((unsigned char *)i64v, sizeof i64v[0], 3); /* the file's order on any host */
    attn_host_to_le((unsigned char *)u32v, sizeof u32v[0], 2);
    const float u32_want[2] = {4294967296.0f, 16777215.0f};
    struct {
        const char *descr, *shape;
        const void *data;
        size_t bytes;
        const float *want;
        int n;
        int64_t inexact;
    } cases[] = {
        {"|i1", "(4,)", i8, 4, i8_want, 4, 0},     {"<u2", "(2,)", u16, 4, u16_want, 2, 0},
        {"<f2", "(3,)", f2, 6, f2_want, 3, 0},     {"<i8", "(3,)", i64v, 24, i64_want, 3, 1},
        {"<u4", "(1, 2)", u32v, 8, u32_want, 2, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        write_npy("c.npy", cases[i].descr, cases[i].shape, cases[i].data, cases[i].bytes);
        attn_status st = attn_npy_read("c.npy", &a, &err);
        tu_check(&g, st == ATTN_OK, "%s: %s", cases[i].descr, err.message);
        if (st == ATTN_OK) {
            expect_values(&g, cases[i].descr, &a, cases[i].want, cases[i].n, cases[i].inexact);
            tu_check(&g, !strcmp(a.file_dtype, cases[i].descr), "%s: file_dtype '%s'",
                     cases[i].descr, a.file_dtype);
        }
        attn_array_free(&a);
    }
    tu_group_end(&g);

    tu_group_begin(&g, &s, ".safetensors integer inputs");
    const char header[] = "{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                          "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]}}";
    int32_t av[2] = {-16777217, 5};
    attn_host_to_le((unsigned char *)av, sizeof av[0], 2);
    const unsigned char bv[3] = {0, 200, 255};
    FILE *f = fopen("c.safetensors", "wb");
    uint64_t hl = sizeof header - 1;
    unsigned char len8[8];
    for (int k = 0; k < 8; ++k) len8[k] = (unsigned char)(hl >> (8 * k));
    if (f) {
        fwrite(len8, 1, 8, f);
        fwrite(header, 1, hl, f);
        fwrite(av, 1, 8, f);
        fwrite(bv, 1, 3, f);
        fclose(f);
    }
    attn_safetensors st = {0};
    tu_check(&g, attn_safetensors_read("c.safetensors", &st, &err) == ATTN_OK, "read: %s",
             err.message);
    const attn_array *ta = attn_safetensors_find(&st, "a"), *tb = attn_safetensors_find(&st, "b");
    const float a_want[2] = {-16777216.0f, 5.0f}, b_want[3] = {0, 200, 255};
    if (ta) expect_values(&g, "I32", ta, a_want, 2, 1);
    if (tb) expect_values(&g, "U8", tb, b_want, 3, 0);
    tu_check(&g, ta && tb && !strcmp(ta->file_dtype, "I32"), "tensors missing or dtype wrong");
    attn_safetensors_free(&st);
    tu_group_end(&g);

    tu_group_begin(&g, &s, "the CLI notes rounded integers");
    write_npy("c.npy", "<i8", "(3,)", i64v, 24);
    clirun_result r;
    const char *args[] = {"info", "c.npy", NULL};
    clirun(ATTN_CLI, args, &r);
    tu_check(&g, r.status == 0 && strstr(r.err, "note: c.npy: 1 <i8 value rounded"),
             "status %d, stderr: %s", r.status, r.err);
    tu_check(&g, strstr(r.out, "<i8") && strstr(r.out, "(3,)"), "info output: %s", r.out);
    clirun_free(&r);
    tu_group_end(&g);
    return tu_suite_finish(&s);
}
