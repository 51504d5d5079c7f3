/* attn train: train the small attention model on a synthetic task and watch
 * attention learn the lookup. Progress is a bar on a terminal and plain
 * lines otherwise; --plot, --log and --json record the run. */
#include "cli.h"
#include "train_log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const cli_option train_options[] = {
    {"--task", "NAME", "recall (default) or recall-prev"},
    {"--steps", "N", "optimizer steps (recall: 1000, recall-prev: 1200)"},
    {"--batch", "B", "examples per step (default 64)"},
    {"--lr", "X", "peak learning rate (default 3e-3)"},
    {"--min-lr", "X", "final learning rate of the cosine schedule (default 3e-5)"},
    {"--warmup", "N", "linear warmup steps (default 100)"},
    {"--optimizer", "NAME", "adamw (default) or sgd"},
    {"--momentum", "X", "SGD momentum (default 0.9)"},
    {"--weight-decay", "X", "decoupled weight decay (AdamW), L2 (SGD) (default 0.01)"},
    {"--clip", "X", "clip the gradient norm to X; 0 = off (default 1)"},
    {"--embed-dim", "E", "model width (default 64)"},
    {"--heads", "H", "attention heads; E/H is the head dimension (recall: 2, recall-prev: 4)"},
    {"--pairs", "P", "(key, value) entries per example (recall: 16, recall-prev: 8)"},
    {"--keys", "K", "key vocabulary (recall: 64, recall-prev: 16)"},
    {"--values", "V", "value vocabulary (recall: 64, recall-prev: 16)"},
    {"--no-posenc", NULL, "no sinusoidal positional encoding"},
    {"--no-scale", NULL, "attention scores without the 1/sqrt(d_k) factor"},
    {"--scale-ablation", NULL,
     "train twice, with and without 1/sqrt(d_k), same seed (default E=256, H=1)"},
    {"--seed", "S", "initialisation and training data (default 1)"},
    {"--heldout", "N", "held-out examples, never trained on (default 2000)"},
    {"--eval-every", "N", "held-out evaluation period in steps (default 50)"},
    {"--threads", "N", "worker threads (default 1; the result is the same for any N)"},
    {"--save", "CKPT.safetensors", "write the trained model (torch state_dict names)"},
    {"--plot", "loss.svg", "loss and held-out accuracy against the step"},
    {"--log", "loss.csv", "every step as CSV"},
    {"--json", NULL, "end with one JSON line: heldout_accuracy, final_loss, steps, seconds, ..."},
    {"--quiet", NULL, "no progress output"},
    {0},
};

static const char train_details[] =
    "Tasks (see docs/TRAINING.md):\n"
    "  recall       P entries [key+value] in one position each, then a query key;\n"
    "               predict the value stored under it. One head suffices.\n"
    "  recall-prev  the same entries, a lone value u, then the query key;\n"
    "               predict (value under the key, u): one head must match keys,\n"
    "               another copy the previous position.\n"
    "Model: embedding (+ sinusoidal positions) -> one nn.MultiheadAttention\n"
    "layer read at the query position -> linear head -> cross-entropy.\n"
    "The loss curve depends only on the options and the seed, never on --threads.";

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* What the progress callback needs. */
typedef struct {
    train_log *log;
    double start, last_draw;
    bool quiet, tty;
    bool out_of_memory;
    int bar_width;
} progress_state;

static void print_eval_line(const attn_train_progress *p, double seconds)
{
    printf("step %5lld/%lld  loss %.4f  batch acc %5.1f%%  held-out acc %6.2f%%  lr %.2e  "
           "%.0f steps/s  %.1f s\n",
           (long long)p->step, (long long)p->total_steps, (double)p->loss,
           100.0 * p->accuracy, 100.0 * p->heldout_accuracy, (double)p->lr,
           seconds > 0 ? (double)p->step / seconds : 0.0, seconds);
    fflush(stdout); /* a line at a time, also when stdout is a file or a pipe */
}

static void draw_bar(const progress_state *st, const attn_train_progress *p, double seconds)
{
    const int w = st->bar_width;
    const int filled = (int)((double)w * (double)p->step / (double)p->total_steps);
    char bar[128];
    for (int i = 0; i < w; ++i) bar[i] = i < filled ? '#' : '.';
    bar[w] = '\0';
    printf("\r[%s] %lld/%lld  loss %.4f  %.0f steps/s  %.1f s ", bar, (long long)p->step,
           (long long)p->total_steps, (double)p->loss,
           seconds > 0 ? (double)p->step / seconds : 0.0, seconds);
    fflush(stdout);
}

static bool on_step(const attn_train_progress *p, void *user)
{
    progress_state *st = user;
    const double t = now_seconds() - st->start;
    if (!train_log_add(st->log, p, t)) {
        st->out_of_memory = true;
        return false;
    }
    if (st->quiet) return true;
    const bool evaluated = !isnan(p->heldout_accuracy);
    if (st->tty) {
        /* Evaluations become permanent lines above the bar. */
        if (evaluated) {
            printf("\r\033[K");
            print_eval_line(p, t);
        }
        if (evaluated || t - st->last_draw > 0.1 || p->step == p->total_steps) {
            draw_bar(st, p, t);
            st->last_draw = t;
        }
        if (p->step == p->total_steps) printf("\n");
    } else if (evaluated) {
        print_eval_line(p, t);
    }
    return true;
}

/* The training settings from the options. */
static int parse_config(const cli_args *a, attn_train_config *cfg, bool *ablation)
{
    const cli_command *cmd = a->cmd;
    attn_task_kind kind = ATTN_TASK_RECALL;
    const char *task = cli_get(a, "--task");
    if (task && !attn_task_from_name(task, &kind))
        return cli_usage_error(cmd, "unknown task '%s' (recall or recall-prev)", task);
    *cfg = attn_train_config_default(kind);
    *ablation = cli_flag(a, "--scale-ablation");
    if (*ablation) {
        /* A large head dimension, where the factor matters. */
        cfg->model.embed_dim = 256;
        cfg->model.num_heads = 1;
    }
    long v;
#define INT_OPT(name, lo, hi, field)                                                            \
    do {                                                                                        \
        if (cli_get(a, name)) {                                                                 \
            if (!cli_get_int(a, name, lo, hi, &v)) return CLI_USAGE;                            \
            field = v;                                                                          \
        }                                                                                       \
    } while (0)
    INT_OPT("--steps", 1, 100000000, cfg->steps);
    INT_OPT("--batch", 1, 1 << 20, cfg->batch_size);
    INT_OPT("--warmup", 0, 100000000, cfg->warmup_steps);
    INT_OPT("--embed-dim", 1, 1 << 16, cfg->model.embed_dim);
    INT_OPT("--heads", 1, 1 << 16, cfg->model.num_heads);
    INT_OPT("--pairs", 1, 4096, cfg->model.task.num_pairs);
    INT_OPT("--keys", 1, 1 << 20, cfg->model.task.num_keys);
    INT_OPT("--values", 2, 1 << 20, cfg->model.task.num_values);
    INT_OPT("--heldout", 1, 100000000, cfg->heldout_size);
    INT_OPT("--eval-every", 0, 100000000, cfg->eval_every);
    /* One thread unless asked: the model is small (a step is a few ms), a
     * second thread gains 1.6x on an idle 2-core machine but loses up to
     * 16x when another process holds the other core (docs/TRAINING.md). */
    cfg->num_threads = 1;
    if (!cli_get_threads(a, &cfg->num_threads)) return CLI_USAGE;
#undef INT_OPT
    if (cli_get(a, "--seed")) {
        if (!cli_get_u64(a, "--seed", &cfg->seed)) return CLI_USAGE;
        if (cfg->seed == cfg->heldout_seed) cfg->heldout_seed ^= 0x5A5A5A5Aull;
    }
    if ((cli_get(a, "--lr") && !cli_get_float(a, "--lr", &cfg->lr)) ||
        (cli_get(a, "--min-lr") && !cli_get_float(a, "--min-lr", &cfg->min_lr)) ||
        (cli_get(a, "--momentum") && !cli_get_float(a, "--momentum", &cfg->momentum)) ||
        (cli_get(a, "--weight-decay") &&
         !cli_get_float(a, "--weight-decay", &cfg->adamw.weight_decay)) ||
        (cli_get(a, "--clip") && !cli_get_float(a, "--clip", &cfg->clip_norm)))
        return CLI_USAGE;
    const char *opt = cli_get(a, "--optimizer");
    if (opt && !strcmp(opt, "sgd")) cfg->optimizer = ATTN_OPTIM_SGD;
    else if (opt && strcmp(opt, "adamw"))
        return cli_usage_error(cmd, "unknown optimizer '%s' (adamw or sgd)", opt);
    if (cli_flag(a, "--no-posenc")) cfg->model.positional_encoding = false;
    if (cli_flag(a, "--no-scale")) {
        if (*ablation) return cli_usage_error(cmd, "--scale-ablation already runs --no-scale");
        cfg->model.unscaled = true;
    }
    const struct { const char *name; float value; } nonneg[] = {
        {"--lr", cfg->lr}, {"--min-lr", cfg->min_lr}, {"--momentum", cfg->momentum},
        {"--weight-decay", cfg->adamw.weight_decay}, {"--clip", cfg->clip_norm}};
    for (size_t i = 0; i < sizeof nonneg / sizeof nonneg[0]; ++i)
        if (cli_get(a, nonneg[i].name) && !(nonneg[i].value >= 0.0f))
            return cli_usage_error(cmd, "%s: must be >= 0, got %g", nonneg[i].name,
                                   (double)nonneg[i].value);
    /* a zero peak learns nothing, and a floor above the peak makes the
     * "decay" climb: both are mistakes, caught before the run */
    if (!(cfg->lr > 0.0f))
        return cli_usage_error(cmd, "--lr: must be > 0 (the peak learning rate), got %g",
                               (double)cfg->lr);
    if (cfg->min_lr > cfg->lr)
        return cli_usage_error(cmd, "--min-lr %g is above the peak --lr %g (the schedule decays "
                                    "from --lr to --min-lr)",
                               (double)cfg->min_lr, (double)cfg->lr);
    if (cfg->model.task.num_keys < cfg->model.task.num_pairs)
        return cli_usage_error(cmd, "--keys %lld must be at least --pairs %lld (keys in one "
                                    "example are distinct)",
                               (long long)cfg->model.task.num_keys,
                               (long long)cfg->model.task.num_pairs);
    if (cfg->model.embed_dim % cfg->model.num_heads)
        return cli_usage_error(cmd, "--embed-dim %lld is not a multiple of --heads %lld",
                               (long long)cfg->model.embed_dim, (long long)cfg->model.num_heads);
    return CLI_OK;
}

static void print_setup(const attn_train_config *c)
{
    const attn_task *t = &c->model.task;
    printf("task %s: %d entries per example, %d keys, %d values; %lld-way classification; "
           "chance %.2f%%\n",
           attn_task_name(t->kind), (int)t->num_pairs, (int)t->num_keys, (int)t->num_values,
           (long long)attn_task_num_classes(t), 100.0 / (double)attn_task_num_classes(t));
    printf("model: embedding %lld%s -> MHA %lld heads x d_k %lld%s -> linear; %s lr %.2g, "
           "batch %lld, %lld steps, threads %d\n",
           (long long)c->model.embed_dim,
           c->model.positional_encoding ? " + sinusoidal positions" : "",
           (long long)c->model.num_heads, (long long)(c->model.embed_dim / c->model.num_heads),
           c->model.unscaled ? ", scores NOT scaled" : ", scores / sqrt(d_k)",
           c->optimizer == ATTN_OPTIM_SGD ? "SGD" : "AdamW", (double)c->lr,
           (long long)c->batch_size, (long long)c->steps,
           c->num_threads > 0 ? c->num_threads : attn_default_threads());
}

/* One training run into log; returns a CLI status. model may be NULL. */
static int run_one(const attn_train_config *cfg, train_log *log, bool quiet, attn_model **model)
{
    progress_state st = {.log = log, .quiet = quiet, .tty = isatty(STDOUT_FILENO),
                         .bar_width = 30};
    if (!quiet) print_setup(cfg);
    attn_error err = {0};
    st.start = now_seconds();
    attn_status s = attn_train(cfg, on_step, &st, model, &log->result, &err);
    log->seconds = now_seconds() - st.start;
    if (st.out_of_memory) {
        fprintf(stderr, "attn train: out of memory recording the run\n");
        return CLI_FAIL;
    }
    if (s != ATTN_OK) return cli_report("train", &err);
    if (!quiet)
        printf("%s: held-out accuracy %.2f%% (%lld examples), final loss %.4g, %lld steps in "
               "%.1f s (%.0f steps/s)\n",
               log->name, 100.0 * log->result.heldout_accuracy, (long long)cfg->heldout_size,
               (double)log->result.final_loss, (long long)log->result.steps, log->seconds,
               (double)log->result.steps / log->seconds);
    return CLI_OK;
}

static int run_train(int argc, char **argv)
{
    cli_args a;
    bool help;
    int rc = cli_parse(&cmd_train, argc, argv, &a, &help);
    if (rc != CLI_OK || help) return rc;
    attn_train_config cfg;
    bool ablation = false;
    if ((rc = parse_config(&a, &cfg, &ablation)) != CLI_OK) return rc;
    const bool quiet = cli_flag(&a, "--quiet"), json = cli_flag(&a, "--json");
    const char *save = cli_get(&a, "--save"), *plot = cli_get(&a, "--plot"),
               *csv = cli_get(&a, "--log");

    /* every destination checked before the run, written after it */
    cli_outputs outs;
    int save_at, plot_at, csv_at;
    if ((rc = cli_outputs_begin(&outs, &cmd_train))) return rc;
    if ((rc = cli_outputs_add(&outs, "--save", save, &save_at)) ||
        (rc = cli_outputs_add(&outs, "--plot", plot, &plot_at)) ||
        (rc = cli_outputs_add(&outs, "--log", csv, &csv_at))) {
        cli_outputs_end(&outs);
        return rc;
    }

    train_log logs[2] = {{.name = attn_task_name(cfg.model.task.kind)}};
    int nlogs = 1;
    attn_model *model = NULL;
    if (ablation) {
        logs[0].name = "scaled";
        logs[1].name = "unscaled";
        nlogs = 2;
    } else if (cfg.model.unscaled) {
        logs[0].name = "unscaled";
    }
    for (int r = 0; r < nlogs && rc == CLI_OK; ++r) {
        attn_train_config c = cfg;
        if (ablation) c.model.unscaled = r == 1;
        if (ablation && !quiet) printf("%s== %s run ==\n", r ? "\n" : "", logs[r].name);
        rc = run_one(&c, &logs[r], quiet, r == 0 && save ? &model : NULL);
    }
    if (rc == CLI_OK && save) rc = cli_outputs_model(&outs, save_at, model);
    char title[160];
    snprintf(title, sizeof title, "attn train --task %s%s: training loss",
             attn_task_name(cfg.model.task.kind),
             ablation ? " --scale-ablation" : cfg.model.unscaled ? " --no-scale" : "");
    if (rc == CLI_OK && plot) rc = train_log_plot(&outs, plot_at, logs, nlogs, title);
    if (rc == CLI_OK && csv) rc = train_log_write_csv(&outs, csv_at, logs, nlogs);
    if (rc == CLI_OK) rc = cli_outputs_commit(&outs);
    cli_outputs_end(&outs);
    for (int i = 0; rc == CLI_OK && !quiet && i < 3; ++i) {
        const char *done[3] = {save, plot, csv};
        if (done[i]) printf("wrote %s\n", done[i]);
    }
    if (rc == CLI_OK && json) {
        printf("{\"task\":\"%s\",\"seed\":%llu,\"threads\":%d,",
               attn_task_name(cfg.model.task.kind), (unsigned long long)cfg.seed,
               cfg.num_threads > 0 ? cfg.num_threads : attn_default_threads());
        printf("\"unscaled\":%s,", cfg.model.unscaled ? "true" : "false");
        train_log_json_fields(stdout, &logs[0]);
        if (ablation) {
            printf(",\"no_scale\":{");
            train_log_json_fields(stdout, &logs[1]);
            printf("}");
        }
        printf("}\n");
    }
    attn_model_free(model);
    for (int r = 0; r < 2; ++r) train_log_free(&logs[r]);
    return rc;
}

const cli_command cmd_train = {
    .name = "train",
    .summary = "train attention on associative recall and watch it learn",
    .usage = "[--task recall|recall-prev] [OPTIONS]",
    .details = train_details,
    .options = train_options,
    .run = run_train,
};
