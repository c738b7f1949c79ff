/*
 * run_gen.c - one sequence's text: detokenize, split reasoning/answer, match
 * stop strings, stream pieces to a sink (see run_gen.h).
 *
 * Stop strings are matched on the answer only: a stop string that happens
 * to occur while the model reasons must not end the request before it has
 * answered. A match may straddle tokens, so each new piece is searched
 * together with the last (longest stop - 1) bytes before it. The sink gets
 * the answer (longest stop - 1) bytes late, so what it streams never holds
 * any part of a matched stop string either; the held bytes go out at the
 * end (dsr1_gen_finish).
 */
#include "run_gen.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "core/dsr1.h"
#include "core/toolcall.h"
#include "run_req.h"

static int buf_add(dsr1_gen_buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        char *p = realloc(b->p, c);
        if (!p) return -1;
        b->p = p;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int dsr1_gen_init(dsr1_gen *g, const dsr1_tokenizer *tk, int32_t eos, int forced_open,
                  char *const *stop, size_t n_stop, dsr1_gen_sink sink, void *sink_ctx,
                  dsr1_error *err)
{
    memset(g, 0, sizeof *g);
    g->tk = tk;
    g->eos = eos;
    g->stop = stop;
    g->n_stop = n_stop;
    for (size_t i = 0; i < n_stop; i++)
        if (strlen(stop[i]) > g->max_stop) g->max_stop = strlen(stop[i]);
    g->sink = sink;
    g->sink_ctx = sink_ctx;
    dsr1_detok_init(&g->detok, tk);
    return dsr1_reasoning_create(&g->split, forced_open, err);
}

void dsr1_gen_free(dsr1_gen *g)
{
    dsr1_reasoning_free(g->split);
    free(g->reasoning.p);
    free(g->answer.p);
    memset(g, 0, sizeof *g);
}

/* Earliest stop-string match that ends inside the bytes from `from` on. */
static void match_stop(dsr1_gen *g, size_t from)
{
    size_t start = from > g->max_stop ? from - (g->max_stop - 1) : 0, best = (size_t)-1;
    for (size_t i = 0; i < g->n_stop; i++) {
        const char *hit = memmem(g->answer.p + start, g->answer.n - start, g->stop[i],
                                 strlen(g->stop[i]));
        if (hit && (size_t)(hit - g->answer.p) < best) best = (size_t)(hit - g->answer.p);
    }
    if (best == (size_t)-1) return;
    g->answer.n = best;
    g->answer.p[best] = 0;
    g->stopped = 1;
}

/* Send the sink the answer bytes no stop string can still claim (all of
 * them at the end or after a match). */
static void stream_answer(dsr1_gen *g, int all)
{
    if (!g->sink) return;
    size_t hold = all || g->stopped || !g->n_stop || !g->max_stop ? 0 : g->max_stop - 1;
    size_t upto = g->answer.n > hold ? g->answer.n - hold : 0;
    if (upto <= g->streamed) return;
    g->sink(g->sink_ctx, DSR1_GEN_ANSWER, g->answer.p + g->streamed, upto - g->streamed);
    g->streamed = upto;
}

/* Route one splitter delta into the buffers and the sink. */
static int take(dsr1_gen *g, const dsr1_reasoning_delta *d)
{
    if (d->n_reasoning) {
        if (buf_add(&g->reasoning, d->reasoning, d->n_reasoning)) return -1;
        if (g->sink) g->sink(g->sink_ctx, DSR1_GEN_REASONING, d->reasoning, d->n_reasoning);
    }
    if (!g->closed && dsr1_reasoning_status(g->split) == DSR1_THINK_CLOSED) {
        g->closed = 1;
        g->t_think_end = dsr1_common_now();
        if (g->sink) g->sink(g->sink_ctx, DSR1_GEN_THINK_END, "", 0);
    }
    if (d->n_answer && !g->stopped) {
        size_t from = g->answer.n;
        if (buf_add(&g->answer, d->answer, d->n_answer)) return -1;
        if (g->n_stop) match_stop(g, from);
        stream_answer(g, 0);
    }
    return 0;
}

int dsr1_gen_push(dsr1_gen *g, int32_t token, dsr1_error *err)
{
    if (g->stopped) return 1;
    g->n_tokens++;
    dsr1_think_status before = dsr1_reasoning_status(g->split);
    if (token == g->eos) return 0; /* the end marker is not text */
    char text[1024];
    size_t n = dsr1_detok_push(&g->detok, token, text, sizeof text);
    dsr1_reasoning_delta d;
    if (dsr1_reasoning_feed(g->split, text, n, &d, err)) return -1;
    if (take(g, &d)) return dsr1_errorf(err, DSR1_ENOMEM, "generated text: out of memory");
    /* A token counts as reasoning when it was read inside the block: this
     * includes the token that closes it. */
    if (before == DSR1_THINK_OPEN || dsr1_reasoning_status(g->split) == DSR1_THINK_OPEN)
        g->n_reasoning_tokens++;
    return g->stopped;
}

int dsr1_gen_finish(dsr1_gen *g, dsr1_error *err)
{
    char text[64];
    size_t n = dsr1_detok_flush(&g->detok, text, sizeof text);
    dsr1_reasoning_delta d;
    if (n && !g->stopped) {
        DSR1_TRY(dsr1_reasoning_feed(g->split, text, n, &d, err));
        if (take(g, &d)) return dsr1_errorf(err, DSR1_ENOMEM, "generated text: out of memory");
    }
    DSR1_TRY(dsr1_reasoning_finish(g->split, &d, err));
    if (take(g, &d)) return dsr1_errorf(err, DSR1_ENOMEM, "generated text: out of memory");
    stream_answer(g, 1);
    return 0;
}

dsr1_think_status dsr1_gen_think_status(const dsr1_gen *g)
{
    return dsr1_reasoning_status(g->split);
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static char *span_dup(const char *p, size_t n, int trim_front)
{
    while (trim_front && n && is_ws(*p)) p++, n--;
    while (n && is_ws(p[n - 1])) n--;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}

char *dsr1_gen_answer(const dsr1_gen *g)
{
    return span_dup(g->answer.p ? g->answer.p : "", g->answer.n, 1);
}

char *dsr1_gen_reasoning(const dsr1_gen *g)
{
    if (dsr1_reasoning_status(g->split) == DSR1_THINK_NONE) return NULL;
    return span_dup(g->reasoning.p ? g->reasoning.p : "", g->reasoning.n, 0);
}

/* ---- prompts ------------------------------------------------------------ */

/* R1's generation prompt ends "<think>\n"; skipping the reasoning is what the
 * model itself writes when it has nothing to think about. */
static const char no_think_tail[] = "\n</think>\n\n";

static int render(const dsr1_tokenizer *tk, const dsr1_prompt_opts *o, const dsr1_chat *chat,
                  const char *raw, char **text, size_t *len, dsr1_error *err)
{
    size_t bl = 0;
    const char *bos = o->bos >= 0 ? dsr1_tokenizer_token_bytes(tk, o->bos, &bl) : NULL;
    char bos_s[256] = "";
    if (bos && bl < sizeof bos_s) memcpy(bos_s, bos, bl), bos_s[bl] = 0;
    if (chat) {
        DSR1_TRY(dsr1_template_render(o->kind, chat, 1, bos ? bos_s : NULL, text, len, err));
    } else {
        size_t rl = strlen(raw);
        if (!(*text = malloc(bl + rl + 1)))
            return dsr1_errorf(err, DSR1_ENOMEM, "prompt: out of memory");
        memcpy(*text, bos_s, bl);
        memcpy(*text + bl, raw, rl + 1);
        *len = bl + rl;
    }
    if (o->no_think && chat && dsr1_reasoning_prompt_opens(*text, *len)) {
        char *t = realloc(*text, *len + sizeof no_think_tail);
        if (!t) return dsr1_errorf(err, DSR1_ENOMEM, "prompt: out of memory");
        memcpy(t + *len, no_think_tail, sizeof no_think_tail);
        *text = t;
        *len += sizeof no_think_tail - 1;
    }
    return 0;
}

int dsr1_gen_prompt(const dsr1_tokenizer *tk, const dsr1_prompt_opts *o, const dsr1_chat *chat,
                    const char *raw, int32_t **ids, size_t *n, int *forced_open,
                    dsr1_error *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc = render(tk, o, chat, raw, &text, &len, err);
    if (!rc) {
        *forced_open = dsr1_reasoning_prompt_opens(text, len);
        rc = dsr1_tokenizer_encode(tk, text, len, ids, n, err);
    }
    free(text);
    return rc;
}

int dsr1_gen_prompt_opts(dsr1_prompt_opts *o, const struct dsr1_model *m, const char *name,
                         int no_think, char *warn, size_t warn_cap, dsr1_error *err)
{
    warn[0] = 0;
    o->no_think = no_think;
    o->bos = dsr1_model_config(m)->bos_token_id;
    if (name) {
        int k = dsr1_template_parse_name(name);
        if (k < 0)
            return dsr1_errorf(err, DSR1_EINVAL, "--template %s: expected v3, r1 or raw", name);
        o->kind = (dsr1_template_kind)k;
        return 0;
    }
    dsr1_detect how;
    o->kind = dsr1_template_detect(dsr1_model_chat_template(m), &how);
    if (how == DSR1_DETECT_UNKNOWN || how == DSR1_DETECT_ABSENT)
        snprintf(warn, warn_cap, "the model's chat template is %s; using %s (--template to choose)",
                 how == DSR1_DETECT_ABSENT ? "missing" : "not one dsr1 knows",
                 dsr1_template_name(o->kind));
    return 0;
}

/* ---- tool calls ----------------------------------------------------------- */

int dsr1_gen_split_tools(dsr1_toolcall_parser *p, char **content, dsr1_run_toolcall **calls,
                         size_t *n, dsr1_error *err)
{
    dsr1_toolcall_delta d1, d2;
    DSR1_TRY(dsr1_toolcall_feed(p, *content, strlen(*content), &d1, err));
    char *text = malloc(d1.n_content + 1);
    if (!text) return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    memcpy(text, d1.content, d1.n_content);
    size_t len = d1.n_content;
    int rc = dsr1_toolcall_finish(p, &d2, err);
    char *t2 = rc ? NULL : realloc(text, len + d2.n_content + 1);
    if (!t2) {
        free(text);
        return rc ? rc : dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    }
    memcpy(t2 + len, d2.content, d2.n_content);
    len += d2.n_content;
    while (len && is_ws(t2[len - 1])) len--; /* the newlines before the markup */
    t2[len] = 0;
    *n = dsr1_toolcall_count(p);
    *calls = *n ? calloc(*n, sizeof **calls) : NULL;
    if (*n && !*calls) {
        free(t2);
        return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < *n; i++) {
        (*calls)[i].name = dsr1_toolcall_get(p, i)->name;
        (*calls)[i].arguments = dsr1_toolcall_get(p, i)->arguments;
    }
    free(*content);
    *content = t2;
    return 0;
}
