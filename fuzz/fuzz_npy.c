/* libFuzzer target: the .npy reader on arbitrary bytes, from an in-memory
 * file and from a pipe. Properties: no crash or leak; both ways give the
 * same status and the same array; an array that reads back is written with
 * attn_npy_write and read again unchanged (round trip). */
#include "attn.h"
#include "fuzz_files.h"

static int read_npy(const uint8_t *data, size_t size, int piped, attn_array *a, attn_error *err)
{
    fuzz_file f;
    if (fuzz_file_open(&f, data, size, piped) != 0) abort();
    int st = attn_npy_read(f.path, a, err);
    fuzz_file_close(&f);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    attn_array mem = {0}, piped = {0};
    attn_error e1 = {0}, e2 = {0};
    int s1 = read_npy(data, size, 0, &mem, &e1);
    int s2 = read_npy(data, size, 1, &piped, &e2);
    /* a pipe cannot tell "declares more than the file holds" before reading,
     * so only success must agree, and then exactly */
    if ((s1 == ATTN_OK) != (s2 == ATTN_OK)) abort();
    if (s1 == ATTN_OK) {
        if (!fuzz_same_array(&mem.t, &piped.t)) abort();
        char path[128];
        snprintf(path, sizeof path, "%s/round.npy", fuzz_scratch());
        attn_error we = {0};
        if (attn_npy_write(path, &mem.t, &we) != ATTN_OK) abort();
        attn_array back = {0};
        if (attn_npy_read(path, &back, &we) != ATTN_OK || !fuzz_same_array(&mem.t, &back.t))
            abort();
        attn_array_free(&back);
    } else if (!e1.message[0] || !e2.message[0]) {
        abort(); /* every failure has a message */
    }
    attn_array_free(&mem);
    attn_array_free(&piped);
    return 0;
}
