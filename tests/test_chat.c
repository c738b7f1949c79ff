/*
 * test_chat.c - the pieces of `dsr1 chat` that need no model: `/set`
 * (ranges, non-finite and non-integer values refused, nothing changed on
 * error, the listing) and reading a /save file back with bounded memory
 * (crafted files: a zstd bomb behind a huge declared KV size, a header line
 * with no end, more data than declared, a torn file, a foreign file).
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <zstd.h>

#include "cli/chat_save.h"
#include "cli/chat_set.h"
#include "test.h"

DSR1_TEST(chat_set_ranges)
{
    dsr1_sampling sp;
    dsr1_sampling_default(&sp);
    int maxtok = 100;
    dsr1_chat_settings st = {&sp, &maxtok};
    char msg[256];
    CHECK_EQ_INT(dsr1_chat_set(&st, "temperature 0.25", msg, sizeof msg), 0);
    CHECK_NEAR(sp.temperature, 0.25, 1e-7);
    CHECK_STR(msg, "temperature = 0.25");
    CHECK_EQ_INT(dsr1_chat_set(&st, "top_k 40", msg, sizeof msg), 0);
    CHECK_EQ_INT(sp.top_k, 40);
    CHECK_EQ_INT(dsr1_chat_set(&st, "repeat_penalty 1.1", msg, sizeof msg), 0); /* alias */
    CHECK_NEAR(sp.repetition_penalty, 1.1, 1e-6);
    CHECK_EQ_INT(dsr1_chat_set(&st, "presence_penalty -1.5", msg, sizeof msg), 0);
    CHECK_NEAR(sp.presence_penalty, -1.5, 1e-7);
    CHECK_EQ_INT(dsr1_chat_set(&st, "frequency_penalty 0.5", msg, sizeof msg), 0);
    CHECK_NEAR(sp.frequency_penalty, 0.5, 1e-7);
    CHECK_EQ_INT(dsr1_chat_set(&st, "max_tokens 4095", msg, sizeof msg), 0);
    CHECK_EQ_INT(maxtok, 4095);
    CHECK_EQ_INT(dsr1_chat_set(&st, "seed 123456789012", msg, sizeof msg), 0);
    CHECK(sp.seed == 123456789012ull);
    CHECK_STR(msg, "seed = 123456789012");
    dsr1_sampling before = sp;
    static const char *const bad[] = {
        "temperature inf", "temperature nan", "temperature -1", "temperature 1e999",
        "top_p 1.5", "top_k 2.5", "top_k 1e12", "top_k -1", "min_p -0.1",
        "repetition_penalty 0", "presence_penalty 2.5", "frequency_penalty -inf", "seed -1", "seed 1e300", "max_tokens 0", "max_tokens 2e9",
        "max_tokens 1e10", "temperature 3x", "temperature", "temperature 1 2", "bogus 1", "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        msg[0] = 0;
        CHECKF(dsr1_chat_set(&st, bad[i], msg, sizeof msg) == -1, "'%s' accepted", bad[i]);
        CHECKF(msg[0] && !strchr(msg, '\n'), "'%s': no one-line message", bad[i]);
    }
    CHECK(!memcmp(&before, &sp, sizeof sp));
    CHECK_EQ_INT(maxtok, 4095);
    CHECK_EQ_INT(dsr1_chat_set(&st, "top_k 2.5", msg, sizeof msg), -1);
    CHECK_STR(msg, "/set top_k 2.5: expected an integer in [0, 1073741824]");
    CHECK_EQ_INT(dsr1_chat_set(&st, "max_tokens 1.5", msg, sizeof msg), -1);
    CHECK_STR(msg, "/set max_tokens 1.5: expected an integer in [1, 1073741824]");
}

DSR1_TEST(chat_set_list)
{
    dsr1_sampling sp;
    dsr1_sampling_default(&sp);
    int maxtok = 77;
    dsr1_chat_settings st = {&sp, &maxtok};
    char path[512], *text;
    snprintf(path, sizeof path, "%s/setlist", dsr1_test_tmpdir());
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    dsr1_chat_set_list(&st, f);
    fclose(f);
    REQUIRE((text = dsr1_test_slurp(path, NULL)));
    static const char *const want[] = {"temperature", "0.6", "top_p", "0.95", "top_k",
                                       "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed",
                                       "max_tokens",
                                       " 77 ", "[0, 1]\n", "[1, 1073741824] integer"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECKF(strstr(text, want[i]), "listing lacks '%s':\n%s", want[i], text);
    free(text);
}

/* ---- /save files --------------------------------------------------------- */

/* A zstd file of `head` followed by n_zero zero bytes. */
static int write_zst(const char *path, const char *head, size_t n_zero)
{
    FILE *f = fopen(path, "wb");
    ZSTD_CCtx *c = ZSTD_createCCtx();
    size_t cap = ZSTD_CStreamOutSize();
    char *out = malloc(cap), *zero = calloc(1, 1 << 20);
    int rc = !f || !c || !out || !zero;
    ZSTD_inBuffer in = {head, strlen(head), 0};
    while (!rc) {
        int last = in.src != zero && n_zero == 0;
        ZSTD_outBuffer ob = {out, cap, 0};
        size_t left = ZSTD_compressStream2(c, &ob, &in, last ? ZSTD_e_end : ZSTD_e_continue);
        if (ZSTD_isError(left) || fwrite(out, 1, ob.pos, f) != ob.pos) rc = 1;
        if (last && left == 0) break;
        if (in.pos < in.size || last) continue;
        size_t k = n_zero < (1u << 20) ? n_zero : 1u << 20;
        n_zero -= k;
        in = (ZSTD_inBuffer){zero, k, 0};
        if (!k) in.src = head, in.size = in.pos = 0;
    }
    if (f) fclose(f);
    ZSTD_freeCCtx(c);
    free(out);
    free(zero);
    return rc;
}

static int load(const char *path, size_t max_json, size_t max_kv, dsr1_error *e)
{
    cJSON *h = NULL;
    void *kv = NULL;
    size_t len = 0;
    int rc = dsr1_chat_save_read(path, max_json, max_kv, &h, &kv, &len, e);
    cJSON_Delete(h);
    free(kv);
    return rc;
}

DSR1_TEST(chat_save_bounded)
{
    char p[512];
    dsr1_error e = {0};
    snprintf(p, sizeof p, "%s/ok.chat", dsr1_test_tmpdir());
    cJSON *h = cJSON_Parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    CHECK_OK(dsr1_chat_save_write(p, h, "KVKVKV", 6, &e), &e);
    cJSON_Delete(h);
    cJSON *back = NULL;
    void *kv = NULL;
    size_t len = 0;
    CHECK_OK(dsr1_chat_save_read(p, 1 << 20, 1 << 20, &back, &kv, &len, &e), &e);
    CHECK_EQ_INT(len, 6);
    CHECK(kv && !memcmp(kv, "KVKVKV", 6));
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(back, "messages")) == 1);
    cJSON_Delete(back);
    free(kv);
    CHECK_EQ_INT(load(p, 1 << 20, 5, &e), DSR1_ERANGE); /* 6 KV bytes, 5 allowed */

    /* The bomb: 256 MiB of zeros (a few KiB on disk) declared as KV. */
    snprintf(p, sizeof p, "%s/bomb.chat", dsr1_test_tmpdir());
    REQUIRE(!write_zst(p, "DSR1CHAT 1\n{\"messages\":[],\"kv_bytes\":268435456}\n", 256u << 20));
    CHECK_EQ_INT(load(p, 1 << 20, 1 << 20, &e), DSR1_ERANGE);
    CHECKF(strstr(e.msg, "more than this context can hold"), "%s", e.msg);
    /* The same data declared as 0 KV bytes: refused at the first extra byte. */
    REQUIRE(!write_zst(p, "DSR1CHAT 1\n{\"messages\":[],\"kv_bytes\":0}\n", 256u << 20));
    CHECK_EQ_INT(load(p, 1 << 20, 1 << 20, &e), DSR1_EFORMAT);
    CHECKF(strstr(e.msg, "more data than the header declares"), "%s", e.msg);
    /* A header line that never ends. */
    REQUIRE(!write_zst(p, "DSR1CHAT 1\n{\"messages\":[\"", 256u << 20));
    CHECK_EQ_INT(load(p, 1 << 20, 1 << 20, &e), DSR1_EFORMAT);
    CHECKF(strstr(e.msg, "header longer than"), "%s", e.msg);
    /* Declared more than is there: torn. */
    REQUIRE(!write_zst(p, "DSR1CHAT 1\n{\"messages\":[],\"kv_bytes\":100}\n", 10));
    CHECK_EQ_INT(load(p, 1 << 20, 1 << 20, &e), DSR1_EFORMAT);
    CHECKF(strstr(e.msg, "truncated"), "%s", e.msg);
    /* Not ours. */
    REQUIRE(!write_zst(p, "hello\n", 0));
    CHECK_EQ_INT(load(p, 1 << 20, 1 << 20, &e), DSR1_EFORMAT);
    CHECKF(strstr(e.msg, "not a dsr1 chat save"), "%s", e.msg);
    REQUIRE(!write_zst(p, "DSR1CHAT 1\n{\"kv_bytes\":1e400}\n", 0));
    CHECK_EQ_INT(load(p, 1 << 20, 1 << 20, &e), DSR1_EFORMAT);
}
