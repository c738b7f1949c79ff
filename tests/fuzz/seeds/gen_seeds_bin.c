#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "convert/dsr1file.h"
#include "core/config.h"
#include "cli/chat_save.h"

typedef struct { const char *name; dsr1_type type, scale_type; int ndim, group; int64_t dims[4]; } spec;

static int write_file(const char *path, const spec *specs, int n, const char *meta, const char *blob)
{
    dsr1_error err = {0};
    dsr1_writer *w;
    if (dsr1_writer_open(&w, path, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    size_t idx[16];
    for (int i = 0; i < n; i++) {
        dsr1_tensor t = {.name = specs[i].name, .type = specs[i].type, .ndim = specs[i].ndim,
                         .scale_type = specs[i].scale_type, .group = specs[i].group};
        memcpy(t.dims, specs[i].dims, sizeof t.dims);
        if (dsr1_writer_add(w, &t, &idx[i], &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    }
    for (int i = 0; i < n; i++) {
        for (int which = 0; which < 2; which++) {
            uint64_t sz = which ? dsr1_type_scale_size(specs[i].type, specs[i].scale_type, specs[i].group, specs[i].ndim, specs[i].dims)
                                : dsr1_type_payload_size(specs[i].type, specs[i].ndim, specs[i].dims);
            if (!sz) continue;
            unsigned char *b = malloc(sz);
            if (specs[i].type == DSR1_T_BLOB && blob) memcpy(b, blob, sz);
            else for (uint64_t j = 0; j < sz; j++) b[j] = (unsigned char)(j * 37 + i);
            if (dsr1_writer_write(w, idx[i], which, 0, b, sz, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
            free(b);
        }
    }
    if (dsr1_writer_set_metadata(w, meta, &err) || dsr1_writer_finish(w, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    return 0;
}

static char *slurp(const char *p, size_t *n)
{
    FILE *f = fopen(p, "rb"); fseek(f, 0, SEEK_END); long l = ftell(f); fseek(f, 0, SEEK_SET);
    char *b = malloc(l + 1); fread(b, 1, l, f); b[l] = 0; fclose(f); if (n) *n = l; return b;
}

int main(void)
{
    const char *R = "tests/fuzz/corpus";
    char path[512];
    /* metadata with the tiny config, normalised */
    char *hf = slurp("tests/fixtures/tiny/ckpt/config.json", NULL);
    dsr1_config c; dsr1_error err = {0};
    if (dsr1_config_parse_hf(&c, hf, "cfg", &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    char *cj = dsr1_config_to_json(&c);
    char meta[8192];
    snprintf(meta, sizeof meta, "{\"format\":\"dsr1\",\"version\":1,\"config\":%s,\"chat_template\":null,"
             "\"source\":{\"dir\":\"/x/ck\",\"name\":\"ck\",\"shards\":[{\"file\":\"a.safetensors\",\"size\":10,\"hash\":\"0123456789abcdef\"}]},"
             "\"conversion\":{\"type\":\"source\",\"type_for\":[\"lm_head.weight=bf16\"],\"dsr1_version\":\"0.1.0\",\"created\":\"2026-11-24T00:00:00Z\"}}", cj);
    size_t toklen;
    char *tok = slurp("tests/fuzz/corpus/tokenizer/small_bpe.json", &toklen);
    spec s1[] = {
        {"model.norm.weight", DSR1_T_F32, 0, 1, 0, {8}},
        {"model.embed_tokens.weight", DSR1_T_BF16, 0, 2, 0, {4, 8}},
        {"q.weight", DSR1_T_FP8_E4M3, DSR1_T_F32, 2, 128, {3, 5}},
        {"i8.weight", DSR1_T_INT8, DSR1_T_F32, 2, 0, {3, 4}},
        {"i4.weight", DSR1_T_INT4, DSR1_T_F16, 2, 32, {2, 64}},
        {"tokenizer.json", DSR1_T_BLOB, 0, 1, 0, {(int64_t)toklen}},
    };
    snprintf(path, sizeof path, "%s/dsr1file/mixed.dsr1.bin", R);
    if (write_file(path, s1, 6, meta, tok)) return 1;
    spec s2[] = {{"w", DSR1_T_F16, 0, 3, 0, {2, 2, 2}}};
    snprintf(path, sizeof path, "%s/dsr1file/one_tensor.dsr1.bin", R);
    if (write_file(path, s2, 1, "{\"format\":\"dsr1\",\"version\":1}", NULL)) return 1;
    snprintf(path, sizeof path, "%s/dsr1file/empty.dsr1.bin", R);
    if (write_file(path, s2, 0, "{}", NULL)) return 1;
    /* chat saves */
    cJSON *h = cJSON_Parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"hello\",\"reasoning\":\"r\"}],\"system\":\"be brief\"}");
    snprintf(path, sizeof path, "%s/chat_save/conversation.dsr1chat", R);
    if (dsr1_chat_save_write(path, h, NULL, 0, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    unsigned char kv[300];
    for (int i = 0; i < 300; i++) kv[i] = (unsigned char)(i * 7);
    snprintf(path, sizeof path, "%s/chat_save/with_kv.dsr1chat", R);
    if (dsr1_chat_save_write(path, h, kv, sizeof kv, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    cJSON_Delete(h);
    return 0;
}
