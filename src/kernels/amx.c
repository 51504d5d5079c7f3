/* The AMX engine on the hardware: amx_body.h on the TILE* instructions.
 * Only ever run when sdpa_amx_available(): CPUID reports AMX-TILE and
 * AMX-BF16 and Linux granted this process the tile data (without that
 * permission the first tile instruction faults). */
#define _DEFAULT_SOURCE /* syscall() */
#include "bf16_engine.h"
#include "tile.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

enum {
    ARCH_REQ_XCOMP_PERM_ = 0x1023, /* asm/prctl.h */
    XFEATURE_XTILEDATA_ = 18,
};

/* CPUID.(7,0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE; then the permission,
 * whose grant also means the OS manages the state (XCR0 bits 17, 18). */
static bool amx_probe(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!(d >> 22 & 1) || !(d >> 24 & 1)) return false;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) == 0;
}

bool sdpa_amx_available(void)
{
    static atomic_int cached = -1; /* asked once per process: the grant is the process's */
    int ok = atomic_load_explicit(&cached, memory_order_relaxed);
    if (ok < 0) {
        ok = amx_probe();
        atomic_store_explicit(&cached, ok, memory_order_relaxed);
    }
    return ok;
}

#define AMX_FN(name) amx_hw_##name
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))
#define TILE_CONFIG(cfg) _tile_loadconfig(cfg)
#define TILE_LOAD(t, p, s) _tile_loadd(t, (p), (s))
#define TILE_STORE(t, p, s) _tile_stored(t, (p), (s))
#define TILE_ZERO(t) _tile_zero(t)
#define TILE_DP(c, a, b) _tile_dpbf16ps(c, a, b)
#define TILE_RELEASE() _tile_release()
#include "amx_body.h"

const sdpa_bf16_engine sdpa_engine_amx = {
    .name = "amx",
    .npad = 16,
    .gemm = amx_hw_gemm,
};

#endif
