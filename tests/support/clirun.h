/*
 * clirun.h — run the attn command-line tool from a test and capture what it
 * did: exit status, stdout and stderr (each in full), without a shell.
 * Plus small text helpers for reading numbers back out of its output.
 */
#ifndef ATTN_TEST_CLIRUN_H
#define ATTN_TEST_CLIRUN_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    int status;   /* exit status; 128 + signal if killed; -1 if it did not run */
    char *out;    /* stdout, NUL-terminated (never NULL after clirun) */
    size_t out_len;
    char *err;    /* stderr */
    size_t err_len;
} clirun_result;

/*
 * Runs program with the NULL-terminated argument list args (args[0] is the
 * first argument, not the program name). Environment: inherited, plus
 * ATTN_EXAMPLES_DIR=<source>/examples when ATTN_SOURCE_DIR is defined.
 * Returns false only if it could not be run at all.
 */
bool clirun(const char *program, const char *const *args, clirun_result *r);
/* The same with a printf-built argument list split on '\x1f' (unit
 * separator), so arguments may contain spaces: clirunf(r, "explain\x1f--x\x1f%s", m). */
bool clirunf(clirun_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with `in` (in_len bytes) fed to its standard input through a
 * pipe (not a regular file), so readers meet a stream of unknown size. */
bool clirun_input(const char *program, const char *const *args, const void *in, size_t in_len,
                  clirun_result *r);
void clirun_free(clirun_result *r);

/* Number of lines in s (a last line without '\n' counts). */
int clirun_count_lines(const char *s);

/*
 * Reads `count` numbers that follow the first line containing `label`
 * (searching from text), skipping brackets, separators and words without
 * digits. Returns false if the label is missing or fewer numbers follow
 * before a blank line.
 */
bool clirun_numbers_after(const char *text, const char *label, double *out, int count);

/* Removes ANSI escape sequences (ESC [ ... letter) in place. */
void clirun_strip_ansi(char *s);

#endif
