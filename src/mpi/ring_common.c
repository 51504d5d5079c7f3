/* Ring attention: collective setup and status agreement, the piece
 * schedule and the (rows, keys) products of each piece, message buffers and
 * timed MPI wrappers. See ring.h. */
#include "ring.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double ring_now(void) { return MPI_Wtime(); }

attn_status ring_fail(attn_error *err, attn_status s, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        err->status = s;
    }
    return s;
}

attn_ring_opts attn_ring_opts_default(void)
{
    attn_ring_opts o;
    memset(&o, 0, sizeof o);
    return o;
}

/* ------------------------------------------------------------ agreement */

typedef struct {
    int32_t status;
    char message[sizeof(((attn_error *)0)->message)];
} status_msg;

attn_status ring_agree(MPI_Comm comm, attn_status local, attn_error *err)
{
    int P = 1, rank = 0;
    MPI_Comm_size(comm, &P);
    MPI_Comm_rank(comm, &rank);
    status_msg mine, *all = malloc(sizeof(status_msg) * (size_t)P);
    memset(&mine, 0, sizeof mine);
    mine.status = (int32_t)local;
    if (local != ATTN_OK && err) snprintf(mine.message, sizeof mine.message, "%s", err->message);
    if (!all) {
        /* Without room for every message, agree on the status alone. */
        int s = (int)local, worst = 0;
        MPI_Allreduce(&s, &worst, 1, MPI_INT, MPI_MAX, comm);
        if (worst == ATTN_OK) return ATTN_OK;
        if (local == ATTN_OK) ring_fail(err, (attn_status)worst, "another rank failed");
        return (attn_status)worst;
    }
    MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, comm);
    attn_status s = ATTN_OK;
    for (int r = 0; r < P; ++r) {
        if (all[r].status == ATTN_OK) continue;
        s = (attn_status)all[r].status;
        if (r != rank || local == ATTN_OK)
            ring_fail(err, s, "rank %d: %s", r, all[r].message);
        else if (err)
            err->status = s; /* keep our own message */
        break;
    }
    free(all);
    return s;
}

/* ---------------------------------------------------------------- setup */

static attn_status check_input(const attn_tensor *t, const char *name, attn_error *err)
{
    if (!t) return ring_fail(err, ATTN_ERR_NULL, "%s: tensor is NULL", name);
    if (t->ndim != 4)
        return ring_fail(err, ATTN_ERR_SHAPE, "%s: expected 4 dimensions (B,H,N,D), got %d", name,
                         t->ndim);
    if (t->dtype != ATTN_F32) return ring_fail(err, ATTN_ERR_DTYPE, "%s: must be float32", name);
    for (int d = 0; d < 4; ++d)
        if (t->shape[d] < 0)
            return ring_fail(err, ATTN_ERR_SHAPE, "%s: negative size in dimension %d", name, d);
    if (attn_tensor_numel(t) > 0 && !t->data)
        return ring_fail(err, ATTN_ERR_NULL, "%s: data is NULL", name);
    return ATTN_OK;
}

static attn_status check_local(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_ring_opts *o, attn_error *err)
{
    attn_status s;
    if ((s = check_input(q, "query", err)) || (s = check_input(k, "key", err)) ||
        (s = check_input(v, "value", err)))
        return s;
    if (k->shape[0] != q->shape[0])
        return ring_fail(err, ATTN_ERR_SHAPE, "key: batch size is %lld, query has %lld",
                         (long long)k->shape[0], (long long)q->shape[0]);
    if (k->shape[3] != q->shape[3])
        return ring_fail(err, ATTN_ERR_SHAPE, "key: feature size is %lld, query has %lld",
                         (long long)k->shape[3], (long long)q->shape[3]);
    for (int d = 0; d < 3; ++d)
        if (v->shape[d] != k->shape[d])
            return ring_fail(err, ATTN_ERR_SHAPE, "value: size %lld in dimension %d, key has %lld",
                             (long long)v->shape[d], d, (long long)k->shape[d]);
    if (k->shape[1] < 1 || q->shape[1] % k->shape[1] != 0)
        return ring_fail(err, ATTN_ERR_SHAPE,
                         "key: %lld heads do not divide the query's %lld (GQA needs Hq %% Hkv == 0)",
                         (long long)k->shape[1], (long long)q->shape[1]);
    if (!o) return ATTN_OK;
    if (!(o->scale >= 0.0f) || isinf(o->scale))
        return ring_fail(err, ATTN_ERR_ARG, "scale: must be finite and non-negative");
    if (o->block_keys < 0 || o->block_queries < 0 || o->num_threads < 0)
        return ring_fail(err, ATTN_ERR_ARG, "block_keys, block_queries, num_threads: must be >= 0");
    for (int i = 0; i < 4; ++i)
        if (o->reserved[i])
            return ring_fail(err, ATTN_ERR_ARG, "reserved: must be zero");
    const attn_tensor *m = o->key_padding_mask;
    if (m) {
        if (m->ndim != 2 || m->shape[0] != q->shape[0] || m->shape[1] != k->shape[2])
            return ring_fail(err, ATTN_ERR_SHAPE,
                             "key_padding_mask: expected (B, Nk_local) = (%lld, %lld)",
                             (long long)q->shape[0], (long long)k->shape[2]);
        if (m->dtype != ATTN_BOOL && m->dtype != ATTN_F32)
            return ring_fail(err, ATTN_ERR_DTYPE, "key_padding_mask: must be bool or float32");
        if (attn_tensor_numel(m) > 0 && !m->data)
            return ring_fail(err, ATTN_ERR_NULL, "key_padding_mask: data is NULL");
    }
    return ATTN_OK;
}

enum { G_B, G_HQ, G_HKV, G_D, G_DV, G_NQ, G_NK, G_MASK, G_CAUSAL, G_BK, G_BQ, G_SCALE, G_N };
static const char *const g_name[G_N] = {"batch size", "query heads", "key heads",
                                        "feature size", "value feature size", "", "",
                                        "key padding mask (present or not)", "causal option",
                                        "block_keys", "block_queries", "scale"};

/* The scale a rank computes with (0 = 1/sqrt(D)), as its bits: every
 * option that changes the result must agree. */
static int64_t scale_bits(const attn_ring_opts *o, int64_t D)
{
    const float s = o && o->scale > 0.0f ? o->scale : 1.0f / sqrtf((float)D);
    uint32_t bits;
    memcpy(&bits, &s, sizeof bits);
    return bits;
}

static float bits_scale(int64_t b)
{
    const uint32_t bits = (uint32_t)b;
    float s;
    memcpy(&s, &bits, sizeof s);
    return s;
}

static int64_t part_len(int64_t n, int64_t parts, int64_t i)
{
    return n / parts + (i < n % parts ? 1 : 0);
}

/* The cross-rank checks; every rank computes the same answer. */
static attn_status check_global(ring_ctx *c, const int64_t *g, attn_error *err)
{
    for (int r = 1; r < c->P; ++r)
        for (int f = 0; f < G_N; ++f) {
            if (f == G_NQ || f == G_NK) continue;
            if (g[r * G_N + f] != g[f] && f == G_SCALE)
                return ring_fail(err, ATTN_ERR_ARG, "rank %d: scale is %g, rank 0 has %g", r,
                                 (double)bits_scale(g[r * G_N + f]), (double)bits_scale(g[f]));
            if (g[r * G_N + f] != g[f])
                return ring_fail(err, ATTN_ERR_SHAPE, "rank %d: %s is %lld, rank 0 has %lld", r,
                                 g_name[f], (long long)g[r * G_N + f], (long long)g[f]);
        }
    int64_t N = 0;
    for (int r = 0; r < c->P; ++r) N += g[r * G_N + G_NK];
    if (!c->causal) return ATTN_OK;
    for (int r = 0; r < c->P; ++r) {
        const int64_t want = part_len(N, 2 * c->P, r) + part_len(N, 2 * c->P, 2 * c->P - 1 - r);
        if (g[r * G_N + G_NK] != want || g[r * G_N + G_NQ] != want)
            return ring_fail(err, ATTN_ERR_SHAPE,
                             "rank %d: holds %lld queries and %lld keys, the zigzag layout of "
                             "N = %lld over %d ranks gives it %lld",
                             r, (long long)g[r * G_N + G_NQ], (long long)g[r * G_N + G_NK],
                             (long long)N, c->P, (long long)want);
    }
    return ATTN_OK;
}

static attn_status set_geometry(ring_ctx *c, const attn_ring_opts *o, attn_error *err)
{
    const int P = c->P;
    int64_t N = 0, longest = 0;
    for (int r = 0; r < P; ++r) N += c->nk[r];
    if (c->causal) {
        for (int i = 0; i < 2 * P; ++i) {
            c->chunk[i] = part_len(N, 2 * P, i);
            if (c->chunk[i] > longest) longest = c->chunk[i];
        }
    } else {
        for (int r = 0; r < P; ++r)
            if (c->nk[r] > longest) longest = c->nk[r];
    }
    int64_t bk = o && o->block_keys ? o->block_keys : RING_DEFAULT_BLOCK_KEYS;
    if (c->causal) bk = bk / 2 > 0 ? bk / 2 : 1; /* a piece is two sub-pieces */
    c->pieces = longest > 0 ? (longest + bk - 1) / bk : 1;
    c->rows = o && o->block_queries ? o->block_queries : RING_DEFAULT_BLOCK_QUERIES;
    c->max_piece = 0;
    for (int src = 0; src < P; ++src)
        for (int64_t j = 0; j < c->pieces; ++j) {
            const ring_piece pc = ring_piece_of(c, src, j);
            if (pc.alen + pc.blen > c->max_piece) c->max_piece = pc.alen + pc.blen;
        }
    if (ring_kv_floats(c, c->max_piece) > INT_MAX)
        return ring_fail(err, ATTN_ERR_UNSUPPORTED,
                         "block_keys: a piece of %lld keys exceeds one MPI message; use smaller "
                         "blocks", (long long)c->max_piece);
    return ATTN_OK;
}

attn_status ring_begin(ring_ctx *c, MPI_Comm comm, const attn_tensor *q, const attn_tensor *k,
                       const attn_tensor *v, const attn_ring_opts *opts, attn_status local,
                       attn_error *err)
{
    memset(c, 0, sizeof *c);
    c->comm = MPI_COMM_NULL;
    attn_error mine = {0};
    if (local != ATTN_OK && err) mine = *err;
    if (local == ATTN_OK) local = check_local(q, k, v, opts, &mine);
    if (MPI_Comm_dup(comm, &c->comm) != MPI_SUCCESS)
        return ring_fail(err, ATTN_ERR_IO, "MPI_Comm_dup failed");
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_size(c->comm, &c->P);
    MPI_Comm_rank(c->comm, &c->rank);
    attn_status s = ring_agree(c->comm, local, &mine);
    if (s != ATTN_OK) goto fail;

    c->causal = opts && opts->causal;
    int64_t dims[G_N] = {q->shape[0], q->shape[1], k->shape[1], q->shape[3], v->shape[3],
                         q->shape[2], k->shape[2], opts && opts->key_padding_mask,
                         c->causal, opts ? opts->block_keys : 0, opts ? opts->block_queries : 0,
                         scale_bits(opts, q->shape[3])};
    int64_t *g = malloc(sizeof(int64_t) * G_N * (size_t)c->P);
    c->nk = malloc(sizeof(int64_t) * (size_t)c->P);
    c->chunk = malloc(sizeof(int64_t) * 2 * (size_t)c->P);
    s = g && c->nk && c->chunk ? ATTN_OK : ring_fail(&mine, ATTN_ERR_ALLOC, "out of memory");
    if ((s = ring_agree(c->comm, s, &mine)) != ATTN_OK) {
        free(g);
        goto fail;
    }
    MPI_Allgather(dims, G_N, MPI_INT64_T, g, G_N, MPI_INT64_T, c->comm);
    c->B = dims[G_B], c->Hq = dims[G_HQ], c->Hkv = dims[G_HKV], c->D = dims[G_D],
    c->Dv = dims[G_DV], c->nq = dims[G_NQ];
    for (int r = 0; r < c->P; ++r) c->nk[r] = g[r * G_N + G_NK];
    s = check_global(c, g, &mine);
    free(g);
    if (s == ATTN_OK) s = set_geometry(c, opts, &mine);
    if (s != ATTN_OK) goto fail; /* the same answer on every rank */
    c->left = (c->rank + c->P - 1) % c->P;
    c->right = (c->rank + 1) % c->P;
    c->mask = opts && opts->key_padding_mask;
    c->scale = opts ? opts->scale : 0.0f;
    c->threads = opts ? opts->num_threads : 0;
    if (c->mask) {
        const attn_tensor *m = opts->key_padding_mask;
        const int64_t nk = c->nk[c->rank];
        c->maskf = malloc(sizeof(float) * (size_t)(c->B * nk > 0 ? c->B * nk : 1));
        if (!c->maskf) {
            s = ring_fail(&mine, ATTN_ERR_ALLOC, "out of memory for the key padding mask");
        } else {
            /* bool true = may attend, as SDPA: an additive 0 / -inf */
            for (int64_t b = 0; b < c->B; ++b)
                for (int64_t j = 0; j < nk; ++j) {
                    const int64_t at = b * m->stride[0] + j * m->stride[1];
                    c->maskf[b * nk + j] =
                        m->dtype == ATTN_BOOL ? (((const uint8_t *)m->data)[at] ? 0.0f : -INFINITY)
                                              : ((const float *)m->data)[at];
                }
        }
    }
    c->tm.buffer_bytes = c->mask ? sizeof(float) * (size_t)(c->B * c->nk[c->rank]) : 0;
    if ((s = ring_agree(c->comm, s, &mine)) != ATTN_OK) goto fail;
    return ATTN_OK;
fail:
    if (err) *err = mine;
    ring_end(c);
    return s;
}

void ring_end(ring_ctx *c)
{
    free(c->nk);
    free(c->chunk);
    free(c->maskf);
    c->nk = c->chunk = NULL;
    c->maskf = NULL;
    if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
    c->comm = MPI_COMM_NULL;
}

/* ------------------------------------------------------------- schedule */

int64_t ring_first_chunk(const ring_ctx *c)
{
    return c->causal ? c->chunk[c->rank] : c->nq;
}

ring_piece ring_piece_of(const ring_ctx *c, int src, int64_t j)
{
    ring_piece p = {0, 0, 0, 0};
    const int64_t k = c->pieces;
    if (!c->causal) {
        const int64_t n = c->nk[src];
        p.a0 = j * n / k;
        p.alen = (j + 1) * n / k - p.a0;
    } else {
        const int64_t na = c->chunk[src], nb = c->chunk[2 * c->P - 1 - src];
        p.a0 = j * na / k;
        p.alen = (j + 1) * na / k - p.a0;
        p.b0 = na + j * nb / k;
        p.blen = (j + 1) * nb / k - j * nb / k;
    }
    return p;
}

/*
 * Causal chunk pairs (query chunk a, key chunk b): full if b < a, hidden if
 * b > a, the diagonal if a == b (same chunk: a square, so top-left and
 * bottom-right agree). This rank holds query chunks r and 2P-1-r; a piece
 * of block src has keys of chunks src and 2P-1-src:
 *   src == r: (r, r) and (2P-1-r, 2P-1-r) diagonal, (2P-1-r, r) full,
 *             (r, 2P-1-r) hidden;
 *   src <  r: both query chunks see chunk src fully; chunk 2P-1-src is
 *             later than both: hidden;
 *   src >  r: only query chunk 2P-1-r sees anything, both key chunks fully.
 * Every rank thus computes with 2·|piece| keys per query chunk row pair.
 */
int ring_calls(const ring_ctx *c, int src, ring_piece pc, ring_call *out)
{
    ring_call all[4];
    int n = 0;
    const int64_t nq = c->nq, n1 = ring_first_chunk(c), al = pc.alen, bl = pc.blen;
    if (!c->causal) {
        all[n++] = (ring_call){0, nq, 0, al, false};
    } else if (src == c->rank) {
        /* Sub-piece A sits at offset a0 of chunk r: query rows before a0 see
         * none of it, rows [a0, a0+al) are its diagonal square, later rows
         * (the rest of chunk r, then all of chunk 2P-1-r) see all of it. */
        const int64_t oa = pc.a0, ob = pc.b0 - n1;
        all[n++] = (ring_call){oa, oa + al, 0, al, true};
        all[n++] = (ring_call){oa + al, nq, 0, al, false};
        all[n++] = (ring_call){n1 + ob, n1 + ob + bl, al, al + bl, true};
        all[n++] = (ring_call){n1 + ob + bl, nq, al, al + bl, false};
    } else if (src < c->rank) {
        all[n++] = (ring_call){0, nq, 0, al, false};
    } else {
        all[n++] = (ring_call){n1, nq, 0, al + bl, false};
    }
    int kept = 0;
    for (int i = 0; i < n; ++i)
        if (all[i].r1 > all[i].r0 && all[i].k1 > all[i].k0) out[kept++] = all[i];
    return kept;
}

bool ring_subcall_at(const ring_ctx *c, const ring_call *call, int64_t i, ring_subcall *sc)
{
    const int64_t x = i * c->rows, left = call->r1 - call->r0 - x;
    if (left <= 0) return false;
    const int64_t m = left < c->rows ? left : c->rows;
    sc->r0 = call->r0 + x;
    sc->r1 = sc->r0 + m;
    sc->k0 = call->k0;
    if (call->diag) {
        /* Rows [x, x+m) of the diagonal square see keys [0, x+m), the last
         * row all of them: bottom-right alignment over exactly those keys. */
        sc->k1 = call->k0 + x + m;
        sc->causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    } else {
        sc->k1 = call->k1;
        sc->causal = ATTN_CAUSAL_NONE;
    }
    return true;
}

int64_t ring_subcall_pairs(const ring_ctx *c, const ring_subcall *sc)
{
    const int64_t m = sc->r1 - sc->r0, nk = sc->k1 - sc->k0;
    /* bottom-right: row i of m sees nk - m + 1 + i keys */
    const int64_t per_head = sc->causal == ATTN_CAUSAL_NONE ? m * nk : m * (nk - m) + m * (m + 1) / 2;
    return c->B * c->Hq * per_head;
}

/* -------------------------------------------------------------- buffers */

int64_t ring_kv_floats(const ring_ctx *c, int64_t len)
{
    return c->B * c->Hkv * len * (c->D + c->Dv) + (c->mask ? c->B * len : 0);
}

int64_t ring_grad_floats(const ring_ctx *c, int64_t len)
{
    return c->B * c->Hkv * len * (c->D + c->Dv);
}

void ring_kv_views(const ring_ctx *c, float *buf, int64_t len, attn_tensor *K, attn_tensor *V,
                   float **mask)
{
    *K = attn_tensor_4d(buf, c->B, c->Hkv, len, c->D);
    *V = attn_tensor_4d(buf + c->B * c->Hkv * len * c->D, c->B, c->Hkv, len, c->Dv);
    *mask = c->mask ? buf + c->B * c->Hkv * len * (c->D + c->Dv) : NULL;
}

void ring_grad_views(const ring_ctx *c, float *buf, int64_t len, attn_tensor *dK, attn_tensor *dV)
{
    *dK = attn_tensor_4d(buf, c->B, c->Hkv, len, c->D);
    *dV = attn_tensor_4d(buf + c->B * c->Hkv * len * c->D, c->B, c->Hkv, len, c->Dv);
}

attn_tensor ring_slice(attn_tensor t, int dim, int64_t start, int64_t len)
{
    t.data = (float *)t.data + start * t.stride[dim];
    t.shape[dim] = len;
    return t;
}

/* dst = src (or dst += src), two 4-D views of one shape. */
static void copy4(attn_tensor *dst, const attn_tensor *src, bool add)
{
    float *d = dst->data;
    const float *s = src->data;
    const int64_t *ds = dst->stride, *ss = src->stride;
    for (int64_t a = 0; a < src->shape[0]; ++a)
        for (int64_t b = 0; b < src->shape[1]; ++b)
            for (int64_t i = 0; i < src->shape[2]; ++i) {
                float *dr = d + a * ds[0] + b * ds[1] + i * ds[2];
                const float *sr = s + a * ss[0] + b * ss[1] + i * ss[2];
                if (add)
                    for (int64_t x = 0; x < src->shape[3]; ++x) dr[x * ds[3]] += sr[x * ss[3]];
                else
                    for (int64_t x = 0; x < src->shape[3]; ++x) dr[x * ds[3]] = sr[x * ss[3]];
            }
}

void ring_add(attn_tensor *dst, const attn_tensor *src) { copy4(dst, src, true); }

void ring_fill(attn_tensor *t, float value)
{
    float *d = t->data;
    for (int64_t a = 0; a < t->shape[0]; ++a)
        for (int64_t b = 0; b < t->shape[1]; ++b)
            for (int64_t i = 0; i < t->shape[2]; ++i) {
                float *r = d + a * t->stride[0] + b * t->stride[1] + i * t->stride[2];
                for (int64_t x = 0; x < t->shape[3]; ++x) r[x * t->stride[3]] = value;
            }
}

void ring_pack_kv(ring_ctx *c, const attn_tensor *k, const attn_tensor *v, ring_piece pc, float *buf)
{
    const double t0 = ring_now();
    const int64_t len = pc.alen + pc.blen, nk = c->nk[c->rank];
    attn_tensor K, V;
    float *mask;
    ring_kv_views(c, buf, len, &K, &V, &mask);
    const int64_t from[2] = {pc.a0, pc.b0}, n[2] = {pc.alen, pc.blen};
    int64_t at = 0;
    for (int part = 0; part < 2; ++part) {
        if (!n[part]) continue;
        attn_tensor ks = ring_slice(*k, 2, from[part], n[part]), vs = ring_slice(*v, 2, from[part], n[part]);
        attn_tensor kd = ring_slice(K, 2, at, n[part]), vd = ring_slice(V, 2, at, n[part]);
        copy4(&kd, &ks, false);
        copy4(&vd, &vs, false);
        if (mask)
            for (int64_t b = 0; b < c->B; ++b)
                memcpy(mask + b * len + at, c->maskf + b * nk + from[part],
                       sizeof(float) * (size_t)n[part]);
        at += n[part];
    }
    c->tm.pack_s += ring_now() - t0;
}

void ring_unpack_grad(ring_ctx *c, ring_piece pc, float *buf, attn_tensor *dk, attn_tensor *dv)
{
    const double t0 = ring_now();
    const int64_t len = pc.alen + pc.blen;
    attn_tensor dK, dV;
    ring_grad_views(c, buf, len, &dK, &dV);
    const int64_t to[2] = {pc.a0, pc.b0}, n[2] = {pc.alen, pc.blen};
    int64_t at = 0;
    for (int part = 0; part < 2; ++part) {
        if (!n[part]) continue;
        attn_tensor ks = ring_slice(dK, 2, at, n[part]), vs = ring_slice(dV, 2, at, n[part]);
        if (dk) {
            attn_tensor kd = ring_slice(*dk, 2, to[part], n[part]);
            copy4(&kd, &ks, false);
        }
        if (dv) {
            attn_tensor vd = ring_slice(*dv, 2, to[part], n[part]);
            copy4(&vd, &vs, false);
        }
        at += n[part];
    }
    c->tm.pack_s += ring_now() - t0;
}

attn_tensor ring_mask_view(const ring_ctx *c, float *mask, int64_t len, int64_t k0, int64_t k1)
{
    attn_tensor m;
    memset(&m, 0, sizeof m);
    m.data = mask + k0;
    m.dtype = ATTN_F32;
    m.ndim = 4;
    m.shape[0] = c->B, m.shape[1] = 1, m.shape[2] = 1, m.shape[3] = k1 - k0;
    m.stride[0] = len, m.stride[1] = 0, m.stride[2] = 0, m.stride[3] = 1;
    return m;
}

/* ------------------------------------------------------------------ MPI */

static void mpi_failed(ring_ctx *c, const char *what, int rc)
{
    if (c->failed != ATTN_OK) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    c->failed = ring_fail(&c->fail_err, ATTN_ERR_IO, "%s failed: %s", what, text);
}

void ring_isend(ring_ctx *c, const float *buf, int64_t count, int tag, MPI_Request *req)
{
    const double t0 = ring_now();
    int rc = MPI_Isend(buf, (int)count, MPI_FLOAT, c->right, tag, c->comm, req);
    if (rc != MPI_SUCCESS) mpi_failed(c, "MPI_Isend", rc), *req = MPI_REQUEST_NULL;
    c->tm.bytes_sent += count * (int64_t)sizeof(float);
    c->tm.comm_s += ring_now() - t0;
}

void ring_irecv(ring_ctx *c, float *buf, int64_t count, int tag, MPI_Request *req)
{
    const double t0 = ring_now();
    int rc = MPI_Irecv(buf, (int)count, MPI_FLOAT, c->left, tag, c->comm, req);
    if (rc != MPI_SUCCESS) mpi_failed(c, "MPI_Irecv", rc), *req = MPI_REQUEST_NULL;
    c->tm.comm_s += ring_now() - t0;
}

void ring_wait(ring_ctx *c, MPI_Request *req)
{
    if (*req == MPI_REQUEST_NULL) return;
    const double t0 = ring_now();
    /* Poll, sleeping briefly between tests, rather than MPI_Wait's busy
     * loop: a waiting rank then leaves its core to the ranks (or other
     * processes) it shares it with. A tick lasts milliseconds; 20 us of
     * extra latency is noise. */
    for (int spins = 0;; ++spins) {
        int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            mpi_failed(c, "MPI_Test", rc);
            *req = MPI_REQUEST_NULL;
            break;
        }
        if (done) break;
        if (spins >= 64) {
            const struct timespec pause = {0, 20000};
            nanosleep(&pause, NULL);
        }
    }
    c->tm.comm_s += ring_now() - t0;
}

void ring_progress(ring_ctx *c, MPI_Request *const *reqs, int n)
{
    const double t0 = ring_now();
    for (int i = 0; i < n; ++i) {
        int done = 0;
        /* the caller's handles: a completed request becomes MPI_REQUEST_NULL */
        if (*reqs[i] != MPI_REQUEST_NULL) MPI_Test(reqs[i], &done, MPI_STATUS_IGNORE);
    }
    c->tm.comm_s += ring_now() - t0;
}

/* --------------------------------------------------------------- stream */

float *ring_kv_tick(ring_ctx *c, ring_kv_stream *st, const attn_tensor *k, const attn_tensor *v,
                    int64_t t, ring_piece *pc, int *src)
{
    const int P = c->P, s = (int)(t % P);
    const int64_t j = t / P;
    *src = (c->rank - s + P) % P;
    *pc = ring_piece_of(c, *src, j);
    const int slot = (int)(t % RING_SLOTS);
    if (s == 0) {
        ring_wait(c, &st->send[slot]);
        ring_pack_kv(c, k, v, *pc, st->slot[slot]);
    } else {
        ring_wait(c, &st->recv);
    }
    if (s < P - 1)
        ring_isend(c, st->slot[slot], ring_kv_floats(c, pc->alen + pc->blen), RING_TAG_KV,
                   &st->send[slot]);
    const int64_t next = t + 1;
    if (next < P * c->pieces && next % P != 0) {
        const int ns = (int)(next % RING_SLOTS), nsrc = (c->rank - (int)(next % P) + P) % P;
        const ring_piece np = ring_piece_of(c, nsrc, next / P);
        ring_wait(c, &st->send[ns]);
        ring_irecv(c, st->slot[ns], ring_kv_floats(c, np.alen + np.blen), RING_TAG_KV, &st->recv);
    }
    return st->slot[slot];
}

void ring_kv_drain(ring_ctx *c, ring_kv_stream *st)
{
    for (int i = 0; i < RING_SLOTS; ++i) ring_wait(c, &st->send[i]);
    ring_wait(c, &st->recv);
}
