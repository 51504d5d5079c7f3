/* Recording a training run, and writing it as CSV, SVG and JSON. */
#include "train_log.h"
#include "svg.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool train_log_add(train_log *log, const attn_train_progress *p, double seconds)
{
    if (log->count == log->cap) {
        const int64_t cap = log->cap ? 2 * log->cap : 1024;
        train_row *rows = realloc(log->rows, sizeof(train_row) * (size_t)cap);
        if (!rows) return false;
        log->rows = rows;
        log->cap = cap;
    }
    log->rows[log->count++] = (train_row){
        .loss = p->loss, .accuracy = p->accuracy, .lr = p->lr, .grad_norm = p->grad_norm,
        .heldout_accuracy = p->heldout_accuracy, .heldout_loss = p->heldout_loss,
        .seconds = seconds,
    };
    return true;
}

void train_log_free(train_log *log)
{
    free(log->rows);
    log->rows = NULL;
    log->count = log->cap = 0;
}

/* A float, or nothing when it is NaN (CSV). */
static void csv_float(FILE *f, float v)
{
    if (!isnan(v)) fprintf(f, "%.9g", (double)v);
}

int train_log_write_csv(cli_outputs *o, int index, const train_log *logs, int nlogs)
{
    /* Built in memory, then written as one output of the set. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        fprintf(stderr, "attn train: out of memory for the log\n");
        return CLI_FAIL;
    }
    fprintf(f, "run,step,loss,accuracy,lr,grad_norm,heldout_accuracy,heldout_loss,seconds\n");
    for (int r = 0; r < nlogs; ++r)
        for (int64_t i = 0; i < logs[r].count; ++i) {
            const train_row *row = &logs[r].rows[i];
            fprintf(f, "%s,%lld,%.9g,%.6g,%.9g,%.9g,", logs[r].name, (long long)(i + 1),
                    (double)row->loss, (double)row->accuracy, (double)row->lr,
                    (double)row->grad_norm);
            csv_float(f, row->heldout_accuracy);
            fputc(',', f);
            csv_float(f, row->heldout_loss);
            fprintf(f, ",%.4f\n", row->seconds);
        }
    const bool ok = !ferror(f);
    int rc = fclose(f) == 0 && ok ? cli_outputs_bytes(o, index, text, len) : CLI_FAIL;
    if (rc == CLI_FAIL && !(ok && text)) fprintf(stderr, "attn train: out of memory for the log\n");
    free(text);
    return rc;
}

/* Geometric mean of the training loss over the last `window` steps ending
 * at i: the per-batch loss is noisy, and on a log axis a rare spike would
 * dominate an arithmetic mean. */
static double moving_average(const train_log *run, int64_t i, int64_t window)
{
    double sum = 0;
    int64_t n = 0;
    for (int64_t j = i; j >= 0 && j > i - window; --j) {
        const double l = run->rows[j].loss;
        if (l > 0 && isfinite(l)) {
            sum += log(l);
            ++n;
        }
    }
    return n ? exp(sum / (double)n) : NAN;
}

/* The arrays one run's series point into. */
typedef struct {
    double *step, *loss, *mean, *eval_step, *eval_acc;
    int64_t nevals;
    char name_loss[96], name_mean[96], name_acc[96];
} run_series;

static bool run_series_fill(run_series *s, const train_log *log)
{
    const size_t n = (size_t)(log->count > 0 ? log->count : 1);
    s->step = malloc(sizeof(double) * n);
    s->loss = malloc(sizeof(double) * n);
    s->mean = malloc(sizeof(double) * n);
    s->eval_step = malloc(sizeof(double) * n);
    s->eval_acc = malloc(sizeof(double) * n);
    if (!s->step || !s->loss || !s->mean || !s->eval_step || !s->eval_acc) return false;
    const int64_t window = log->count / 50 > 1 ? log->count / 50 : 1;
    s->nevals = 0;
    for (int64_t i = 0; i < log->count; ++i) {
        s->step[i] = (double)(i + 1);
        s->loss[i] = log->rows[i].loss;
        s->mean[i] = moving_average(log, i, window);
        if (!isnan(log->rows[i].heldout_accuracy)) {
            s->eval_step[s->nevals] = (double)(i + 1);
            s->eval_acc[s->nevals++] = 100.0 * log->rows[i].heldout_accuracy;
        }
    }
    snprintf(s->name_loss, sizeof s->name_loss, "%s: training loss per batch", log->name);
    snprintf(s->name_mean, sizeof s->name_mean, "%s: training loss, geometric mean of %lld steps",
             log->name, (long long)window);
    snprintf(s->name_acc, sizeof s->name_acc, "%s: held-out accuracy (final %.2f%%)", log->name,
             100.0 * log->result.heldout_accuracy);
    return true;
}

static void run_series_free(run_series *s)
{
    free(s->step);
    free(s->loss);
    free(s->mean);
    free(s->eval_step);
    free(s->eval_acc);
}

int train_log_plot(cli_outputs *o, int index, const train_log *logs, int nlogs, const char *title)
{
    enum { MAX_RUNS = 4 };
    if (nlogs > MAX_RUNS) nlogs = MAX_RUNS;
    run_series runs[MAX_RUNS];
    memset(runs, 0, sizeof runs);
    svg_series loss[2 * MAX_RUNS], acc[MAX_RUNS];
    int nloss = 0;
    int64_t steps = 2;
    bool ok = true;
    int rc = CLI_FAIL;
    for (int r = 0; r < nlogs && ok; ++r) {
        run_series *s = &runs[r];
        ok = run_series_fill(s, &logs[r]);
        if (!ok) break;
        const int n = (int)logs[r].count;
        steps = logs[r].count > steps ? logs[r].count : steps;
        /* The noisy per-batch loss in a light shade behind its mean. */
        loss[nloss++] = (svg_series){.name = nlogs == 1 ? s->name_loss : NULL, .x = s->step,
                                     .y = s->loss, .n = n,
                                     .colour = r == 0 ? "#c6dbef" : "#fdd0a2"};
        loss[nloss++] = (svg_series){.name = s->name_mean, .x = s->step, .y = s->mean, .n = n,
                                     .colour = svg_palette(r)};
        acc[r] = (svg_series){.name = s->name_acc, .x = s->eval_step, .y = s->eval_acc,
                              .n = (int)s->nevals, .colour = svg_palette(r),
                              .markers = s->nevals <= 60};
    }
    svg *doc = ok ? svg_new(760, 720) : NULL;
    if (doc) {
        svg_line_plot top = {.title = title ? title : "Training loss", .x_label = "step",
                             .y_label = "cross-entropy (nats)", .log_y = true,
                             .fix_x = true, .x_min = 1, .x_max = (double)steps,
                             .series = loss, .nseries = nloss};
        svg_line_plot bottom = {.title = "Held-out accuracy", .x_label = "step",
                                .y_label = "accuracy (%)", .fix_x = true, .x_min = 1,
                                .x_max = (double)steps, .fix_y = true, .y_min = 0,
                                .y_max = 100, .series = acc, .nseries = nlogs,
                                .legend = SVG_LEGEND_BOTTOM_RIGHT};
        svg_plot_lines(doc, 0, 0, 760, 420, &top);
        svg_plot_lines(doc, 0, 420, 760, 300, &bottom);
        rc = svg_save(doc, o, index);
    } else {
        fprintf(stderr, "attn train: out of memory drawing the plot\n");
    }
    svg_free(doc);
    for (int r = 0; r < nlogs; ++r) run_series_free(&runs[r]);
    return rc;
}

static void json_number(FILE *f, const char *name, double v)
{
    if (isfinite(v)) fprintf(f, "\"%s\":%.9g", name, v);
    else fprintf(f, "\"%s\":null", name);
}

void train_log_json_fields(FILE *f, const train_log *log)
{
    const attn_train_result *r = &log->result;
    json_number(f, "heldout_accuracy", r->heldout_accuracy);
    fputc(',', f);
    json_number(f, "final_loss", r->final_loss);
    fputc(',', f);
    json_number(f, "heldout_loss", r->heldout_loss);
    fprintf(f, ",\"steps\":%lld,", (long long)r->steps);
    json_number(f, "seconds", log->seconds);
    fputc(',', f);
    json_number(f, "steps_per_second", log->seconds > 0 ? (double)r->steps / log->seconds : NAN);
    fprintf(f, ",\"skipped_examples\":%lld", (long long)r->skipped_examples);
}
