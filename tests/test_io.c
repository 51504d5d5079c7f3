/* .npy and .safetensors: round trips, files written by NumPy, and malformed
 * files (each must fail cleanly with the right status and a one-line message
 * that starts with the path), failed writes that must leave nothing behind,
 * and a seeded mutation loop that must never crash (run it under `make asan`).
 *
 * Malformed files are generated here at run time in a temporary directory;
 * tests/data/io/ holds files written by NumPy (scripts/gen_io_fixtures.py)
 * whose values follow formulas recomputed below.
 *
 * ATTN_IO_FUZZ_SEED=<n> replays one mutation seed; ATTN_IO_FUZZ_ITERS=<n>
 * changes the number of mutations per format; ATTN_TEST_VERBOSE=1 prints
 * every expected error message.
 */
#include "attn.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- harness */

static int passed, failed;

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (cond) {                                                                           \
            passed++;                                                                         \
        } else {                                                                              \
            failed++;                                                                         \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                       \
            printf(__VA_ARGS__);                                                              \
            printf("\n");                                                                     \
        }                                                                                     \
    } while (0)

static char tmpdir[512];

/* A path in the temporary directory (a few rotating buffers). */
static const char *tmp(const char *name)
{
    static char bufs[4][640];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", tmpdir, name);
    return b;
}

static const char *fixture(const char *name)
{
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/tests/data/io/%s", ATTN_SOURCE_DIR, name);
    return buf;
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        printf("cannot create %s\n", path);
        exit(2);
    }
    if (n && fwrite(data, 1, n, f) != n) exit(2);
    fclose(f);
}

/* The whole file in a malloc'd buffer (NULL if absent). */
static unsigned char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)size + 1);
    *n = fread(buf, 1, (size_t)size, f);
    fclose(f);
    return buf;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Files other than `keep...` in the temporary directory whose name starts
 * with ".attn-" (the writer's temporaries). */
static int count_temporaries(void)
{
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, ".attn-", 6) == 0) n++;
    if (d) closedir(d);
    return n;
}

/* The error must have the expected status and one line starting with "path: ". */
static void check_error(const char *label, const char *path, attn_status got, attn_status want,
                        const attn_error *err, const char *must_contain)
{
    CHECK(got == want, "%s: status %s, want %s (message: %s)", label, attn_status_string(got),
          attn_status_string(want), err->message);
    CHECK(err->status == got, "%s: err->status %d != returned %d", label, err->status, got);
    size_t n = strlen(path);
    CHECK(strncmp(err->message, path, n) == 0 && err->message[n] == ':',
          "%s: message does not start with the path: %s", label, err->message);
    CHECK(!strchr(err->message, '\n'), "%s: message has a newline: %s", label, err->message);
    if (getenv("ATTN_TEST_VERBOSE")) printf("  %-34s %s\n", label, err->message);
    if (must_contain)
        CHECK(strstr(err->message, must_contain) != NULL, "%s: message lacks \"%s\": %s", label,
              must_contain, err->message);
}

static bool same_float(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* ------------------------------------------------------- file builders */

/* A .npy file: magic, version, header text (padded by the caller or not),
 * then data_len bytes of `fill`. */
static size_t build_npy(unsigned char *buf, int major, const char *header, size_t data_len,
                        unsigned char fill)
{
    size_t hl = strlen(header), n = 0;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    n = 8;
    if (major == 1) {
        buf[n++] = (unsigned char)(hl & 0xff);
        buf[n++] = (unsigned char)(hl >> 8);
    } else {
        for (int k = 0; k < 4; ++k) buf[n++] = (unsigned char)(hl >> (8 * k));
    }
    memcpy(buf + n, header, hl);
    n += hl;
    memset(buf + n, fill, data_len);
    return n + data_len;
}

/* A .safetensors file: 8-byte length, the header JSON as given, data_len bytes. */
static size_t build_st(unsigned char *buf, const char *header, size_t header_len,
                       size_t data_len, unsigned char fill)
{
    for (int k = 0; k < 8; ++k) buf[k] = (unsigned char)((uint64_t)header_len >> (8 * k));
    memcpy(buf + 8, header, header_len);
    memset(buf + 8 + header_len, fill, data_len);
    return 8 + header_len + data_len;
}

/* ------------------------------------------------------------ .npy tests */

static void test_npy_round_trip_f32(void)
{
    float data[6] = {1.5f, -0.0f, INFINITY, NAN, 1e-45f, -3.25e38f};
    attn_tensor t = attn_tensor_2d(data, 2, 3);
    attn_error err = {0};
    const char *path = tmp("rt_f32.npy");
    CHECK(attn_npy_write(path, &t, &err) == ATTN_OK, "write f32: %s", err.message);
    attn_array a;
    attn_status st = attn_npy_read(path, &a, &err);
    CHECK(st == ATTN_OK, "read f32: %s", err.message);
    if (st != ATTN_OK) return;
    CHECK(a.name == NULL, "npy name should be NULL");
    CHECK(a.t.dtype == ATTN_F32 && a.t.ndim == 2 && a.t.shape[0] == 2 && a.t.shape[1] == 3,
          "f32 shape");
    CHECK(a.t.stride[0] == 3 && a.t.stride[1] == 1, "f32 result is C-contiguous");
    const float *got = a.t.data;
    for (int i = 0; i < 6; ++i)
        CHECK(same_float(got[i], data[i]), "f32 element %d: %g vs %g (bits differ)", i, got[i],
              data[i]);
    attn_array_free(&a);
    CHECK(a.t.data == NULL, "attn_array_free clears the array");
    attn_array_free(&a); /* twice is harmless */
    attn_array_free(NULL);

    /* The header is numpy's: version 1.0, dict text, '\n', data 64-byte aligned. */
    size_t n;
    unsigned char *bytes = read_file(path, &n);
    CHECK(bytes && n > 10 && memcmp(bytes, "\x93NUMPY\x01\x00", 8) == 0, "magic and version 1.0");
    if (bytes && n > 10) {
        size_t hl = bytes[8] | (size_t)bytes[9] << 8;
        const char *want = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        CHECK((10 + hl) % 64 == 0, "data offset %zu is 64-byte aligned", 10 + hl);
        CHECK(10 + hl + 24 == n, "file size %zu = header + 24 data bytes", n);
        CHECK(hl >= strlen(want) && memcmp(bytes + 10, want, strlen(want)) == 0,
              "header text is numpy's");
        CHECK(bytes[10 + hl - 1] == '\n', "header ends with a newline");
        bool spaces = true;
        for (size_t i = 10 + strlen(want); i < 10 + hl - 1; ++i) spaces &= bytes[i] == ' ';
        CHECK(spaces, "header padding is spaces");
    }
    free(bytes);
}

static void test_npy_strided_and_shapes(void)
{
    attn_error err = {0};
    attn_array a;
    /* Transposed view of a 3x4 matrix: the file holds the (4,3) transpose. */
    float m[12];
    for (int i = 0; i < 12; ++i) m[i] = (float)i * 1.5f - 4.0f;
    attn_tensor t = attn_tensor_transpose(attn_tensor_2d(m, 3, 4), 0, 1);
    CHECK(attn_npy_write(tmp("transposed.npy"), &t, &err) == ATTN_OK, "write transposed: %s",
          err.message);
    if (attn_npy_read(tmp("transposed.npy"), &a, &err) == ATTN_OK) {
        CHECK(a.t.ndim == 2 && a.t.shape[0] == 4 && a.t.shape[1] == 3, "transposed shape");
        const float *g = a.t.data;
        int bad = 0;
        for (int r = 0; r < 4; ++r)
            for (int c = 0; c < 3; ++c) bad += !same_float(g[r * 3 + c], m[c * 4 + r]);
        CHECK(bad == 0, "transposed values (%d wrong)", bad);
        attn_array_free(&a);
    } else {
        CHECK(false, "read transposed: %s", err.message);
    }

    /* Negative stride (reversed rows) and a broadcast (stride 0) dimension. */
    attn_tensor rev = attn_tensor_2d(m + 8, 3, 4);
    rev.stride[0] = -4;
    attn_tensor bc = attn_tensor_make(m, ATTN_F32, 3, (int64_t[]){2, 3, 4});
    bc.stride[0] = 0;
    CHECK(attn_npy_write(tmp("rev.npy"), &rev, &err) == ATTN_OK, "write reversed: %s",
          err.message);
    CHECK(attn_npy_write(tmp("bc.npy"), &bc, &err) == ATTN_OK, "write broadcast: %s",
          err.message);
    if (attn_npy_read(tmp("rev.npy"), &a, &err) == ATTN_OK) {
        const float *g = a.t.data;
        int bad = 0;
        for (int r = 0; r < 3; ++r)
            for (int c = 0; c < 4; ++c) bad += !same_float(g[r * 4 + c], m[(2 - r) * 4 + c]);
        CHECK(bad == 0, "reversed rows (%d wrong)", bad);
        attn_array_free(&a);
    }
    if (attn_npy_read(tmp("bc.npy"), &a, &err) == ATTN_OK) {
        const float *g = a.t.data;
        int bad = 0;
        for (int i = 0; i < 24; ++i) bad += !same_float(g[i], m[i % 12]);
        CHECK(a.t.ndim == 3 && a.t.shape[0] == 2 && bad == 0, "broadcast (%d wrong)", bad);
        attn_array_free(&a);
    }

    /* 0-d: shape (), one element. */
    float scalar = -7.25f;
    attn_tensor s = attn_tensor_make(&scalar, ATTN_F32, 0, NULL);
    CHECK(attn_npy_write(tmp("scalar.npy"), &s, &err) == ATTN_OK, "write 0-d: %s", err.message);
    if (attn_npy_read(tmp("scalar.npy"), &a, &err) == ATTN_OK) {
        CHECK(a.t.ndim == 0 && attn_tensor_numel(&a.t) == 1 && *(float *)a.t.data == scalar,
              "0-d round trip");
        attn_array_free(&a);
    } else {
        CHECK(false, "read 0-d: %s", err.message);
    }

    /* Empty dimensions (no data; NULL data is fine for an empty view). */
    const int64_t shapes[][3] = {{0, 3, 1}, {2, 0, 4}, {5, 2, 0}};
    for (int k = 0; k < 3; ++k) {
        attn_tensor e = attn_tensor_make(NULL, ATTN_F32, 3, shapes[k]);
        CHECK(attn_npy_write(tmp("empty.npy"), &e, &err) == ATTN_OK, "write empty %d: %s", k,
              err.message);
        if (attn_npy_read(tmp("empty.npy"), &a, &err) == ATTN_OK) {
            CHECK(a.t.ndim == 3 && a.t.shape[0] == shapes[k][0] && a.t.shape[1] == shapes[k][1] &&
                      a.t.shape[2] == shapes[k][2] && attn_tensor_numel(&a.t) == 0,
                  "empty round trip %d", k);
            attn_array_free(&a);
        } else {
            CHECK(false, "read empty %d: %s", k, err.message);
        }
    }

    /* 8 dimensions (the maximum) and a 1-d "(n,)" shape. */
    float d8[16];
    for (int i = 0; i < 16; ++i) d8[i] = (float)i;
    attn_tensor t8 = attn_tensor_make(d8, ATTN_F32, 8, (int64_t[]){1, 2, 1, 2, 1, 2, 1, 2});
    CHECK(attn_npy_write(tmp("d8.npy"), &t8, &err) == ATTN_OK, "write 8-d: %s", err.message);
    if (attn_npy_read(tmp("d8.npy"), &a, &err) == ATTN_OK) {
        CHECK(a.t.ndim == 8 && memcmp(a.t.data, d8, sizeof d8) == 0, "8-d round trip");
        attn_array_free(&a);
    }
    attn_tensor t1 = attn_tensor_1d(d8, 5);
    CHECK(attn_npy_write(tmp("d1.npy"), &t1, &err) == ATTN_OK, "write 1-d: %s", err.message);
    size_t n;
    unsigned char *bytes = read_file(tmp("d1.npy"), &n);
    CHECK(bytes && n > 70 && strstr((char *)bytes + 10, "'shape': (5,), }") != NULL,
          "1-d shape written as (5,)");
    free(bytes);
}

static void test_npy_bool(void)
{
    attn_error err = {0};
    uint8_t mask[6] = {1, 0, 0, 1, 1, 0};
    attn_tensor t = attn_tensor_make(mask, ATTN_BOOL, 2, (int64_t[]){3, 2});
    t = attn_tensor_transpose(t, 0, 1); /* (2,3) view */
    CHECK(attn_npy_write(tmp("mask.npy"), &t, &err) == ATTN_OK, "write bool: %s", err.message);
    attn_array a;
    if (attn_npy_read(tmp("mask.npy"), &a, &err) == ATTN_OK) {
        const uint8_t *g = a.t.data;
        int bad = 0;
        for (int r = 0; r < 2; ++r)
            for (int c = 0; c < 3; ++c) bad += g[r * 3 + c] != mask[c * 2 + r];
        CHECK(a.t.dtype == ATTN_BOOL && a.t.shape[0] == 2 && a.t.shape[1] == 3 && bad == 0,
              "bool round trip (%d wrong)", bad);
        attn_array_free(&a);
    } else {
        CHECK(false, "read bool: %s", err.message);
    }
    size_t n;
    unsigned char *bytes = read_file(tmp("mask.npy"), &n);
    CHECK(bytes && strstr((char *)bytes + 10, "'descr': '|b1'") != NULL, "bool descr is |b1");
    free(bytes);
}

static bool read_fixture(const char *name, attn_array *a, attn_error *err)
{
    attn_status st = attn_npy_read(fixture(name), a, err);
    CHECK(st == ATTN_OK, "%s: %s", name, err->message);
    return st == ATTN_OK;
}

/* Files written by numpy.save / numpy.lib.format.write_array. */
static void test_npy_numpy_fixtures(void)
{
    attn_error err = {0};
    attn_array a;
#define READ_FIXTURE(name) read_fixture(name, &a, &err)
    if (READ_FIXTURE("f4_2x3.npy")) {
        const float *g = a.t.data;
        int bad = 0;
        for (int i = 0; i < 6; ++i) bad += g[i] != (float)i * 0.25f - 0.5f;
        CHECK(a.t.dtype == ATTN_F32 && a.t.ndim == 2 && a.t.shape[0] == 2 && a.t.shape[1] == 3 &&
                  bad == 0,
              "numpy f4_2x3");
        attn_array_free(&a);
    }
    if (READ_FIXTURE("f8_3x2.npy")) {
        const float *g = a.t.data;
        int bad = 0;
        for (int i = 0; i < 6; ++i) bad += !same_float(g[i], (float)((double)i + 0.1));
        CHECK(a.t.dtype == ATTN_F32 && a.t.shape[0] == 3 && a.t.shape[1] == 2 && bad == 0,
              "numpy <f8 converted to float32 (%d wrong)", bad);
        attn_array_free(&a);
    }
    if (READ_FIXTURE("b1_7.npy")) {
        const uint8_t *g = a.t.data;
        int bad = 0;
        for (int i = 0; i < 7; ++i) bad += g[i] != (i % 3 == 0);
        CHECK(a.t.dtype == ATTN_BOOL && a.t.ndim == 1 && a.t.shape[0] == 7 && bad == 0,
              "numpy |b1");
        attn_array_free(&a);
    }
    if (READ_FIXTURE("fortran_f4_2x3x4.npy")) {
        const float *g = a.t.data;
        int bad = 0;
        for (int i = 0; i < 24; ++i) bad += g[i] != (float)i;
        CHECK(a.t.ndim == 3 && a.t.shape[0] == 2 && a.t.shape[1] == 3 && a.t.shape[2] == 4 &&
                  a.t.stride[0] == 12 && bad == 0,
              "numpy Fortran-order <f4 read into C order (%d wrong)", bad);
        attn_array_free(&a);
    }
    if (READ_FIXTURE("fortran_f8_3x5.npy")) {
        const float *g = a.t.data;
        int bad = 0;
        for (int i = 0; i < 15; ++i) bad += !same_float(g[i], (float)((double)i + 0.1));
        CHECK(a.t.shape[0] == 3 && a.t.shape[1] == 5 && bad == 0,
              "numpy Fortran-order <f8 (%d wrong)", bad);
        attn_array_free(&a);
    }
    if (READ_FIXTURE("fortran_b1_2x3.npy")) {
        const uint8_t *g = a.t.data;
        int bad = 0;
        for (int i = 0; i < 6; ++i) bad += g[i] != (i % 2 == 1);
        CHECK(a.t.dtype == ATTN_BOOL && bad == 0, "numpy Fortran-order |b1");
        attn_array_free(&a);
    }
    const char *versions[] = {"v2_f4_4.npy", "v3_f4_4.npy"};
    for (int v = 0; v < 2; ++v)
        if (READ_FIXTURE(versions[v])) {
            const float *g = a.t.data;
            int bad = 0;
            for (int i = 0; i < 4; ++i) bad += g[i] != (float)i - 1.5f;
            CHECK(a.t.ndim == 1 && a.t.shape[0] == 4 && bad == 0, "numpy %s", versions[v]);
            attn_array_free(&a);
        }
    if (READ_FIXTURE("scalar_f4.npy")) {
        CHECK(a.t.ndim == 0 && *(float *)a.t.data == 3.5f, "numpy 0-d");
        attn_array_free(&a);
    }
    if (READ_FIXTURE("empty_f4_0x3.npy")) {
        CHECK(a.t.ndim == 2 && a.t.shape[0] == 0 && a.t.shape[1] == 3, "numpy empty (0,3)");
        attn_array_free(&a);
    }
#undef READ_FIXTURE
}

/* Hand-built variants the fixtures do not cover. */
static void test_npy_handmade_valid(void)
{
    unsigned char buf[4096];
    attn_error err = {0};
    attn_array a;
    struct {
        const char *label;
        int major;
        const char *header;
        size_t data;
        int ndim;
    } cases[] = {
        {"double quotes, no trailing comma, odd spacing", 1,
         "{ \"shape\" : ( 2 , 2 ) , \"fortran_order\":False,\"descr\":\"<f4\"}\n", 16, 2},
        {"version 2.0, unpadded header", 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 12, 1},
        {"version 3.0, 0-d", 3, "{'descr': '<f8', 'fortran_order': True, 'shape': ()}\n", 8, 0},
        {"trailing comma in shape", 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 1,), }", 2, 2},
        {"fortran 1-d is just C order", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
        size_t n = build_npy(buf, cases[k].major, cases[k].header, cases[k].data, 0);
        write_file(tmp("handmade.npy"), buf, n);
        attn_status st = attn_npy_read(tmp("handmade.npy"), &a, &err);
        CHECK(st == ATTN_OK && a.t.ndim == cases[k].ndim, "%s: %s", cases[k].label, err.message);
        attn_array_free(&a);
    }
}

typedef struct {
    const char *label;
    int major;              /* 0: use raw bytes instead */
    const char *header;
    size_t data_len;
    unsigned char fill;
    attn_status want;
    const char *contains;
} npy_bad_case;

static void test_npy_malformed(void)
{
    static const npy_bad_case cases[] = {
        {"unknown dtype", 1, "{'descr': 'zz!', 'fortran_order': False, 'shape': (2,), }", 8, 0,
         ATTN_ERR_FORMAT, "zz!"},
        {"object dtype", 1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", 16, 0,
         ATTN_ERR_UNSUPPORTED, "object"},
        {"object dtype O8", 1, "{'descr': 'O8', 'fortran_order': False, 'shape': (2,), }", 16, 0,
         ATTN_ERR_UNSUPPORTED, "pickled"},
        {"big-endian f4", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, 0,
         ATTN_ERR_UNSUPPORTED, "'>f4'"},
        {"complex64", 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, 0,
         ATTN_ERR_UNSUPPORTED, "'<c8'"},
        {"unicode strings", 1, "{'descr': '<U10', 'fortran_order': False, 'shape': (2,), }", 80, 0,
         ATTN_ERR_UNSUPPORTED, "'<U10'"},
        {"big-endian int64", 1, "{'descr': '>i8', 'fortran_order': False, 'shape': (2,), }", 16,
         0, ATTN_ERR_UNSUPPORTED, "'>i8'"},
        {"structured dtype", 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",
         8, 0, ATTN_ERR_UNSUPPORTED, "structured"},
        {"shape overflow (2**62, 8)", 1,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 8), }", 0, 0,
         ATTN_ERR_OVERFLOW, NULL},
        {"bytes overflow (2**62,) of f8", 1,
         "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,), }", 0, 0,
         ATTN_ERR_OVERFLOW, NULL},
        {"dimension beyond int64", 1,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0, 0,
         ATTN_ERR_OVERFLOW, NULL},
        {"huge shape, short file", 1,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000), }", 8, 0,
         ATTN_ERR_FORMAT, "truncated"},
        {"trailing bytes", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 9, 0,
         ATTN_ERR_FORMAT, "trailing"},
        {"short data", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 23, 0,
         ATTN_ERR_FORMAT, "truncated"},
        {"no data", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 0, 0,
         ATTN_ERR_FORMAT, "truncated"},
        {"missing shape", 1, "{'descr': '<f4', 'fortran_order': False, }", 0, 0, ATTN_ERR_FORMAT,
         "'shape'"},
        {"missing descr", 1, "{'fortran_order': False, 'shape': (2,), }", 8, 0, ATTN_ERR_FORMAT,
         "'descr'"},
        {"missing fortran_order", 1, "{'descr': '<f4', 'shape': (2,), }", 8, 0, ATTN_ERR_FORMAT,
         "'fortran_order'"},
        {"extra key", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8, 0,
         ATTN_ERR_FORMAT, "'x'"},
        {"duplicate key", 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
         8, 0, ATTN_ERR_FORMAT, "duplicate"},
        {"negative dimension", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 0, 0,
         ATTN_ERR_FORMAT, "negative"},
        {"non-integer dimension", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,), }",
         8, 0, ATTN_ERR_FORMAT, NULL},
        {"string dimension", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': ('2',), }", 8,
         0, ATTN_ERR_FORMAT, NULL},
        {"shape is a list", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", 8, 0,
         ATTN_ERR_FORMAT, "tuple"},
        {"shape (2) is not a tuple", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2), }",
         8, 0, ATTN_ERR_FORMAT, "tuple"},
        {"nine dimensions", 1,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4, 0,
         ATTN_ERR_UNSUPPORTED, "8"},
        {"fortran_order not a bool", 1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", 8,
         0, ATTN_ERR_FORMAT, "fortran_order"},
        {"header not a dict", 1, "['<f4', False, (2,)]", 8, 0, ATTN_ERR_FORMAT, NULL},
        {"text after the dict", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x", 8,
         0, ATTN_ERR_FORMAT, "after"},
        {"unterminated dict", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), ", 8, 0,
         ATTN_ERR_FORMAT, NULL},
        {"unterminated string", 1, "{'descr': '<f4", 8, 0, ATTN_ERR_FORMAT, NULL},
        {"escape in string", 1, "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,), }", 8,
         0, ATTN_ERR_FORMAT, "escape"},
        {"bool value 2", 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", 3, 2,
         ATTN_ERR_FORMAT, "0 or 1"},
        {"version 3 invalid UTF-8", 3, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), \xff}",
         8, 0, ATTN_ERR_FORMAT, "UTF-8"},
        {"empty header", 1, "", 0, 0, ATTN_ERR_FORMAT, NULL},
    };
    unsigned char buf[8192];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
        const npy_bad_case *c = &cases[k];
        char name[64];
        snprintf(name, sizeof name, "bad%02zu.npy", k);
        const char *path = tmp(name);
        write_file(path, buf, build_npy(buf, c->major, c->header, c->data_len, c->fill));
        attn_error err = {0};
        attn_array a;
        memset(&a, 0x5a, sizeof a);
        attn_status st = attn_npy_read(path, &a, &err);
        check_error(c->label, path, st, c->want, &err, c->contains);
        CHECK(a.t.data == NULL && a.name == NULL, "%s: out is cleared on failure", c->label);
        if (st == ATTN_OK) attn_array_free(&a);
        CHECK(attn_npy_read(path, &a, NULL) == c->want, "%s: NULL err gives the same status",
              c->label);
    }

    /* Preamble-level damage, built byte by byte. */
    struct {
        const char *label;
        const unsigned char *bytes;
        size_t n;
        attn_status want;
        const char *contains;
    } raw[] = {
        {"empty file", (const unsigned char *)"", 0, ATTN_ERR_FORMAT, "truncated"},
        {"truncated magic", (const unsigned char *)"\x93NUM", 4, ATTN_ERR_FORMAT, "truncated"},
        {"bad magic", (const unsigned char *)"\x93NUMPZ\x01\x00\x00\x00", 10, ATTN_ERR_FORMAT,
         "magic"},
        {"not npy at all", (const unsigned char *)"hello world, this is text", 25, ATTN_ERR_FORMAT,
         "magic"},
        {"version 4.0", (const unsigned char *)"\x93NUMPY\x04\x00\x00\x00", 10,
         ATTN_ERR_UNSUPPORTED, "4.0"},
        {"version 1.1", (const unsigned char *)"\x93NUMPY\x01\x01\x00\x00", 10,
         ATTN_ERR_UNSUPPORTED, "1.1"},
        {"truncated header length", (const unsigned char *)"\x93NUMPY\x02\x00\x10", 9,
         ATTN_ERR_FORMAT, "truncated"},
        {"huge header length", (const unsigned char *)"\x93NUMPY\x02\x00\x00\x28\x6b\xee", 12,
         ATTN_ERR_FORMAT, "exceeds"},
        {"header longer than file", (const unsigned char *)"\x93NUMPY\x01\x00\xe8\x03{'descr'", 18,
         ATTN_ERR_FORMAT, "longer than the file"},
    };
    for (size_t k = 0; k < sizeof raw / sizeof raw[0]; ++k) {
        const char *path = tmp("raw.npy");
        write_file(path, raw[k].bytes, raw[k].n);
        attn_error err = {0};
        attn_array a;
        attn_status st = attn_npy_read(path, &a, &err);
        check_error(raw[k].label, path, st, raw[k].want, &err, raw[k].contains);
        if (st == ATTN_OK) attn_array_free(&a);
    }

    /* Files that cannot be read at all. */
    attn_error err = {0};
    attn_array a;
    const char *missing = tmp("does-not-exist.npy");
    check_error("missing file", missing, attn_npy_read(missing, &a, &err), ATTN_ERR_IO, &err,
                "cannot open");
    check_error("directory", tmpdir, attn_npy_read(tmpdir, &a, &err), ATTN_ERR_IO, &err, NULL);
    CHECK(attn_npy_read(NULL, &a, &err) == ATTN_ERR_NULL, "NULL path");
    CHECK(attn_npy_read(missing, NULL, &err) == ATTN_ERR_NULL, "NULL out");
}

/* Failed writes leave no file, no temporary, and never clobber an old file. */
static void test_npy_failed_writes(void)
{
    attn_error err = {0};
    float v[4] = {1, 2, 3, 4};
    attn_tensor t = attn_tensor_1d(v, 4);

    char nodir[700];
    snprintf(nodir, sizeof nodir, "%s/no-such-dir/x.npy", tmpdir);
    check_error("write into a missing directory", nodir, attn_npy_write(nodir, &t, &err),
                ATTN_ERR_IO, &err, NULL);
    CHECK(!file_exists(nodir), "no file in a missing directory");

    /* An existing good file, then a write that fails half-way (bad bool). */
    const char *path = tmp("keep.npy");
    CHECK(attn_npy_write(path, &t, &err) == ATTN_OK, "write keep.npy: %s", err.message);
    size_t n0, n1;
    unsigned char *before = read_file(path, &n0);
    uint8_t big[40000];
    memset(big, 1, sizeof big);
    big[sizeof big - 1] = 7; /* found only after the first chunks were written */
    attn_tensor bad = attn_tensor_make(big, ATTN_BOOL, 1, (int64_t[]){(int64_t)sizeof big});
    check_error("bool element 7", path, attn_npy_write(path, &bad, &err), ATTN_ERR_ARG, &err,
                "0 or 1");
    unsigned char *after = read_file(path, &n1);
    CHECK(before && after && n0 == n1 && memcmp(before, after, n0) == 0,
          "failed write left the old file intact");
    free(before);
    free(after);
    CHECK(count_temporaries() == 0, "no temporary files left after a failed write");

    const char *fresh = tmp("never.npy");
    attn_npy_write(fresh, &bad, &err);
    CHECK(!file_exists(fresh), "failed write created no file");

    /* Invalid tensors are refused before any file is made. */
    attn_tensor neg = attn_tensor_1d(v, 4);
    neg.shape[0] = -1;
    check_error("negative shape", fresh, attn_npy_write(fresh, &neg, &err), ATTN_ERR_SHAPE, &err,
                NULL);
    attn_tensor nulldata = attn_tensor_1d(NULL, 4);
    check_error("NULL data", fresh, attn_npy_write(fresh, &nulldata, &err), ATTN_ERR_NULL, &err,
                NULL);
    attn_tensor nine = attn_tensor_1d(v, 4);
    nine.ndim = 9;
    check_error("nine dims", fresh, attn_npy_write(fresh, &nine, &err), ATTN_ERR_SHAPE, &err,
                NULL);
    CHECK(attn_npy_write(fresh, NULL, &err) == ATTN_ERR_NULL, "NULL tensor");
    CHECK(attn_npy_write(NULL, &t, &err) == ATTN_ERR_NULL, "NULL path");
    CHECK(!file_exists(fresh), "refused writes created no file");

    /* Destination is a directory: rename fails, temporary removed. */
    char dir[700];
    snprintf(dir, sizeof dir, "%s/adir", tmpdir);
    mkdir(dir, 0700);
    check_error("destination is a directory", dir, attn_npy_write(dir, &t, &err), ATTN_ERR_IO,
                &err, NULL);
    CHECK(count_temporaries() == 0, "no temporary left after a failed rename");
    rmdir(dir);
}

/* ----------------------------------------------------- safetensors tests */

static void test_st_round_trip(void)
{
    attn_error err = {0};
    float w[12];
    for (int i = 0; i < 12; ++i) w[i] = (float)i * 0.75f - 2.0f;
    w[5] = NAN;
    w[6] = -0.0f;
    uint8_t mask[4] = {1, 0, 1, 1};
    float scalar = 42.0f;
    attn_tensor tensors[5] = {
        attn_tensor_transpose(attn_tensor_2d(w, 3, 4), 0, 1), /* strided (4,3) */
        attn_tensor_make(mask, ATTN_BOOL, 2, (int64_t[]){2, 2}),
        attn_tensor_make(&scalar, ATTN_F32, 0, NULL),
        attn_tensor_make(NULL, ATTN_F32, 2, (int64_t[]){0, 5}),
        attn_tensor_1d(w, 12),
    };
    const char *names[5] = {"layer.0.weight", "mask", "scale \"quoted\"\n", "empty", "flat"};
    const char *path = tmp("rt.safetensors");
    CHECK(attn_safetensors_write(path, names, tensors, 5, &err) == ATTN_OK, "write: %s",
          err.message);
    attn_safetensors st;
    if (attn_safetensors_read(path, &st, &err) != ATTN_OK) {
        CHECK(false, "read: %s", err.message);
        return;
    }
    CHECK(st.count == 5, "5 tensors, got %zu", st.count);
    for (size_t i = 0; i < st.count && i < 5; ++i)
        CHECK(strcmp(st.arrays[i].name, names[i]) == 0, "order/name %zu: %s", i,
              st.arrays[i].name);
    const attn_array *a = attn_safetensors_find(&st, "layer.0.weight");
    if (a) {
        const float *g = a->t.data;
        int bad = 0;
        for (int r = 0; r < 4; ++r)
            for (int c = 0; c < 3; ++c) bad += !same_float(g[r * 3 + c], w[c * 4 + r]);
        CHECK(a->t.dtype == ATTN_F32 && a->t.shape[0] == 4 && a->t.shape[1] == 3 && bad == 0,
              "strided F32 (%d wrong)", bad);
    } else {
        CHECK(false, "find layer.0.weight");
    }
    a = attn_safetensors_find(&st, "mask");
    CHECK(a && a->t.dtype == ATTN_BOOL && memcmp(a->t.data, mask, 4) == 0, "BOOL round trip");
    a = attn_safetensors_find(&st, "scale \"quoted\"\n");
    CHECK(a && a->t.ndim == 0 && *(float *)a->t.data == 42.0f, "0-d with an escaped name");
    a = attn_safetensors_find(&st, "empty");
    CHECK(a && a->t.ndim == 2 && a->t.shape[0] == 0 && a->t.shape[1] == 5, "empty tensor");
    a = attn_safetensors_find(&st, "flat");
    CHECK(a && a->t.shape[0] == 12 && memcmp(a->t.data, w, sizeof w) == 0, "flat F32");
    CHECK(attn_safetensors_find(&st, "nope") == NULL, "find absent");
    CHECK(attn_safetensors_find(NULL, "mask") == NULL, "find in NULL");
    attn_safetensors_free(&st);
    CHECK(st.arrays == NULL && st.count == 0, "free clears");
    attn_safetensors_free(&st);

    /* The header length is a multiple of 8 and the padding is spaces. */
    size_t n;
    unsigned char *bytes = read_file(path, &n);
    if (bytes && n >= 8) {
        uint64_t hl = 0;
        for (int k = 7; k >= 0; --k) hl = hl << 8 | bytes[k];
        CHECK(hl % 8 == 0 && hl + 8 <= n, "header length %llu is a multiple of 8",
              (unsigned long long)hl);
        CHECK(bytes[8] == '{', "header starts with '{'");
        size_t end = 8 + hl;
        while (end > 8 && bytes[end - 1] == ' ') end--;
        CHECK(end > 8 && bytes[end - 1] == '}', "header is JSON padded with spaces");
        CHECK(n == 8 + hl + 12 * 4 + 4 + 4 + 0 + 12 * 4, "file size %zu", n);
    }
    free(bytes);

    /* No tensors at all is a valid file. */
    CHECK(attn_safetensors_write(tmp("none.safetensors"), NULL, NULL, 0, &err) == ATTN_OK,
          "write empty: %s", err.message);
    CHECK(attn_safetensors_read(tmp("none.safetensors"), &st, &err) == ATTN_OK && st.count == 0,
          "read empty: %s", err.message);
    attn_safetensors_free(&st);
}

static void test_st_fixture(void)
{
    attn_error err = {0};
    attn_safetensors st;
    if (attn_safetensors_read(fixture("mixed.safetensors"), &st, &err) != ATTN_OK) {
        CHECK(false, "mixed.safetensors: %s", err.message);
        return;
    }
    const char *order[] = {"weight", "double", "half", "bhalf", "mask"};
    CHECK(st.count == 5, "mixed: 5 tensors");
    for (size_t i = 0; i < st.count && i < 5; ++i)
        CHECK(strcmp(st.arrays[i].name, order[i]) == 0, "mixed: data order %zu is %s", i,
              st.arrays[i].name);
    const attn_array *a = attn_safetensors_find(&st, "weight");
    if (a) {
        const float *g = a->t.data;
        int bad = 0;
        for (int i = 0; i < 6; ++i) bad += g[i] != (float)i * 0.5f;
        CHECK(a->t.shape[0] == 2 && a->t.shape[1] == 3 && bad == 0, "mixed F32");
    }
    a = attn_safetensors_find(&st, "double");
    if (a) {
        const float *g = a->t.data;
        CHECK(same_float(g[0], (float)0.1) && g[1] == -2.5f && isinf(g[2]) && g[2] > 0,
              "mixed F64 -> float32 (1e300 -> inf)");
    }
    a = attn_safetensors_find(&st, "half");
    if (a) {
        const float *g = a->t.data;
        CHECK(g[0] == 1.0f && g[1] == -2.0f && g[2] == 65504.0f && g[3] == ldexpf(1, -24) &&
                  g[4] == ldexpf(1, -14) && isinf(g[5]) && g[5] > 0 && g[6] == 0 &&
                  signbit(g[6]) && isnan(g[7]),
              "mixed F16 specials");
    }
    a = attn_safetensors_find(&st, "bhalf");
    if (a) {
        const float *g = a->t.data;
        CHECK(g[0] == 1.0f && g[1] == -3.5f && g[2] == ldexpf(1, -130) && isinf(g[3]) && g[3] < 0,
              "mixed BF16");
    }
    a = attn_safetensors_find(&st, "mask");
    if (a) {
        const uint8_t *g = a->t.data;
        CHECK(a->t.dtype == ATTN_BOOL && g[0] == 1 && g[1] == 0 && g[2] == 0 && g[3] == 1,
              "mixed BOOL");
    }
    attn_safetensors_free(&st);
}

/* Every F16 and BF16 bit pattern against an independent formula. */
static void test_st_half_conversions(void)
{
    enum { N = 65536 };
    char header[256];
    int hl = snprintf(header, sizeof header,
                      "{\"h\":{\"dtype\":\"F16\",\"shape\":[%d],\"data_offsets\":[0,%d]},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[256,256],\"data_offsets\":[%d,%d]}}",
                      N, 2 * N, 2 * N, 4 * N);
    unsigned char *buf = malloc(8 + (size_t)hl + 4 * N);
    build_st(buf, header, (size_t)hl, 0, 0);
    for (int i = 0; i < N; ++i) {
        buf[8 + hl + 2 * i] = (unsigned char)(i & 0xff);
        buf[8 + hl + 2 * i + 1] = (unsigned char)(i >> 8);
        buf[8 + hl + 2 * N + 2 * i] = (unsigned char)(i & 0xff);
        buf[8 + hl + 2 * N + 2 * i + 1] = (unsigned char)(i >> 8);
    }
    const char *path = tmp("halves.safetensors");
    write_file(path, buf, 8 + (size_t)hl + 4 * N);
    free(buf);
    attn_error err = {0};
    attn_safetensors st;
    if (attn_safetensors_read(path, &st, &err) != ATTN_OK) {
        CHECK(false, "halves: %s", err.message);
        return;
    }
    const float *h = attn_safetensors_find(&st, "h")->t.data;
    const float *b = attn_safetensors_find(&st, "b")->t.data;
    int bad_h = 0, bad_b = 0;
    for (int i = 0; i < N; ++i) {
        int sign = i >> 15;
        /* half: 5-bit exponent (bias 15), 10-bit mantissa */
        int e = (i >> 10) & 31, m = i & 1023;
        if (e == 31) {
            bad_h += m ? !(isnan(h[i]) && !!signbit(h[i]) == sign)
                       : !(isinf(h[i]) && !!signbit(h[i]) == sign);
        } else {
            double v = ldexp(e ? 1024 + m : m, (e ? e : 1) - 25);
            bad_h += !((double)h[i] == (sign ? -v : v) && !!signbit(h[i]) == sign);
        }
        /* bfloat16: 8-bit exponent (bias 127), 7-bit mantissa */
        e = (i >> 7) & 255, m = i & 127;
        if (e == 255) {
            bad_b += m ? !(isnan(b[i]) && !!signbit(b[i]) == sign)
                       : !(isinf(b[i]) && !!signbit(b[i]) == sign);
        } else {
            double v = ldexp(e ? 128 + m : m, (e ? e : 1) - 134);
            bad_b += !((double)b[i] == (sign ? -v : v) && !!signbit(b[i]) == sign);
        }
    }
    CHECK(bad_h == 0, "F16: %d of 65536 bit patterns converted wrongly", bad_h);
    CHECK(bad_b == 0, "BF16: %d of 65536 bit patterns converted wrongly", bad_b);
    /* NaN quiet bit survives (0x7e00 is the canonical quiet half NaN). */
    uint32_t bits;
    memcpy(&bits, &h[0x7e00], 4);
    CHECK(bits == 0x7fc00000u, "half quiet NaN -> float quiet NaN (0x%08x)", bits);
    attn_safetensors_free(&st);
}

typedef struct {
    const char *label;
    const char *header; /* JSON text */
    size_t data_len;
    unsigned char fill;
    attn_status want;
    const char *contains;
} st_bad_case;

#define T1(dt, shape, b, e) "{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_st_malformed(void)
{
    static const st_bad_case cases[] = {
        {"JSON not an object", "[1, 2]", 0, 0, ATTN_ERR_FORMAT, "not a JSON object"},
        {"JSON string", "\"a\"", 0, 0, ATTN_ERR_FORMAT, "not a JSON object"},
        {"invalid JSON", "{\"a\": ", 0, 0, ATTN_ERR_FORMAT, "JSON"},
        {"trailing comma", "{\"a\":" T1("F32", "[1]", 0, 4) ",}", 4, 0, ATTN_ERR_FORMAT, "JSON"},
        {"non-UTF-8 JSON", "{\"\xff\":" T1("F32", "[1]", 0, 4) "}", 4, 0, ATTN_ERR_FORMAT, "UTF-8"},
        {"overlong UTF-8", "{\"\xc0\xaf\":" T1("F32", "[1]", 0, 4) "}", 4, 0, ATTN_ERR_FORMAT,
         "UTF-8"},
        {"encoded surrogate", "{\"\xed\xa0\x80\":" T1("F32", "[1]", 0, 4) "}", 4, 0,
         ATTN_ERR_FORMAT, "UTF-8"},
        {"lone surrogate escape", "{\"\\ud800\":" T1("F32", "[1]", 0, 4) "}", 4, 0,
         ATTN_ERR_FORMAT, "surrogate"},
        {"NUL in a name", "{\"a\\u0000b\":" T1("F32", "[1]", 0, 4) "}", 4, 0, ATTN_ERR_UNSUPPORTED,
         "NUL"},
        {"missing dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, ATTN_ERR_FORMAT,
         "'dtype'"},
        {"missing shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, 0,
         ATTN_ERR_FORMAT, "'shape'"},
        {"missing data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, 0,
         ATTN_ERR_FORMAT, "'data_offsets'"},
        {"extra key", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
         0, ATTN_ERR_FORMAT, "'x'"},
        {"duplicate key in entry",
         "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0,
         ATTN_ERR_FORMAT, "duplicate"},
        {"entry not an object", "{\"a\": 5}", 0, 0, ATTN_ERR_FORMAT, "object"},
        {"unknown dtype", "{\"a\":" T1("F33", "[1]", 0, 4) "}", 4, 0, ATTN_ERR_FORMAT, "F33"},
        {"dtype not a string", "{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0,
         ATTN_ERR_FORMAT, "dtype"},
        {"unsupported C64", "{\"a\":" T1("C64", "[1]", 0, 8) "}", 8, 0, ATTN_ERR_UNSUPPORTED, "C64"},
        {"unsupported F8_E4M3", "{\"a\":" T1("F8_E4M3", "[1]", 0, 1) "}", 1, 0, ATTN_ERR_UNSUPPORTED,
         "F8_E4M3"},
        {"overlapping offsets",
         "{\"a\":" T1("F32", "[2]", 0, 8) ",\"b\":" T1("F32", "[2]", 4, 12) "}", 12, 0,
         ATTN_ERR_FORMAT, "overlap"},
        {"gapped offsets", "{\"a\":" T1("F32", "[1]", 0, 4) ",\"b\":" T1("F32", "[1]", 8, 12) "}",
         12, 0, ATTN_ERR_FORMAT, "gap"},
        {"offsets not starting at 0", "{\"a\":" T1("F32", "[1]", 4, 8) "}", 8, 0, ATTN_ERR_FORMAT,
         "start at 0"},
        {"data not fully covered", "{\"a\":" T1("F32", "[1]", 0, 4) "}", 6, 0, ATTN_ERR_FORMAT,
         "trailing"},
        {"data truncated", "{\"a\":" T1("F32", "[2]", 0, 8) "}", 5, 0, ATTN_ERR_FORMAT,
         "truncated"},
        {"shape x size != bytes", "{\"a\":" T1("F32", "[3]", 0, 8) "}", 8, 0, ATTN_ERR_FORMAT,
         "span"},
        {"offsets end before begin", "{\"a\":" T1("F32", "[0]", 8, 4) "}", 0, 0, ATTN_ERR_FORMAT,
         "before"},
        {"three offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4,
         0, ATTN_ERR_FORMAT, "data_offsets"},
        {"one offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4, 0,
         ATTN_ERR_FORMAT, "data_offsets"},
        {"duplicate names", "{\"a\":" T1("F32", "[1]", 0, 4) ",\"a\":" T1("F32", "[1]", 4, 8) "}",
         8, 0, ATTN_ERR_FORMAT, "duplicate"},
        {"duplicate metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, 0, ATTN_ERR_FORMAT,
         "duplicate"},
        {"negative shape entry", "{\"a\":" T1("F32", "[-1]", 0, 4) "}", 4, 0, ATTN_ERR_FORMAT,
         "negative"},
        {"non-integer shape entry", "{\"a\":" T1("F32", "[1.0]", 0, 4) "}", 4, 0, ATTN_ERR_FORMAT,
         "not an integer"},
        {"exponent shape entry", "{\"a\":" T1("F32", "[1e0]", 0, 4) "}", 4, 0, ATTN_ERR_FORMAT,
         "not an integer"},
        {"string shape entry", "{\"a\":" T1("F32", "[\"1\"]", 0, 4) "}", 4, 0, ATTN_ERR_FORMAT,
         "integers"},
        {"shape not an array", "{\"a\":" T1("F32", "4", 0, 4) "}", 4, 0, ATTN_ERR_FORMAT, "array"},
        {"leading zero", "{\"a\":" T1("F32", "[01]", 0, 4) "}", 4, 0, ATTN_ERR_FORMAT, "JSON"},
        {"shape entry beyond int64", "{\"a\":" T1("F32", "[99999999999999999999]", 0, 4) "}", 4,
         0, ATTN_ERR_OVERFLOW, "64 bits"},
        {"shape overflow (2**62, 8)",
         "{\"a\":" T1("F32", "[4611686018427387904,8]", 0, 4) "}", 4, 0, ATTN_ERR_OVERFLOW, NULL},
        {"byte count overflow",
         "{\"a\":" T1("F64", "[4611686018427387904]", 0, 4) "}", 4, 0, ATTN_ERR_OVERFLOW, NULL},
        {"negative offset", "{\"a\":" T1("F32", "[1]", -4, 0) "}", 0, 0, ATTN_ERR_FORMAT,
         "negative"},
        {"nine dimensions", "{\"a\":" T1("F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 4, 0,
         ATTN_ERR_UNSUPPORTED, NULL},
        {"garbage after JSON", "{\"a\":" T1("F32", "[1]", 0, 4) "}  x", 4, 0, ATTN_ERR_FORMAT,
         "after"},
        {"NUL padding", "{\"a\":" T1("F32", "[1]", 0, 4) "}\0\0\0", 4, 0, ATTN_ERR_FORMAT, NULL},
        {"metadata value not a string", "{\"__metadata__\":{\"k\":1}}", 0, 0, ATTN_ERR_FORMAT,
         "string"},
        {"metadata not an object", "{\"__metadata__\":[\"k\"]}", 0, 0, ATTN_ERR_FORMAT, "object"},
        {"bool value 2", "{\"m\":" T1("BOOL", "[3]", 0, 3) "}", 3, 2, ATTN_ERR_FORMAT, "0 or 1"},
        {"raw control char in string", "{\"a\tb\":" T1("F32", "[1]", 0, 4) "}", 4, 0,
         ATTN_ERR_FORMAT, "control"},
        {"bad escape", "{\"a\\qb\":" T1("F32", "[1]", 0, 4) "}", 4, 0, ATTN_ERR_FORMAT, "escape"},
        {"empty header", "", 0, 0, ATTN_ERR_FORMAT, "not a JSON object"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
        const st_bad_case *c = &cases[k];
        size_t hl = strlen(c->header);
        if (strcmp(c->label, "NUL padding") == 0) hl += 3;
        unsigned char *buf = malloc(8 + hl + c->data_len + 1);
        size_t n = build_st(buf, c->header, hl, c->data_len, c->fill);
        char name[64];
        snprintf(name, sizeof name, "bad%02zu.safetensors", k);
        const char *path = tmp(name);
        write_file(path, buf, n);
        free(buf);
        attn_error err = {0};
        attn_safetensors st;
        memset(&st, 0x5a, sizeof st);
        attn_status s = attn_safetensors_read(path, &st, &err);
        check_error(c->label, path, s, c->want, &err, c->contains);
        CHECK(st.arrays == NULL && st.count == 0, "%s: out is cleared on failure", c->label);
        if (s == ATTN_OK) attn_safetensors_free(&st);
    }

    /* Valid edge cases the grammar must accept. */
    const char *good[] = {
        "{\"a\":" T1("F32", "[1]", 0, 4) "}       ",
        " {\"a\" : " T1("F32", "[1]", 0, 4) " }\n",
        "{\"__metadata__\":{\"format\":\"pt\",\"k\":\"\\u00e9\\ud83d\\ude00\"},\"a\":" T1("F32", "[1]", 0, 4) "}",
        "{\"\xc3\xa9\\u00e9\":" T1("F32", "[1]", 0, 4) "}",
        "{\"z\":" T1("F32", "[0]", 4, 4) ",\"a\":" T1("F32", "[1]", 0, 4) ",\"y\":" T1("BOOL", "[0,3]", 4, 4) "}",
    };
    for (size_t k = 0; k < sizeof good / sizeof good[0]; ++k) {
        size_t hl = strlen(good[k]);
        unsigned char buf[512];
        size_t n = build_st(buf, good[k], hl, 4, 0);
        const char *path = tmp("good.safetensors");
        write_file(path, buf, n);
        attn_error err = {0};
        attn_safetensors st;
        attn_status s = attn_safetensors_read(path, &st, &err);
        CHECK(s == ATTN_OK, "valid header %zu rejected: %s", k, err.message);
        if (s == ATTN_OK && k == 3)
            CHECK(st.count == 1 && strcmp(st.arrays[0].name, "\xc3\xa9\xc3\xa9") == 0,
                  "\\u00e9 decodes to UTF-8");
        if (s == ATTN_OK && k == 4)
            CHECK(st.count == 3 && strcmp(st.arrays[0].name, "a") == 0,
                  "empty tensors sort after the tensor ending at their offset");
        attn_safetensors_free(&st);
    }

    /* Preamble damage. */
    struct {
        const char *label;
        const unsigned char *bytes;
        size_t n;
        const char *contains;
    } raw[] = {
        {"empty file", (const unsigned char *)"", 0, "too short"},
        {"truncated length", (const unsigned char *)"\x10\x00\x00", 3, "too short"},
        {"huge header length", (const unsigned char *)"\x00\x00\x00\x00\x00\x01\x00\x00{}", 10,
         "exceeds"},
        {"all-ones header length", (const unsigned char *)"\xff\xff\xff\xff\xff\xff\xff\xff{}", 10,
         "exceeds"},
        {"header longer than file", (const unsigned char *)"\x00\x01\x00\x00\x00\x00\x00\x00{}", 10,
         "longer than"},
    };
    for (size_t k = 0; k < sizeof raw / sizeof raw[0]; ++k) {
        const char *path = tmp("raw.safetensors");
        write_file(path, raw[k].bytes, raw[k].n);
        attn_error err = {0};
        attn_safetensors st;
        attn_status s = attn_safetensors_read(path, &st, &err);
        check_error(raw[k].label, path, s, ATTN_ERR_FORMAT, &err, raw[k].contains);
        if (s == ATTN_OK) attn_safetensors_free(&st);
    }
    attn_error err = {0};
    attn_safetensors st;
    const char *missing = tmp("missing.safetensors");
    check_error("missing file", missing, attn_safetensors_read(missing, &st, &err), ATTN_ERR_IO,
                &err, "cannot open");
    CHECK(attn_safetensors_read(NULL, &st, &err) == ATTN_ERR_NULL, "NULL path");
    CHECK(attn_safetensors_read(missing, NULL, &err) == ATTN_ERR_NULL, "NULL out");
}

static void test_st_failed_writes(void)
{
    attn_error err = {0};
    float v[3] = {1, 2, 3};
    attn_tensor t[2] = {attn_tensor_1d(v, 3), attn_tensor_1d(v, 2)};
    const char *path = tmp("keep.safetensors");
    const char *ok_names[2] = {"a", "b"};
    CHECK(attn_safetensors_write(path, ok_names, t, 2, &err) == ATTN_OK, "write: %s", err.message);
    size_t n0, n1;
    unsigned char *before = read_file(path, &n0);

    const char *dup[2] = {"a", "a"};
    check_error("duplicate names", path, attn_safetensors_write(path, dup, t, 2, &err),
                ATTN_ERR_ARG, &err, "duplicate");
    const char *empty[2] = {"a", ""};
    check_error("empty name", path, attn_safetensors_write(path, empty, t, 2, &err), ATTN_ERR_ARG,
                &err, "empty");
    const char *null_name[2] = {"a", NULL};
    check_error("NULL name", path, attn_safetensors_write(path, null_name, t, 2, &err),
                ATTN_ERR_NULL, &err, NULL);
    const char *reserved[2] = {"a", "__metadata__"};
    check_error("reserved name", path, attn_safetensors_write(path, reserved, t, 2, &err),
                ATTN_ERR_ARG, &err, "reserved");
    const char *bad_utf8[2] = {"a", "\xff"};
    check_error("non-UTF-8 name", path, attn_safetensors_write(path, bad_utf8, t, 2, &err),
                ATTN_ERR_ARG, &err, "UTF-8");
    attn_tensor neg[2] = {t[0], t[1]};
    neg[1].shape[0] = -2;
    check_error("negative shape", path, attn_safetensors_write(path, ok_names, neg, 2, &err),
                ATTN_ERR_SHAPE, &err, "'b'");
    uint8_t bools[3] = {0, 1, 3};
    attn_tensor withbad[2] = {t[0], attn_tensor_make(bools, ATTN_BOOL, 1, (int64_t[]){3})};
    check_error("bool element 3", path, attn_safetensors_write(path, ok_names, withbad, 2, &err),
                ATTN_ERR_ARG, &err, "0 or 1");
    unsigned char *after = read_file(path, &n1);
    CHECK(before && after && n0 == n1 && memcmp(before, after, n0) == 0,
          "failed safetensors writes left the old file intact");
    free(before);
    free(after);
    CHECK(count_temporaries() == 0, "no temporary files after failed safetensors writes");

    char nodir[700];
    snprintf(nodir, sizeof nodir, "%s/no-such-dir/x.safetensors", tmpdir);
    check_error("missing directory", nodir, attn_safetensors_write(nodir, ok_names, t, 2, &err),
                ATTN_ERR_IO, &err, NULL);
    CHECK(!file_exists(nodir), "no file in a missing directory");
    CHECK(attn_safetensors_write(NULL, ok_names, t, 2, &err) == ATTN_ERR_NULL, "NULL path");
    CHECK(attn_safetensors_write(path, NULL, t, 2, &err) == ATTN_ERR_NULL, "NULL names");
}

/* ------------------------------------------------------------- mutations */

static uint64_t rng_state;
static uint64_t next_random(void)
{
    /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Mutates `src` into `dst` (capacity cap); returns the new length. */
static size_t mutate(const unsigned char *src, size_t n, unsigned char *dst, size_t cap,
                     size_t hot_end)
{
    memcpy(dst, src, n);
    int edits = 1 + (int)(next_random() % 4);
    for (int e = 0; e < edits; ++e) {
        uint64_t r = next_random();
        /* Most edits hit the header, where the parsing happens. */
        size_t span = (r & 1) && hot_end < n ? hot_end : n;
        size_t at = span ? (size_t)(next_random() % span) : 0;
        switch ((r >> 1) % 7) {
        case 0: if (n) dst[at] ^= (unsigned char)(1u << (next_random() % 8)); break;
        case 1: if (n) dst[at] = (unsigned char)next_random(); break;
        case 2: n = n ? (size_t)(next_random() % n) : 0; break; /* truncate */
        case 3: /* append junk */
            for (int k = (int)(next_random() % 9); k > 0 && n < cap; --k)
                dst[n++] = (unsigned char)next_random();
            break;
        case 4: { /* interesting bytes */
            static const unsigned char interesting[] = {0, 0xff, '"', '\'', ',', ':', '(', ')', '[',
                                                        ']', '{', '}', '-', '9', '\\', ' ', 0x80};
            if (n) dst[at] = interesting[next_random() % sizeof interesting];
            break;
        }
        case 5: /* delete one byte */
            if (n && at < n) {
                memmove(dst + at, dst + at + 1, n - at - 1);
                n--;
            }
            break;
        default: /* duplicate a byte */
            if (n && n < cap) {
                memmove(dst + at + 1, dst + at, n - at);
                n++;
            }
            break;
        }
    }
    return n;
}

static void test_mutations(void)
{
    uint64_t seed = 0x5eed10f0ull;
    int iters = 3000;
    const char *env = getenv("ATTN_IO_FUZZ_SEED");
    if (env) seed = strtoull(env, NULL, 0);
    env = getenv("ATTN_IO_FUZZ_ITERS");
    if (env) iters = atoi(env);
    printf("mutation seed %llu, %d iterations per format\n", (unsigned long long)seed, iters);
    rng_state = seed;

    /* Sources: one valid small file per format. */
    float v[6] = {1, 2, 3, 4, 5, 6};
    uint8_t m[4] = {1, 0, 1, 0};
    attn_tensor t = attn_tensor_2d(v, 2, 3);
    attn_tensor tm = attn_tensor_make(m, ATTN_BOOL, 2, (int64_t[]){2, 2});
    attn_error err = {0};
    attn_npy_write(tmp("src.npy"), &t, &err);
    const char *names[2] = {"w", "mask"};
    attn_tensor both[2] = {t, tm};
    attn_safetensors_write(tmp("src.safetensors"), names, both, 2, &err);
    size_t nn, ns;
    unsigned char *npy = read_file(tmp("src.npy"), &nn);
    unsigned char *sft = read_file(tmp("src.safetensors"), &ns);
    unsigned char *mixed = NULL;
    size_t nm = 0;
    mixed = read_file(fixture("mixed.safetensors"), &nm);
    if (!npy || !sft || !mixed) {
        CHECK(false, "mutation sources missing");
        free(npy), free(sft), free(mixed);
        return;
    }
    unsigned char buf[1024];
    int accepted[3] = {0}, rejected[3] = {0}, inconsistent = 0;
    for (int i = 0; i < iters; ++i) {
        for (int fmt = 0; fmt < 3; ++fmt) {
            const unsigned char *src = fmt == 0 ? npy : fmt == 1 ? sft : mixed;
            size_t n = fmt == 0 ? nn : fmt == 1 ? ns : nm;
            size_t hot = fmt == 0 ? 128 : n - 40;
            size_t len = mutate(src, n, buf, sizeof buf, hot);
            const char *path = tmp(fmt == 0 ? "mut.npy" : "mut.safetensors");
            write_file(path, buf, len);
            attn_error e = {0};
            if (fmt == 0) {
                attn_array a;
                attn_status s = attn_npy_read(path, &a, &e);
                if (s == ATTN_OK) {
                    accepted[fmt]++;
                    int64_t numel = attn_tensor_numel(&a.t);
                    size_t elsize = a.t.dtype == ATTN_BOOL ? 1 : 4;
                    inconsistent += a.t.ndim < 0 || a.t.ndim > ATTN_MAX_DIMS ||
                                    (size_t)numel * elsize > len;
                    /* touch every byte so ASan sees the buffer is as big as the shape says */
                    volatile unsigned char sink = 0;
                    for (size_t k = 0; k < (size_t)numel * elsize; ++k)
                        sink ^= ((unsigned char *)a.t.data)[k];
                    (void)sink;
                    attn_array_free(&a);
                } else {
                    rejected[fmt]++;
                    inconsistent += strncmp(e.message, path, strlen(path)) != 0 || a.t.data;
                }
            } else {
                attn_safetensors st;
                attn_status s = attn_safetensors_read(path, &st, &e);
                if (s == ATTN_OK) {
                    accepted[fmt]++;
                    for (size_t k = 0; k < st.count; ++k) {
                        int64_t numel = attn_tensor_numel(&st.arrays[k].t);
                        size_t elsize = st.arrays[k].t.dtype == ATTN_BOOL ? 1 : 4;
                        volatile unsigned char sink = 0;
                        for (size_t b = 0; b < (size_t)numel * elsize; ++b)
                            sink ^= ((unsigned char *)st.arrays[k].t.data)[b];
                        (void)sink;
                        inconsistent += st.arrays[k].name == NULL;
                    }
                    attn_safetensors_free(&st);
                } else {
                    rejected[fmt]++;
                    inconsistent += strncmp(e.message, path, strlen(path)) != 0 ||
                                    st.arrays != NULL;
                }
            }
            /* A fresh file each time: ext4 flushes files truncated and rewritten
             * in place on close, which makes this loop 40x slower. */
            unlink(path);
        }
    }
    printf("mutations: npy %d accepted / %d rejected; safetensors %d / %d; mixed %d / %d\n",
           accepted[0], rejected[0], accepted[1], rejected[1], accepted[2], rejected[2]);
    CHECK(inconsistent == 0, "%d mutated files gave inconsistent results", inconsistent);
    CHECK(iters == 0 || (rejected[0] > iters / 2 && rejected[1] > iters / 2),
          "most mutations are rejected (the parsers are strict)");
    free(npy);
    free(sft);
    free(mixed);
}

/* ------------------------------------------------------------------ main */

static void remove_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char path[1024];
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
        if (unlink(path) != 0) rmdir(path);
    }
    if (d) closedir(d);
    rmdir(tmpdir);
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/attn_test_io_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_npy_round_trip_f32();
    test_npy_strided_and_shapes();
    test_npy_bool();
    test_npy_numpy_fixtures();
    test_npy_handmade_valid();
    test_npy_malformed();
    test_npy_failed_writes();
    test_st_round_trip();
    test_st_fixture();
    test_st_half_conversions();
    test_st_malformed();
    test_st_failed_writes();
    test_mutations();
    CHECK(count_temporaries() == 0, "no temporary files at the end");
    remove_tmpdir();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
