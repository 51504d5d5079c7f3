/*
 * Fused forward: query tiles × key tiles with an online softmax.
 *
 * A task is (batch b, kv head hk, up to FWD_UNITS "units"), a unit being
 * FWD_ROWS query rows of one query head reading hk: consecutive row blocks
 * of a head and/or the heads of a GQA group. For each key tile (FWD_KEYS
 * keys; FWD_DIRECT_KEYS for direct scores, below) the task packs Kᵀ and V
 * once, then for each of its units:
 *   S  = Q·Kᵀ              (rows × keys; Q read in place, any strides)
 *   P  = exp(scale·S + bias - m_new), m and l updated   (online softmax)
 *   O  = alpha∘O + P·V     (alpha rescales rows whose max grew)
 * and finally out = O / l, lse = m + log l. Tiles that causality and the
 * masks hide entirely are skipped before anything is computed or packed;
 * partially visible tiles are cut per row (limit) and masked in registers.
 *
 * Memory: per thread one Kᵀ and one V tile, a score tile, a bias tile and
 * the output accumulators of its rows: O(threads × tile × D), nothing of
 * size Nq × Nk. When a kv head's rows make several tasks, every Kᵀ tile is
 * packed once per call instead of once per task (float32, the size of K;
 * with bfloat16 products Kᵀ's and V's pairs, the size of K and V in
 * bfloat16): the packing then costs O(Nk·D), not O(Nq·Nk·D / rows per
 * task). The first task to reach a tile packs it, between its products: a
 * phase of transposes alone would wait on memory with every thread
 * (shared_keys).
 * Attention weights, when requested, are written by a second sweep over the
 * key tiles of the task from the final LSE (w = exp(scale·s + bias - lse)),
 * which costs one more Q·Kᵀ.
 *
 * Decoding (a few query rows against many keys) changes three things, all
 * chosen from the shapes alone:
 *   - stacked units: the query rows of all heads of a GQA group form one
 *     unit (row g = row g % Nq of head g / Nq, one row stride when Q's heads
 *     are laid out one after another), so a microtile holds several heads'
 *     rows and each K/V tile is read once for the whole group;
 *   - split-KV: the keys are cut into `split` chunks, each task
 *     accumulating (O, max, sum) over one chunk; the partials are merged in
 *     chunk order afterwards (the sink counted in chunk 0 only);
 *   - direct scores (sdpa_scores_direct, a rule of the shape that the
 *     backward follows too): the scores come straight from K's rows, a
 *     few query rows at a time (kernels' scores_rows, no Kᵀ tile), and
 *     P·V reads a 16-bit V in place (gemm16).
 *
 * Every output element is produced by one task (or one merge) in a fixed
 * order, so results do not depend on the thread count or scheduling.
 */
#include "fused_util.h"
#include "profile.h"
#include "../kernels/bf16_engine.h"
#include "../kernels/bf16dot.h"

#include <sched.h>

enum {
    FWD_ROWS = 96,            /* query rows per unit (multiple of every MR) */
    FWD_KEYS = SDPA_KEY_TILE, /* keys per tile (multiple of SDPA_MAX_NPAD) */
    FWD_DIRECT_KEYS = 64,     /* keys per tile of direct scores (decoding): the V rows they
                               * prefetch fit L1 at D = 128, and the scratch zeroed every call
                               * stays small (128 keys and its scratch: a 2-thread float32 step
                               * over 32768 keys took 5% longer) */
    FWD_UNITS = 6,            /* row blocks (of any heads of the group) sharing a K/V tile */
    FWD_BAND = 12,            /* rows whose visible columns are bounded together (× every MR) */
    FWD_DECODE_ROWS = 16,     /* at most this many query rows: a decoding shape */
    FWD_SPLIT_KEYS = 2048,    /* keys per split-KV chunk (a multiple of both tiles) */
    FWD_MAX_SPLIT = 64,
};

_Static_assert(FWD_ROWS % FWD_BAND == 0, "row bands must tile a row block");
_Static_assert(FWD_KEYS % SDPA_MAX_NPAD == 0 && FWD_DIRECT_KEYS % SDPA_MAX_NPAD == 0,
               "key tiles are whole column panels");
_Static_assert(FWD_DIRECT_KEYS <= FWD_KEYS, "the scratch holds FWD_KEYS keys");

typedef struct {
    bool stacked;     /* a unit holds the rows of several heads of a group */
    bool direct;      /* scores straight from K's rows (sdpa_scores_direct), no Kᵀ tile */
    bool dot;         /* bfloat16 products on eng (p->bf16_products, where an engine runs) */
    const sdpa_bf16_engine *eng;
    bool p16;         /* dot: the softmax writes P as bfloat16 itself (softmax_online_p16) */
    bool prepacked;   /* every key tile packed once per call, shared by all tasks */
    bool bands;       /* windowed rows a band at a time over their keys (window_bands) */
    int64_t keys;     /* keys per tile: FWD_KEYS, or FWD_DIRECT_KEYS (direct) */
    int64_t q_rs;     /* Q's row stride within a unit */
    int64_t units;    /* units per kv head */
    int64_t per_task; /* units per task */
    int64_t split;    /* key chunks (1: no split-KV) */
    int64_t bcp, dvp; /* padded tile widths: keys, value features */
} fwd_dims;

/* Split-KV chunks of a decoding shape: one per FWD_SPLIT_KEYS keys. */
static int64_t decode_split(const sdpa_problem *p)
{
    const int64_t chunks = p->Nk / FWD_SPLIT_KEYS;
    return chunks < 1 ? 1 : chunks > FWD_MAX_SPLIT ? FWD_MAX_SPLIT : chunks;
}

static fwd_dims forward_dims(const sdpa_problem *p)
{
    fwd_dims d;
    d.bcp = sdpa_round_up(FWD_KEYS, SDPA_MAX_NPAD); /* the caller's with direct */
    d.dvp = sdpa_round_up(p->Dv, SDPA_MAX_NPAD);
    /* (Whether the weights are wanted changes nothing here: O's bits must
     * not depend on it.) */
    const bool decode = p->Nq <= FWD_DECODE_ROWS;
    /* Stacked rows need one row stride across the group's heads. */
    d.stacked = decode && p->group > 1 && (p->Nq == 1 || p->qs[1] == p->Nq * p->qs[2]);
    d.q_rs = d.stacked && p->Nq == 1 ? p->qs[1] : p->qs[2];
    d.direct = d.dot = d.bands = false; /* set by the caller, which knows the kernels */
    d.eng = NULL;
    d.keys = FWD_KEYS;
    d.units = d.stacked ? (p->group * p->Nq + FWD_ROWS - 1) / FWD_ROWS
                        : (p->Nq + FWD_ROWS - 1) / FWD_ROWS * p->group;
    d.per_task = FWD_UNITS;
    d.split = decode ? decode_split(p) : 1;
    /* Several tasks per kv head would each transpose all its keys: pack
     * them once instead (the caller still rules out direct and dot). Not
     * for a decoding shape's few rows (a group of more than FWD_UNITS heads
     * when the weights are wanted, or too few keys to split): two tasks
     * transposing the keys cost little there, and the workspace sized for
     * such a shape stays free of Kᵀ tiles (sdpa_fused_forward_workspace). */
    d.prepacked = p->Nq > FWD_DECODE_ROWS && d.units > d.per_task;
    return d;
}

/* Keys of split chunk c: [*k0, *k1), tile-aligned. */
static void split_keys(const sdpa_problem *p, const fwd_dims *d, int64_t c, int64_t *k0,
                       int64_t *k1)
{
    const int64_t tiles = (p->Nk + d->keys - 1) / d->keys;
    *k0 = tiles * c / d->split * d->keys;
    *k1 = c + 1 == d->split ? p->Nk : tiles * (c + 1) / d->split * d->keys;
}

/* Per-thread scratch, in the order forward_thread_bytes sizes it. */
typedef struct {
    float *kt, *v, *s, *bias, *o, *rowmax, *rowsum, *alpha;
    const float *ktp; /* Kᵀ of the current tile: kt, or the tile in the pre-packed keys */
    float *kpack; /* the shared key tiles (fwd_dims.prepacked, shared_words each) */
    int64_t ktiles; /* how many */
    atomic_uchar *kstate; /* per shared tile: its sdpa_item_claim state */
    unsigned char *kfinite; /* dot: per shared tile, whether its V pairs are all finite */
    int64_t kend;         /* the task reads no key from here on */
    float *vmax; /* the score rows' lane maxima from gemm_max (FWD_ROWS × SDPA_MAX_VW) */
    float *qb; /* direct: a few Q rows made contiguous (sdpa_direct_scores) */
    float *qf; /* a 16-bit Q (p->q16): the task's unit rows widened, D floats each */
    const void *kr; /* direct: the tile's K rows (dtype krt, ldkr apart), in place or in kt */
    attn_dtype krt;
    int64_t ldkr;
    int32_t *start, *end;
    const float *vop; /* V operand of the current tile: w->v or V in place */
    int64_t ldv;
    const uint16_t *v16; /* direct decoding: a 16-bit V tile read in place (vop NULL until widened) */
    int64_t ldv16;
    int v_finite;     /* of the current V tile: 1, 0, or -1 not yet known */
    /* dot: the task's Q rows as feature pairs (FWD_UNITS·FWD_ROWS rows of
     * ceil(D/2)), a band's probabilities rounded to bfloat16 (FWD_ROWS ×
     * bcp), and whether v holds the tile's V as key pairs (else widened: a
     * tile with non-finite values, whose hidden keys' zero probabilities
     * must skip them, takes the float32 product); kt then holds Kᵀ as
     * feature pairs. */
    uint32_t *qp;
    uint16_t *p16;
    bool v_pairs;
    const uint32_t *vp; /* v_pairs: the tile's V as key pairs (rows ldv apart) */
    bool p16_set; /* p16 already holds the tile's P (softmax_online_p16) */
    const sdpa_bf16_engine *eng;
} fwd_scratch;

/* Feature pairs of a Q row (bfloat16 products). */
static int64_t q_pairs(const sdpa_problem *p)
{
    return (p->D + 1) / 2;
}

/* Query rows of one task's units: the accumulators a thread needs. */
static int64_t task_rows(const fwd_dims *d)
{
    return (d->units < d->per_task ? d->units : d->per_task) * FWD_ROWS;
}

static sdpa_size forward_thread_bytes(const sdpa_problem *p, const fwd_dims *d)
{
    sdpa_size s = {0, true};
    const int64_t rows = task_rows(d);
    sdpa_size_add(&s, p->D, d->bcp, sizeof(float));    /* kt */
    sdpa_size_add(&s, d->keys, d->dvp, sizeof(float)); /* v */
    sdpa_size_add(&s, FWD_ROWS, d->bcp, sizeof(float)); /* s */
    sdpa_size_add(&s, FWD_ROWS, d->bcp, sizeof(float)); /* bias */
    sdpa_size_add(&s, rows, d->dvp, sizeof(float));     /* o */
    sdpa_size_add(&s, rows, 1, sizeof(float));          /* rowmax */
    sdpa_size_add(&s, rows, 1, sizeof(float));          /* rowsum */
    sdpa_size_add(&s, rows, 1, sizeof(float));          /* alpha */
    sdpa_size_add(&s, FWD_ROWS, SDPA_MAX_VW, sizeof(float)); /* vmax */
    sdpa_size_add(&s, FWD_ROWS, 1, sizeof(int32_t));    /* start */
    sdpa_size_add(&s, FWD_ROWS, 1, sizeof(int32_t));    /* end */
    /* qb, sized whether or not this shape decodes: a workspace sized for Nq
     * rows then serves every call with fewer (the ring's sub-calls rely on it) */
    sdpa_size_add(&s, p->D, SDPA_SCORES_ROWS, sizeof(float));
    if (p->qt != ATTN_F32) sdpa_size_add(&s, rows, p->D, sizeof(float)); /* qf */
    if (p->bf16_products) {
        sdpa_size_add(&s, FWD_UNITS * FWD_ROWS, q_pairs(p), sizeof(uint32_t)); /* qp */
        sdpa_size_add(&s, FWD_ROWS, d->bcp, sizeof(uint16_t));                /* p16 */
    }
    return s;
}

static fwd_scratch carve_scratch(const sdpa_problem *p, const fwd_dims *d, char *base)
{
    fwd_scratch w;
    const int64_t rows = task_rows(d);
    w.kt = sdpa_take(&base, p->D * d->bcp, sizeof(float));
    w.v = sdpa_take(&base, d->keys * d->dvp, sizeof(float));
    w.s = sdpa_take(&base, FWD_ROWS * d->bcp, sizeof(float));
    w.bias = sdpa_take(&base, FWD_ROWS * d->bcp, sizeof(float));
    w.o = sdpa_take(&base, rows * d->dvp, sizeof(float));
    w.rowmax = sdpa_take(&base, rows, sizeof(float));
    w.rowsum = sdpa_take(&base, rows, sizeof(float));
    w.alpha = sdpa_take(&base, rows, sizeof(float));
    w.vmax = sdpa_take(&base, FWD_ROWS * SDPA_MAX_VW, sizeof(float));
    w.start = sdpa_take(&base, FWD_ROWS, sizeof(int32_t));
    w.end = sdpa_take(&base, FWD_ROWS, sizeof(int32_t));
    w.qb = sdpa_take(&base, p->D * SDPA_SCORES_ROWS, sizeof(float));
    w.qf = p->qt != ATTN_F32 ? sdpa_take(&base, rows * p->D, sizeof(float)) : NULL;
    w.qp = NULL;
    w.p16 = NULL;
    w.p16_set = false;
    w.eng = d->eng;
    if (p->bf16_products) {
        w.qp = sdpa_take(&base, FWD_UNITS * FWD_ROWS * q_pairs(p), sizeof(uint32_t));
        w.p16 = sdpa_take(&base, FWD_ROWS * d->bcp, sizeof(uint16_t));
    }
    return w;
}

/* Split-KV partials of nq query rows: per chunk and row, the accumulator
 * row (dvp floats), its max and its sum. */
static sdpa_size partial_bytes(const sdpa_problem *p, const fwd_dims *d, int64_t nq)
{
    sdpa_size s = {0, true};
    int64_t rows = 0;
    if (d->split > 1 && !attn_mul_ok(p->B * p->Hq, nq, &rows)) s.ok = false;
    sdpa_size_add(&s, d->split > 1 ? d->split * rows : 0, d->dvp + 2, sizeof(float));
    return s;
}

/* The shared keys: per kv head, every tile's Kᵀ (D × bcp), and its state. */
static int64_t key_tiles(const sdpa_problem *p, const fwd_dims *d)
{
    return (p->Nk + d->keys - 1) / d->keys;
}

/* Keys of the tile from key j0. */
static int64_t tile_keys(const sdpa_problem *p, const fwd_dims *d, int64_t j0)
{
    return p->Nk - j0 < d->keys ? p->Nk - j0 : d->keys;
}

/* 32-bit words of one shared key tile: Kᵀ widened (D × bcp floats), or
 * for bfloat16 products Kᵀ's feature pairs (ceil(D/2) × bcp) and V's key
 * pairs (keys/2 × dvp): room for either, as the engine is chosen after
 * the workspace is sized. */
static int64_t shared_words(const sdpa_problem *p, const fwd_dims *d)
{
    const int64_t f32 = p->D * d->bcp;
    const int64_t dot = q_pairs(p) * d->bcp + d->keys / 2 * d->dvp;
    return p->bf16_products && dot > f32 ? dot : f32;
}

_Static_assert(FWD_KEYS % 2 == 0, "a shared tile's V pairs are whole");

/* Shared tile t's Kᵀ (or Kᵀ's pairs). With bfloat16 products all tiles'
 * Kᵀ pairs come first and then all tiles' V pairs, so that a kv head's V
 * pairs run on from tile to tile: a window's P·V reads a band's keys in
 * one product across tiles. */
static float *tile_kt(const sdpa_problem *p, const fwd_dims *d, const fwd_scratch *w, int64_t t)
{
    return w->kpack + t * (d->dot ? q_pairs(p) * d->bcp : p->D * d->bcp);
}

/* Shared tile t's V pairs (bfloat16 products only), keys/2 rows of dvp. */
static uint32_t *tile_v_pairs(const sdpa_problem *p, const fwd_dims *d, const fwd_scratch *w,
                              int64_t t)
{
    return (uint32_t *)w->kpack + w->ktiles * q_pairs(p) * d->bcp + t * (d->keys / 2 * d->dvp);
}

static sdpa_size prepack_bytes(const sdpa_problem *p, const fwd_dims *d)
{
    sdpa_size s = {0, true};
    int64_t tiles = 0;
    if (d->prepacked && !attn_mul_ok(p->B * p->Hkv, key_tiles(p, d), &tiles)) s.ok = false;
    sdpa_size_add(&s, d->prepacked ? tiles : 0, shared_words(p, d), sizeof(float));
    sdpa_size_add(&s, d->prepacked ? tiles : 0, 1, sizeof(atomic_uchar)); /* kstate */
    sdpa_size_add(&s, d->prepacked ? tiles : 0, 1, 1);                    /* kfinite */
    return s;
}

/* Per-thread scratch for `threads`, then the shared split-KV partials and
 * Kᵀ tiles, the task cursors and the alignment slack. */
static bool workspace_total(const sdpa_problem *p, sdpa_size per, sdpa_size shared,
                            size_t *bytes)
{
    int64_t total;
    if (!per.ok || !shared.ok || !attn_mul_ok((int64_t)per.bytes, p->threads, &total) ||
        !attn_add_ok(total, (int64_t)shared.bytes, &total) ||
        !attn_add_ok(total, p->threads * (int64_t)sizeof(sdpa_cursor), &total) ||
        !attn_add_ok(total, SDPA_WORKSPACE_SLACK, &total))
        return false;
    *bytes = (size_t)total;
    return true;
}

/* Bytes this very call needs. */
static bool workspace_exact(const sdpa_problem *p, size_t *bytes)
{
    const fwd_dims d = forward_dims(p);
    const sdpa_size part = partial_bytes(p, &d, p->Nq), pack = prepack_bytes(p, &d);
    const sdpa_size shared = {part.bytes + pack.bytes,
                              part.ok && pack.ok && part.bytes <= SIZE_MAX - pack.bytes};
    return workspace_total(p, forward_thread_bytes(p, &d), shared, bytes);
}

/* Enough for this call and every call with at most its query rows and keys
 * (slices of q, k and v, of any strides), with or without weights: what a
 * caller sizing once for its largest call needs (the ring does). Such a call
 * holds at most the units of unstacked rows per task (stacking a GQA
 * group's rows of one stride only packs them into fewer units), and either
 * the split-KV partials of a decoding shape (at most FWD_DECODE_ROWS rows
 * and these keys' chunks) or, with more rows, the Kᵀ tiles of these keys. */
bool sdpa_fused_forward_workspace(const sdpa_problem *p, size_t *bytes)
{
    fwd_dims most = forward_dims(p);
    most.units = (p->Nq + FWD_ROWS - 1) / FWD_ROWS * p->group;
    most.split = decode_split(p);
    const sdpa_size part =
        partial_bytes(p, &most, p->Nq < FWD_DECODE_ROWS ? p->Nq : FWD_DECODE_ROWS);
    const sdpa_size pack = prepack_bytes(p, &most); /* forward_dims decided prepacked */
    const sdpa_size shared = !part.ok || !pack.ok ? (sdpa_size){0, false}
                             : part.bytes > pack.bytes ? part : pack;
    return workspace_total(p, forward_thread_bytes(p, &most), shared, bytes);
}

/* Kᵀ (D × bcp) of keys [j0, j0+nj) of kv head (b, hk), widened to float32. */
static void pack_kt(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                    int64_t b, int64_t hk, int64_t j0, int64_t nj, float *kt)
{
    const int64_t ko = AT4(p->ks, b, hk, j0, 0);
    if (p->kt == ATTN_F32)
        kern->pack_transposed((const float *)p->k + ko, p->ks[2], p->ks[3], nj, p->D, kt, d->bcp);
    else
        kern->pack_transposed16(p->kt, (const uint16_t *)p->k + ko, p->ks[2], p->ks[3], nj, p->D,
                                kt, d->bcp);
}

/* Keys [j0, j0+nj) of kv head (b, hk) into kt (and, bfloat16 products,
 * into vp with *finite whether V's values all are): Kᵀ widened, or Kᵀ's
 * feature pairs and V's key pairs. A shared tile and a task's private copy
 * of it (both of all the tile's keys) hold the same bits. */
static void pack_tile(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                      int64_t b, int64_t hk, int64_t j0, int64_t nj, float *kt, uint32_t *vp,
                      unsigned char *finite)
{
    if (!d->dot) {
        pack_kt(p, kern, d, b, hk, j0, nj, kt);
        return;
    }
    const int64_t ko = AT4(p->ks, b, hk, j0, 0), vo = AT4(p->vs, b, hk, j0, 0);
    sdpa_pairs_kt(p->kt, (const char *)p->k + (ptrdiff_t)ko * (ptrdiff_t)attn_dtype_size(p->kt),
                  p->ks[2], p->ks[3], nj, p->D, (uint32_t *)kt, d->bcp);
    *finite = sdpa_pairs_keys(p->vt,
                              (const char *)p->v + (ptrdiff_t)vo * (ptrdiff_t)attn_dtype_size(p->vt),
                              p->vs[2], p->vs[3], nj, p->Dv, vp, d->dvp);
}

/* Index of the shared tile from key j0 of kv head (b, hk). */
static int64_t shared_tile(const sdpa_problem *p, const fwd_dims *d, int64_t b, int64_t hk,
                           int64_t j0)
{
    return (b * p->Hkv + hk) * key_tiles(p, d) + j0 / d->keys;
}

/* K's and V's rows of slice `part` of `parts` of the tile from key j0 of
 * kv head (b, hk) requested into L2 (rows of contiguous features only),
 * unless a task packed or is packing it: its packing then finds them there
 * instead of waiting on memory, which a window's few products per tile do
 * not hide. A slice per unit of the tile before, not the whole tile at
 * once: a burst of a tile's lines fills the miss buffers and stalls the
 * products it was meant to overlap. */
static void prefetch_tile(const sdpa_problem *p, const fwd_dims *d, const fwd_scratch *w,
                          int64_t b, int64_t hk, int64_t j0, int64_t part, int64_t parts)
{
#if defined(__GNUC__) || defined(__clang__) /* a hint: none without the builtin */
    /* (the bands: also past the task's keys, which the kv head's next task,
     * on this thread next, reads first) */
    if (j0 >= (d->bands ? p->Nk : w->kend) || p->ks[3] != 1 || p->vs[3] != 1) return;
    if (atomic_load_explicit(&w->kstate[shared_tile(p, d, b, hk, j0)], memory_order_relaxed) !=
        SDPA_ITEM_FREE)
        return;
    const int64_t keys = tile_keys(p, d, j0), ja = keys * part / parts;
    const int64_t nj = keys * (part + 1) / parts - ja;
    j0 += ja;
    const size_t ke = attn_dtype_size(p->kt), ve = attn_dtype_size(p->vt);
    const char *k = (const char *)p->k + (ptrdiff_t)AT4(p->ks, b, hk, j0, 0) * (ptrdiff_t)ke;
    const char *v = (const char *)p->v + (ptrdiff_t)AT4(p->vs, b, hk, j0, 0) * (ptrdiff_t)ve;
    for (int64_t j = 0; j < nj; ++j) {
        const char *kr = k + (ptrdiff_t)(j * p->ks[2]) * (ptrdiff_t)ke;
        const char *vr = v + (ptrdiff_t)(j * p->vs[2]) * (ptrdiff_t)ve;
        for (int64_t x = 0; x < p->D * (int64_t)ke; x += 64) __builtin_prefetch(kr + x, 0, 2);
        for (int64_t x = 0; (d->dot || d->bands) && x < p->Dv * (int64_t)ve; x += 64)
            __builtin_prefetch(vr + x, 0, 2);
    }
#else
    (void)p, (void)d, (void)w, (void)b, (void)hk, (void)j0, (void)part, (void)parts;
#endif
}

/* Packs the shared Kᵀ of the tile from key j0 of kv head (b, hk) if the
 * caller claims it; the claim. */
static sdpa_claim pack_if_free(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                               int64_t b, int64_t hk, int64_t j0, fwd_scratch *w)
{
    const int64_t t = shared_tile(p, d, b, hk, j0);
    const sdpa_claim claim = sdpa_item_claim(&w->kstate[t]);
    if (claim == SDPA_CLAIM_MINE) {
        pack_tile(p, kern, d, b, hk, j0, tile_keys(p, d, j0), tile_kt(p, d, w, t),
                  d->dot ? tile_v_pairs(p, d, w, t) : NULL, &w->kfinite[t]);
        sdpa_item_done(&w->kstate[t]);
    }
    return claim;
}

/* The shared tile from key j0 of kv head (b, hk), all its keys (tasks
 * that see fewer share it), into w->ktp (and, bfloat16 products, w->vp
 * with *finite): packed by the first task that asks (acquire/release on
 * its state orders the packing before any read). A task that finds it
 * being packed packs the next tile meanwhile (tasks of one head walk the
 * keys in step: they take turns instead of each packing every tile), and
 * if it is still not ready then, its own copy in w->kt and w->v. Every
 * copy holds the same bits. */
static void shared_keys(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                        int64_t b, int64_t hk, int64_t j0, fwd_scratch *w, unsigned char *finite)
{
    const int64_t t = shared_tile(p, d, b, hk, j0);
    float *kt = tile_kt(p, d, w, t);
    sdpa_claim claim = pack_if_free(p, kern, d, b, hk, j0, w);
    if (claim == SDPA_CLAIM_BUSY) {
        if (j0 + d->keys < w->kend) pack_if_free(p, kern, d, b, hk, j0 + d->keys, w);
        claim = pack_if_free(p, kern, d, b, hk, j0, w);
    }
    if (claim != SDPA_CLAIM_BUSY) {
        w->ktp = kt;
        w->vp = d->dot ? tile_v_pairs(p, d, w, t) : NULL;
        *finite = d->dot && w->kfinite[t]; /* written for bfloat16 tiles only */
        return;
    }
    pack_tile(p, kern, d, b, hk, j0, tile_keys(p, d, j0), w->kt, (uint32_t *)w->v, finite);
    w->ktp = w->kt;
    w->vp = (const uint32_t *)w->v;
}

/* Keys of tile [j0, j0+nj) for kv head (b, hk): Kᵀ (D × bcp), or for direct
 * scores K's rows (in place unless their features are strided), and the V
 * operand (nj rows, packed only when V cannot be read in place). bfloat16
 * and float16 K and V are widened here, the one dtype-aware step. */
static void pack_kv(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                    int64_t b, int64_t hk, int64_t j0, int64_t nj, fwd_scratch *w, bool with_v)
{
    const int64_t ko = AT4(p->ks, b, hk, j0, 0), vo = AT4(p->vs, b, hk, j0, 0);
    unsigned char pairs_finite = 0; /* dot: the tile's V pairs are usable */
    if (d->prepacked) {
        shared_keys(p, kern, d, b, hk, j0, w, &pairs_finite);
    } else if (d->dot) { /* Kᵀ's feature pairs (ceil(D/2) × bcp uint32: at most kt's size),
                          * V's key pairs (ceil(nj/2) × dvp uint32: half of v) */
        pack_tile(p, kern, d, b, hk, j0, nj, w->kt, (uint32_t *)w->v, &pairs_finite);
        w->ktp = w->kt;
        w->vp = (const uint32_t *)w->v;
    } else if (d->direct && p->ks[3] == 1) {
        w->kr = (const char *)p->k + (ptrdiff_t)ko * (ptrdiff_t)attn_dtype_size(p->kt);
        w->krt = p->kt;
        w->ldkr = p->ks[2];
    } else if (d->direct) { /* rows of D floats in kt (D·bcp floats: room for nj <= bcp rows) */
        if (p->kt == ATTN_F32) {
            const float *src = (const float *)p->k + ko;
            for (int64_t c = 0; c < nj; ++c)
                for (int64_t l = 0; l < p->D; ++l)
                    w->kt[c * p->D + l] = src[c * p->ks[2] + l * p->ks[3]];
        } else {
            kern->widen(p->kt, (const uint16_t *)p->k + ko, p->ks[2], p->ks[3], nj, p->D, w->kt,
                        p->D);
        }
        w->kr = w->kt;
        w->krt = ATTN_F32;
        w->ldkr = p->D;
    } else {
        pack_kt(p, kern, d, b, hk, j0, nj, w->kt);
        w->ktp = w->kt;
    }
    if (!with_v) return;
    w->v_finite = -1;
    w->v16 = NULL;
    w->v_pairs = false;
    /* V's key pairs, unless a value is not finite */
    if (d->dot && pairs_finite) {
        w->v_pairs = true;
        w->v_finite = 1;
        w->ldv = d->dvp;
        return;
    }
    if (p->vt != ATTN_F32 && d->direct && kern->gemm16 && p->vs[3] == 1 &&
        p->Dv % kern->npad == 0 && p->vs[2] >= p->Dv) {
        /* P·V widens V as it loads it; a ragged tile widens it first (band_pv) */
        w->v16 = (const uint16_t *)p->v + vo;
        w->ldv16 = p->vs[2];
        w->vop = NULL;
        w->ldv = d->dvp;
    } else if (p->vt == ATTN_F32) {
        w->vop = sdpa_rows_operand((const float *)p->v + vo, p->vs[2], p->vs[3], nj, p->Dv,
                                   kern->npad, w->v, d->dvp, &w->ldv);
    } else {
        kern->widen(p->vt, (const uint16_t *)p->v + vo, p->vs[2], p->vs[3], nj, p->Dv, w->v, d->dvp);
        w->vop = w->v;
        w->ldv = d->dvp;
    }
}

/* Row c of the current tile's K rows (direct scores). */
static const void *key_row(const fwd_scratch *w, int64_t c)
{
    return (const char *)w->kr + (ptrdiff_t)(c * w->ldkr) * (ptrdiff_t)attn_dtype_size(w->krt);
}

/* Second sweep: weights of rows [i0, i0+mi) from the final row max m and
 * log-sum ll: exp(x - m - ll). (exp(x - lse) would round lse = m + ll first
 * and lose |lse| ulps.) A NaN lse marks a NaN-poisoned row. */
static void write_weights(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                          int64_t b, int64_t h, int64_t i0, int64_t mi, const float *q,
                          int64_t q_rs, int64_t q_cs, const uint32_t *qp, const float *rowmax,
                          const float *rowll, const float *lse, fwd_scratch *w)
{
    /* A NaN row (lse NaN, though its max may not be: a row whose visible
     * logits are all NaN looks empty) takes a NaN max: NaN on its visible
     * keys, 0 on hidden ones (probs). */
    float m[FWD_ROWS];
    for (int64_t r = 0; r < mi; ++r) m[r] = isnan(lse[r]) ? NAN : rowmax[r];
    rowmax = m;
    const int64_t hk = h / p->group;
    for (int64_t j0 = 0; j0 < p->Nk; j0 += d->keys) {
        const int64_t nj = tile_keys(p, d, j0);
        const sdpa_tile t = sdpa_plan_tile(p, kern, b, h, i0, mi, j0, nj, w->start, w->end,
                                           w->bias, d->bcp);
        if (t.cols > 0) {
            const int64_t c0 = t.c0 - t.c0 % kern->npad, cn = sdpa_round_up(t.cols, kern->npad);
            const sdpa_logits lg = sdpa_tile_logits(p, &t, 0, w->start, w->end, w->bias);
            pack_kv(p, kern, d, b, hk, j0, nj, w, false);
            if (d->direct)
                sdpa_direct_scores(kern, w->krt, key_row(w, c0), w->ldkr,
                                   (t.cols < nj ? t.cols : nj) - c0, cn - c0, p->D, q, q_rs,
                                   q_cs, mi, w->s + c0, d->bcp, NULL, w->qb);
            else if (d->dot) /* the forward's scores: Q's pairs, Kᵀ's pairs */
                d->eng->gemm(mi, cn - c0, q_pairs(p), qp, q_pairs(p),
                             (const uint32_t *)w->ktp + c0, d->bcp, w->s + c0, d->bcp, NULL,
                             SDPA_GEMM_SET);
            else
                kern->gemm(mi, cn - c0, p->D, q, q_rs, q_cs, w->ktp + c0, d->bcp, w->s + c0,
                           d->bcp, NULL, SDPA_GEMM_SET);
            kern->probs(mi, c0, cn, &lg, w->s, d->bcp, rowmax, rowll, NULL);
        }
        for (int64_t r = 0; r < mi; ++r) {
            float *dst = p->w + AT4(p->ws, b, h, i0 + r, j0);
            const bool seen = t.cols > 0 && w->end[r] > w->start[r];
            for (int64_t c = 0; c < nj; ++c)
                dst[c * p->ws[3]] = seen && c >= w->start[r] && c < w->end[r] ? w->s[r * d->bcp + c]
                                                                              : 0.0f;
        }
    }
}

/* Unit u of kv head hk: query head *h, rows [*i0, *i0 + *mi) (past Nq when
 * stacked: row g is row g % Nq of head *h + g / Nq). Unstacked units run
 * block-major, so a GQA group's heads of one row block are neighbours. */
static void unit_rows(const sdpa_problem *p, const fwd_dims *d, int64_t hk, int64_t u,
                      int64_t *h, int64_t *i0, int64_t *mi)
{
    if (d->stacked) {
        const int64_t rows = p->group * p->Nq;
        *h = hk * p->group;
        *i0 = u * FWD_ROWS;
        *mi = rows - *i0 < FWD_ROWS ? rows - *i0 : FWD_ROWS;
        return;
    }
    *h = hk * p->group + u % p->group;
    *i0 = u / p->group * FWD_ROWS;
    *mi = p->Nq - *i0 < FWD_ROWS ? p->Nq - *i0 : FWD_ROWS;
}

/* Q row i0 of unit e (head h) and Q's row and feature strides: Q in
 * place, or a 16-bit Q's rows as forward_task widened them into w->qf. */
static const float *unit_q(const sdpa_problem *p, const fwd_dims *d, const fwd_scratch *w,
                           int64_t e, int64_t b, int64_t h, int64_t i0, int64_t *rs, int64_t *cs)
{
    if (!p->q) {
        *rs = p->D;
        *cs = 1;
        return w->qf + e * FWD_ROWS * p->D;
    }
    *rs = d->q_rs;
    *cs = p->qs[3];
    return p->q + b * p->qs[0] + h * p->qs[1] + i0 * d->q_rs;
}

/* Dropout of a unit's tile rows, one call per head they belong to. */
static void unit_dropout(const sdpa_problem *p, const sdpa_kernels *kern, int64_t b, int64_t h,
                         int64_t i0, int64_t mi, int64_t j0, int64_t c0, int64_t cn, float *s,
                         int64_t lds)
{
    for (int64_t r = 0; r < mi;) {
        const int64_t g = i0 + r, run = p->Nq - g % p->Nq < mi - r ? p->Nq - g % p->Nq : mi - r;
        sdpa_dropout_tile(p, kern, b, h + g / p->Nq, g % p->Nq, run, j0, c0, cn, s + r * lds,
                          lds, NULL);
        r += run;
    }
}

/* The P·V product of one band (rows r0.. of the unit): the kernels' GEMM,
 * or, when a zero probability would meet a non-finite value of a key the
 * row does not see, the GEMM that skips zero probabilities (hidden keys
 * never influence) and then the zero terms of visible keys. mode: SET on a
 * unit's first tile (O need not be zeroed first), then SCALE_ADD
 * (O = alpha∘O + P·V). */
static void band_pv(const sdpa_kernels *kern, const sdpa_problem *p, const sdpa_tile *t,
                    fwd_scratch *w, int64_t r0, int64_t rows, int64_t n, int64_t c0, int64_t c1,
                    const float *pb, int64_t ldp, float *o, int64_t ldo, const float *alpha,
                    int64_t nj, sdpa_gemm_mode mode)
{
    if (w->v_pairs) { /* P rounded to bfloat16, a zero past an odd end to fill the last pair
                       * (the softmax's: the band's rows see no column from c1 on) */
        const int64_t kp = (c1 - c0 + 1) / 2;
        /* the softmax's rows of P (pb's rows of s), or the band's own */
        const uint16_t *p16 = w->p16_set ? w->p16 + (pb - w->s) : w->p16;
        for (int64_t r = 0; r < rows && !w->p16_set; ++r)
            sdpa_pairs_narrow(pb + r * ldp + c0, c1 - c0, w->p16 + r * ldp + c0);
        w->eng->gemm(rows, n, kp, (const uint32_t *)(p16 + c0), ldp / 2,
                     w->vp + c0 / 2 * w->ldv, w->ldv, o, ldo, alpha, mode);
        return;
    }
    if (w->v16 && !t->ragged) {
        kern->gemm16(p->vt, rows, n, c1 - c0, pb + c0, ldp, 1, w->v16 + c0 * w->ldv16, w->ldv16,
                     o, ldo, alpha, mode);
        return;
    }
    if (w->v16 && !w->vop) { /* the float32 tile, for the finiteness check */
        kern->widen(p->vt, w->v16, w->ldv16, 1, nj, p->Dv, w->v, w->ldv);
        w->vop = w->v;
    }
    if (t->ragged && w->v_finite < 0)
        w->v_finite = kern->rows_finite(w->vop, w->ldv, nj, p->Dv);
    if (!t->ragged || w->v_finite) {
        kern->gemm(rows, n, c1 - c0, pb + c0, ldp, 1, w->vop + c0 * w->ldv, w->ldv, o, ldo,
                   alpha, mode);
        return;
    }
    sdpa_gemm_skip_zeros(rows, n, c1 - c0, pb + c0, ldp, 1, w->vop + c0 * w->ldv, w->ldv, o, ldo,
                         alpha, mode);
    const sdpa_logits vis = sdpa_tile_logits(p, t, r0, w->start, w->end, w->bias);
    sdpa_add_zero_terms(&vis, NULL, 0, false, rows, p->Dv, c1 - c0, pb + c0, ldp, 1, 0, c0,
                        w->vop + c0 * w->ldv, w->ldv, o, ldo);
}

/* out, lse and stats of query row i of head h from its accumulated output
 * row o (Dv floats, overwritten when out is 16-bit), max m and sum l. *ll
 * and *lse receive the log-sum and LSE. */
static void finish_row(const sdpa_problem *p, const sdpa_kernels *kern, int64_t b, int64_t h,
                       int64_t i, float *o, float m, float l, float *ll, float *lse)
{
    const int64_t at = AT4(p->os, b, h, i, 0);
    /* A row that saw no key: out 0, lse -inf (l is 0 exactly then), unless
     * its scores were all NaN: then NaN, as everywhere else. A sink of +inf
     * or NaN, which started (m, l) and made them non-finite, leaves no such
     * trace: then the row is asked (out 0, lse the sink). */
    const float sink = sdpa_sink(p, h);
    const bool sink_only = !isfinite(sink) && sink != -INFINITY && !sdpa_row_sees_key(p, b, h, i);
    if (sink_only) m = sink, l = 1.0f;
    const bool empty = l == 0.0f || sink_only;
    const float fill = empty && sdpa_row_sees_nan(p, b, h, i) ? NAN : 0.0f;
    if (p->o && p->os[3] == 1 && !empty) { /* the common case, vectorised */
        float *restrict dst = p->o + at;
        for (int64_t c = 0; c < p->Dv; ++c) dst[c] = o[c] / l;
    } else if (p->o) {
        for (int64_t c = 0; c < p->Dv; ++c) p->o[at + c * p->os[3]] = empty ? fill : o[c] / l;
    } else { /* 16-bit out: each value rounded once, as a converted float32 copy would be */
        for (int64_t c = 0; c < p->Dv; ++c) o[c] = empty ? fill : o[c] / l;
        if (p->os[3] == 1)
            kern->narrow(p->ot, o, p->Dv, p->o16 + at);
        else
            for (int64_t c = 0; c < p->Dv; ++c)
                attn_store_float(p->o16, p->ot, at + c * p->os[3], o[c]);
    }
    *ll = empty ? (fill == 0.0f ? 0.0f : NAN) : logf(l);
    /* The row max may have passed over a NaN logit (max ignores NaN): a
     * row of +inf and NaN logits is NaN, as on the reference path; so is a
     * row of NaN logits alone, whose max stayed -inf and sum became NaN
     * (softmax_online): its statistics must not read as a row that saw
     * nothing (the backward's P would be 0). */
    const bool nan_max = empty ? fill != 0.0f
                               : (m == INFINITY && sdpa_row_sees_nan(p, b, h, i)) ||
                                     (m == -INFINITY && isnan(l));
    const float mx = nan_max ? NAN : sink_only ? sink : empty ? -INFINITY : m;
    /* an infinite logit: torch's logsumexp is +inf (its softmax NaN) */
    *lse = mx == INFINITY ? INFINITY : mx + *ll;
    if (p->lse) p->lse[b * p->ls[0] + h * p->ls[1] + i * p->ls[2]] = *lse;
    if (p->stats) {
        float *st = p->stats + AT4(p->ss, b, h, i, 0);
        st[0] = mx;
        st[p->ss[3]] = *ll;
    }
}

/* Split-KV partial of (chunk, b, head, row): dvp + 2 floats (o, max, sum). */
static float *partial_at(const sdpa_problem *p, const fwd_dims *d, float *part, int64_t chunk,
                         int64_t b, int64_t h, int64_t i)
{
    const int64_t row = (b * p->Hq + h) * p->Nq + i;
    return part + (chunk * p->B * p->Hq * p->Nq + row) * (d->dvp + 2);
}

/* One past the last row of the run of bands from row r0 (a band start)
 * that share their columns [c0, c1), c1 rounded up to `round` (the panels,
 * or half panels, of a score GEMM; 1: the exact keys of a P·V). */
static int64_t band_run_end(const int64_t *band_c0, const int64_t *band_c1, int64_t r0,
                            int64_t mi, int64_t round)
{
    const int64_t x = r0 / FWD_BAND;
    int64_t r1 = r0 + FWD_BAND;
    while (r1 < mi && band_c0[r1 / FWD_BAND] == band_c0[x] &&
           sdpa_round_up(band_c1[r1 / FWD_BAND], round) == sdpa_round_up(band_c1[x], round))
        r1 += FWD_BAND;
    return r1 < mi ? r1 : mi;
}

/* The first key of the bands from band starts r0 to r1 that see one,
 * rounded down to `round`. */
static int64_t run_lo(const int64_t *band_lo, int64_t r0, int64_t r1, int64_t round)
{
    int64_t lo = INT64_MAX;
    for (int64_t r = r0; r < r1; r += FWD_BAND)
        lo = band_lo[r / FWD_BAND] < lo ? band_lo[r / FWD_BAND] : lo;
    return lo - lo % round;
}

/* ------------------------------------------------------------------
 * Windowed rows a band at a time. A window's row sees a few hundred keys
 * across 3 or 4 key tiles, and per tile each unit planned its rows, took
 * a softmax step (with rescales) and products per band: a fixed cost per
 * row that the few products did not hide. When all the tiles of a task's
 * keys are packed and shared, each 12-row band instead takes its keys as
 * one range: its scores (one GEMM per tile the range crosses, into one
 * row buffer), one softmax pass from the rows' first statistics (no
 * rescale: softmax_rows where the logits are plain), one P·V (float32:
 * V in place; bfloat16: the kv head's V pairs, which run on across its
 * tiles), and its rows are done. */

/* A band's columns: its rows of the score tile laid end to end, less two
 * panels (rows 4 KiB apart would all fall in the same L1 sets: the
 * 12-row products missed L1 on every row). */
enum { FWD_BAND_COLS = FWD_ROWS * FWD_KEYS / FWD_BAND - 32 };
_Static_assert(FWD_BAND_COLS % SDPA_MAX_NPAD == 0, "a band's rows start on panels");

/* Whether the call's windowed rows take the bands (unit_bands): both
 * sides bounded, a band's keys within FWD_BAND_COLS (with a panel's
 * rounding at each end), the key tiles shared, and none of what the tile
 * loop alone does (masks, dropout, decoding's shapes, V packed per tile). */
static bool window_bands(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d)
{
    if (!p->window || p->window_left < 0 || p->window_right < 0 || !d->prepacked ||
        d->stacked || d->direct || d->split > 1 || p->nmask > 0 || p->dropout_p > 0.0f ||
        d->bcp != FWD_KEYS)
        return false;
    if (!d->dot && (p->vt != ATTN_F32 || p->vs[3] != 1 || p->Dv % kern->npad != 0 ||
                    p->vs[2] < p->Dv)) /* float32 P·V reads V in place */
        return false;
    const int64_t room = FWD_BAND_COLS - (FWD_BAND - 1) - 2 * SDPA_MAX_NPAD;
    return p->window_left < room && p->window_right < room &&
           p->window_left + p->window_right + 1 <= room;
}

/* The shared tiles of keys [k0, k1) of kv head (b, hk) packed: by this
 * task where no other claimed them, else waited for (another task is
 * packing one, which depends on nothing: a bounded wait). Waiting, not a
 * private copy, as a band reads several tiles at once. */
static void tiles_ready(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                        int64_t b, int64_t hk, int64_t k0, int64_t k1, fwd_scratch *w)
{
    const int64_t first = k0 - k0 % d->keys;
    for (int64_t j0 = first; j0 < k1; j0 += d->keys) pack_if_free(p, kern, d, b, hk, j0, w);
    for (int64_t j0 = first; j0 < k1; j0 += d->keys)
        while (pack_if_free(p, kern, d, b, hk, j0, w) == SDPA_CLAIM_BUSY) sched_yield();
}

/* Whether the values of keys [k0, k1) are all finite (bfloat16: of the
 * tiles holding them): else a band's zero probabilities of keys a row
 * does not see could meet inf or NaN, and the task takes the tile loop. */
static bool keys_finite(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                        int64_t b, int64_t hk, int64_t k0, int64_t k1, const fwd_scratch *w)
{
    if (!d->dot)
        return kern->rows_finite((const float *)p->v + AT4(p->vs, b, hk, k0, 0), p->vs[2], k1 - k0,
                                 p->Dv);
    for (int64_t j0 = k0 - k0 % d->keys; j0 < k1; j0 += d->keys)
        if (!w->kfinite[shared_tile(p, d, b, hk, j0)]) return false;
    return true;
}

/* The shared tile from key j0 of kv head (b, hk) (ready: tiles_ready). */
static float *ready_tile(const sdpa_problem *p, const fwd_dims *d, int64_t b, int64_t hk,
                         int64_t j0, const fwd_scratch *w)
{
    return tile_kt(p, d, w, shared_tile(p, d, b, hk, j0));
}

/* Rows [r0, r1) of a Q read in place (D contiguous floats each, rs
 * apart) requested into L1: a band's score GEMM would otherwise meet each
 * row's lines one at a time, a wait on memory per 16 features, as nothing
 * read them before. */
static void prefetch_q_rows(const float *q, int64_t rs, int64_t r0, int64_t r1, int64_t D)
{
#if defined(__GNUC__) || defined(__clang__)
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t x = 0; x < D; x += 16) __builtin_prefetch(q + r * rs + x, 0, 3);
#else
    (void)q, (void)rs, (void)r0, (void)r1, (void)D;
#endif
}

/* Unit e of kv head (b, hk) (head h, rows [i0, i0+mi)) band by band:
 * its accumulator rows, row maxima and sums, from their first values;
 * meanwhile the shared tile from key `next` (-1: none) requested into L2
 * a slice per band (prefetch_tile). */
static void unit_bands(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                       int64_t b, int64_t hk, int64_t e, int64_t h, int64_t i0, int64_t mi,
                       int64_t next, fwd_scratch *w)
{
    const int64_t npad = kern->npad, lds = FWD_BAND_COLS, dvn = sdpa_round_up(p->Dv, npad);
    const int64_t spad = d->dot ? npad : npad / 2; /* score GEMMs: half panels (float32) */
    int64_t q_rs, q_cs;
    const float *qu = unit_q(p, d, w, e, b, h, i0, &q_rs, &q_cs);
    for (int64_t r0 = 0; r0 < mi; r0 += FWD_BAND) {
        const int64_t rb = mi - r0 < FWD_BAND ? mi - r0 : FWD_BAND, x = e * FWD_ROWS + r0;
        float *o = w->o + x * d->dvp, *rowmax = w->rowmax + x, *rowsum = w->rowsum + x;
        if (next >= 0) /* a slice per band */
            prefetch_tile(p, d, w, b, hk, next, r0 / FWD_BAND, (mi + FWD_BAND - 1) / FWD_BAND);
        if (!d->dot && q_cs == 1) /* this band's Q rows (the first band), the next band's */
            prefetch_q_rows(qu, q_rs, r0 == 0 ? 0 : r0 + FWD_BAND,
                            r0 + 2 * FWD_BAND < mi ? r0 + 2 * FWD_BAND : mi, p->D);
        int64_t rlo[FWD_BAND], rhi[FWD_BAND], lo = INT64_MAX, hi = 0;
        for (int64_t r = 0; r < rb; ++r) {
            sdpa_row_keys(p, i0 + r0 + r, &rlo[r], &rhi[r]);
            if (rhi[r] <= rlo[r]) continue;
            lo = rlo[r] < lo ? rlo[r] : lo;
            hi = rhi[r] > hi ? rhi[r] : hi;
        }
        if (hi <= lo) { /* no row of the band sees a key: O = 0 */
            memset(o, 0, (size_t)(rb * d->dvp) * sizeof(float));
            continue;
        }
        const int64_t kb = lo - lo % npad; /* column 0 of the band's rows */
        for (int64_t r = 0; r < rb; ++r) {
            const bool seen = rhi[r] > rlo[r];
            w->start[r] = seen ? (int32_t)(rlo[r] - kb) : 0;
            w->end[r] = seen ? (int32_t)(rhi[r] - kb) : 0;
        }
        /* S = Q·Kᵀ from the half panel holding the first key to the one
         * holding the last, a GEMM per tile */
        SDPA_PROF_START(t_scores);
        const int64_t sa = lo - lo % spad, sz = sdpa_round_up(hi, spad);
        SDPA_PROF_COUNT(SDPA_PROF_FORWARD, SDPA_PROF_PARTIAL,
                        sdpa_prof_visible(w->start, w->end, rb), (uint64_t)(rb * (sz - sa)));
        for (int64_t j0 = sa - sa % d->keys; j0 < sz; j0 += d->keys) {
            const int64_t ca = sa > j0 ? sa : j0, cz = sz < j0 + d->keys ? sz : j0 + d->keys;
            const float *kt = ready_tile(p, d, b, hk, j0, w);
            if (d->dot)
                d->eng->gemm(rb, cz - ca, q_pairs(p), w->qp + x * q_pairs(p), q_pairs(p),
                             (const uint32_t *)kt + (ca - j0), d->bcp, w->s + (ca - kb), lds,
                             NULL, SDPA_GEMM_SET);
            else
                kern->gemm(rb, cz - ca, p->D, qu + r0 * q_rs, q_rs, q_cs, kt + (ca - j0), d->bcp,
                           w->s + (ca - kb), lds, NULL, SDPA_GEMM_SET);
        }
        SDPA_PROF_STOP(SDPA_PROF_FORWARD, SDPA_PROF_PARTIAL, SDPA_PROF_SCORES, t_scores);
        SDPA_PROF_START(t_softmax);
        const sdpa_logits lg = {
            .scale = p->scale,
            .softcap = p->softcap,
            .inv_softcap = sdpa_inv_softcap(p),
            .start = w->start,
            .end = w->end,
            .alibi = p->alibi ? p->alibi[b * p->alibi_s[0] + h * p->alibi_s[1]] : 0.0f,
            .alibi_d0 = (int32_t)(i0 + r0 + p->Nk - p->Nq - kb)};
        const int64_t n = sdpa_round_up(hi - kb, npad);
        const bool p16 = d->dot && d->p16; /* the softmax rounds P to bfloat16 itself */
        if (kern->softmax_rows && !(p->softcap > 0.0f) && !p->alibi) /* plain logits */
            kern->softmax_rows(rb, (lo - lo % 2) - kb, n, p->scale, w->start, w->end, w->s, lds,
                               p16 ? w->p16 : NULL, rowmax, rowsum);
        else if (p16)
            kern->softmax_online_p16(rb, 0, n, &lg, w->s, lds, w->p16, rowmax, rowsum,
                                     w->alpha + x, NULL);
        else
            kern->softmax_online(rb, 0, n, &lg, w->s, lds, rowmax, rowsum, w->alpha + x, NULL);
        SDPA_PROF_STOP(SDPA_PROF_FORWARD, SDPA_PROF_PARTIAL, SDPA_PROF_SOFTMAX, t_softmax);
        /* O = P·V from the first key (bfloat16: its pair; P is zero past
         * each row's keys up to n, which completes an odd end's pair) */
        SDPA_PROF_START(t_pv);
        if (!d->dot) {
            kern->gemm(rb, dvn, hi - lo, w->s + (lo - kb), lds, 1,
                       (const float *)p->v + AT4(p->vs, b, hk, lo, 0), p->vs[2], o, d->dvp, NULL,
                       SDPA_GEMM_SET);
        } else {
            const int64_t pa = lo - lo % 2;
            for (int64_t r = 0; r < rb && !p16; ++r)
                sdpa_pairs_narrow(w->s + r * lds + (pa - kb), hi - pa,
                                  w->p16 + r * lds + (pa - kb));
            /* the kv head's V pairs run on across its tiles (tile_v_pairs) */
            const uint32_t *vp = tile_v_pairs(p, d, w, shared_tile(p, d, b, hk, 0));
            d->eng->gemm(rb, dvn, (hi - pa + 1) / 2, (const uint32_t *)(w->p16 + (pa - kb)),
                         lds / 2, vp + pa / 2 * d->dvp, d->dvp, o, d->dvp, NULL, SDPA_GEMM_SET);
        }
        SDPA_PROF_STOP(SDPA_PROF_FORWARD, SDPA_PROF_PARTIAL, SDPA_PROF_PV, t_pv);
    }
}

/* One task: units [u0, u0+nu) of kv head (b, hk) over the keys of split
 * chunk `chunk`; the outputs, or (split-KV) the chunk's partials. */
static void forward_task(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                         int64_t b, int64_t hk, int64_t u0, int64_t nu, int64_t chunk,
                         float *part, fwd_scratch *w)
{
    const int64_t dvn = sdpa_round_up(p->Dv, kern->npad), npad = kern->npad;
    /* The float32 score GEMMs may end in half a panel (direct scores and
     * bfloat16 dot products take whole ones). */
    const int64_t spad = d->direct || d->dot ? npad : npad / 2;
    int64_t key0, key1;
    split_keys(p, d, chunk, &key0, &key1);
    /* A sink starts every row's softmax: max = sink, sum = e^(sink - sink)
     * (in chunk 0 only, so that split-KV counts it once). */
    for (int64_t e = 0; e < nu; ++e) {
        int64_t h, i0, mi;
        unit_rows(p, d, hk, u0 + e, &h, &i0, &mi);
        for (int64_t r = 0; r < FWD_ROWS; ++r) {
            const float sink = chunk == 0 && r < mi ? sdpa_sink(p, h + (i0 + r) / p->Nq) : -INFINITY;
            w->rowmax[e * FWD_ROWS + r] = sink;
            w->rowsum[e * FWD_ROWS + r] = sink == -INFINITY ? 0.0f : 1.0f;
        }
    }
    bool o_set[FWD_UNITS] = {false}; /* unit e's O written by a tile yet */
    /* A 16-bit Q's unit rows, widened once per task into qf; for bfloat16
     * products, any Q's as feature pairs in qp instead. */
    for (int64_t e = 0; (!p->q || d->dot) && e < nu; ++e) {
        int64_t h, i0, mi;
        unit_rows(p, d, hk, u0 + e, &h, &i0, &mi);
        const int64_t at = b * p->qs[0] + h * p->qs[1] + i0 * d->q_rs;
        if (d->dot && p->q && p->qs[3] == 1) /* the vectorised packer (the same products) */
            sdpa_pairs_rows_f32(p->q + at, d->q_rs, mi, p->D, w->qp + e * FWD_ROWS * q_pairs(p),
                                q_pairs(p));
        else if (d->dot)
            sdpa_pairs_rows(p->q ? ATTN_F32 : p->qt,
                            p->q ? (const void *)(p->q + at) : (const void *)(p->q16 + at),
                            d->q_rs, p->qs[3], mi, p->D, w->qp + e * FWD_ROWS * q_pairs(p),
                            q_pairs(p));
        else
            kern->widen(p->qt, p->q16 + at, d->q_rs, p->qs[3], mi, p->D,
                        w->qf + e * FWD_ROWS * p->D, p->D);
    }

    /* Keys outside [kbeg, kend) are visible to none of the units' rows. The
     * bounds are monotone within a head: each head's first and last rows of
     * a unit give them (the first bounds it, empty or not). */
    int64_t kbeg = key1, kend = key0;
    for (int64_t e = 0; e < nu; ++e) {
        int64_t h, i0, mi, lo, hi;
        unit_rows(p, d, hk, u0 + e, &h, &i0, &mi);
        for (int64_t g = i0, next; g < i0 + mi; g = next) {
            next = (g / p->Nq + 1) * p->Nq; /* the next head's first row */
            next = next < i0 + mi ? next : i0 + mi;
            sdpa_row_keys(p, g % p->Nq, &lo, &hi);
            kbeg = lo < kbeg ? lo : kbeg;
            sdpa_row_keys(p, (next - 1) % p->Nq, &lo, &hi);
            kend = hi > kend ? hi : kend;
        }
    }
    if (kbeg < key0) kbeg = key0;
    if (kend > key1) kend = key1;
    w->kend = kend;
    /* Windowed units band by band while the values they read are finite
     * (checked as far as each unit reads); the rest by the tile loop. */
    bool banded[FWD_UNITS] = {false};
    int64_t units_banded = 0;
    for (int64_t e = 0, finite_to = kbeg; d->bands && e < nu; ++e, ++units_banded) {
        int64_t h, i0, mi, lo, hi, x;
        unit_rows(p, d, hk, u0 + e, &h, &i0, &mi);
        sdpa_row_keys(p, i0, &lo, &x);
        sdpa_row_keys(p, i0 + mi - 1, &x, &hi);
        if (hi > lo) {
            SDPA_PROF_START(t_pack);
            tiles_ready(p, kern, d, b, hk, lo, hi, w);
            const int64_t from = lo > finite_to ? lo : finite_to;
            const bool finite = hi <= from || keys_finite(p, kern, d, b, hk, from, hi, w);
            finite_to = hi > finite_to ? hi : finite_to;
            SDPA_PROF_STOP(SDPA_PROF_FORWARD, SDPA_PROF_WHOLE, SDPA_PROF_PACK, t_pack);
            if (!finite) break;
        }
        /* the next tile, which the next units read, requested meanwhile */
        const int64_t next = hi > lo ? (hi - 1) - (hi - 1) % d->keys + d->keys : -1;
        unit_bands(p, kern, d, b, hk, e, h, i0, mi, next, w);
        banded[e] = o_set[e] = true;
    }
    for (int64_t j0 = kbeg - kbeg % d->keys; units_banded < nu && j0 < kend; j0 += d->keys) {
        const int64_t nj = kend - j0 < d->keys ? kend - j0 : d->keys;
        bool packed = false;
        for (int64_t e = 0; e < nu; ++e) {
            int64_t h, i0, mi;
            if (banded[e]) continue;
            unit_rows(p, d, hk, u0 + e, &h, &i0, &mi);
            if (d->prepacked) prefetch_tile(p, d, w, b, hk, j0 + d->keys, e, nu);
            SDPA_PROF_START(t_plan);
            const sdpa_tile t = sdpa_plan_tile(p, kern, b, h, i0, mi, j0, nj, w->start, w->end,
                                               w->bias, d->bcp);
            SDPA_PROF_STOP(SDPA_PROF_FORWARD, SDPA_PROF_WHOLE, SDPA_PROF_PLAN, t_plan);
            if (t.cols == 0) continue; /* hidden: not even packed */
            if (!packed) {
                SDPA_PROF_START(t_pack);
                pack_kv(p, kern, d, b, hk, j0, nj, w, true);
                SDPA_PROF_STOP(SDPA_PROF_FORWARD, SDPA_PROF_WHOLE, SDPA_PROF_PACK, t_pack);
                packed = true;
            }
            SDPA_PROF_COUNT(SDPA_PROF_FORWARD, t.ragged, sdpa_prof_visible(w->start, w->end, mi), 0);
            float *rowmax = w->rowmax + e * FWD_ROWS, *rowsum = w->rowsum + e * FWD_ROWS;
            float *alpha = w->alpha + e * FWD_ROWS, *o = w->o + e * FWD_ROWS * d->dvp;
            int64_t q_rs, q_cs;
            const float *qu = unit_q(p, d, w, e, b, h, i0, &q_rs, &q_cs);
            /* Each band of rows covers just the columns its own rows may see
             * (on diagonal (causal), windowed or ragged tiles); P·V reads V
             * rows [c0, hi) only: rows past the tile's keys may hold
             * anything (poisoned memory, NaN). */
            int64_t band_c0[FWD_ROWS / FWD_BAND], band_c1[FWD_ROWS / FWD_BAND];
            int64_t band_lo[FWD_ROWS / FWD_BAND]; /* the band's first key, unrounded */
            bool uniform = true;
            for (int64_t r0 = 0; r0 < mi; r0 += FWD_BAND) {
                const int64_t rb = mi - r0 < FWD_BAND ? mi - r0 : FWD_BAND, x = r0 / FWD_BAND;
                sdpa_band_cols(w->start + r0, w->end + r0, rb, 1, &band_lo[x], &band_c1[x]);
                band_c0[x] = band_lo[x] - band_lo[x] % npad;
                uniform &= band_c0[x] == band_c0[0] && band_c1[x] == band_c1[0];
            }
            /* One float32 score GEMM for a uniform unit also takes the rows'
             * maxima on the way (softmax_online's first pass). */
            const float *vmax = uniform && !d->direct &&
                                        (d->dot ? d->eng->gemm_max != NULL : kern->gemm_max != NULL)
                                    ? w->vmax
                                    : NULL;
            /* S = Q·Kᵀ over the visible columns only, one GEMM for each run
             * of bands with the same column panels, ending at the spad
             * after the bands' last key (the softmax never reads the
             * columns past a row's keys). */
            SDPA_PROF_START(t_scores);
            for (int64_t r0 = 0, r1; r0 < mi; r0 = r1) {
                r1 = band_run_end(band_c0, band_c1, r0, mi, spad);
                /* from the half panel (spad) that holds the run's first key:
                 * the softmax reads no vector before a row's first key */
                const int64_t rb = r1 - r0, c0 = run_lo(band_lo, r0, r1, spad);
                int64_t hi = 0; /* the run's last key (direct scores read no further) */
                for (int64_t r = r0; r < r1; r += FWD_BAND)
                    hi = band_c1[r / FWD_BAND] > hi ? band_c1[r / FWD_BAND] : hi;
                const int64_t c1 = sdpa_round_up(hi, spad);
                const float *qr = qu + r0 * q_rs;
                SDPA_PROF_COUNT(SDPA_PROF_FORWARD, t.ragged, 0, (uint64_t)(rb * (c1 - c0)));
                if (c1 > c0 && d->direct) {
                    const size_t ve = attn_dtype_size(p->vt);
                    const sdpa_prefetch vpf = {
                        (const char *)p->v + (ptrdiff_t)AT4(p->vs, b, hk, j0 + c0, 0) * (ptrdiff_t)ve,
                        p->vs[2] * (int64_t)ve, p->Dv * (int64_t)ve};
                    sdpa_direct_scores(kern, w->krt, key_row(w, c0), w->ldkr,
                                       (hi < nj ? hi : nj) - c0, c1 - c0, p->D, qr, q_rs,
                                       q_cs, rb, w->s + r0 * d->bcp + c0, d->bcp,
                                       r0 == 0 && p->vs[3] == 1 ? &vpf : NULL, w->qb);
                } else if (c1 > c0 && d->dot && vmax) {
                    d->eng->gemm_max(rb, c1 - c0, q_pairs(p),
                                     w->qp + (e * FWD_ROWS + r0) * q_pairs(p), q_pairs(p),
                                     (const uint32_t *)w->ktp + c0, d->bcp,
                                     w->s + r0 * d->bcp + c0, d->bcp, w->vmax);
                } else if (c1 > c0 && d->dot) {
                    d->eng->gemm(rb, c1 - c0, q_pairs(p),
                                 w->qp + (e * FWD_ROWS + r0) * q_pairs(p), q_pairs(p),
                                 (const uint32_t *)w->ktp + c0, d->bcp, w->s + r0 * d->bcp + c0,
                                 d->bcp, NULL, SDPA_GEMM_SET);
                } else if (c1 > c0 && vmax) {
                    kern->gemm_max(rb, c1 - c0, p->D, qr, q_rs, q_cs, w->ktp + c0, d->bcp,
                                   w->s + r0 * d->bcp + c0, d->bcp, w->vmax);
                } else if (c1 > c0) {
                    kern->gemm(rb, c1 - c0, p->D, qr, q_rs, q_cs, w->ktp + c0, d->bcp,
                               w->s + r0 * d->bcp + c0, d->bcp, NULL, SDPA_GEMM_SET);
                }
            }
            SDPA_PROF_STOP(SDPA_PROF_FORWARD, t.ragged, SDPA_PROF_SCORES, t_scores);
            /* The online softmax in one call for all rows from the first to
             * the last band that sees a column, over the columns of all of
             * them: each row's own bounds hide the rest (never read as
             * scores). Rows outside keep their statistics (none visible). */
            SDPA_PROF_START(t_softmax);
            int64_t ra = mi, rz = 0, sc0 = d->bcp, scn = 0;
            for (int64_t r0 = 0; r0 < mi; r0 += FWD_BAND) {
                const int64_t x = r0 / FWD_BAND;
                if (band_c1[x] == band_c0[x]) continue;
                ra = ra < r0 ? ra : r0;
                rz = r0 + FWD_BAND < mi ? r0 + FWD_BAND : mi;
                const int64_t cn = sdpa_round_up(band_c1[x], npad);
                sc0 = band_c0[x] < sc0 ? band_c0[x] : sc0;
                scn = cn > scn ? cn : scn;
            }
            /* bfloat16 P·V: P rounded in the exponentials' pass (dropout
             * changes P after it: then the float32 P is rounded later) */
            w->p16_set = d->p16 && w->v_pairs && !(p->dropout_p > 0.0f);
            if (rz > ra) {
                const sdpa_logits lg = sdpa_tile_logits(p, &t, ra, w->start, w->end, w->bias);
                if (w->p16_set)
                    kern->softmax_online_p16(rz - ra, sc0, scn, &lg, w->s + ra * d->bcp, d->bcp,
                                             w->p16 + ra * d->bcp, rowmax + ra, rowsum + ra,
                                             alpha + ra, vmax);
                else
                    kern->softmax_online(rz - ra, sc0, scn, &lg, w->s + ra * d->bcp, d->bcp,
                                         rowmax + ra, rowsum + ra, alpha + ra, vmax);
            }
            SDPA_PROF_STOP(SDPA_PROF_FORWARD, t.ragged, SDPA_PROF_SOFTMAX, t_softmax);
            /* Per run of bands with the same columns: dropout (on P after
             * the row sums took it whole), O = alpha∘O + P·V. Rows that saw
             * nothing keep O (alpha would be 1), unless O is still to be
             * set (k = 0 zeroes it). */
            SDPA_PROF_START(t_pv);
            /* With P rounded by the softmax (zero past each row's keys up
             * to scn) and the tile's V pairs all finite, a run may take
             * bands whose last keys differ within a panel: its columns end
             * at the panel (at most the tile's keys, which the pairs hold),
             * fewer and larger products for a window's or a diagonal's
             * ragged edge, adding exact zeros. */
            const int64_t pv_round = w->p16_set ? npad : 1;
            for (int64_t r0 = 0, r1; r0 < mi; r0 = r1) {
                r1 = band_run_end(pv_round > 1 ? band_c0 : band_lo, band_c1, r0, mi, pv_round);
                /* from the run's first key (bfloat16: the pair that holds
                 * it): the probabilities before it are zeros */
                const int64_t rb = r1 - r0, c0 = run_lo(band_lo, r0, r1, w->p16_set ? 2 : 1);
                int64_t c1 = band_c1[r0 / FWD_BAND];
                if (c1 > c0 && pv_round > 1) {
                    c1 = sdpa_round_up(c1, pv_round);
                    c1 = c1 < nj ? c1 : nj;
                }
                if (c1 == c0 && o_set[e]) continue;
                if (p->dropout_p > 0.0f)
                    unit_dropout(p, kern, b, h, i0 + r0, rb, j0, band_c0[r0 / FWD_BAND],
                                 sdpa_round_up(c1, npad),
                                 w->s + r0 * d->bcp, d->bcp);
                band_pv(kern, p, &t, w, r0, rb, dvn, c0, c1, w->s + r0 * d->bcp, d->bcp,
                        o + r0 * d->dvp, d->dvp, alpha + r0, nj,
                        o_set[e] ? SDPA_GEMM_SCALE_ADD : SDPA_GEMM_SET);
            }
            SDPA_PROF_STOP(SDPA_PROF_FORWARD, t.ragged, SDPA_PROF_PV, t_pv);
            o_set[e] = true;
        }
    }
    SDPA_PROF_START(t_finish);
    /* A unit no tile reached still finishes from O = 0 (a row with a sink
     * has sum 1 and no key). */
    for (int64_t e = 0; e < nu; ++e)
        if (!o_set[e]) memset(w->o + e * FWD_ROWS * d->dvp, 0, (size_t)(FWD_ROWS * d->dvp) * sizeof(float));

    for (int64_t e = 0; e < nu; ++e) {
        int64_t h, i0, mi;
        unit_rows(p, d, hk, u0 + e, &h, &i0, &mi);
        /* alpha is free now: it holds each row's log-sum ll for the weights. */
        float *rowll = w->alpha + e * FWD_ROWS, lse_rows[FWD_ROWS];
        for (int64_t r = 0; r < mi; ++r) {
            const int64_t x = e * FWD_ROWS + r, g = i0 + r, hh = h + g / p->Nq, ii = g % p->Nq;
            float *o = w->o + x * d->dvp;
            if (d->split > 1) {
                float *dst = partial_at(p, d, part, chunk, b, hh, ii);
                memcpy(dst, o, (size_t)d->dvp * sizeof(float));
                dst[d->dvp] = w->rowmax[x];
                dst[d->dvp + 1] = w->rowsum[x];
            } else {
                finish_row(p, kern, b, hh, ii, o, w->rowmax[x], w->rowsum[x], &rowll[r],
                           &lse_rows[r]);
            }
        }
        if (p->w && d->split == 1) { /* split-KV: after the merge (merge_row) */
            int64_t q_rs, q_cs;
            const float *q = unit_q(p, d, w, e, b, h, i0, &q_rs, &q_cs);
            for (int64_t r = 0, run; r < mi; r += run) { /* one call per head of the unit */
                const int64_t g = i0 + r;
                run = p->Nq - g % p->Nq < mi - r ? p->Nq - g % p->Nq : mi - r;
                write_weights(p, kern, d, b, h + g / p->Nq, g % p->Nq, run, q + r * q_rs, q_rs,
                              q_cs, d->dot ? w->qp + (e * FWD_ROWS + r) * q_pairs(p) : NULL,
                              w->rowmax + e * FWD_ROWS + r, rowll + r, lse_rows + r, w);
            }
        }
    }
    SDPA_PROF_STOP(SDPA_PROF_FORWARD, SDPA_PROF_WHOLE, SDPA_PROF_FINISH, t_finish);
}

/* Split-KV: row (b, h, i)'s chunks merged in chunk order,
 *   m = max_c m_c,  l = Σ_c l_c·e^(m_c - m),  o = Σ_c o_c·e^(m_c - m),
 * then finished like an unsplit row, and its weights written from the
 * merged statistics. */
static void merge_row(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                      const float *part, int64_t b, int64_t h, int64_t i, fwd_scratch *w)
{
    float *o = w->o; /* a free accumulator row */
    float m = -INFINITY;
    for (int64_t c = 0; c < d->split; ++c) {
        const float mc = partial_at(p, d, (float *)part, c, b, h, i)[d->dvp];
        if (mc > m || isnan(mc)) m = isnan(m) ? m : mc;
    }
    float l = 0.0f;
    for (int64_t x = 0; x < p->Dv; ++x) o[x] = 0.0f;
    for (int64_t c = 0; c < d->split; ++c) {
        const float *pc = partial_at(p, d, (float *)part, c, b, h, i);
        if (pc[d->dvp + 1] == 0.0f) continue; /* the chunk saw nothing */
        const float f = m == pc[d->dvp] ? 1.0f : expf(pc[d->dvp] - m);
        l += pc[d->dvp + 1] * f;
        for (int64_t x = 0; x < p->Dv; ++x) o[x] += pc[x] * f;
    }
    float ll, lse;
    finish_row(p, kern, b, h, i, o, m, l, &ll, &lse);
    if (!p->w) return;
    const int64_t at = AT4(p->qs, b, h, i, 0);
    if (d->dot) { /* the row's feature pairs, as its task packed them */
        sdpa_pairs_rows(p->q ? ATTN_F32 : p->qt,
                        p->q ? (const void *)(p->q + at) : (const void *)(p->q16 + at), 0,
                        p->qs[3], 1, p->D, w->qp, q_pairs(p));
        write_weights(p, kern, d, b, h, i, 1, NULL, 0, 0, w->qp, &m, &ll, &lse, w);
    } else if (p->q) {
        write_weights(p, kern, d, b, h, i, 1, p->q + at, 0, p->qs[3], NULL, &m, &ll, &lse, w);
    } else { /* a 16-bit Q: the row widened */
        kern->widen(p->qt, p->q16 + at, 0, p->qs[3], 1, p->D, w->qf, p->D);
        write_weights(p, kern, d, b, h, i, 1, w->qf, 0, 1, NULL, &m, &ll, &lse, w);
    }
}

/* Thread `me` of `team`'s share of the forward's tasks, then of the
 * split-KV merge: called by each thread of a parallel region, or as a team
 * of one on the calling thread (which may itself be in another region, so
 * nothing here asks OpenMP who it is). */
static void forward_team(const sdpa_problem *p, const sdpa_kernels *kern, const fwd_dims *d,
                         char *scratch, size_t per_thread, float *part, float *kpack,
                         atomic_uchar *kstate, unsigned char *kfinite, sdpa_cursor *cursor,
                         int me, int team)
{
    const int64_t per_kv = (d->units + d->per_task - 1) / d->per_task;
    const int64_t kv_heads = p->B * p->Hkv;
    const bool causal = p->causal != ATTN_CAUSAL_NONE;
    SDPA_PROF_START(t_setup);
    char *mine = scratch + (size_t)me * per_thread;
    memset(mine, 0, per_thread);
    fwd_scratch w = carve_scratch(p, d, mine);
    SDPA_PROF_STOP(SDPA_PROF_FORWARD, SDPA_PROF_WHOLE, SDPA_PROF_SETUP, t_setup);
    w.kpack = kpack;
    w.ktiles = d->prepacked ? p->B * p->Hkv * key_tiles(p, d) : 0;
    w.kstate = kstate;
    w.kfinite = kfinite;
    /* A kv head's tasks one after another on one thread, which then
     * finds the head's key tiles in its L2 (sdpa_next_task); causal
     * ones from the head's last rows, the dearest, so that the tasks
     * left for other threads at the end are the cheap first rows. */
    for (int64_t t; (t = sdpa_next_task(cursor, me, team, kv_heads, per_kv * d->split)) >= 0;) {
        const int64_t chunk = t % d->split, tu = t / d->split, bh = tu / per_kv;
        const int64_t k = causal ? per_kv - 1 - tu % per_kv : tu % per_kv, u0 = k * d->per_task;
        const int64_t nu = d->units - u0 < d->per_task ? d->units - u0 : d->per_task;
        SDPA_PROF_START(t_task);
        forward_task(p, kern, d, bh / p->Hkv, bh % p->Hkv, u0, nu, chunk, part, &w);
        SDPA_PROF_STOP(SDPA_PROF_FORWARD, SDPA_PROF_WHOLE, SDPA_PROF_TASKS, t_task);
    }
    if (d->split == 1) return;
    const int64_t rows = p->B * p->Hq * p->Nq;
    if (team == 1) {
        for (int64_t row = 0; row < rows; ++row)
            merge_row(p, kern, d, part, row / (p->Hq * p->Nq), row / p->Nq % p->Hq,
                      row % p->Nq, &w);
        return;
    }
#pragma omp barrier /* every chunk's partials written */
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row)
        merge_row(p, kern, d, part, row / (p->Hq * p->Nq), row / p->Nq % p->Hq, row % p->Nq,
                  &w);
}

attn_status sdpa_fused_forward(const sdpa_problem *p, const sdpa_kernels *kern, attn_error *err)
{
    SDPA_PROF_START(t_call);
    fwd_dims d = forward_dims(p);
    d.direct = sdpa_scores_direct(p, kern); /* the workspace has room either way */
    if (d.direct) { /* smaller tiles, and scratch to match */
        d.keys = FWD_DIRECT_KEYS;
        d.bcp = sdpa_round_up(d.keys, SDPA_MAX_NPAD);
    }
    d.eng = p->bf16_products && !d.direct ? sdpa_engine_select(kern) : NULL;
    d.dot = d.eng != NULL; /* else (f32, decoding shapes): the exact float32 path */
    d.p16 = d.dot && kern->softmax_online_p16 && sdpa_bf16dot_available();
    d.prepacked = d.prepacked && !d.direct; /* the workspace has room either way */
    d.bands = window_bands(p, kern, &d);
    size_t need;
    RETURN_IF(!workspace_exact(p, &need), err, ATTN_ERR_OVERFLOW, "workspace size overflows");
    need -= SDPA_WORKSPACE_SLACK;
    void *owned;
    char *ws;
    RETURN_IF_ERROR(sdpa_workspace(p, need, &owned, &ws, err));
    const size_t per_thread = forward_thread_bytes(p, &d).bytes;
    char *scratch = sdpa_take(&ws, (int64_t)per_thread * p->threads, 1);
    float *part = sdpa_take(&ws, (int64_t)partial_bytes(p, &d, p->Nq).bytes, 1); /* split-KV partials */
    const int64_t shared = d.prepacked ? p->B * p->Hkv * key_tiles(p, &d) : 0; /* key tiles */
    float *kpack = sdpa_take(&ws, shared * shared_words(p, &d), sizeof(float));
    atomic_uchar *kstate = sdpa_take(&ws, shared, sizeof(atomic_uchar));
    unsigned char *kfinite = sdpa_take(&ws, shared, 1);
    for (int64_t t = 0; t < shared; ++t) atomic_init(&kstate[t], SDPA_ITEM_FREE);
    sdpa_cursor *cursor = sdpa_take(&ws, p->threads, sizeof(sdpa_cursor));
    for (int t = 0; t < p->threads; ++t) atomic_init(&cursor[t].next, 0);

    /* One thread, or one task: the team's work on this thread, without
     * entering a parallel region (whose set-up costs more than a tiny call). */
    const int64_t tasks = p->B * p->Hkv * ((d.units + d.per_task - 1) / d.per_task) * d.split;
    const int threads = p->threads;
    SDPA_PROF_START(t_loop);
    if (threads == 1 || tasks == 1) {
        forward_team(p, kern, &d, scratch, per_thread, part, kpack, kstate, kfinite, cursor, 0, 1);
    } else {
#pragma omp parallel num_threads(threads)
        {
            int me, team;
            sdpa_team(&me, &team);
            forward_team(p, kern, &d, scratch, per_thread, part, kpack, kstate, kfinite, cursor, me,
                         team);
        }
    }
    SDPA_PROF_STOP(SDPA_PROF_FORWARD, SDPA_PROF_WHOLE, SDPA_PROF_LOOP, t_loop);
    free(owned);
    SDPA_PROF_STOP(SDPA_PROF_FORWARD, SDPA_PROF_WHOLE, SDPA_PROF_CALL, t_call);
    SDPA_PROF_CALL(SDPA_PROF_FORWARD);
    return ATTN_OK;
}
