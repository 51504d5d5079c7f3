/* Output files of a command, all or nothing, through the library's output
 * sets; temporary files are removed when SIGINT, SIGTERM or SIGHUP ends the
 * run (signals.c). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

/* "attn CMD: --lse adir: is a directory" from "adir: is a directory" (the
 * library's messages about an output start with its path, or the end of a
 * long one). */
static int report(const cli_outputs *o, int index, const attn_error *err)
{
    const char *msg = err->message[0] ? err->message : attn_status_string(err->status);
    if (index >= 0 && index < o->n)
        fprintf(stderr, "attn %s: %s %s\n", o->cmd->name, o->option[index], msg);
    else
        fprintf(stderr, "attn %s: %s\n", o->cmd->name, msg);
    return cli_exit_code(err->status);
}

int cli_outputs_begin(cli_outputs *o, const cli_command *cmd)
{
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    attn_error err = {0};
    if (attn_outputs_create(&o->set, &err) != ATTN_OK) return report(o, -1, &err);
    cli_signals_track(o->set, true);
    return CLI_OK;
}

int cli_outputs_add(cli_outputs *o, const char *option, const char *path, int *index)
{
    *index = -1;
    if (!path) return CLI_OK;
    if (o->n == ATTN_MAX_OUTPUTS) return cli_usage_error(o->cmd, "too many outputs");
    o->option[o->n] = option;
    o->path[o->n] = path;
    attn_error err = {0};
    int at;
    if (attn_outputs_add(o->set, path, &at, &err) != ATTN_OK) {
        /* "b: the same file as output 0 (a)": name the options */
        const char *same = strstr(err.message, ": the same file as output ");
        int first;
        if (same && sscanf(same, ": the same file as output %d", &first) == 1 && first >= 0 &&
            first < o->n) {
            fprintf(stderr, "attn %s: %s %s: the same file as %s %s\n", o->cmd->name, option,
                    path, o->option[first], o->path[first]);
            return CLI_USAGE;
        }
        o->n++;
        int rc = report(o, o->n - 1, &err);
        o->n--;
        return rc;
    }
    o->n++;
    *index = at;
    return CLI_OK;
}

int cli_outputs_npy(cli_outputs *o, int index, const attn_tensor *t)
{
    attn_error err = {0};
    if (index < 0 || attn_outputs_write_npy(o->set, index, t, &err) == ATTN_OK) return CLI_OK;
    return report(o, index, &err);
}

int cli_outputs_safetensors(cli_outputs *o, int index, const char *const *names,
                            const attn_tensor *tensors, size_t count)
{
    attn_error err = {0};
    if (index < 0 || attn_outputs_write_safetensors(o->set, index, names, tensors, count, &err) ==
                         ATTN_OK)
        return CLI_OK;
    return report(o, index, &err);
}

int cli_outputs_model(cli_outputs *o, int index, attn_model *m)
{
    attn_error err = {0};
    if (index < 0 || attn_outputs_write_model(o->set, index, m, &err) == ATTN_OK) return CLI_OK;
    return report(o, index, &err);
}

int cli_outputs_bytes(cli_outputs *o, int index, const void *data, size_t size)
{
    attn_error err = {0};
    if (index < 0 || attn_outputs_write_bytes(o->set, index, data, size, &err) == ATTN_OK)
        return CLI_OK;
    return report(o, index, &err);
}

int cli_outputs_commit(cli_outputs *o)
{
    /* A signal in the middle would leave some outputs moved and some not:
     * it waits until the commit has finished (or been undone). */
    attn_error err = {0};
    cli_signals_hold(true);
    attn_status st = attn_outputs_commit(o->set, &err);
    cli_signals_hold(false);
    if (st == ATTN_OK) return CLI_OK;
    /* which output failed: the message starts with its path as shown */
    for (int i = 0; i < o->n; ++i) {
        size_t len = strlen(o->path[i]);
        if (len < 160 && !strncmp(err.message, o->path[i], len) && err.message[len] == ':')
            return report(o, i, &err);
    }
    return report(o, -1, &err);
}

void cli_outputs_end(cli_outputs *o)
{
    if (!o->set) return;
    cli_signals_track(o->set, false);
    attn_outputs_free(o->set);
    o->set = NULL;
}

int cli_save_npys(const cli_command *cmd, const char *const *options, const char *const *paths,
                  const attn_tensor *tensors, int n)
{
    cli_outputs o;
    int index[ATTN_MAX_OUTPUTS];
    int rc = n > ATTN_MAX_OUTPUTS ? cli_usage_error(cmd, "too many outputs") : cli_outputs_begin(&o, cmd);
    if (rc) return rc;
    for (int i = 0; i < n && !rc; ++i) rc = cli_outputs_add(&o, options[i], paths[i], &index[i]);
    for (int i = 0; i < n && !rc; ++i) rc = cli_outputs_npy(&o, index[i], &tensors[i]);
    if (!rc) rc = cli_outputs_commit(&o);
    cli_outputs_end(&o);
    return rc;
}
