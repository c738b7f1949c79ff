/*
 * run_out.c - the result and error records of `dsr1 run` (run_req.h), in
 * the two shapes callers expect:
 *
 *   flat (dsr1's own, for "messages"/"prompt" lines): one object per
 *     request with id, content, reasoning_content, tool_calls,
 *     finish_reason, usage and timing at the top; with "n" > 1 a
 *     "choices" array too (choice 0 stays at the top).
 *   openai (for custom_id/body lines, as OpenAI's Batch API and vLLM's
 *     run-batch write): {"id", "custom_id", "response": {"status_code":
 *     200, "request_id", "body": <chat.completion>}, "error": null}, or
 *     "response": null and "error": {"code", "message"} for a request that
 *     failed.
 *
 * Pure functions of the result struct (the tokenizer only turns logprob
 * token ids into text), so tests/test_run.c checks the shapes directly.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_req.h"

/* The id value back from its JSON text (it came from cJSON, so it parses). */
static cJSON *id_item(const char *id_json)
{
    cJSON *id = cJSON_Parse(id_json);
    return id ? id : cJSON_CreateNull();
}

static void add_str_or_null(cJSON *o, const char *key, const char *s)
{
    if (s)
        cJSON_AddStringToObject(o, key, s);
    else
        cJSON_AddNullToObject(o, key);
}

static void add_tool_calls(cJSON *o, const dsr1_run_choice *c, int always)
{
    if (!c->n_tool_calls) {
        if (always) cJSON_AddNullToObject(o, "tool_calls");
        return;
    }
    cJSON *arr = cJSON_AddArrayToObject(o, "tool_calls");
    for (size_t i = 0; arr && i < c->n_tool_calls; i++) {
        cJSON *t = cJSON_CreateObject(), *f;
        char id[32];
        snprintf(id, sizeof id, "call_%zu", i);
        cJSON_AddStringToObject(t, "id", id);
        cJSON_AddStringToObject(t, "type", "function");
        f = cJSON_AddObjectToObject(t, "function");
        cJSON_AddStringToObject(f, "name", c->tool_calls[i].name);
        cJSON_AddStringToObject(f, "arguments", c->tool_calls[i].arguments);
        cJSON_AddItemToArray(arr, t);
    }
}

/* ---- logprobs --------------------------------------------------------------- */

/* Bytes as valid UTF-8: a byte that does not start a well-formed sequence
 * becomes U+FFFD (a token may hold half a character; "bytes" has them all). */
static char *utf8_clean(const char *p, size_t n)
{
    char *o = malloc(n * 3 + 1), *w = o;
    if (!o) return NULL;
    const unsigned char *s = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = k && i + k <= n && c != 0;
        for (size_t j = 1; ok && j < k; j++) ok = (s[i + j] & 0xc0) == 0x80;
        if (ok && k > 1) {
            unsigned cp = c & (0x7f >> k);
            for (size_t j = 1; j < k; j++) cp = (cp << 6) | (s[i + j] & 0x3f);
            ok = cp >= (k == 2 ? 0x80u : k == 3 ? 0x800u : 0x10000u) && cp <= 0x10ffff &&
                 !(cp >= 0xd800 && cp <= 0xdfff);
        }
        if (ok) {
            memcpy(w, s + i, k);
            w += k;
            i += k;
        } else {
            memcpy(w, "\xef\xbf\xbd", 3);
            w += 3;
            i++;
        }
    }
    *w = 0;
    return o;
}

/* {"token", "logprob", "bytes"} for one id. */
static cJSON *token_item(const dsr1_tokenizer *tk, int32_t id, float lp)
{
    cJSON *o = cJSON_CreateObject();
    size_t n = 0;
    const char *b = tk ? dsr1_tokenizer_token_bytes(tk, id, &n) : NULL;
    char *text = b ? utf8_clean(b, n) : NULL;
    if (text) {
        cJSON_AddStringToObject(o, "token", text);
    } else {
        char buf[32];
        snprintf(buf, sizeof buf, "<%d>", (int)id);
        cJSON_AddStringToObject(o, "token", buf);
    }
    free(text);
    /* -inf is not JSON: OpenAI writes -9999.0 for "impossible". */
    cJSON_AddNumberToObject(o, "logprob", isfinite(lp) ? lp : -9999.0);
    cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; b && i < n; i++)
        cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)b[i]));
    cJSON_AddNumberToObject(o, "token_id", id);
    return o;
}

/* OpenAI's {"content": [...]} (every generated token, reasoning included),
 * or null when the request did not ask. */
static void add_logprobs(cJSON *o, const dsr1_run_choice *c, const dsr1_tokenizer *tk)
{
    if (!c->want_logprobs) {
        cJSON_AddNullToObject(o, "logprobs");
        return;
    }
    cJSON *lp = cJSON_AddObjectToObject(o, "logprobs");
    cJSON *arr = cJSON_AddArrayToObject(lp, "content");
    for (size_t i = 0; i < c->n_logprobs; i++) {
        const dsr1_run_logprob *l = &c->logprobs[i];
        cJSON *t = token_item(tk, l->token, l->logprob);
        cJSON *top = cJSON_AddArrayToObject(t, "top_logprobs");
        for (int k = 0; k < l->n_top; k++)
            cJSON_AddItemToArray(top, token_item(tk, l->top_ids[k], l->top_logprobs[k]));
        cJSON_AddItemToArray(arr, t);
    }
    cJSON_AddNullToObject(lp, "refusal");
}

/* ---- flat ------------------------------------------------------------------ */

/* Milliseconds rounded to 0.01: enough, and keeps records short. */
static double r2(double x) { return round(x * 100) / 100; }

static void add_timing(cJSON *o, const dsr1_run_result *r)
{
    cJSON *t = cJSON_AddObjectToObject(o, "timing");
    cJSON_AddNumberToObject(t, "ttft_ms", r2(r->ttft_ms));
    cJSON_AddNumberToObject(t, "total_ms", r2(r->total_ms));
    cJSON_AddNumberToObject(t, "tokens_per_s", r2(r->tokens_per_s));
}

static void add_speculative(cJSON *u, const dsr1_run_result *r)
{
    if (r->spec_steps <= 0) return;
    cJSON *s = cJSON_AddObjectToObject(u, "speculative");
    cJSON_AddNumberToObject(s, "steps", r->spec_steps);
    cJSON_AddNumberToObject(s, "drafted", r->spec_drafted);
    cJSON_AddNumberToObject(s, "accepted", r->spec_accepted);
}

static void flat_choice(cJSON *o, const dsr1_run_choice *c, const dsr1_tokenizer *tk)
{
    add_str_or_null(o, "content", c->content);
    add_str_or_null(o, "reasoning_content", c->reasoning);
    add_tool_calls(o, c, 0);
    cJSON_AddStringToObject(o, "finish_reason", c->finish ? c->finish : "stop");
    if (c->want_logprobs) add_logprobs(o, c, tk);
}

static cJSON *flat_record(const dsr1_run_result *r)
{
    static const dsr1_run_choice none = {0};
    const dsr1_run_choice *c0 = r->n_choices ? &r->choices[0] : &none;
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddItemToObject(o, "id", id_item(r->id_json));
    if (r->custom_id) cJSON_AddItemToObject(o, "custom_id", id_item(r->id_json));
    flat_choice(o, c0, r->tk);
    if (r->n_choices > 1) {
        cJSON *arr = cJSON_AddArrayToObject(o, "choices");
        for (size_t i = 0; i < r->n_choices; i++) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "index", (double)i);
            flat_choice(c, &r->choices[i], r->tk);
            cJSON_AddItemToArray(arr, c);
        }
    }
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", r->prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", r->completion_tokens);
    cJSON_AddNumberToObject(u, "reasoning_tokens", r->reasoning_tokens);
    cJSON_AddNumberToObject(u, "cached_tokens", r->cached_tokens);
    add_speculative(u, r);
    add_timing(o, r);
    return o;
}

/* ---- OpenAI ---------------------------------------------------------------- */

static void openai_ids(const dsr1_run_result *r, long line, char *batch, char *req,
                       char *cmpl, size_t cap)
{
    snprintf(batch, cap, "batch_req_%lld_%ld", r ? r->created : 0LL, line);
    snprintf(req, cap, "req_%lld_%ld", r ? r->created : 0LL, line);
    snprintf(cmpl, cap, "chatcmpl-%lld-%ld", r ? r->created : 0LL, line);
}

static cJSON *completion_body(const dsr1_run_result *r, const char *cmpl_id)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "id", cmpl_id);
    cJSON_AddStringToObject(b, "object", "chat.completion");
    cJSON_AddNumberToObject(b, "created", (double)r->created);
    cJSON_AddStringToObject(b, "model", r->model ? r->model : "dsr1");
    cJSON *arr = cJSON_AddArrayToObject(b, "choices");
    for (size_t i = 0; i < r->n_choices; i++) {
        const dsr1_run_choice *c = &r->choices[i];
        cJSON *ch = cJSON_CreateObject(), *m;
        cJSON_AddNumberToObject(ch, "index", (double)i);
        m = cJSON_AddObjectToObject(ch, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        add_str_or_null(m, "content", c->content);
        add_str_or_null(m, "reasoning_content", c->reasoning);
        add_tool_calls(m, c, 1);
        cJSON_AddNullToObject(m, "refusal");
        add_logprobs(ch, c, r->tk);
        cJSON_AddStringToObject(ch, "finish_reason", c->finish ? c->finish : "stop");
        cJSON_AddItemToArray(arr, ch);
    }
    cJSON *u = cJSON_AddObjectToObject(b, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", r->prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", r->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", r->prompt_tokens + r->completion_tokens);
    cJSON *pd = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(pd, "cached_tokens", r->cached_tokens);
    cJSON *cd = cJSON_AddObjectToObject(u, "completion_tokens_details");
    cJSON_AddNumberToObject(cd, "reasoning_tokens", r->reasoning_tokens);
    add_speculative(u, r);
    cJSON_AddNullToObject(b, "system_fingerprint");
    add_timing(b, r);
    return b;
}

static cJSON *openai_record(const dsr1_run_result *r)
{
    char batch[64], req[64], cmpl[64];
    openai_ids(r, r->line, batch, req, cmpl, sizeof batch);
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "id", batch);
    cJSON_AddItemToObject(o, "custom_id", id_item(r->id_json));
    cJSON *resp = cJSON_AddObjectToObject(o, "response");
    cJSON_AddNumberToObject(resp, "status_code", 200);
    cJSON_AddStringToObject(resp, "request_id", req);
    cJSON_AddItemToObject(resp, "body", completion_body(r, cmpl));
    cJSON_AddNullToObject(o, "error");
    return o;
}

char *dsr1_run_result_json(const dsr1_run_result *r)
{
    cJSON *o = r->openai ? openai_record(r) : flat_record(r);
    if (!o) return NULL;
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *dsr1_run_error_json(const char *id_json, int custom_id, long line, int openai,
                          const char *code, const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    if (openai) {
        char batch[64], req[64], cmpl[64];
        dsr1_run_result r = {0};
        openai_ids(&r, line, batch, req, cmpl, sizeof batch);
        cJSON_AddStringToObject(o, "id", batch);
        cJSON_AddItemToObject(o, "custom_id", id_item(id_json));
        cJSON_AddNullToObject(o, "response");
    } else {
        cJSON_AddItemToObject(o, "id", id_item(id_json));
        if (custom_id) cJSON_AddItemToObject(o, "custom_id", id_item(id_json));
    }
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "code", code ? code : "invalid_request");
    cJSON_AddStringToObject(e, "message", msg);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
