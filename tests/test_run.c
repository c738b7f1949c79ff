/*
 * test_run.c - the pieces of `dsr1 run` / `dsr1 chat` that need no model:
 * request parsing and defaults, error and result records, the resume id
 * set, reading back a results file (torn last line, torn zstd frame),
 * plain and zstd JSONL round trips, the generation text stream (stop
 * strings across tokens, reasoning split) on the real tokenizer, and model
 * path resolution.
 *
 * The cli/ modules come from build/libdsr1cli.a (all of cli/ but main.c).
 */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/common.h"
#include "cli/run_gen.h"
#include "cli/run_req.h"
#include "core/toolcall.h"
#include "run_util.h"
#include "test.h"

DSR1_TEST(run_req_chat_fields)
{
    dsr1_run_req r;
    dsr1_error e = {0};
    CHECK_OK(dsr1_test_parse_req(&r, "{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                       "\"max_tokens\":5,\"temperature\":0.2,\"top_p\":0.5,\"top_k\":-1,"
                       "\"min_p\":0.1,\"repetition_penalty\":1.3,\"seed\":7,"
                       "\"stop\":[\"X\",\"\",\"YZ\"]}", 4, &e), &e);
    CHECK_STR(r.id_json, "\"a\"");
    REQUIRE(r.chat != NULL);
    CHECK_EQ_INT(r.chat->n_msgs, 1);
    CHECK_STR(r.chat->msgs[0].content, "hi");
    CHECK_EQ_INT(r.max_tokens, 5);
    CHECK_NEAR(r.sampling.temperature, 0.2, 1e-6);
    CHECK_NEAR(r.sampling.top_p, 0.5, 1e-6);
    CHECK_EQ_INT(r.sampling.top_k, 0); /* -1 (vLLM's "off") */
    CHECK_NEAR(r.sampling.min_p, 0.1, 1e-6);
    CHECK_NEAR(r.sampling.repetition_penalty, 1.3, 1e-6);
    CHECK_EQ_INT(r.sampling.seed, 7);
    CHECK_EQ_INT(r.n_stop, 2); /* the empty stop string is dropped */
    CHECK_STR(r.stop[1], "YZ");
    CHECK_EQ_INT(r.max_stop_len, 2);
    dsr1_run_req_clear(&r);
}

DSR1_TEST(run_req_defaults_and_seed)
{
    dsr1_run_req r;
    dsr1_error e = {0};
    CHECK_OK(dsr1_test_parse_req(&r, "{\"prompt\":\"Once\"}", 9, &e), &e);
    CHECK_STR(r.id_json, "\"line-9\"");
    CHECK(r.chat == NULL);
    CHECK_STR(r.prompt, "Once");
    CHECK_EQ_INT(r.max_tokens, 4096);
    CHECK_NEAR(r.sampling.temperature, 0.6, 1e-6);
    CHECK_NEAR(r.sampling.top_p, 0.95, 1e-6);
    CHECK_EQ_INT(r.sampling.seed, 109); /* --seed 100 + line 9 */
    CHECK_EQ_INT(r.n_stop, 0);
    dsr1_run_req_clear(&r);
    CHECK_OK(dsr1_test_parse_req(&r, "{\"id\":12,\"prompt\":\"x\",\"stop\":\"END\",\"seed\":-1}", 3, &e), &e);
    CHECK_STR(r.id_json, "12");
    CHECK_EQ_INT(r.sampling.seed, 103); /* -1 means unset */
    CHECK_STR(r.stop[0], "END");
    dsr1_run_req_clear(&r);
}

DSR1_TEST(run_req_openai_batch_shape)
{
    dsr1_run_req r;
    dsr1_error e = {0};
    CHECK_OK(dsr1_test_parse_req(&r, "{\"custom_id\":\"req-1\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\","
                       "\"body\":{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":"
                       "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
                       "\"max_completion_tokens\":3}}", 1, &e), &e);
    CHECK_STR(r.id_json, "\"req-1\"");
    CHECK_EQ_INT(r.custom_id, 1);
    CHECK_EQ_INT(r.max_tokens, 3);
    REQUIRE(r.chat && r.chat->n_msgs == 1);
    CHECK_STR(r.chat->msgs[0].content, "ab");
    dsr1_run_req_clear(&r);
}

DSR1_TEST(run_req_system_default)
{
    dsr1_run_defaults d;
    dsr1_run_defaults_init(&d);
    d.system = "Be brief.";
    dsr1_run_req r;
    dsr1_error e = {0};
    const char *a = "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}";
    CHECK_OK(dsr1_run_req_parse(&r, a, strlen(a), 1, &d, &e), &e);
    REQUIRE(r.chat && r.chat->n_msgs == 2);
    CHECK_STR(r.chat->msgs[0].role, "system");
    CHECK_STR(r.chat->msgs[0].content, "Be brief.");
    dsr1_run_req_clear(&r);
    const char *b = "{\"messages\":[{\"role\":\"system\",\"content\":\"own\"},"
                    "{\"role\":\"user\",\"content\":\"q\"}]}";
    CHECK_OK(dsr1_run_req_parse(&r, b, strlen(b), 1, &d, &e), &e);
    REQUIRE(r.chat && r.chat->n_msgs == 2);
    CHECK_STR(r.chat->msgs[0].content, "own");
    dsr1_run_req_clear(&r);
}

DSR1_TEST(run_req_bad_lines)
{
    static const struct { const char *line, *id, *msg; } cases[] = {
        {"not json", "\"line-5\"", "not valid JSON"},
        {"[1,2]", "\"line-5\"", "expected a JSON object"},
        {"{\"id\":\"k\"}", "\"k\"", "expected \"messages\" or \"prompt\""},
        {"{\"id\":3,\"prompt\":5}", "3", "\"prompt\": expected a string"},
        {"{\"prompt\":\"a\",\"messages\":[]}", "\"line-5\"", "both"},
        {"{\"messages\":[]}", "\"line-5\"", "non-empty array"},
        {"{\"prompt\":\"a\",\"temperature\":-1}", "\"line-5\"", "\"temperature\""},
        {"{\"prompt\":\"a\",\"top_p\":1.5}", "\"line-5\"", "\"top_p\""},
        {"{\"prompt\":\"a\",\"max_tokens\":2.5}", "\"line-5\"", "integer"},
        {"{\"prompt\":\"a\",\"max_tokens\":0}", "\"line-5\"", "\"max_tokens\""},
        {"{\"prompt\":\"a\",\"stop\":[1]}", "\"line-5\"", "\"stop\""},
        {"{\"prompt\":\"a\",\"stop\":{}}", "\"line-5\"", "\"stop\""},
        {"{\"body\":3}", "\"line-5\"", "\"body\""},
        {"{\"id\":\"m\",\"messages\":[{\"content\":\"x\"}]}", "\"m\"", "role"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dsr1_run_req r;
        dsr1_error e = {0};
        int rc = dsr1_test_parse_req(&r, cases[i].line, 5, &e);
        CHECKF(rc != 0, "accepted: %s", cases[i].line);
        CHECKF(r.id_json && !strcmp(r.id_json, cases[i].id), "%s: id %s", cases[i].line,
               r.id_json ? r.id_json : "(null)");
        CHECKF(strstr(e.msg, cases[i].msg) != NULL, "%s: message '%s'", cases[i].line, e.msg);
        CHECK(r.chat == NULL && r.prompt == NULL && r.stop == NULL);
        dsr1_run_req_clear(&r);
    }
}

DSR1_TEST(run_records_shape)
{
    char *er = dsr1_run_error_json("\"line-3\"", 0, 3, 0, NULL, "line 3: not valid JSON");
    CHECK_STR(er, "{\"id\":\"line-3\",\"error\":{\"code\":\"invalid_request\","
                  "\"message\":\"line 3: not valid JSON\"}}");
    free(er);
    dsr1_run_toolcall calls[1] = {{"get_weather", "{\"city\":\"Paris\"}"}};
    dsr1_run_choice c = {0};
    c.content = "Hi \"there\"";
    c.tool_calls = calls;
    c.n_tool_calls = 1;
    c.finish = "tool_calls";
    dsr1_run_result r = {0};
    r.id_json = "7";
    r.custom_id = 1;
    r.choices = &c;
    r.n_choices = 1;
    r.prompt_tokens = 10;
    r.completion_tokens = 4;
    r.reasoning_tokens = 2;
    r.spec_steps = 3;
    r.spec_drafted = 3;
    r.spec_accepted = 2;
    r.ttft_ms = 12.3456;
    r.total_ms = 100;
    r.tokens_per_s = 33.333;
    char *s = dsr1_run_result_json(&r);
    cJSON *j = cJSON_Parse(s);
    REQUIRE(j != NULL);
    CHECK(cJSON_GetObjectItem(j, "id")->valueint == 7);
    CHECK(cJSON_GetObjectItem(j, "custom_id")->valueint == 7);
    CHECK_STR(cJSON_GetObjectItem(j, "content")->valuestring, "Hi \"there\"");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "reasoning_content")));
    CHECK_STR(cJSON_GetObjectItem(j, "finish_reason")->valuestring, "tool_calls");
    cJSON *tc = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tool_calls"), 0);
    CHECK_STR(cJSON_GetObjectItem(tc, "type")->valuestring, "function");
    CHECK_STR(cJSON_GetObjectItem(tc, "id")->valuestring, "call_0");
    cJSON *fn = cJSON_GetObjectItem(tc, "function");
    CHECK_STR(cJSON_GetObjectItem(fn, "name")->valuestring, "get_weather");
    CHECK_STR(cJSON_GetObjectItem(fn, "arguments")->valuestring, "{\"city\":\"Paris\"}");
    cJSON *u = cJSON_GetObjectItem(j, "usage");
    CHECK_EQ_INT(cJSON_GetObjectItem(u, "completion_tokens")->valueint, 4);
    CHECK_EQ_INT(cJSON_GetObjectItem(cJSON_GetObjectItem(u, "speculative"), "accepted")->valueint, 2);
    CHECK_NEAR(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "timing"), "ttft_ms")->valuedouble, 12.35, 1e-9);
    char *id = dsr1_run_record_id(s, strlen(s));
    CHECK_STR(id, "7");
    free(id);
    CHECK(dsr1_run_record_id("{\"x\":1}", 7) == NULL);
    cJSON_Delete(j);
    free(s);
}

DSR1_TEST(run_idset)
{
    dsr1_run_idset s = {0};
    char buf[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(buf, sizeof buf, "\"id-%d\"", i);
        CHECK_EQ_INT(dsr1_run_idset_add(&s, strdup(buf)), 0);
    }
    CHECK_EQ_INT(dsr1_run_idset_add(&s, strdup("\"id-5\"")), 0); /* duplicate: kept once */
    CHECK_EQ_INT(s.n, 1000);
    CHECK(dsr1_run_idset_has(&s, "\"id-999\""));
    CHECK(!dsr1_run_idset_has(&s, "\"id-1000\""));
    CHECK(!dsr1_run_idset_has(&s, "id-5")); /* a string id is not the bare text */
    dsr1_run_idset_free(&s);
    CHECK(!dsr1_run_idset_has(&s, "\"id-1\""));
}

/* ---- files ------------------------------------------------------------ */

DSR1_TEST(run_resume_torn_line)
{
    char p[512], note[600];
    snprintf(p, sizeof p, "%s/torn.jsonl", dsr1_test_tmpdir());
    const char good[] = "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n";
    char data[256];
    snprintf(data, sizeof data, "%s{\"id\":4,\"cont", good);
    dsr1_test_write_file(p, data, strlen(data));
    dsr1_error e = {0};
    int n = 0;
    CHECK_OK(dsr1_common_read_back(p, dsr1_test_count_line, &n, note, sizeof note, &e), &e);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(dsr1_test_file_size(p), (long)strlen(good));
    CHECK(strstr(note, "cut 13 bytes") != NULL);
    n = 0; /* again: nothing more to cut */
    CHECK_OK(dsr1_common_read_back(p, dsr1_test_count_line, &n, note, sizeof note, &e), &e);
    CHECK_EQ_INT(n, 3);
    CHECK_STR(note, "");
    /* A complete last line that is not a record is torn too. */
    snprintf(data, sizeof data, "%s{\"id\":\n", good);
    dsr1_test_write_file(p, data, strlen(data));
    CHECK_OK(dsr1_common_read_back(p, NULL, NULL, note, sizeof note, &e), &e);
    CHECK_EQ_INT(dsr1_test_file_size(p), (long)strlen(good));
    /* A bad line before the end: not ours, refuse and touch nothing. */
    snprintf(data, sizeof data, "{\"id\":1}\ngarbage\n{\"id\":3}\n");
    dsr1_test_write_file(p, data, strlen(data));
    CHECK(dsr1_common_read_back(p, NULL, NULL, note, sizeof note, &e) == DSR1_EFORMAT);
    CHECK(strstr(e.msg, "line 2") != NULL);
    CHECK_EQ_INT(dsr1_test_file_size(p), (long)strlen(data));
    /* Missing file: nothing to resume, no error. */
    snprintf(p, sizeof p, "%s/none.jsonl", dsr1_test_tmpdir());
    CHECK_OK(dsr1_common_read_back(p, NULL, NULL, note, sizeof note, &e), &e);
}

/* Read every line back; checks they are records 0..n-1 in order. */
static int read_records(dsr1_test_ctx *t, const char *p)
{
    dsr1_linereader *r;
    dsr1_error e = {0};
    if (dsr1_common_reader_open(&r, p, &e)) return -1;
    int n = 0;
    char *line, want[64];
    size_t len;
    while (!dsr1_common_reader_next(r, &line, &len, &e) && line) {
        snprintf(want, sizeof want, "{\"id\":%d,\"text\":\"r%d\"}", n, n);
        CHECKF(!strcmp(line, want) && len == strlen(want), "record %d: %s", n, line);
        n++;
    }
    CHECKF(e.code == 0, "%s", e.msg);
    dsr1_common_reader_close(r);
    return n;
}

DSR1_TEST(run_zst_round_trip_and_resume)
{
    char p[512], note[600];
    snprintf(p, sizeof p, "%s/out.jsonl.zst", dsr1_test_tmpdir());
    dsr1_error e = {0};
    CHECK_OK(dsr1_test_write_records(p, 0, 500, 0, &e), &e);
    unsigned char magic[4] = {0};
    FILE *f = fopen(p, "rb");
    CHECK(f && fread(magic, 1, 4, f) == 4);
    if (f) fclose(f);
    CHECK(magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd);
    CHECK_EQ_INT(read_records(t, p), 500);
    /* Tear the last frame, as a kill in the middle of a write would. */
    long full = dsr1_test_file_size(p);
    CHECK(truncate(p, full - 5) == 0);
    int n = 0;
    CHECK_OK(dsr1_common_read_back(p, dsr1_test_count_line, &n, note, sizeof note, &e), &e);
    CHECK_EQ_INT(n, 499);
    CHECK(dsr1_test_file_size(p) < full - 5);
    /* Append the rest as new frames: concatenated frames read as one. */
    CHECK_OK(dsr1_test_write_records(p, 499, 600, 1, &e), &e);
    CHECK_EQ_INT(read_records(t, p), 600);
    /* The zstd tool reads it too (if present). */
    char out[256];
    if (dsr1_test_sh(out, sizeof out, "command -v zstd >/dev/null") == 0) {
        int rc = dsr1_test_sh(out, sizeof out, "zstd -dc '%s' | wc -l", p);
        CHECK(rc == 0 && atoi(out) == 600);
    }
}

DSR1_TEST(run_reader_plain_lines)
{
    char p[512];
    snprintf(p, sizeof p, "%s/lines.txt", dsr1_test_tmpdir());
    size_t big = 200000;
    char *data = malloc(big + 64);
    strcpy(data, "a\r\n\n");
    memset(data + 4, 'x', big);
    strcpy(data + 4 + big, "\nlast");
    dsr1_test_write_file(p, data, strlen(data));
    dsr1_linereader *r;
    dsr1_error e = {0};
    REQUIRE(dsr1_common_reader_open(&r, p, &e) == 0);
    char *line;
    size_t len;
    CHECK(!dsr1_common_reader_next(r, &line, &len, &e) && line && len == 1 && line[0] == 'a');
    CHECK(!dsr1_common_reader_next(r, &line, &len, &e) && line && len == 0);
    CHECK(!dsr1_common_reader_next(r, &line, &len, &e) && line && len == big);
    CHECK(!dsr1_common_reader_next(r, &line, &len, &e) && line && !strcmp(line, "last"));
    CHECK(!dsr1_common_reader_next(r, &line, &len, &e) && line == NULL);
    dsr1_common_reader_close(r);
    free(data);
    /* A truncated zstd stream is an error, not a silent short read. */
    snprintf(p, sizeof p, "%s/short.zst", dsr1_test_tmpdir());
    CHECK_OK(dsr1_test_write_records(p, 0, 1, 0, &e), &e);
    CHECK(truncate(p, dsr1_test_file_size(p) - 3) == 0);
    REQUIRE(dsr1_common_reader_open(&r, p, &e) == 0);
    int rc = 0;
    while (!(rc = dsr1_common_reader_next(r, &line, &len, &e)) && line) {}
    CHECK(rc == DSR1_EFORMAT);
    dsr1_common_reader_close(r);
    CHECK(dsr1_common_reader_open(&r, "/nonexistent/x", &e) == DSR1_EIO);
}

/* ---- generation stream ---------------------------------------------------- */

DSR1_TEST(run_gen_stop_and_reasoning)
{
    dsr1_tokenizer *tk = dsr1_test_tokenizer();
    if (!tk) DSR1_SKIP("tokenizer fixture did not load");
    char *stop[2] = {"STOP", "never"};
    dsr1_gen g;
    dsr1_error e = {0};
    /* Forced <think>: reasoning, the close tag, the answer, a stop string
     * spelled over several tokens; EOS text never appears. */
    CHECK_OK(dsr1_gen_init(&g, tk, 1, 1, stop, 2, NULL, NULL, &e), &e);
    CHECK_EQ_INT(dsr1_test_push_text(&g, tk, "Let me think. STOP is not a stop here.\n</think>\n\n"), 0);
    CHECK_EQ_INT(dsr1_test_push_text(&g, tk, "The answer is 4.ST"), 0);
    CHECK_EQ_INT(dsr1_test_push_text(&g, tk, "OP and more"), 1);
    CHECK_EQ_INT(dsr1_gen_push(&g, 5, &e), 1); /* after the stop: ignored */
    CHECK_OK(dsr1_gen_finish(&g, &e), &e);
    char *a = dsr1_gen_answer(&g), *r = dsr1_gen_reasoning(&g);
    CHECK_STR(a, "The answer is 4.");
    CHECK_STR(r, "Let me think. STOP is not a stop here.");
    CHECK(g.stopped && g.n_reasoning_tokens > 5);
    free(a);
    free(r);
    dsr1_gen_free(&g);
    /* No tags at all and no forced block: everything is answer. */
    CHECK_OK(dsr1_gen_init(&g, tk, 1, 0, NULL, 0, NULL, NULL, &e), &e);
    CHECK_EQ_INT(dsr1_test_push_text(&g, tk, "  plain text "), 0);
    CHECK_OK(dsr1_gen_finish(&g, &e), &e);
    a = dsr1_gen_answer(&g);
    CHECK_STR(a, "plain text");
    CHECK(dsr1_gen_reasoning(&g) == NULL);
    CHECK_EQ_INT(g.n_reasoning_tokens, 0);
    free(a);
    dsr1_gen_free(&g);
    /* Forced block never closed (token limit): all reasoning, no answer. */
    CHECK_OK(dsr1_gen_init(&g, tk, 1, 1, NULL, 0, NULL, NULL, &e), &e);
    CHECK_EQ_INT(dsr1_test_push_text(&g, tk, "still thinking"), 0);
    CHECK_OK(dsr1_gen_finish(&g, &e), &e);
    a = dsr1_gen_answer(&g);
    r = dsr1_gen_reasoning(&g);
    CHECK_STR(a, "");
    CHECK_STR(r, "still thinking");
    CHECK(dsr1_gen_think_status(&g) == DSR1_THINK_UNTERMINATED);
    free(a);
    free(r);
    dsr1_gen_free(&g);
    dsr1_tokenizer_free(tk);
}

DSR1_TEST(run_gen_tool_calls)
{
    dsr1_toolcall_parser *p;
    dsr1_error e = {0};
    REQUIRE(dsr1_toolcall_create(&p, &e) == 0);
    char *content = strdup("Let me check.\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
                           "<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
                           "<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
    dsr1_run_toolcall *calls = NULL;
    size_t n = 0;
    CHECK_OK(dsr1_gen_split_tools(p, &content, &calls, &n, &e), &e);
    CHECK_STR(content, "Let me check.");
    REQUIRE(n == 1);
    CHECK_STR(calls[0].name, "get_weather");
    CHECK_STR(calls[0].arguments, "{\"city\":\"Paris\"}");
    free(calls);
    free(content);
    /* No markup: the text is unchanged and there are no calls. */
    dsr1_toolcall_reset(p);
    content = strdup("plain answer");
    CHECK_OK(dsr1_gen_split_tools(p, &content, &calls, &n, &e), &e);
    CHECK_STR(content, "plain answer");
    CHECK(n == 0 && calls == NULL);
    free(content);
    dsr1_toolcall_free(p);
}

/* ---- model selection -------------------------------------------------------- */

static void put_env(const char *k, const char *v)
{
    if (v) setenv(k, v, 1);
    else unsetenv(k);
}

DSR1_TEST(run_model_path_resolution)
{
    char dir[512], data[600], p[700], out[1024];
    snprintf(dir, sizeof dir, "%s/xdg", dsr1_test_tmpdir());
    snprintf(data, sizeof data, "%s/dsr1", dir);
    mkdir(dir, 0700);
    mkdir(data, 0700);
    char *old_x = getenv("XDG_DATA_HOME") ? strdup(getenv("XDG_DATA_HOME")) : NULL;
    char *old_m = getenv("DSR1_MODEL") ? strdup(getenv("DSR1_MODEL")) : NULL;
    put_env("XDG_DATA_HOME", dir);
    put_env("DSR1_MODEL", NULL);
    dsr1_error e = {0};
    /* Nothing anywhere: the message says how to get a model. */
    CHECK(dsr1_common_model_path(NULL, out, sizeof out, &e) == DSR1_ENOTFOUND);
    CHECK(strstr(e.msg, "dsr1 convert") && strstr(e.msg, "--default"));
    /* The only *.dsr1 in the data directory. */
    snprintf(p, sizeof p, "%s/a.dsr1", data);
    dsr1_test_write_file(p, "x", 1);
    CHECK_OK(dsr1_common_model_path(NULL, out, sizeof out, &e), &e);
    CHECK_STR(out, p);
    /* Two: ambiguous without a default file... */
    snprintf(p, sizeof p, "%s/b.dsr1", data);
    dsr1_test_write_file(p, "x", 1);
    CHECK(dsr1_common_model_path(NULL, out, sizeof out, &e) == DSR1_ENOTFOUND);
    CHECK(strstr(e.msg, "several") != NULL);
    /* ...which names one (relative to the directory). */
    snprintf(p, sizeof p, "%s/default", data);
    dsr1_test_write_file(p, "b.dsr1\n", 7);
    CHECK_OK(dsr1_common_model_path(NULL, out, sizeof out, &e), &e);
    snprintf(p, sizeof p, "%s/b.dsr1", data);
    CHECK_STR(out, p);
    /* DSR1_MODEL beats the data directory, -m beats both. */
    snprintf(p, sizeof p, "%s/a.dsr1", data);
    put_env("DSR1_MODEL", p);
    CHECK_OK(dsr1_common_model_path(NULL, out, sizeof out, &e), &e);
    CHECK_STR(out, p);
    CHECK(dsr1_common_model_path("/nonexistent.dsr1", out, sizeof out, &e) == DSR1_ENOTFOUND);
    /* A checkpoint directory gets the convert command. */
    const char *ck = dsr1_test_fixture("tiny/ckpt");
    CHECK(dsr1_common_model_path(ck, out, sizeof out, &e) == DSR1_EINVAL);
    CHECK(strstr(e.msg, "dsr1 convert") && strstr(e.msg, ck));
    put_env("XDG_DATA_HOME", old_x);
    put_env("DSR1_MODEL", old_m);
    free(old_x);
    free(old_m);
}
