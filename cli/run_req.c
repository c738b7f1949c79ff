/*
 * run_req.c - parsing `dsr1 run` input lines (declared in run_req.h); the
 * result records are written by run_out.c.
 *
 * Accepted shapes, per line:
 *   {"id": ..., "messages": [...], "tools"?: [...], <fields>}
 *   {"id": ..., "prompt": "raw text", <fields>}
 *   {"custom_id": ..., "method": "POST", "url": ..., "body": {"messages" |
 *       "prompt": ..., <fields>}}   (the OpenAI batch-file shape)
 * Fields: the sampling settings of the shared table (common.h: OpenAI's
 * names plus vLLM's top_k/min_p/repetition_penalty, and their aliases),
 * n, logprobs, top_logprobs, stop (a string or an array of strings),
 * stop_token_ids, model. A field that is none of these is reported (with
 * the known name it is probably a typo of) and ignored, or refused when
 * strict; a known OpenAI field dsr1 does not implement the same way.
 *
 * Not here: rendering the template or tokenizing (that needs the model), so
 * an unknown role or an over-long prompt is reported by the caller.
 */
#include "run_req.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

void dsr1_run_defaults_init(dsr1_run_defaults *d)
{
    memset(d, 0, sizeof *d);
    d->max_tokens = 4096;
    dsr1_sampling_default(&d->sampling);
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* ---- ids ------------------------------------------------------------------ */

/* The id: "id" or "custom_id", a string or a finite number; else "line-N".
 * A number that is not finite (1e999 parses as inf) would be written as
 * null and never match on --resume: *bad. */
static char *parse_id(const cJSON *root, long line_no, int *custom, int *bad, char *msg,
                      size_t cap)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
    *custom = 0;
    *bad = 0;
    if (!id || cJSON_IsNull(id)) {
        id = cJSON_GetObjectItemCaseSensitive(root, "custom_id");
        *custom = id != NULL;
    }
    const char *key = *custom ? "custom_id" : "id";
    if (id && cJSON_IsString(id)) return cJSON_PrintUnformatted(id);
    if (id && cJSON_IsNumber(id) && isfinite(id->valuedouble)) return cJSON_PrintUnformatted(id);
    if (id && !cJSON_IsNull(id)) {
        *bad = 1;
        snprintf(msg, cap, "\"%s\": expected a string or a finite number (write large or "
                 "odd ids as strings)", key);
    }
    *custom = 0;
    char buf[48];
    snprintf(buf, sizeof buf, "\"line-%ld\"", line_no);
    return xstrdup(buf);
}

char *dsr1_run_line_id(const char *line, size_t len, long line_no, int *custom, int *bad,
                       char *msg, size_t cap)
{
    cJSON *root = cJSON_ParseWithLength(line, len);
    char *id = parse_id(cJSON_IsObject(root) ? root : NULL, line_no, custom, bad, msg, cap);
    cJSON_Delete(root);
    return id;
}

/* The offset of a \u0000 escape in the JSON text, or -1. cJSON would end
 * the string there and the rest of the prompt would silently vanish. */
static long nul_escape(const char *s, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) return (long)i;
        i++; /* skip the escaped character (so \\u0000 is text) */
    }
    return -1;
}

/* ---- fields --------------------------------------------------------------- */

/* A number field within [lo, hi] (an integer when asked). */
static int num_field(const cJSON *v, const char *key, double lo, double hi, int integer,
                     double *out, dsr1_error *err)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return dsr1_errorf(err, DSR1_EINVAL, "\"%s\": expected a number in [%g, %g]", key, lo,
                           hi);
    if (integer && v->valuedouble != floor(v->valuedouble))
        return dsr1_errorf(err, DSR1_EINVAL, "\"%s\": expected an integer", key);
    *out = v->valuedouble;
    return 0;
}

static int add_stop(dsr1_run_req *r, const char *s)
{
    if (!*s) return 0; /* an empty stop string would match everywhere */
    char **n = realloc(r->stop, (r->n_stop + 1) * sizeof *n);
    if (!n) return -1;
    r->stop = n;
    if (!(r->stop[r->n_stop] = xstrdup(s))) return -1;
    size_t l = strlen(s);
    if (l > r->max_stop_len) r->max_stop_len = l;
    r->n_stop++;
    return 0;
}

static int parse_stop(dsr1_run_req *r, const cJSON *v, dsr1_error *err)
{
    if (cJSON_IsString(v)) {
        if (add_stop(r, v->valuestring)) return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
        return 0;
    }
    if (!cJSON_IsArray(v))
        return dsr1_errorf(err, DSR1_EINVAL, "\"stop\": expected a string or an array of strings");
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsString(e))
            return dsr1_errorf(err, DSR1_EINVAL, "\"stop\": expected an array of strings");
        if (add_stop(r, e->valuestring)) return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    }
    return 0;
}

static int parse_stop_ids(dsr1_run_req *r, const cJSON *v, dsr1_error *err)
{
    int n = cJSON_GetArraySize(v);
    if (!cJSON_IsArray(v))
        return dsr1_errorf(err, DSR1_EINVAL, "\"stop_token_ids\": expected an array of token ids");
    if (n && !(r->stop_ids = malloc((size_t)n * sizeof *r->stop_ids)))
        return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        double x;
        DSR1_TRY(num_field(e, "stop_token_ids", 0, 2147483647.0, 1, &x, err));
        r->stop_ids[r->n_stop_ids++] = (int32_t)x;
    }
    return 0;
}

/* Fields of the request that are not settings. */
static const char *const structural[] = {
    "id", "custom_id", "method", "url", "body", "messages", "prompt", "tools", "model", "n",
    "logprobs", "top_logprobs", "stop", "stop_token_ids", "user", "metadata", "store",
    "stream", "stream_options", "tool_choice", "parallel_tool_calls",
};
/* OpenAI fields dsr1 accepts but does not act on: reported like typos. */
static const char *const unsupported[] = {"response_format", "logit_bias", "reasoning_effort",
                                          "modalities", "audio", "prediction", "service_tier",
                                          "web_search_options", "functions", "function_call"};

static int in_list(const char *k, const char *const *l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, l[i])) return 1;
    return 0;
}

/* Every name a field could have meant: structural ones and the settings. */
static const char *suggest_field(const char *k)
{
    const char *cand[64];
    size_t n = 0, ns;
    const dsr1_setting *t = dsr1_common_settings(&ns);
    for (size_t i = 0; i < sizeof structural / sizeof *structural; i++) cand[n++] = structural[i];
    for (size_t i = 0; i < ns && n < 64; i++) cand[n++] = t[i].name;
    return dsr1_common_suggest(k, cand, n);
}

/* An unknown or unsupported field: a warning, or with strict an error. */
static int odd_field(dsr1_run_req *r, const char *k, int strict, dsr1_error *err)
{
    char msg[224];
    const char *near = suggest_field(k);
    if (in_list(k, unsupported, sizeof unsupported / sizeof *unsupported))
        snprintf(msg, sizeof msg, "field \"%s\" is not supported by dsr1", k);
    else if (near)
        snprintf(msg, sizeof msg, "unknown field \"%.64s\" (did you mean \"%s\"?)", k, near);
    else
        snprintf(msg, sizeof msg, "unknown field \"%.64s\"", k);
    if (strict) return dsr1_errorf(err, DSR1_EINVAL, "%s (--strict)", msg);
    if (r->n_warn < DSR1_RUN_MAX_WARN) {
        dsr1_run_warn *w = &r->warn[r->n_warn++];
        snprintf(w->field, sizeof w->field, "%.63s", k);
        snprintf(w->msg, sizeof w->msg, "%s; ignored", msg);
    }
    return 0;
}

static void set_setting(dsr1_run_req *r, const char *name, double x, double *seed)
{
    dsr1_sampling *s = &r->sampling;
    if (!strcmp(name, "max_tokens")) r->max_tokens = (int)x;
    else if (!strcmp(name, "temperature")) s->temperature = (float)x;
    else if (!strcmp(name, "top_p")) s->top_p = (float)x;
    else if (!strcmp(name, "top_k")) s->top_k = x < 0 ? 0 : (int)x;
    else if (!strcmp(name, "min_p")) s->min_p = (float)x;
    else if (!strcmp(name, "repetition_penalty")) s->repetition_penalty = (float)x;
    else if (!strcmp(name, "presence_penalty")) s->presence_penalty = (float)x;
    else if (!strcmp(name, "frequency_penalty")) s->frequency_penalty = (float)x;
    else if (!strcmp(name, "seed")) *seed = x;
}

/* One field of the request object (or of "body"). */
static int parse_field(dsr1_run_req *r, const cJSON *v, double *seed, int strict,
                       dsr1_error *err)
{
    const char *k = v->string;
    double x;
    if (cJSON_IsNull(v)) return 0; /* null means unset in OpenAI's API */
    const dsr1_setting *st = dsr1_common_setting(k);
    if (st && strcmp(k, "n") && k[0] != '-') {
        double lo = st->lo, hi = st->hi;
        if (!strcmp(st->name, "top_k")) lo = -1; /* vLLM: -1 = off */
        if (!strcmp(st->name, "seed")) lo = -hi; /* OpenAI: -1 = unset */
        DSR1_TRY(num_field(v, k, lo, hi, st->integer, &x, err));
        set_setting(r, st->name, x, seed);
        return 0;
    }
    if (!strcmp(k, "n")) {
        DSR1_TRY(num_field(v, k, 1, DSR1_RUN_MAX_N, 1, &x, err));
        r->n = (int)x;
    } else if (!strcmp(k, "logprobs")) {
        if (!cJSON_IsBool(v)) return dsr1_errorf(err, DSR1_EINVAL, "\"logprobs\": expected true or false");
        r->logprobs = cJSON_IsTrue(v);
    } else if (!strcmp(k, "top_logprobs")) {
        DSR1_TRY(num_field(v, k, 0, DSR1_MAX_TOP_LOGPROBS, 1, &x, err));
        r->top_logprobs = (int)x;
    } else if (!strcmp(k, "stop")) {
        return parse_stop(r, v, err);
    } else if (!strcmp(k, "stop_token_ids")) {
        return parse_stop_ids(r, v, err);
    } else if (!strcmp(k, "model")) {
        if (cJSON_IsString(v) && !(r->model = xstrdup(v->valuestring)))
            return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    } else if (!strcmp(k, "tool_choice")) {
        if (!cJSON_IsString(v) || strcmp(v->valuestring, "auto")) return odd_field(r, k, strict, err);
    } else if (!strcmp(k, "stream")) {
        if (cJSON_IsTrue(v)) return odd_field(r, k, strict, err);
    } else if (!in_list(k, structural, sizeof structural / sizeof *structural)) {
        return odd_field(r, k, strict, err);
    }
    return 0;
}

static int parse_fields(dsr1_run_req *r, const cJSON *o, const dsr1_run_defaults *d,
                        dsr1_error *err)
{
    double seed = -1;
    r->n = 1;
    const cJSON *v;
    cJSON_ArrayForEach(v, o) DSR1_TRY(parse_field(r, v, &seed, d->strict, err));
    if (r->top_logprobs && !r->logprobs) r->logprobs = 1;
    /* Per-request RNG stream: the request's own seed, else base + line, so
     * a request draws the same tokens alone, in a batch or after resume. */
    if (seed != -1) /* -1 (the OpenAI "unset") falls back too */
        r->sampling.seed = (uint64_t)(int64_t)seed;
    else
        r->sampling.seed = d->sampling.seed + (uint64_t)r->line;
    for (size_t i = 0; !r->stop && i < d->n_stop; i++)
        if (add_stop(r, d->stop[i])) return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    return 0;
}

/* --system: insert {"role":"system"} first unless the chat has one. */
static int add_system(cJSON *body, const char *system)
{
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
    if (!system || !cJSON_IsArray(msgs)) return 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (cJSON_IsString(role) && !strcmp(role->valuestring, "system")) return 0;
    }
    cJSON *sys = cJSON_CreateObject();
    if (!sys || !cJSON_AddStringToObject(sys, "role", "system") ||
        !cJSON_AddStringToObject(sys, "content", system) ||
        !cJSON_InsertItemInArray(msgs, 0, sys)) {
        cJSON_Delete(sys);
        return -1;
    }
    return 0;
}

static int parse_body(dsr1_run_req *r, cJSON *body, const dsr1_run_defaults *d,
                      dsr1_error *err)
{
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    if (msgs && prompt)
        return dsr1_errorf(err, DSR1_EINVAL, "both \"messages\" and \"prompt\"; expected one");
    if (prompt) {
        if (!cJSON_IsString(prompt))
            return dsr1_errorf(err, DSR1_EINVAL, "\"prompt\": expected a string");
        if (!(r->prompt = xstrdup(prompt->valuestring)))
            return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    } else if (msgs) {
        if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
            return dsr1_errorf(err, DSR1_EINVAL, "\"messages\": expected a non-empty array");
        if (add_system(body, d->system)) return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
        DSR1_TRY(dsr1_chat_from_json(&r->chat, body, err));
    } else {
        return dsr1_errorf(err, DSR1_EINVAL, "expected \"messages\" or \"prompt\"");
    }
    return parse_fields(r, body, d, err);
}

/* The OpenAI envelope: only custom_id, method, url and body belong there. */
static int check_envelope(dsr1_run_req *r, const cJSON *root, int strict, dsr1_error *err)
{
    static const char *const env[] = {"id", "custom_id", "method", "url", "body"};
    const cJSON *v;
    cJSON_ArrayForEach(v, root)
        if (!in_list(v->string, env, sizeof env / sizeof *env))
            DSR1_TRY(odd_field(r, v->string, strict, err));
    return 0;
}

int dsr1_run_req_parse(dsr1_run_req *r, const char *line, size_t len, long line_no,
                       const dsr1_run_defaults *d, dsr1_error *err)
{
    memset(r, 0, sizeof *r);
    r->line = line_no;
    r->sampling = d->sampling;
    r->max_tokens = d->max_tokens;
    r->n = 1;
    cJSON *root = cJSON_ParseWithLength(line, len);
    char idmsg[160];
    int bad_id = 0;
    r->id_json = parse_id(cJSON_IsObject(root) ? root : NULL, line_no, &r->custom_id, &bad_id,
                          idmsg, sizeof idmsg);
    long nul = root ? nul_escape(line, len) : -1;
    int rc;
    if (!r->id_json) {
        rc = dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    } else if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= line && at <= line + len ? (long)(at - line) : -1;
        rc = dsr1_errorf(err, DSR1_EINVAL, "not valid JSON (at byte %ld)", off);
    } else if (!cJSON_IsObject(root)) {
        rc = dsr1_errorf(err, DSR1_EINVAL, "expected a JSON object");
    } else if (bad_id) {
        rc = dsr1_errorf(err, DSR1_EINVAL, "%s", idmsg);
    } else if (nul >= 0) {
        rc = dsr1_errorf(err, DSR1_EINVAL, "\\u0000 (a NUL character) at byte %ld: not "
                         "supported in text", nul);
    } else {
        cJSON *body = cJSON_GetObjectItemCaseSensitive(root, "body");
        if (body && !cJSON_IsObject(body))
            rc = dsr1_errorf(err, DSR1_EINVAL, "\"body\": expected an object");
        else if (body && (rc = check_envelope(r, root, d->strict, err)))
            ;
        else
            rc = parse_body(r, body ? body : root, d, err);
    }
    cJSON_Delete(root);
    if (rc) {
        char *keep = r->id_json;
        int custom = r->custom_id;
        r->id_json = NULL;
        dsr1_run_req_clear(r);
        r->id_json = keep;
        r->custom_id = custom;
        r->line = line_no;
    }
    return rc;
}

void dsr1_run_req_clear(dsr1_run_req *r)
{
    free(r->id_json);
    dsr1_chat_free(r->chat);
    free(r->prompt);
    for (size_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_ids);
    free(r->model);
    memset(r, 0, sizeof *r);
}

char *dsr1_run_record_id(const char *line, size_t len)
{
    cJSON *root = cJSON_ParseWithLength(line, len);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "custom_id");
    if (!id) id = cJSON_GetObjectItemCaseSensitive(root, "id");
    char *s = id && (cJSON_IsString(id) || cJSON_IsNumber(id)) ? cJSON_PrintUnformatted(id) : NULL;
    cJSON_Delete(root);
    return s;
}

/* ---- id set ------------------------------------------------------------- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

/* Index of id's slot, or of the empty slot where it would go. */
static size_t find_slot(char **slot, size_t cap, const char *id)
{
    size_t i = (size_t)hash_str(id) & (cap - 1);
    while (slot[i] && strcmp(slot[i], id)) i = (i + 1) & (cap - 1);
    return i;
}

int dsr1_run_idset_add(dsr1_run_idset *s, char *id)
{
    long old;
    return dsr1_run_idset_put(s, id, 0, &old);
}

int dsr1_run_idset_put(dsr1_run_idset *s, char *id, long val, long *old)
{
    *old = 0;
    if (!id) return DSR1_ENOMEM;
    if ((s->n + 1) * 2 > s->cap) { /* keep the load under 1/2 */
        size_t cap = s->cap ? s->cap * 2 : 64;
        char **slot = calloc(cap, sizeof *slot);
        long *v = calloc(cap, sizeof *v);
        if (!slot || !v) {
            free(slot);
            free(v);
            free(id);
            return DSR1_ENOMEM;
        }
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->slot[i]) continue;
            size_t j = find_slot(slot, cap, s->slot[i]);
            slot[j] = s->slot[i];
            v[j] = s->val[i];
        }
        free(s->slot);
        free(s->val);
        s->slot = slot;
        s->val = v;
        s->cap = cap;
    }
    size_t i = find_slot(s->slot, s->cap, id);
    if (s->slot[i]) {
        *old = s->val[i];
        free(id);
        return 0;
    }
    s->slot[i] = id;
    s->val[i] = val;
    s->n++;
    return 0;
}

int dsr1_run_idset_has(const dsr1_run_idset *s, const char *id)
{
    return s->cap && s->slot[find_slot(s->slot, s->cap, id)] != NULL;
}

void dsr1_run_idset_free(dsr1_run_idset *s)
{
    for (size_t i = 0; i < s->cap; i++) free(s->slot[i]);
    free(s->slot);
    free(s->val);
    memset(s, 0, sizeof *s);
}

