/*
 * run_check.c - what `dsr1 run` checks before the model loads
 * (run_batch.h): the files named on the command line, and a read-ahead of
 * the input and of the output being resumed.
 *
 * Why before: a model can take minutes to load, and a mistake found after
 * that costs the user those minutes, or worse, a file. Nothing here writes
 * except the --resume cut of a torn last record (common_resume.c), which
 * is what resuming means anyway.
 *
 * Same-file detection uses st_dev/st_ino, so `--in F --out ./F` and
 * hard links are caught, not just equal strings.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "run_batch.h"

/* ---- files ---------------------------------------------------------------- */

static int check_in(const dsr1_run_opts *o, struct stat *in_st, int *have)
{
    *have = 0;
    if (!o->in || !strcmp(o->in, "-")) return 0;
    if (stat(o->in, in_st) != 0)
        return dsr1_cli_usage("run", "--in %s: %s", o->in, strerror(errno));
    if (S_ISDIR(in_st->st_mode))
        return dsr1_cli_usage("run", "--in %s: a directory, expected a JSONL file", o->in);
    if (access(o->in, R_OK) != 0)
        return dsr1_cli_usage("run", "--in %s: %s", o->in, strerror(errno));
    *have = 1;
    return 0;
}

/* The directory part of path ("." when none) into dir. */
static void dir_of(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == path) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

int dsr1_run_check_files(const dsr1_run_opts *o)
{
    struct stat in_st, out_st;
    int have_in;
    if (check_in(o, &in_st, &have_in)) return 2;
    int to_stdout = !strcmp(o->out, "-");
    if (o->resume && to_stdout)
        return dsr1_cli_usage("run", "--resume needs --out FILE (it reads back what is there)");
    if (to_stdout) return 0;
    if (stat(o->out, &out_st) == 0) {
        if (S_ISDIR(out_st.st_mode))
            return dsr1_cli_usage("run", "--out %s: a directory, expected a file name", o->out);
        if (have_in && in_st.st_dev == out_st.st_dev && in_st.st_ino == out_st.st_ino)
            return dsr1_cli_usage("run", "--in and --out are the same file (%s); the results "
                                  "would overwrite the requests", o->out);
        if (access(o->out, W_OK) != 0)
            return dsr1_cli_usage("run", "--out %s: %s", o->out, strerror(errno));
        if (S_ISREG(out_st.st_mode) && out_st.st_size > 0 && !o->resume && !o->overwrite)
            return dsr1_cli_usage("run", "--out %s exists (%lld bytes); add --resume to "
                                  "continue it or --overwrite to replace it", o->out,
                                  (long long)out_st.st_size);
        return 0;
    }
    if (errno != ENOENT) return dsr1_cli_usage("run", "--out %s: %s", o->out, strerror(errno));
    char dir[4096];
    struct stat d;
    dir_of(o->out, dir, sizeof dir);
    if (stat(dir, &d) != 0 || !S_ISDIR(d.st_mode))
        return dsr1_cli_usage("run", "--out %s: the directory %s does not exist", o->out, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return dsr1_cli_usage("run", "--out %s: cannot create files in %s: %s", o->out, dir,
                              strerror(errno));
    return 0;
}

/* ---- read-ahead ----------------------------------------------------------- */

static void add_done(void *ctx, const char *line, size_t len)
{
    dsr1_run_plan *p = ctx;
    char *id = dsr1_run_record_id(line, len);
    if (id) dsr1_run_idset_add(&p->done, id);
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

/* Count the requests and find duplicate ids (up to 3 named). */
static int scan_input(dsr1_run_plan *p, const dsr1_run_opts *o, dsr1_error *err)
{
    dsr1_linereader *r;
    DSR1_TRY(dsr1_common_reader_open(&r, o->in, err));
    dsr1_common_reader_set_max_line(r, o->max_line_bytes);
    dsr1_run_idset seen = {0};
    char dups[400] = "";
    int n_dup = 0, rc;
    long line_no = 0;
    char *line;
    size_t len;
    while (!(rc = dsr1_common_reader_next(r, &line, &len, err)) && line) {
        line_no++;
        int too_long = dsr1_common_reader_too_long(r) != 0;
        if (!too_long && blank(line, len)) continue;
        p->total++; /* an over-long line gets a record too */
        if (too_long) continue;
        int custom, bad;
        char msg[8];
        char *id = dsr1_run_line_id(line, len, line_no, &custom, &bad, msg, sizeof msg);
        long first = 0;
        if (!id || dsr1_run_idset_put(&seen, id, line_no, &first)) {
            rc = dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory reading ids", o->in);
            break;
        }
        if (first && n_dup++ < 3) {
            size_t u = strlen(dups);
            char *again = dsr1_run_line_id(line, len, line_no, &custom, &bad, msg, sizeof msg);
            snprintf(dups + u, sizeof dups - u, "%s%.80s on lines %ld and %ld", u ? ", " : "",
                     again ? again : "?", first, line_no);
            free(again);
        }
    }
    dsr1_run_idset_free(&seen);
    dsr1_common_reader_close(r);
    if (!rc && n_dup)
        rc = dsr1_errorf(err, DSR1_EINVAL, "%s: duplicate id%s %s%s; ids must be unique, "
                         "since --resume finds finished requests by id", o->in,
                         n_dup > 1 ? "s" : "", dups, n_dup > 3 ? ", ..." : "");
    return rc;
}

int dsr1_run_plan_make(dsr1_run_plan *p, const dsr1_run_opts *o, dsr1_error *err)
{
    memset(p, 0, sizeof *p);
    struct stat st;
    if (o->in && strcmp(o->in, "-") && stat(o->in, &st) == 0 && S_ISREG(st.st_mode))
        DSR1_TRY(scan_input(p, o, err));
    if (o->in_text) p->total = 1;
    if (o->resume)
        DSR1_TRY(dsr1_common_read_back(o->out, add_done, p, p->note, sizeof p->note, err));
    return 0;
}

void dsr1_run_plan_free(dsr1_run_plan *p) { dsr1_run_idset_free(&p->done); }
