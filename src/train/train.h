/* Private parts of the training code: the model layout and the flat
 * parameter segments optimizers walk. */
#ifndef ATTN_TRAIN_PRIVATE_H
#define ATTN_TRAIN_PRIVATE_H

#include "../core/internal.h"

/* Parameters: the model's own (embedding, head) plus the MHA's. */
enum { MODEL_MAX_PARAMS = 16, MODEL_NAME_LEN = 48, MODEL_SEGMENTS = 2 };

struct attn_model {
    attn_model_config cfg;
    int64_t V, E, C, N; /* vocabulary, embedding, classes, sequence length */
    attn_mha *mha;

    /* Own parameters in one flat buffer: embedding.weight (V,E), then
     * head.weight (C,E), then head.bias (C); grads alike. */
    float *params, *grads;
    size_t count;
    float *embedding, *head_w, *head_b;
    float *d_embedding, *d_head_w, *d_head_b;

    int nparams;
    char names[MODEL_MAX_PARAMS][MODEL_NAME_LEN];

    /* Activations of the last forward, for capacity examples. */
    int64_t capacity;
    int64_t forward_batch; /* batch of the last attn_model_forward, 0 if none */
    float *x;       /* (B,N,E) embeddings + positions: keys and values of the MHA */
    float *xq;      /* (B,1,E) copy of x's last position: the MHA query (a
                     * contiguous copy lets the projection be one GEMM) */
    float *y;       /* (B,1,E) MHA output at the query position */
    float *logits;  /* (B,C)   head output */
    float *dlogits; /* (B,C) */
    float *dy;      /* (B,1,E) gradient at the MHA output */
    float *dq;      /* (B,1,E) gradient at the MHA query (the last row of x) */
    float *dk;      /* (B,N,E) gradient at the MHA key input, then of all of x */
    float *dv;      /* (B,N,E) gradient at the MHA value input */
};

/* The two flat segments (own, MHA): parameters, gradients, float counts. */
void model_segments(attn_model *m, float **params, float **grads, size_t *counts);

/* A sorted set of 64-bit example fingerprints (held-out examples). */
typedef struct {
    uint64_t *hash;
    int64_t count;
} example_set;

/* Fingerprint of one example (tokens of seq_len·SLOTS ids and its target). */
uint64_t example_fingerprint(const int32_t *tokens, int64_t ntokens, int32_t target);
attn_status example_set_build(example_set *s, const int32_t *tokens, const int32_t *targets,
                              int64_t count, int64_t ntokens, attn_error *err);
bool example_set_contains(const example_set *s, uint64_t fingerprint);
void example_set_free(example_set *s);

#endif
