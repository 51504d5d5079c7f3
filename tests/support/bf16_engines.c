/* The engines a bf16 test runs (bf16_engines.h). */
#include "bf16_engines.h"

#include <stdio.h>

int bf16_engines_here(bf16_engine_entry *out)
{
    int n = 0;
#if defined(__x86_64__)
    const sdpa_kernels *kern = sdpa_kernels_for(sdpa_isa_best());
    if (sdpa_engine_runs(SDPA_ENGINE_AMX, kern))
        out[n++] = (bf16_engine_entry){"amx", SDPA_ENGINE_AMX, &sdpa_engine_amx};
    else
        printf("AMX: not on this CPU (or the tile state not granted): its kernel runs on the model only\n");
    if (sdpa_engine_runs(SDPA_ENGINE_AVX512BF16, kern))
        out[n++] = (bf16_engine_entry){"avx512bf16", SDPA_ENGINE_AVX512BF16, &sdpa_engine_avx512bf16};
    else
        printf("AVX512_BF16: not on this CPU\n");
#else
    printf("AMX, AVX512_BF16: not on this architecture\n");
#endif
    out[n++] = (bf16_engine_entry){"amx-model", SDPA_ENGINE_AMX_MODEL, &sdpa_engine_amx_model};
    out[n++] = (bf16_engine_entry){"f32", SDPA_ENGINE_F32, NULL};
    return n;
}
