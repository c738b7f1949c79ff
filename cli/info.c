/*
 * info.c - `dsr1 info FILE.dsr1|CKPT_DIR [--json]` and `dsr1 info --hw`.
 *
 * Describes a model without loading it: the config summary, tensors by
 * type, file size, the memory it will need (weights are mmap'd; the KV
 * cache holds the compressed latent kv_lora_rank + qk_rope_head_dim per
 * layer per token, BF16), parameter counts and provenance. The same facts
 * print as text or as one JSON object (--json) on stdout.
 * For a checkpoint directory the tensors are the source dtypes and the
 * directory is validated (shapes against config.json) like convert does.
 * The hardware report lives in cli/info_hw.c.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "common.h"
#include "convert/checkpoint.h"
#include "core/dsr1file.h"
#include "core/config.h"

#define N_KINDS 8 /* enough for dsr1 types and safetensors dtypes */

typedef struct facts {
    const char *path, *kind;     /* "dsr1" or "checkpoint" */
    dsr1_config cfg;
    const char *kind_name[N_KINDS];
    uint64_t count[N_KINDS], bytes[N_KINDS];
    uint64_t file_size, n_tensors;
    cJSON *prov;                 /* owned: {"source":..,"conversion":..} or shards */
} facts;

/* ---- gathering -------------------------------------------------------- */

static int from_file(facts *f, const char *path, dsr1_error *err)
{
    dsr1_file *df;
    DSR1_TRY(dsr1_file_open(&df, path, err));
    cJSON *meta = cJSON_Parse(dsr1_file_metadata(df));
    cJSON *cfg = cJSON_GetObjectItemCaseSensitive(meta, "config");
    char *cs = cfg ? cJSON_PrintUnformatted(cfg) : NULL;
    int rc = cs ? dsr1_config_from_json(&f->cfg, cs, path, err)
                : dsr1_errorf(err, DSR1_EFORMAT, "%s: metadata has no \"config\" object", path);
    free(cs);
    f->kind = "dsr1";
    f->file_size = dsr1_file_header_of(df)->file_size;
    f->n_tensors = dsr1_file_n_tensors(df);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const dsr1_tensor *t = dsr1_file_tensor(df, i);
        f->kind_name[t->type] = dsr1_type_name(t->type);
        f->count[t->type]++;
        f->bytes[t->type] += t->size + t->scale_size;
    }
    f->prov = cJSON_CreateObject();
    const char *keys[2] = {"source", "conversion"};
    for (int k = 0; k < 2; k++) {
        cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(meta, keys[k]);
        cJSON_AddItemToObject(f->prov, keys[k], v ? v : cJSON_CreateNull());
    }
    cJSON_Delete(meta);
    dsr1_file_close(df);
    return rc;
}

static int from_checkpoint(facts *f, const char *dir, dsr1_error *err)
{
    dsr1_checkpoint *ck;
    DSR1_TRY(dsr1_checkpoint_open(&ck, dir, err));
    int rc = dsr1_checkpoint_check_shapes(ck, err);
    f->cfg = *dsr1_checkpoint_config(ck);
    f->kind = "checkpoint";
    f->n_tensors = dsr1_checkpoint_n_tensors(ck);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const dsr1_st_tensor *t = dsr1_checkpoint_tensor(ck, i);
        f->kind_name[t->dtype] = dsr1_st_dtype_name(t->dtype);
        f->count[t->dtype]++;
        f->bytes[t->dtype] += t->size;
    }
    f->prov = cJSON_CreateObject();
    cJSON *src = cJSON_AddObjectToObject(f->prov, "source");
    const char *slash = strrchr(dir, '/');
    cJSON_AddStringToObject(src, "dir", dir);
    cJSON_AddStringToObject(src, "name", slash && slash[1] ? slash + 1 : dir);
    cJSON *shards = cJSON_AddArrayToObject(src, "shards");
    for (size_t i = 0; i < dsr1_checkpoint_n_shards(ck); i++) {
        uint64_t size;
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "file", dsr1_checkpoint_shard_name(ck, i, &size));
        cJSON_AddNumberToObject(s, "size", (double)size);
        cJSON_AddItemToArray(shards, s);
        f->file_size += size;
    }
    cJSON_AddNullToObject(f->prov, "conversion");
    dsr1_checkpoint_close(ck);
    return rc;
}

static uint64_t kv_bytes_per_token(const dsr1_config *c)
{
    return (uint64_t)(c->kv_lora_rank + c->qk_rope_head_dim) *
           (uint64_t)(c->num_hidden_layers + c->num_nextn_predict_layers) * 2;
}

/* ---- JSON output ------------------------------------------------------ */

static void print_json(const facts *f)
{
    uint64_t total, active;
    dsr1_config_param_counts(&f->cfg, &total, &active);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", f->path);
    cJSON_AddStringToObject(o, "kind", f->kind);
    cJSON_AddNumberToObject(o, "file_size", (double)f->file_size);
    char *cs = dsr1_config_to_json(&f->cfg);
    cJSON_AddItemToObject(o, "config", cs ? cJSON_Parse(cs) : cJSON_CreateNull());
    free(cs);
    cJSON *ty = cJSON_AddObjectToObject(o, "tensors");
    for (int k = 0; k < N_KINDS; k++) {
        if (!f->count[k]) continue;
        cJSON *e = cJSON_AddObjectToObject(ty, f->kind_name[k]);
        cJSON_AddNumberToObject(e, "count", (double)f->count[k]);
        cJSON_AddNumberToObject(e, "bytes", (double)f->bytes[k]);
    }
    cJSON *p = cJSON_AddObjectToObject(o, "params");
    cJSON_AddNumberToObject(p, "total", (double)total);
    cJSON_AddNumberToObject(p, "active", (double)active);
    cJSON *m = cJSON_AddObjectToObject(o, "memory");
    cJSON_AddNumberToObject(m, "weights_bytes", (double)f->file_size);
    cJSON_AddNumberToObject(m, "kv_bytes_per_token", (double)kv_bytes_per_token(&f->cfg));
    cJSON_AddItemReferenceToObject(o, "provenance", f->prov);
    char *s = cJSON_PrintUnformatted(o);
    if (s) printf("%s\n", s);
    free(s);
    cJSON_Delete(o);
}

/* ---- text output ------------------------------------------------------ */

static void print_config(const dsr1_config *c)
{
    static const char *const topk[] = {"greedy", "group_limited_greedy", "noaux_tc"};
    printf("model:      DeepSeek-V%d family, %d layers + %d MTP, hidden %d, vocab %d\n",
           c->family, c->num_hidden_layers, c->num_nextn_predict_layers, c->hidden_size, c->vocab_size);
    printf("attention:  MLA, %d heads, q_lora_rank %d, kv_lora_rank %d, qk %d nope + %d rope, v %d\n",
           c->num_attention_heads, c->q_lora_rank, c->kv_lora_rank, c->qk_nope_head_dim,
           c->qk_rope_head_dim, c->v_head_dim);
    if (c->n_routed_experts)
        printf("experts:    %d routed (%d per token, %d groups / top %d, %s, %s), %d shared, "
               "width %d; first %d layers dense (width %d)\n", c->n_routed_experts,
               c->num_experts_per_tok, c->n_group, c->topk_group,
               topk[c->topk_method < 3 ? c->topk_method : 0],
               c->scoring_func == DSR1_SCORE_SIGMOID ? "sigmoid" : "softmax", c->n_shared_experts,
               c->moe_intermediate_size, c->first_k_dense_replace, c->intermediate_size);
    printf("context:    %d tokens, rope theta %g", c->max_position_embeddings, (double)c->rope_theta);
    if (c->has_yarn)
        printf(", YaRN x%g over %d (beta %g/%g, mscale %g/%g)", (double)c->rope_scaling_factor,
               c->original_max_position_embeddings, (double)c->beta_fast, (double)c->beta_slow,
               (double)c->mscale, (double)c->mscale_all_dim);
    printf("\n");
}

/* A string the file gave, made safe for a terminal (no escape sequences,
 * control characters or broken UTF-8: see dsr1_text_sanitize); "?" when v
 * is not a string. Uses one of four rotating buffers so a printf can take
 * several. */
static const char *shown(const cJSON *v)
{
    static char buf[4][256];
    static int next;
    if (!cJSON_IsString(v)) return "?";
    char *b = buf[next++ & 3];
    snprintf(b, sizeof buf[0], "%s", v->valuestring);
    dsr1_text_sanitize(b);
    return b;
}

static void print_provenance(const cJSON *prov)
{
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(prov, "source");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(src, "name");
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(src, "shards");
    printf("source:     %s (%d shard%s)\n", shown(name),
           cJSON_GetArraySize(shards), cJSON_GetArraySize(shards) == 1 ? "" : "s");
    const cJSON *cv = cJSON_GetObjectItemCaseSensitive(prov, "conversion");
    if (!cJSON_IsObject(cv)) return;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(cv, "type");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(cv, "dsr1_version");
    const cJSON *when = cJSON_GetObjectItemCaseSensitive(cv, "created");
    printf("converted:  --type %s", shown(ty));
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(cv, "type_for"))
        if (cJSON_IsString(r)) printf(" --type-for %s", shown(r));
    printf(", dsr1 %s, %s\n", shown(ver), shown(when));
}

/* 671.0 B, 37.6 B, 12.3 M, 950 K */
static const char *count_str(uint64_t n, char *buf, size_t cap)
{
    double v = (double)n;
    if (v >= 1e9) snprintf(buf, cap, "%.1f B", v / 1e9);
    else if (v >= 1e6) snprintf(buf, cap, "%.1f M", v / 1e6);
    else snprintf(buf, cap, "%.0f K", v / 1e3);
    return buf;
}

static void print_text(const facts *f)
{
    char b[32], b2[32], path[4096];
    uint64_t total, active;
    dsr1_config_param_counts(&f->cfg, &total, &active);
    snprintf(path, sizeof path, "%s", f->path); /* may come from the default-model file */
    dsr1_text_sanitize(path);
    printf("%-12s%s, %s, %llu tensors\n", !strcmp(f->kind, "dsr1") ? "file:" : "checkpoint:", path,
           dsr1_common_bytes((double)f->file_size, b, sizeof b), (unsigned long long)f->n_tensors);
    print_config(&f->cfg);
    printf("parameters: %s total, %s active per token\n", count_str(total, b, sizeof b),
           count_str(active, b2, sizeof b2));
    printf("tensors:   ");
    for (int k = 0; k < N_KINDS; k++)
        if (f->count[k])
            printf(" %s %llu (%s)", f->kind_name[k], (unsigned long long)f->count[k],
                   dsr1_common_bytes((double)f->bytes[k], b, sizeof b));
    printf("\n");
    uint64_t kv = kv_bytes_per_token(&f->cfg);
    printf("memory:     weights %s (mmap), KV cache %s per token (BF16 latent), %s at %d tokens\n",
           dsr1_common_bytes((double)f->file_size, b, sizeof b),
           dsr1_common_bytes((double)kv, b2, sizeof b2),
           dsr1_common_bytes((double)kv * f->cfg.max_position_embeddings, (char[32]){0}, 32),
           f->cfg.max_position_embeddings);
    print_provenance(f->prov);
}

/* ---- command ---------------------------------------------------------- */

int dsr1_cmd_info(int argc, char **argv)
{
    int json = 0, hw = 0, numa = 0, threads = 0;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        double v;
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--numa") && i + 1 < argc) {
            if (dsr1_common_numa_arg("info", argv[++i], &numa)) return 2;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (dsr1_common_opt_num("info", "--threads", argv[++i], 1, 1024, 1, &v)) return 2;
            threads = (int)v;
        }
        else if (!strcmp(argv[i], "--hw")) hw = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: dsr1 info [FILE.dsr1|CHECKPOINT_DIR] [--json]\n"
                   "       dsr1 info --hw [--json] [--numa auto|off|virtual:N] [--threads N]\n"
                   "Describe a model (config, tensors by type, memory, parameters, provenance)\n"
                   "or this machine. Without a file: the default model (DSR1_MODEL, then\n"
                   "the data directory's default). See dsr1-info(1).\n");
            return 0;
        } else if (argv[i][0] == '-') return dsr1_cli_usage("info", "unknown option '%s'", argv[i]);
        else if (path) return dsr1_cli_usage("info", "unexpected argument '%s'", argv[i]);
        else path = argv[i];
    }
    if (hw) return path ? dsr1_cli_usage("info", "--hw takes no file") : dsr1_info_hw(json, numa, threads);
    if (numa || threads) return dsr1_cli_usage("info", "--numa and --threads go with --hw");
    char resolved[4096];
    dsr1_error err = {0};
    if (path) { /* a repo id: its snapshot in the Hugging Face cache */
        if (dsr1_common_resolve_path(path, resolved, sizeof resolved, &err)) return dsr1_cli_fail(&err);
        path = resolved;
    }
    if (!path) { /* the model every other command would use: -m, DSR1_MODEL, default */
        if (dsr1_common_model_path(NULL, resolved, sizeof resolved, &err))
            return dsr1_cli_fail(&err);
        path = resolved;
    }
    facts f;
    memset(&f, 0, sizeof f);
    f.path = path;
    struct stat sb;
    int rc = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) ? from_checkpoint(&f, path, &err)
                                                        : from_file(&f, path, &err);
    if (!rc) {
        if (json) print_json(&f);
        else print_text(&f);
    }
    cJSON_Delete(f.prov);
    return rc ? dsr1_cli_fail(&err) : 0;
}
