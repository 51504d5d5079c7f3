/* Run-time choice of the kernel table: CPUID, capped by ATTN_ARCH. The CPU's
 * answer is cached once per process: under a hypervisor CPUID traps and costs
 * tens of microseconds, which small conversions and GEMMs paid on every call
 * (test_lowp ran 277 s instead of 10 s on an AVX-512 VM). The cache holds a
 * hardware constant, so concurrent first calls store the same value; getenv
 * stays per call so ATTN_ARCH can change between calls. */
#include "kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(SDPA_HAVE_X86) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>

/* F16C (CPUID.1:ECX bit 29), which both SIMD tables use for float16; every
 * AVX2 and AVX-512 CPU has it. (clang's __builtin_cpu_supports lacks the
 * name.) */
static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}
#endif
#if defined(SDPA_HAVE_NEON) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1 << 1)
#endif
#endif

/* Advanced SIMD is part of the ARMv8-A baseline; Linux still reports it
 * (HWCAP_ASIMD), other systems on AArch64 (macOS) always have it. */
static bool cpu_has_neon(void)
{
#if defined(SDPA_HAVE_NEON) && defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
#elif defined(SDPA_HAVE_NEON)
    return true;
#else
    return false;
#endif
}

static sdpa_isa isa_from_cpuid(void)
{
    if (cpu_has_neon()) return SDPA_ISA_NEON;
#if defined(SDPA_HAVE_X86) && (defined(__GNUC__) || defined(__clang__))
    /* __builtin_cpu_supports also checks that the OS saves the registers (XCR0). */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("fma") && cpu_has_f16c())
        return SDPA_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c())
        return SDPA_ISA_AVX2;
#endif
    return SDPA_ISA_GENERIC;
}

sdpa_isa sdpa_isa_best(void)
{
    static atomic_int cached = -1; /* -1 until the first call */
    int isa = atomic_load_explicit(&cached, memory_order_relaxed);
    if (isa < 0) {
        isa = (int)isa_from_cpuid();
        atomic_store_explicit(&cached, isa, memory_order_relaxed);
    }
    return (sdpa_isa)isa;
}

sdpa_isa sdpa_isa_select(void)
{
    const sdpa_isa best = sdpa_isa_best();
    const char *env = getenv("ATTN_ARCH");
    if (!env || !*env) return best;
    sdpa_isa want;
    if (strcmp(env, "reference") == 0) return SDPA_ISA_REFERENCE;
    else if (strcmp(env, "generic") == 0) want = SDPA_ISA_GENERIC;
    else if (strcmp(env, "avx2") == 0) want = SDPA_ISA_AVX2;
    else if (strcmp(env, "avx512") == 0) want = SDPA_ISA_AVX512;
    else if (strcmp(env, "neon") == 0) want = SDPA_ISA_NEON;
    else return best; /* unknown names are ignored */
    /* Never run an instruction set the CPU lacks: cap at the best one (the
     * x86 tables are ordered; neon runs only where it is the best). */
    if (want == SDPA_ISA_NEON || best == SDPA_ISA_NEON)
        return want == SDPA_ISA_GENERIC ? want : best;
    return want < best ? want : best;
}

const sdpa_kernels *sdpa_kernels_for(sdpa_isa isa)
{
    if (isa == SDPA_ISA_REFERENCE) isa = sdpa_isa_best();
#if defined(SDPA_HAVE_NEON)
    if (isa == SDPA_ISA_NEON && sdpa_isa_best() == SDPA_ISA_NEON) return &sdpa_kernels_neon;
#endif
#if defined(SDPA_HAVE_X86)
    if (isa == SDPA_ISA_AVX512 && sdpa_isa_best() >= SDPA_ISA_AVX512) return &sdpa_kernels_avx512;
    if ((isa == SDPA_ISA_AVX2 || isa == SDPA_ISA_AVX512) && sdpa_isa_best() >= SDPA_ISA_AVX2)
        return &sdpa_kernels_avx2;
#endif
    return &sdpa_kernels_generic;
}

const char *attn_isa(void)
{
    const sdpa_isa isa = sdpa_isa_select();
    return isa == SDPA_ISA_REFERENCE ? "reference" : sdpa_kernels_for(isa)->name;
}
