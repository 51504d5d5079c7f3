/* bf16_engines.h — the bf16 engines (src/kernels/bf16_engine.h) a test can
 * run on this machine, best first, ending with the AMX kernel on its tile
 * model and f32 (no engine). Prints the ones that cannot run here ("AMX:
 * not on this CPU ..."). */
#ifndef ATTN_TEST_BF16_ENGINES_H
#define ATTN_TEST_BF16_ENGINES_H

#include "../../src/kernels/bf16_engine.h"

typedef struct {
    const char *name; /* the ATTN_ENGINE value that selects it */
    sdpa_engine_id id;
    const sdpa_bf16_engine *eng; /* NULL: f32 */
} bf16_engine_entry;

enum { BF16_MAX_ENGINES = 4 };

/* Fills out (BF16_MAX_ENGINES entries) and returns how many. */
int bf16_engines_here(bf16_engine_entry *out);

#endif
