/* Output sets: several files written all or nothing (attn.h, "output files").
 *
 * Every destination is checked and given its temporary file when it is
 * added, before the caller computes anything. Commit moves them into place
 * one by one, keeping each replaced file under a second name; if one move
 * fails, the moves already made are undone, so either every destination
 * holds its new content or every one holds what it held before. Standard
 * output goes last, since it cannot be taken back.
 */
#include "encode.h"

#include <stdlib.h>
#include <string.h>

struct attn_outputs {
    int count;
    bool closed; /* committed or failed to commit: no more use */
    attn_atomic_file files[ATTN_MAX_OUTPUTS]; /* fixed: a signal handler may walk it */
};

attn_status attn_outputs_create(attn_outputs **out, attn_error *err)
{
    RETURN_IF(!out, err, ATTN_ERR_NULL, "attn_outputs_create: out is NULL");
    *out = calloc(1, sizeof **out);
    RETURN_IF(!*out, err, ATTN_ERR_ALLOC, "output set: out of memory");
    attn_ok(err);
    return ATTN_OK;
}

attn_status attn_outputs_add(attn_outputs *o, const char *path, int *index, attn_error *err)
{
    RETURN_IF(!o, err, ATTN_ERR_NULL, "attn_outputs_add: set is NULL");
    RETURN_IF(o->closed, err, ATTN_ERR_ARG, "%s: the output set is already committed",
              path ? path : "(null)");
    RETURN_IF(o->count == ATTN_MAX_OUTPUTS, err, ATTN_ERR_ARG, "%s: more than %d outputs",
              path ? path : "(null)", ATTN_MAX_OUTPUTS);
    attn_atomic_file *f = &o->files[o->count];
    RETURN_IF_ERROR(attn_atomic_open(f, path, err));
    for (int i = 0; i < o->count; ++i)
        if (attn_destination_same(&o->files[i].dest, &f->dest)) {
            attn_status st = attn_fail(err, ATTN_ERR_ARG, "%s: the same file as output %d (%s)",
                                       f->dest.shown, i, o->files[i].dest.shown);
            attn_atomic_abort(f);
            memset(f, 0, sizeof *f);
            return st;
        }
    if (index) *index = o->count;
    o->count++;
    attn_ok(err);
    return ATTN_OK;
}

static attn_status file_at(attn_outputs *o, int index, attn_atomic_file **f, attn_error *err)
{
    RETURN_IF(!o, err, ATTN_ERR_NULL, "output set is NULL");
    RETURN_IF(index < 0 || index >= o->count, err, ATTN_ERR_ARG,
              "output index %d: the set has %d outputs", index, o->count);
    RETURN_IF(o->closed, err, ATTN_ERR_ARG, "%s: the output set is already committed",
              o->files[index].dest.shown);
    *f = &o->files[index];
    return ATTN_OK;
}

attn_status attn_outputs_write_npy(attn_outputs *o, int index, const attn_tensor *t,
                                   attn_error *err)
{
    attn_atomic_file *f = NULL;
    RETURN_IF_ERROR(file_at(o, index, &f, err));
    return attn_npy_encode(f, t, err);
}

attn_status attn_outputs_write_safetensors(attn_outputs *o, int index, const char *const *names,
                                           const attn_tensor *tensors, size_t count,
                                           attn_error *err)
{
    attn_atomic_file *f = NULL;
    RETURN_IF_ERROR(file_at(o, index, &f, err));
    return attn_safetensors_encode(f, names, tensors, count, err);
}

attn_status attn_outputs_write_model(attn_outputs *o, int index, attn_model *m, attn_error *err)
{
    attn_atomic_file *f = NULL;
    RETURN_IF_ERROR(file_at(o, index, &f, err));
    return attn_model_encode(f, m, err);
}

attn_status attn_outputs_write_bytes(attn_outputs *o, int index, const void *data, size_t size,
                                     attn_error *err)
{
    attn_atomic_file *f = NULL;
    RETURN_IF_ERROR(file_at(o, index, &f, err));
    RETURN_IF(size && !data, err, ATTN_ERR_NULL, "%s: data is NULL", f->dest.shown);
    return attn_atomic_write(f, data, size, err);
}

static void abort_all(attn_outputs *o)
{
    for (int i = o->count - 1; i >= 0; --i) attn_atomic_abort(&o->files[i]);
    o->closed = true;
}

attn_status attn_outputs_commit(attn_outputs *o, attn_error *err)
{
    RETURN_IF(!o, err, ATTN_ERR_NULL, "attn_outputs_commit: set is NULL");
    RETURN_IF(o->closed, err, ATTN_ERR_ARG, "output set: already committed");
    attn_status st = ATTN_OK;
    for (int i = 0; i < o->count && st == ATTN_OK; ++i) st = attn_atomic_finish(&o->files[i], err);
    /* files first (each undoable), standard output last */
    for (int pass = 0; pass < 2 && st == ATTN_OK; ++pass)
        for (int i = 0; i < o->count && st == ATTN_OK; ++i)
            if (o->files[i].dest.is_stdout == (pass == 1)) st = attn_atomic_swap(&o->files[i], err);
    if (st == ATTN_OK)
        for (int i = 0; i < o->count; ++i) attn_atomic_forget(&o->files[i]);
    abort_all(o); /* undoes the swaps if one failed; otherwise only frees */
    if (st == ATTN_OK) attn_ok(err);
    return st;
}

void attn_outputs_free(attn_outputs *o)
{
    if (!o) return;
    abort_all(o);
    free(o);
}

void attn_outputs_remove_temporaries(const attn_outputs *o)
{
    if (!o) return;
    /* and the slot being added: its file exists before the count includes it */
    for (int i = 0; i <= o->count && i < ATTN_MAX_OUTPUTS; ++i)
        attn_atomic_remove_signal_safe(&o->files[i]);
}
