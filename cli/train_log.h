/* The record of a training run as the CLI sees it: one row per step, the
 * CSV log, the loss/accuracy plot, and the JSON summary fields. */
#ifndef ATTN_CLI_TRAIN_LOG_H
#define ATTN_CLI_TRAIN_LOG_H

#include "attn.h"
#include "cli.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    float loss, accuracy, lr, grad_norm;
    float heldout_accuracy, heldout_loss; /* NaN when not evaluated at this step */
    double seconds;                       /* wall time since the run started */
} train_row;

typedef struct {
    const char *name; /* "scaled", "unscaled", or the task name */
    train_row *rows;
    int64_t count, cap;
    attn_train_result result;
    double seconds;   /* whole run, evaluation included */
} train_log;

/* Appends a step; false when out of memory. */
bool train_log_add(train_log *log, const attn_train_progress *p, double seconds);
void train_log_free(train_log *log);

/* CSV with a header: run,step,loss,accuracy,lr,grad_norm,heldout_accuracy,
 * heldout_loss,seconds (held-out fields empty when not evaluated).
 * Written as output `index` of the set; returns the exit status after
 * printing any failure. */
int train_log_write_csv(cli_outputs *o, int index, const train_log *logs, int nlogs);

/* Training loss (log scale, with a moving average) and held-out accuracy
 * of each run against the step, in one SVG. title may be NULL. */
int train_log_plot(cli_outputs *o, int index, const train_log *logs, int nlogs, const char *title);

/* The summary of one run as JSON members (no braces):
 * "heldout_accuracy":…,"final_loss":…,"heldout_loss":…,"steps":…,
 * "seconds":…,"steps_per_second":…,"skipped_examples":… */
void train_log_json_fields(FILE *f, const train_log *log);

#endif
