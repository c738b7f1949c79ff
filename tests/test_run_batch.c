/*
 * test_run_batch.c - the parts of `dsr1 run` that issues 12 and 13 added,
 * without a model: OpenAI request fields (n, logprobs, penalties, stop
 * ids), unknown-field warnings and --strict, ids that cannot be written
 * back (1e999) and \u0000, the OpenAI batch-output and flat record shapes,
 * "did you mean" and the shared settings table, the input line cap, and
 * --resume refusing damaged or foreign zstd output (a 2^63 content size, a
 * flipped byte) while still cutting a torn last frame; the streamed answer
 * never showing a stop string. The helpers are copies of test_run.c's.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/common.h"
#include "cli/run_gen.h"
#include "cli/run_req.h"
#include "run_util.h"
#include "test.h"

/* ---- issue 12/13: request fields, records, checks ------------------------------- */

DSR1_TEST(run_req_openai_fields)
{
    dsr1_run_req r;
    dsr1_error e = {0};
    CHECK_OK(dsr1_test_parse_req(&r, "{\"custom_id\":\"q\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\","
                       "\"body\":{\"model\":\"m1\",\"messages\":[{\"role\":\"user\",\"content\":"
                       "\"hi\"}],\"n\":3,\"logprobs\":true,\"top_logprobs\":5,"
                       "\"presence_penalty\":0.5,\"frequency_penalty\":-1,\"stop\":\"END\","
                       "\"stop_token_ids\":[1,7],\"seed\":42,\"max_completion_tokens\":9,"
                       "\"user\":\"u\",\"repeat_penalty\":1.2}}", 2, &e), &e);
    CHECK_EQ_INT(r.n, 3);
    CHECK_EQ_INT(r.logprobs, 1);
    CHECK_EQ_INT(r.top_logprobs, 5);
    CHECK_NEAR(r.sampling.presence_penalty, 0.5, 1e-6);
    CHECK_NEAR(r.sampling.frequency_penalty, -1, 1e-6);
    CHECK_NEAR(r.sampling.repetition_penalty, 1.2, 1e-6); /* an alias of the table */
    CHECK_EQ_INT(r.n_stop_ids, 2);
    CHECK_EQ_INT(r.stop_ids[1], 7);
    CHECK_EQ_INT(r.sampling.seed, 42);
    CHECK_EQ_INT(r.max_tokens, 9);
    CHECK_STR(r.model, "m1");
    CHECK_EQ_INT(r.n_warn, 0);
    dsr1_run_req_clear(&r);
    /* top_logprobs alone turns logprobs on; out-of-range values are refused. */
    CHECK_OK(dsr1_test_parse_req(&r, "{\"prompt\":\"x\",\"top_logprobs\":2}", 1, &e), &e);
    CHECK_EQ_INT(r.logprobs, 1);
    dsr1_run_req_clear(&r);
    CHECK(dsr1_test_parse_req(&r, "{\"prompt\":\"x\",\"top_logprobs\":21}", 1, &e) == DSR1_EINVAL);
    dsr1_run_req_clear(&r);
    CHECK(dsr1_test_parse_req(&r, "{\"prompt\":\"x\",\"n\":0}", 1, &e) == DSR1_EINVAL);
    dsr1_run_req_clear(&r);
    CHECK(dsr1_test_parse_req(&r, "{\"prompt\":\"x\",\"presence_penalty\":3}", 1, &e) == DSR1_EINVAL);
    dsr1_run_req_clear(&r);
    CHECK(dsr1_test_parse_req(&r, "{\"prompt\":\"x\",\"stop_token_ids\":[-1]}", 1, &e) == DSR1_EINVAL);
    dsr1_run_req_clear(&r);
}

DSR1_TEST(run_req_unknown_fields_warn_or_refuse)
{
    dsr1_run_req r;
    dsr1_error e = {0};
    dsr1_run_defaults d;
    dsr1_run_defaults_init(&d);
    const char *l = "{\"prompt\":\"x\",\"temprature\":0,\"response_format\":{\"type\":\"json\"},"
                    "\"zzzzzz\":1}";
    CHECK_OK(dsr1_run_req_parse(&r, l, strlen(l), 4, &d, &e), &e);
    REQUIRE(r.n_warn == 3);
    CHECK_STR(r.warn[0].field, "temprature");
    CHECKF(strstr(r.warn[0].msg, "did you mean \"temperature\"") != NULL, "%s", r.warn[0].msg);
    CHECKF(strstr(r.warn[1].msg, "not supported") != NULL, "%s", r.warn[1].msg);
    CHECKF(strstr(r.warn[2].msg, "did you mean") == NULL, "%s", r.warn[2].msg);
    CHECK_NEAR(r.sampling.temperature, 0.6, 1e-6); /* the typo changed nothing */
    dsr1_run_req_clear(&r);
    d.strict = 1;
    CHECK(dsr1_run_req_parse(&r, l, strlen(l), 4, &d, &e) == DSR1_EINVAL);
    CHECKF(strstr(e.msg, "temprature") && strstr(e.msg, "--strict"), "%s", e.msg);
    dsr1_run_req_clear(&r);
    /* The OpenAI envelope is checked too. */
    const char *o = "{\"custom_id\":\"a\",\"bdy\":{},\"body\":{\"prompt\":\"x\"}}";
    d.strict = 0;
    CHECK_OK(dsr1_run_req_parse(&r, o, strlen(o), 1, &d, &e), &e);
    CHECK(r.n_warn == 1 && strstr(r.warn[0].msg, "\"body\""));
    dsr1_run_req_clear(&r);
}

DSR1_TEST(run_req_bad_ids_and_nul)
{
    dsr1_run_req r;
    dsr1_error e = {0};
    /* 1e999 parses as infinity: it would be written as null and rerun forever. */
    CHECK(dsr1_test_parse_req(&r, "{\"id\":1e999,\"prompt\":\"x\"}", 6, &e) == DSR1_EINVAL);
    CHECK_STR(r.id_json, "\"line-6\"");
    CHECKF(strstr(e.msg, "finite") != NULL, "%s", e.msg);
    dsr1_run_req_clear(&r);
    CHECK(dsr1_test_parse_req(&r, "{\"custom_id\":[1],\"body\":{\"prompt\":\"x\"}}", 6, &e) == DSR1_EINVAL);
    dsr1_run_req_clear(&r);
    /* \u0000 would end the C string: refused with where it is. */
    CHECK(dsr1_test_parse_req(&r, "{\"id\":\"z\",\"prompt\":\"ab\\u0000cd\"}", 2, &e) == DSR1_EINVAL);
    CHECKF(strstr(e.msg, "NUL") && strstr(e.msg, "byte 22"), "%s", e.msg);
    CHECK_STR(r.id_json, "\"z\"");
    dsr1_run_req_clear(&r);
    /* An escaped backslash before u0000 is text, not a NUL. */
    CHECK_OK(dsr1_test_parse_req(&r, "{\"prompt\":\"a\\\\u0000\"}", 2, &e), &e);
    CHECK_STR(r.prompt, "a\\u0000");
    dsr1_run_req_clear(&r);
    int custom, bad;
    char msg[160];
    char *id = dsr1_run_line_id("{\"custom_id\":\"k\"}", 17, 3, &custom, &bad, msg, sizeof msg);
    CHECK_STR(id, "\"k\"");
    CHECK(custom && !bad);
    free(id);
}

DSR1_TEST(run_records_openai_shape)
{
    dsr1_run_logprob lp[2] = {{.token = 5, .logprob = -0.5f, .n_top = 1, .top_ids = {5},
                               .top_logprobs = {-0.5f}},
                              {.token = 6, .logprob = -INFINITY, .n_top = 0}};
    dsr1_run_choice c[2] = {{0}, {0}};
    c[0].content = "four";
    c[0].reasoning = "2+2";
    c[0].finish = "stop";
    c[0].want_logprobs = 1;
    c[0].logprobs = lp;
    c[0].n_logprobs = 2;
    c[1].content = "4";
    c[1].finish = "length";
    c[1].want_logprobs = 1;
    dsr1_run_result r = {0};
    r.id_json = "\"req-1\"";
    r.custom_id = 1;
    r.line = 3;
    r.openai = 1;
    r.model = "tiny";
    r.created = 1700000000;
    r.choices = c;
    r.n_choices = 2;
    r.prompt_tokens = 10;
    r.completion_tokens = 7;
    r.reasoning_tokens = 3;
    r.cached_tokens = 4;
    char *s = dsr1_run_result_json(&r);
    cJSON *j = cJSON_Parse(s);
    REQUIRE(j != NULL);
    CHECK_STR(cJSON_GetObjectItem(j, "custom_id")->valuestring, "req-1");
    CHECK(!strncmp(cJSON_GetObjectItem(j, "id")->valuestring, "batch_req_", 10));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "error")));
    cJSON *resp = cJSON_GetObjectItem(j, "response");
    CHECK_EQ_INT(cJSON_GetObjectItem(resp, "status_code")->valueint, 200);
    CHECK(cJSON_IsString(cJSON_GetObjectItem(resp, "request_id")));
    cJSON *body = cJSON_GetObjectItem(resp, "body");
    CHECK_STR(cJSON_GetObjectItem(body, "object")->valuestring, "chat.completion");
    CHECK_STR(cJSON_GetObjectItem(body, "model")->valuestring, "tiny");
    CHECK_EQ_INT(cJSON_GetObjectItem(body, "created")->valuedouble, 1700000000);
    cJSON *ch = cJSON_GetObjectItem(body, "choices");
    CHECK_EQ_INT(cJSON_GetArraySize(ch), 2);
    cJSON *c0 = cJSON_GetArrayItem(ch, 0), *m = cJSON_GetObjectItem(c0, "message");
    CHECK_EQ_INT(cJSON_GetObjectItem(c0, "index")->valueint, 0);
    CHECK_STR(cJSON_GetObjectItem(m, "role")->valuestring, "assistant");
    CHECK_STR(cJSON_GetObjectItem(m, "content")->valuestring, "four");
    CHECK_STR(cJSON_GetObjectItem(m, "reasoning_content")->valuestring, "2+2");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(m, "tool_calls")));
    CHECK_STR(cJSON_GetObjectItem(c0, "finish_reason")->valuestring, "stop");
    cJSON *lc = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "logprobs"), "content");
    CHECK_EQ_INT(cJSON_GetArraySize(lc), 2);
    CHECK_NEAR(cJSON_GetObjectItem(cJSON_GetArrayItem(lc, 0), "logprob")->valuedouble, -0.5, 1e-6);
    CHECK_NEAR(cJSON_GetObjectItem(cJSON_GetArrayItem(lc, 1), "logprob")->valuedouble, -9999, 0);
    CHECK_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(lc, 0), "token")->valuestring, "<5>");
    CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(lc, 0), "top_logprobs")), 1);
    CHECK_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(ch, 1), "finish_reason")->valuestring, "length");
    cJSON *u = cJSON_GetObjectItem(body, "usage");
    CHECK_EQ_INT(cJSON_GetObjectItem(u, "total_tokens")->valueint, 17);
    CHECK_EQ_INT(cJSON_GetObjectItem(cJSON_GetObjectItem(u, "completion_tokens_details"),
                                     "reasoning_tokens")->valueint, 3);
    CHECK_EQ_INT(cJSON_GetObjectItem(cJSON_GetObjectItem(u, "prompt_tokens_details"),
                                     "cached_tokens")->valueint, 4);
    /* --resume knows an OpenAI record by its custom_id. */
    char *id = dsr1_run_record_id(s, strlen(s));
    CHECK_STR(id, "\"req-1\"");
    free(id);
    cJSON_Delete(j);
    free(s);
    /* Flat with n > 1: choice 0 on top and a choices array. */
    r.openai = 0;
    s = dsr1_run_result_json(&r);
    j = cJSON_Parse(s);
    REQUIRE(j != NULL);
    CHECK_STR(cJSON_GetObjectItem(j, "content")->valuestring, "four");
    CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")), 2);
    cJSON_Delete(j);
    free(s);
    /* A failed request: response null, error with a code. */
    s = dsr1_run_error_json("\"req-2\"", 1, 4, 1, "context_length_exceeded", "too long");
    j = cJSON_Parse(s);
    REQUIRE(j != NULL);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "response")));
    CHECK_STR(cJSON_GetObjectItem(j, "custom_id")->valuestring, "req-2");
    cJSON *er = cJSON_GetObjectItem(j, "error");
    CHECK_STR(cJSON_GetObjectItem(er, "code")->valuestring, "context_length_exceeded");
    CHECK_STR(cJSON_GetObjectItem(er, "message")->valuestring, "too long");
    cJSON_Delete(j);
    free(s);
}

DSR1_TEST(run_suggest_and_settings)
{
    const char *c[] = {"temperature", "top_p", "top_k", "max_tokens", "seed"};
    CHECK_STR(dsr1_common_suggest("temprature", c, 5), "temperature");
    CHECK_STR(dsr1_common_suggest("max_tokns", c, 5), "max_tokens");
    CHECK_STR(dsr1_common_suggest("top_q", c, 5), "top_p");
    CHECK(dsr1_common_suggest("banana", c, 5) == NULL);
    CHECK(dsr1_common_suggest("temperature", c, 5) == NULL); /* exact: not a typo */
    CHECK_EQ_INT(dsr1_common_edit_distance("abcd", "abdc"), 1); /* a swap is one edit */
    CHECK_EQ_INT(dsr1_common_edit_distance("", "abc"), 3);
    /* One table: canonical names, flags and aliases find the same setting. */
    const dsr1_setting *a = dsr1_common_setting("repeat_penalty");
    REQUIRE(a != NULL);
    CHECK_STR(a->name, "repetition_penalty");
    CHECK_STR(a->flag, "--repetition-penalty");
    CHECK(dsr1_common_setting("--repetition-penalty") == a);
    CHECK(dsr1_common_setting("repeat-penalty") == a);
    CHECK_STR(dsr1_common_setting("temp")->name, "temperature");
    CHECK_STR(dsr1_common_setting("max_completion_tokens")->name, "max_tokens");
    CHECK(dsr1_common_setting("n") == NULL);
}

DSR1_TEST(run_reader_line_cap)
{
    char p[512];
    snprintf(p, sizeof p, "%s/long.jsonl", dsr1_test_tmpdir());
    size_t big = 300000;
    char *data = malloc(big + 64);
    REQUIRE(data != NULL);
    strcpy(data, "{\"a\":1}\n");
    size_t n = strlen(data);
    memset(data + n, 'x', big);
    n += big;
    memcpy(data + n, "\n{\"b\":2}", 8);
    n += 8;
    dsr1_test_write_file(p, data, n);
    free(data);
    dsr1_linereader *r;
    dsr1_error e = {0};
    CHECK_OK(dsr1_common_reader_open(&r, p, &e), &e);
    dsr1_common_reader_set_max_line(r, 1000);
    char *line;
    size_t len;
    CHECK_OK(dsr1_common_reader_next(r, &line, &len, &e), &e);
    CHECK(line && !strcmp(line, "{\"a\":1}") && dsr1_common_reader_too_long(r) == 0);
    CHECK_OK(dsr1_common_reader_next(r, &line, &len, &e), &e);
    CHECK(line && len == 0);
    CHECK_EQ_INT(dsr1_common_reader_too_long(r), (long long)big);
    CHECK_OK(dsr1_common_reader_next(r, &line, &len, &e), &e);
    CHECK(line && !strcmp(line, "{\"b\":2}") && dsr1_common_reader_too_long(r) == 0);
    CHECK_OK(dsr1_common_reader_next(r, &line, &len, &e), &e);
    CHECK(line == NULL);
    dsr1_common_reader_close(r);
}

/* A zstd frame header declaring content size 2^63 (single segment, 8-byte
 * size field) followed by an empty raw last block. */
static size_t huge_frame(unsigned char *f)
{
    size_t n = 0;
    f[n++] = 0x28, f[n++] = 0xb5, f[n++] = 0x2f, f[n++] = 0xfd;
    f[n++] = 0xe0; /* FCS 8 bytes, single segment */
    unsigned long long sz = 1ull << 63;
    for (int i = 0; i < 8; i++) f[n++] = (unsigned char)(sz >> (8 * i));
    f[n++] = 0x01, f[n++] = 0x00, f[n++] = 0x00; /* last block, raw, size 0 */
    return n;
}

DSR1_TEST(run_resume_zst_refuses_damage)
{
    char p[512], note[600];
    snprintf(p, sizeof p, "%s/dmg.jsonl.zst", dsr1_test_tmpdir());
    dsr1_error e = {0};
    /* 1. A frame declaring 2^63 bytes: refused at once (it used to loop). */
    unsigned char f[32];
    size_t fn = huge_frame(f);
    dsr1_test_write_file(p, (const char *)f, fn);
    CHECK(dsr1_common_read_back(p, NULL, NULL, note, sizeof note, &e) == DSR1_EFORMAT);
    CHECK_EQ_INT(dsr1_test_file_size(p), (long)fn);
    /* 2. One flipped byte in the middle: refused, nothing cut. */
    CHECK_OK(dsr1_test_write_records(p, 0, 50, 0, &e), &e);
    long full = dsr1_test_file_size(p);
    FILE *fp = fopen(p, "r+b");
    REQUIRE(fp != NULL);
    fseek(fp, full / 2, SEEK_SET);
    int ch = fgetc(fp);
    fseek(fp, full / 2, SEEK_SET);
    fputc(ch ^ 0x40, fp);
    fclose(fp);
    int n = 0;
    CHECK(dsr1_common_read_back(p, dsr1_test_count_line, &n, note, sizeof note, &e) == DSR1_EFORMAT);
    CHECKF(strstr(e.msg, "not resuming") != NULL, "%s", e.msg);
    CHECK_EQ_INT(dsr1_test_file_size(p), full);
    /* 3. A foreign .zst (valid frames, not our records): refused, kept. */
    char out[256];
    if (dsr1_test_sh(out, sizeof out, "command -v zstd >/dev/null") == 0) {
        CHECK(dsr1_test_sh(out, sizeof out, "printf 'hello\\nworld\\n' | zstd -q -c > '%s'", p) == 0);
        long sz = dsr1_test_file_size(p);
        CHECK(dsr1_common_read_back(p, NULL, NULL, note, sizeof note, &e) == DSR1_EFORMAT);
        CHECK_EQ_INT(dsr1_test_file_size(p), sz);
    }
    /* 4. Only a torn last frame is cut (kept records are counted). */
    CHECK_OK(dsr1_test_write_records(p, 0, 20, 0, &e), &e);
    full = dsr1_test_file_size(p);
    CHECK(truncate(p, full - 3) == 0);
    n = 0;
    CHECK_OK(dsr1_common_read_back(p, dsr1_test_count_line, &n, note, sizeof note, &e), &e);
    CHECK_EQ_INT(n, 19);
}

typedef struct sink_buf {
    char s[512];
    size_t n;
} sink_buf;

static void sink_answer(void *ctx, dsr1_gen_kind kind, const char *text, size_t len)
{
    sink_buf *b = ctx;
    if (kind != DSR1_GEN_ANSWER || b->n + len >= sizeof b->s) return;
    memcpy(b->s + b->n, text, len);
    b->n += len;
    b->s[b->n] = 0;
}

DSR1_TEST(run_gen_stream_never_shows_stop)
{
    /* The streamed answer (prompt mode's stdout) holds back what a stop
     * string spelled over several tokens could still claim, so the stop
     * string never reaches the terminal; without a match everything is
     * streamed by the end. */
    dsr1_tokenizer *tk = dsr1_test_tokenizer();
    if (!tk) DSR1_SKIP("tokenizer fixture did not load");
    char *stop[1] = {"STOP"};
    dsr1_gen g;
    dsr1_error e = {0};
    sink_buf b = {{0}, 0};
    CHECK_OK(dsr1_gen_init(&g, tk, 1, 0, stop, 1, sink_answer, &b, &e), &e);
    CHECK_EQ_INT(dsr1_test_push_text(&g, tk, "The answer is 4.ST"), 0);
    CHECK(strstr(b.s, "ST") == NULL); /* held back: it may become STOP */
    CHECK_EQ_INT(dsr1_test_push_text(&g, tk, "OP and more"), 1);
    CHECK_OK(dsr1_gen_finish(&g, &e), &e);
    CHECK_STR(b.s, "The answer is 4.");
    dsr1_gen_free(&g);
    sink_buf c = {{0}, 0};
    CHECK_OK(dsr1_gen_init(&g, tk, 1, 0, stop, 1, sink_answer, &c, &e), &e);
    CHECK_EQ_INT(dsr1_test_push_text(&g, tk, "no stop ST here"), 0);
    CHECK_OK(dsr1_gen_finish(&g, &e), &e);
    CHECK_STR(c.s, "no stop ST here");
    dsr1_gen_free(&g);
    dsr1_tokenizer_free(tk);
}
