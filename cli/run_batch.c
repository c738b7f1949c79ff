/*
 * run_batch.c - the batch loop of `dsr1 run` (see run_batch.h).
 *
 * Input is read lazily, so memory is bounded by the window, not the file:
 * at most `parallel` sequences are in the engine, and a finished record
 * waits in the reorder ring only while an earlier line is still running.
 * The ring holds `window` records; a line is admitted only when its slot is
 * free, which is what bounds it. A non-seekable input (a pipe, a FIFO) is
 * read exactly once, here.
 *
 * A request with "n" > 1 runs as n sequences with the same prompt (choice i
 * seeded with the request's seed + i * a large odd constant, choice 0 with
 * the request's own), admitted together when n sequences are free; its
 * record is written when the last one finishes. The choices share the
 * prompt's full KV pages through the engine's prefix cache (one computes
 * them, the others take them as they appear; cached_tokens shows it).
 *
 * Every input line that is not skipped by --resume gets exactly one output
 * record, written with one write(2) as soon as it (and, unless --unordered,
 * everything before it) is done. That is what makes --resume exact: the ids
 * in the output are precisely the requests that are finished.
 *
 * Not here: option parsing, the single-prompt mode (run.c); file checks and
 * the read-ahead (run_check.c); request parsing (run_req.c); record shapes
 * (run_out.c); the text stream (run_gen.c).
 */
#include "run_batch.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "core/toolcall.h"

typedef struct choice {
    int seq;                 /* engine sequence, -1 once released */
    int done;
    dsr1_finish fin;
    dsr1_gen gen;
    dsr1_run_logprob *lp;    /* [n_lp] when the request wants logprobs */
    size_t n_lp, cap_lp;
    char msg[256];           /* the engine's message when it failed */
    dsr1_seq_stats st;       /* taken when it finished */
} choice;

typedef struct job {
    int live;                /* parsed and not yet written */
    int started;             /* its sequences were submitted */
    long k;                  /* output slot */
    dsr1_run_req req;
    choice *ch;              /* [req.n] */
    int n_open;              /* choices still generating */
} job;

typedef struct batch {
    dsr1_engine *e;
    const dsr1_run_opts *o;
    dsr1_run_plan *plan;
    const dsr1_tokenizer *tk;
    int32_t eos;
    dsr1_linereader *rd;
    int in_eof, openai;      /* openai: -1 until the first request line decides */
    long line_no;
    dsr1_recwriter *wr;
    dsr1_run_idset seen;     /* ids of this input so far (duplicates; streaming input) */
    dsr1_run_idset warned;   /* fields already warned about */
    job *jobs;               /* [parallel + 1] */
    int n_jobs, n_live, seqs_live;
    job *waiting;            /* parsed, waiting for n free sequences */
    char **ring;             /* [window] records waiting for their turn */
    long window, next_k, next_write;
    long skipped, n_written, n_failed, gen_tokens;
    long long created;
    double t0;
    dsr1_status st;
    dsr1_event *ev;
    dsr1_toolcall_parser *tools; /* reset per choice */
} batch;

/* ---- output ------------------------------------------------------------- */

static int write_ready(batch *b, dsr1_error *err)
{
    while (b->ring[b->next_write % b->window]) {
        char **slot = &b->ring[b->next_write % b->window];
        int rc = dsr1_common_writer_put(b->wr, *slot, strlen(*slot), err);
        free(*slot);
        *slot = NULL;
        if (rc) return rc;
        b->next_write++;
        b->n_written++;
    }
    return 0;
}

/* Hand over a record (owned) for slot k. */
static int put_record(batch *b, long k, char *rec, int failed, dsr1_error *err)
{
    if (!rec) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory for a record", b->o->out);
    b->n_failed += failed;
    if (b->o->unordered) {
        int rc = dsr1_common_writer_put(b->wr, rec, strlen(rec), err);
        free(rec);
        b->next_write++;
        b->n_written++;
        return rc;
    }
    b->ring[k % b->window] = rec;
    return write_ready(b, err);
}

static int put_error(batch *b, long k, const dsr1_run_req *r, const char *code, const char *msg,
                     dsr1_error *err)
{
    char *rec = dsr1_run_error_json(r->id_json, r->custom_id, r->line, b->openai == 1, code, msg);
    return put_record(b, k, rec, 1, err);
}

/* ---- finishing ---------------------------------------------------------- */

static const char *finish_name(dsr1_finish f)
{
    switch (f) {
    case DSR1_FINISH_LENGTH: return "length";
    case DSR1_FINISH_ERROR: return "error";
    default: return "stop"; /* EOS, a stop id, or our cancel on a stop string */
    }
}

static void fill_timing(const job *j, dsr1_run_result *res)
{
    const dsr1_seq_stats *st = &j->ch[0].st;
    double done = 0, first = st->t_first_token;
    res->prompt_tokens = st->n_prompt;
    for (int i = 0; i < j->req.n; i++) {
        const dsr1_seq_stats *s = &j->ch[i].st;
        if (s->n_cached > res->cached_tokens) res->cached_tokens = s->n_cached;
        if (s->t_done > done) done = s->t_done;
        res->spec_steps += s->spec_steps;
        res->spec_drafted += s->spec_drafted;
        res->spec_accepted += s->spec_accepted;
    }
    if (done <= 0) done = dsr1_common_now();
    if (first > 0) res->ttft_ms = (first - st->t_queued) * 1e3;
    res->total_ms = (done - st->t_queued) * 1e3;
    /* Decode rate of choice 0: tokens after the first over the time after it. */
    double end = st->t_done > 0 ? st->t_done : done, dt = first > 0 ? end - first : 0;
    res->tokens_per_s = st->n_generated > 1 && dt > 0 ? (st->n_generated - 1) / dt : 0;
}

/* The text of one finished choice into c (strings malloc'd, tool calls
 * copied out of the shared parser). Returns 0 or an error for the record. */
static int choice_text(batch *b, job *j, choice *x, dsr1_run_choice *c, dsr1_error *gerr)
{
    DSR1_TRY(dsr1_gen_finish(&x->gen, gerr));
    char *answer = dsr1_gen_answer(&x->gen);
    c->reasoning = dsr1_gen_reasoning(&x->gen);
    if (!answer) return dsr1_errorf(gerr, DSR1_ENOMEM, "out of memory");
    dsr1_run_toolcall *calls = NULL;
    size_t n = 0;
    dsr1_toolcall_reset(b->tools);
    if (j->req.chat) DSR1_TRY(dsr1_gen_split_tools(b->tools, &answer, &calls, &n, gerr));
    for (size_t i = 0; i < n; i++) {
        calls[i].name = strdup(calls[i].name);
        calls[i].arguments = strdup(calls[i].arguments);
        if (!calls[i].name || !calls[i].arguments)
            return dsr1_errorf(gerr, DSR1_ENOMEM, "out of memory");
    }
    c->content = answer;
    c->tool_calls = calls;
    c->n_tool_calls = n;
    c->finish = x->gen.stopped ? "stop" : finish_name(x->fin);
    if (n && !strcmp(c->finish, "stop")) c->finish = "tool_calls";
    c->want_logprobs = j->req.logprobs;
    c->logprobs = x->lp;
    c->n_logprobs = x->n_lp;
    c->completion_tokens = x->gen.n_tokens;
    c->reasoning_tokens = x->gen.n_reasoning_tokens;
    return 0;
}

static void choice_free_text(dsr1_run_choice *c)
{
    for (size_t i = 0; i < c->n_tool_calls; i++) {
        free((char *)c->tool_calls[i].name);
        free((char *)c->tool_calls[i].arguments);
    }
    free((void *)c->tool_calls);
    free((char *)c->content);
    free((char *)c->reasoning);
}

static void job_clear(batch *b, job *j)
{
    for (int i = 0; j->ch && i < j->req.n; i++) {
        choice *x = &j->ch[i];
        if (x->seq >= 0) {
            dsr1_engine_cancel(b->e, x->seq);
            dsr1_engine_release(b->e, x->seq);
            b->seqs_live--;
        }
        dsr1_gen_free(&x->gen);
        free(x->lp);
    }
    free(j->ch);
    dsr1_run_req_clear(&j->req);
    memset(j, 0, sizeof *j);
    b->n_live--;
}

/* All choices done: build the record (or an error record) and write it. */
static int finish_job(batch *b, job *j, dsr1_error *err)
{
    int n = j->req.n;
    dsr1_run_choice *cs = calloc((size_t)n, sizeof *cs);
    dsr1_error gerr = {0};
    int grc = cs ? 0 : dsr1_errorf(&gerr, DSR1_ENOMEM, "out of memory");
    const char *fail = NULL;
    for (int i = 0; !grc && i < n; i++) {
        if (j->ch[i].fin == DSR1_FINISH_ERROR) fail = j->ch[i].msg[0] ? j->ch[i].msg : "the engine failed";
        grc = choice_text(b, j, &j->ch[i], &cs[i], &gerr);
    }
    dsr1_run_result res = {0};
    res.id_json = j->req.id_json;
    res.custom_id = j->req.custom_id;
    res.line = j->req.line;
    res.openai = b->openai == 1;
    res.model = j->req.model ? j->req.model : b->o->model_name;
    res.created = b->created;
    res.tk = b->tk;
    res.choices = cs;
    res.n_choices = (size_t)n;
    for (int i = 0; cs && i < n; i++) {
        res.completion_tokens += j->ch[i].gen.n_tokens;
        res.reasoning_tokens += j->ch[i].gen.n_reasoning_tokens;
    }
    fill_timing(j, &res);
    b->gen_tokens += res.completion_tokens;
    char *rec;
    if (grc || fail)
        rec = dsr1_run_error_json(j->req.id_json, j->req.custom_id, j->req.line, res.openai,
                                  "server_error", grc ? gerr.msg : fail);
    else
        rec = dsr1_run_result_json(&res);
    int rc = put_record(b, j->k, rec, grc || fail, err);
    for (int i = 0; cs && i < n; i++) choice_free_text(&cs[i]);
    free(cs);
    job_clear(b, j);
    return rc;
}

/* A choice ended: keep its stats, give its sequence back. */
static int end_choice(batch *b, job *j, choice *x, dsr1_finish f, const char *msg,
                      dsr1_error *err)
{
    x->done = 1;
    x->fin = f;
    if (msg) snprintf(x->msg, sizeof x->msg, "%s", msg);
    dsr1_engine_seq_stats(b->e, x->seq, &x->st);
    dsr1_engine_release(b->e, x->seq);
    x->seq = -1;
    b->seqs_live--;
    return --j->n_open == 0 ? finish_job(b, j, err) : 0;
}

/* ---- admission ---------------------------------------------------------- */

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i])) return 0;
    return 1;
}

static const char *submit_code(int rc) { return rc == DSR1_ERANGE ? "context_length_exceeded" : "invalid_request"; }

/* Render, tokenize, submit every choice. A failure of the request itself
 * becomes its error record; only output errors are returned. */
static int start_job(batch *b, job *j, dsr1_error *err)
{
    dsr1_error rerr = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    int forced = 0, nc = j->req.n;
    dsr1_run_req *r = &j->req;
    j->started = 1;
    int rc = dsr1_gen_prompt(b->tk, &b->o->prompt, r->chat, r->prompt, &ids, &n, &forced, &rerr);
    if (!rc && !(j->ch = calloc((size_t)nc, sizeof *j->ch)))
        rc = dsr1_errorf(&rerr, DSR1_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < nc; i++) {
        choice *x = &j->ch[i];
        x->seq = -1;
        rc = dsr1_gen_init(&x->gen, b->tk, b->eos, forced, r->stop, r->n_stop, NULL, NULL, &rerr);
        if (rc) break;
        dsr1_request q = {0};
        q.prompt = ids;
        q.n_prompt = n;
        q.max_tokens = r->max_tokens;
        q.sampling = r->sampling;
        q.sampling.seed += (uint64_t)i * 0x9e3779b97f4a7c15ull;
        q.stop_ids = r->stop_ids;
        q.n_stop_ids = r->n_stop_ids;
        q.reuse_seq = -1;
        q.logprobs = r->logprobs;
        q.top_logprobs = r->top_logprobs;
        rc = dsr1_engine_submit(b->e, &q, &x->seq, &rerr);
        if (rc) {
            x->seq = -1;
            break;
        }
        b->seqs_live++;
        j->n_open++;
    }
    free(ids);
    if (!rc) return 0;
    char msg[600];
    snprintf(msg, sizeof msg, "line %ld: %s", r->line, rerr.msg);
    rc = put_error(b, j->k, r, submit_code(rc), msg, err);
    job_clear(b, j);
    return rc;
}

static job *free_job(batch *b)
{
    for (int i = 0; i < b->n_jobs; i++)
        if (!b->jobs[i].live) return &b->jobs[i];
    return NULL;
}

/* The shape of the output when not forced: the first request line's. */
static int looks_openai(const char *line, size_t len)
{
    cJSON *j = cJSON_ParseWithLength(line, len);
    int yes = cJSON_IsObject(j) && (cJSON_GetObjectItemCaseSensitive(j, "custom_id") ||
                                    cJSON_GetObjectItemCaseSensitive(j, "body"));
    cJSON_Delete(j);
    return yes;
}

/* Unknown fields: one line each on stderr, the first time a field is seen. */
static void warn_fields(batch *b, const dsr1_run_req *r)
{
    for (int i = 0; i < r->n_warn; i++) {
        if (dsr1_run_idset_has(&b->warned, r->warn[i].field)) continue;
        dsr1_run_idset_add(&b->warned, strdup(r->warn[i].field));
        fprintf(stderr, "dsr1 run: line %ld: %s (reported once)\n", r->line, r->warn[i].msg);
    }
}

/* The next line: the file's, or the one in-memory request. */
static int next_line(batch *b, char **line, size_t *len, dsr1_error *err)
{
    if (!b->o->in_text) return dsr1_common_reader_next(b->rd, line, len, err);
    *line = b->line_no == 0 ? (char *)b->o->in_text : NULL;
    *len = *line ? strlen(*line) : 0;
    return 0;
}

/* One line read: parse it into j, or write its error record. Returns 1
 * when j is ready to start, 0 when the line is dealt with, <0 on error. */
static int take_line(batch *b, job *j, const char *line, size_t len, dsr1_error *err)
{
    size_t too_long = b->rd ? dsr1_common_reader_too_long(b->rd) : 0;
    if (b->openai < 0) b->openai = b->o->format == DSR1_FORMAT_AUTO ? looks_openai(line, len)
                                                                    : b->o->format == DSR1_FORMAT_OPENAI;
    dsr1_error perr = {0};
    int prc = too_long ? DSR1_EINVAL
                       : dsr1_run_req_parse(&j->req, line, len, b->line_no, &b->o->defaults, &perr);
    if (too_long) {
        memset(&j->req, 0, sizeof j->req);
        j->req.line = b->line_no;
        char idb[48];
        snprintf(idb, sizeof idb, "\"line-%ld\"", b->line_no);
        j->req.id_json = strdup(idb);
        dsr1_errorf(&perr, DSR1_EINVAL, "%zu bytes, over the limit of %zu bytes per line "
                    "(--max-line-bytes)", too_long, b->o->max_line_bytes);
    }
    if (!j->req.id_json) return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    if (dsr1_run_idset_has(&b->plan->done, j->req.id_json)) {
        b->skipped++;
        dsr1_run_req_clear(&j->req);
        return 0;
    }
    long first = 0;
    char *dup = strdup(j->req.id_json);
    if (!dup || dsr1_run_idset_put(&b->seen, dup, b->line_no, &first))
        return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    j->live = 1;
    b->n_live++;
    j->k = b->next_k++;
    if (!prc && first) {
        prc = dsr1_errorf(&perr, DSR1_EINVAL, "duplicate id %s (first on line %ld); ids must "
                          "be unique", j->req.id_json, first);
    }
    if (!prc) {
        warn_fields(b, &j->req);
        if (j->req.n <= b->o->parallel) return 1;
        prc = dsr1_errorf(&perr, DSR1_EINVAL, "\"n\": %d choices need --parallel %d or more",
                          j->req.n, j->req.n);
    }
    char msg[600];
    snprintf(msg, sizeof msg, "line %ld: %s", b->line_no, perr.msg);
    int rc = put_error(b, j->k, &j->req, "invalid_request", msg, err);
    job_clear(b, j);
    return rc ? -1 : 0;
}

/* Read lines and start requests while there is room in the engine and in
 * the reorder ring. */
static int admit(batch *b, dsr1_error *err)
{
    while (b->next_k - b->next_write < b->window) {
        if (b->waiting) {
            if (b->seqs_live + b->waiting->req.n > b->o->parallel) break;
            job *w = b->waiting;
            b->waiting = NULL;
            DSR1_TRY(start_job(b, w, err));
            continue;
        }
        if (b->in_eof || b->seqs_live >= b->o->parallel) break;
        job *j = free_job(b);
        if (!j) break;
        char *line;
        size_t len;
        DSR1_TRY(next_line(b, &line, &len, err));
        if (!line) {
            b->in_eof = 1;
            break;
        }
        b->line_no++;
        if (blank(line, len) && !(b->rd && dsr1_common_reader_too_long(b->rd))) continue;
        int t = take_line(b, j, line, len, err);
        if (t < 0) return err->code ? err->code : DSR1_EIO;
        if (t == 1) b->waiting = j;
    }
    return 0;
}

/* ---- the loop ----------------------------------------------------------- */

static job *find_job(batch *b, int seq, choice **x)
{
    for (int i = 0; i < b->n_jobs; i++) {
        job *j = &b->jobs[i];
        if (!j->live || !j->started) continue;
        for (int c = 0; c < j->req.n; c++)
            if (j->ch[c].seq == seq) {
                *x = &j->ch[c];
                return j;
            }
    }
    return NULL;
}

static int keep_logprob(choice *x, const dsr1_event *ev)
{
    if (x->n_lp == x->cap_lp) {
        size_t cap = x->cap_lp ? x->cap_lp * 2 : 64;
        dsr1_run_logprob *p = realloc(x->lp, cap * sizeof *p);
        if (!p) return -1;
        x->lp = p;
        x->cap_lp = cap;
    }
    dsr1_run_logprob *l = &x->lp[x->n_lp++];
    l->token = ev->token;
    l->logprob = ev->logprob;
    l->n_top = ev->n_top;
    memcpy(l->top_ids, ev->top_ids, sizeof l->top_ids);
    memcpy(l->top_logprobs, ev->top_logprobs, sizeof l->top_logprobs);
    return 0;
}

static int on_event(batch *b, const dsr1_event *ev, dsr1_error *err)
{
    choice *x = NULL;
    job *j = find_job(b, ev->seq, &x);
    if (!j || x->done) return 0; /* a sequence we already finished (stop string) */
    if (ev->token >= 0) {
        if (j->req.logprobs && ev->token != b->eos && !x->gen.stopped && keep_logprob(x, ev))
            return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
        int r = dsr1_gen_push(&x->gen, ev->token, err);
        if (r < 0) return r;
        if (r == 1) { /* stop string: end it here, whatever the engine says */
            dsr1_engine_cancel(b->e, x->seq);
            return end_choice(b, j, x, DSR1_FINISH_STOP, NULL, err);
        }
    }
    if (ev->finish != DSR1_FINISH_NONE) return end_choice(b, j, x, ev->finish, ev->message, err);
    return 0;
}

static void progress(batch *b, int force)
{
    double dt = dsr1_common_now() - b->t0;
    long done = b->n_written + b->skipped, total = b->plan->total;
    double tps = dt > 0 ? (double)b->gen_tokens / dt : 0;
    char eta[32] = "";
    if (total > 0 && b->n_written > 0 && done < total) {
        double left = dt / (double)b->n_written * (double)(total - done);
        snprintf(eta, sizeof eta, ", ETA %ldm%02lds", (long)left / 60, (long)left % 60);
    }
    if (total > 0)
        dsr1_common_status(&b->st, force, "dsr1 run: %ld/%ld done (%ld failed), %.1f tok/s%s",
                           done, total, b->n_failed, tps, eta);
    else
        dsr1_common_status(&b->st, force, "dsr1 run: %ld done (%ld failed), %.1f tok/s", done,
                           b->n_failed, tps);
}

static int loop(batch *b, volatile sig_atomic_t *stop, dsr1_error *err)
{
    for (;;) {
        if (*stop) return dsr1_errorf(err, DSR1_EINTR, "interrupted");
        DSR1_TRY(admit(b, err));
        if (b->seqs_live == 0) {
            if (b->in_eof && !b->waiting) return 0;
            continue;
        }
        size_t n = 0;
        DSR1_TRY(dsr1_engine_step(b->e, b->ev, &n, err));
        for (size_t i = 0; i < n; i++) DSR1_TRY(on_event(b, &b->ev[i], err));
        progress(b, 0);
    }
}

/* ---- setup -------------------------------------------------------------- */

static int open_streams(batch *b, dsr1_error *err)
{
    const dsr1_run_opts *o = b->o;
    if (b->plan->note[0] && !o->quiet) fprintf(stderr, "dsr1: %s\n", b->plan->note);
    if (b->plan->done.n && !o->quiet)
        fprintf(stderr, "dsr1: resuming: %zu records already in %s\n", b->plan->done.n, o->out);
    if (!o->in_text) {
        DSR1_TRY(dsr1_common_reader_open(&b->rd, o->in, err));
        dsr1_common_reader_set_max_line(b->rd, o->max_line_bytes);
    }
    return dsr1_common_writer_open(&b->wr, o->out, o->resume, err);
}

static void teardown(batch *b)
{
    for (int i = 0; b->jobs && i < b->n_jobs; i++)
        if (b->jobs[i].live) job_clear(b, &b->jobs[i]);
    for (long i = 0; b->ring && i < b->window; i++) free(b->ring[i]);
    free(b->ring);
    free(b->jobs);
    free(b->ev);
    dsr1_toolcall_free(b->tools);
    dsr1_run_idset_free(&b->seen);
    dsr1_run_idset_free(&b->warned);
    dsr1_common_reader_close(b->rd);
    dsr1_common_writer_close(b->wr);
}

int dsr1_run_batch(dsr1_model *m, dsr1_engine *e, const dsr1_run_opts *o,
                   dsr1_run_plan *plan, volatile sig_atomic_t *stop, long *n_failed,
                   dsr1_error *err)
{
    batch b = {0};
    b.e = e;
    b.o = o;
    b.plan = plan;
    b.tk = dsr1_model_tokenizer(m);
    b.eos = dsr1_model_config(m)->eos_token_id;
    b.openai = o->format == DSR1_FORMAT_AUTO ? -1 : o->format == DSR1_FORMAT_OPENAI;
    b.window = 4L * o->parallel + 16;
    b.n_jobs = o->parallel + 1;
    b.created = (long long)time(NULL);
    b.t0 = dsr1_common_now();
    dsr1_common_status_init(&b.st, o->quiet);
    if (!b.tk) return dsr1_errorf(err, DSR1_EUNSUPPORTED, "the model file has no tokenizer");
    b.jobs = calloc((size_t)b.n_jobs, sizeof *b.jobs);
    b.ring = calloc((size_t)b.window, sizeof *b.ring);
    b.ev = calloc(dsr1_engine_max_events(e), sizeof *b.ev);
    int rc = !b.jobs || !b.ring || !b.ev ? dsr1_errorf(err, DSR1_ENOMEM, "out of memory")
                                         : dsr1_toolcall_create(&b.tools, err);
    if (!rc) rc = open_streams(&b, err);
    if (!rc) rc = loop(&b, stop, err);
    progress(&b, 1);
    dsr1_common_status_clear(&b.st);
    if (!o->quiet)
        fprintf(stderr, "dsr1 run: %ld records written (%ld failed), %ld skipped as done, %.1f s\n",
                b.n_written, b.n_failed, b.skipped, dsr1_common_now() - b.t0);
    *n_failed = b.n_failed;
    teardown(&b);
    return rc;
}
