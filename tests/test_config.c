/*
 * test_config.c - core/config.c: the tiny fixture's config.json, a V2-Lite
 * config and R1's real values (written inline), family defaults, the
 * normalised JSON round trip, softmax scale and parameter counts against
 * published numbers, and every refusal (code and the key in the message).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/dsr1.h"
#include "test.h"

/* Real DeepSeek-V2-Lite-Chat config.json values (q_lora_rank null, softmax
 * routing, greedy top-k, YaRN with mscale 0.707). */
static const char *v2_lite_json =
    "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"attention_bias\": false,"
    " \"aux_loss_alpha\": 0.001, \"bos_token_id\": 100000, \"eos_token_id\": 100001,"
    " \"first_k_dense_replace\": 1, \"hidden_act\": \"silu\", \"hidden_size\": 2048,"
    " \"intermediate_size\": 10944, \"kv_lora_rank\": 512, \"max_position_embeddings\": 163840,"
    " \"model_type\": \"deepseek_v2\", \"moe_intermediate_size\": 1408, \"moe_layer_freq\": 1,"
    " \"n_group\": 1, \"n_routed_experts\": 64, \"n_shared_experts\": 2,"
    " \"norm_topk_prob\": false, \"num_attention_heads\": 16, \"num_experts_per_tok\": 6,"
    " \"num_hidden_layers\": 27, \"num_key_value_heads\": 16, \"pretraining_tp\": 1,"
    " \"q_lora_rank\": null, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64,"
    " \"rms_norm_eps\": 1e-06, \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1,"
    " \"factor\": 40, \"mscale\": 0.707, \"mscale_all_dim\": 0.707,"
    " \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}, \"rope_theta\": 10000,"
    " \"routed_scaling_factor\": 1.0, \"scoring_func\": \"softmax\", \"seq_aux\": true,"
    " \"tie_word_embeddings\": false, \"topk_group\": 1, \"topk_method\": \"greedy\","
    " \"torch_dtype\": \"bfloat16\", \"use_cache\": true, \"v_head_dim\": 128,"
    " \"vocab_size\": 102400}";

/* DeepSeek-R1's released config.json (the keys that matter). */
static const char *r1_json =
    "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"attention_bias\": false,"
    " \"bos_token_id\": 0, \"eos_token_id\": 1, \"ep_size\": 1, \"first_k_dense_replace\": 3,"
    " \"hidden_act\": \"silu\", \"hidden_size\": 7168, \"intermediate_size\": 18432,"
    " \"kv_lora_rank\": 512, \"max_position_embeddings\": 163840, \"model_type\": \"deepseek_v3\","
    " \"moe_intermediate_size\": 2048, \"moe_layer_freq\": 1, \"n_group\": 8,"
    " \"n_routed_experts\": 256, \"n_shared_experts\": 1, \"norm_topk_prob\": true,"
    " \"num_attention_heads\": 128, \"num_experts_per_tok\": 8, \"num_hidden_layers\": 61,"
    " \"num_key_value_heads\": 128, \"num_nextn_predict_layers\": 1, \"q_lora_rank\": 1536,"
    " \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, \"quantization_config\":"
    " {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", \"quant_method\": \"fp8\","
    " \"weight_block_size\": [128, 128]}, \"rms_norm_eps\": 1e-06, \"rope_scaling\":"
    " {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 1.0,"
    " \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},"
    " \"rope_theta\": 10000, \"routed_scaling_factor\": 2.5, \"scoring_func\": \"sigmoid\","
    " \"tie_word_embeddings\": false, \"topk_group\": 4, \"topk_method\": \"noaux_tc\","
    " \"torch_dtype\": \"bfloat16\", \"v_head_dim\": 128, \"vocab_size\": 129280}";

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static char *fixture_config(void)
{
    return read_text(dsr1_test_fixture("tiny/ckpt/config.json"));
}

DSR1_TEST(config_fixture)
{
    char *json = fixture_config();
    REQUIRE(json);
    dsr1_config c;
    dsr1_error e = {0};
    CHECK_OK(dsr1_config_parse_hf(&c, json, "config.json", &e), &e);
    free(json);
    CHECK_EQ_INT(c.family, DSR1_FAMILY_V3);
    CHECK_EQ_INT(c.vocab_size, 2048);
    CHECK_EQ_INT(c.hidden_size, 256);
    CHECK_EQ_INT(c.intermediate_size, 512);
    CHECK_EQ_INT(c.moe_intermediate_size, 128);
    CHECK_EQ_INT(c.num_hidden_layers, 4);
    CHECK_EQ_INT(c.num_nextn_predict_layers, 1);
    CHECK_EQ_INT(c.num_attention_heads, 4);
    CHECK_EQ_INT(c.q_lora_rank, 96);
    CHECK_EQ_INT(c.kv_lora_rank, 64);
    CHECK_EQ_INT(c.qk_nope_head_dim, 32);
    CHECK_EQ_INT(c.qk_rope_head_dim, 16);
    CHECK_EQ_INT(c.v_head_dim, 32);
    CHECK_EQ_INT(c.n_routed_experts, 16);
    CHECK_EQ_INT(c.n_shared_experts, 1);
    CHECK_EQ_INT(c.num_experts_per_tok, 4);
    CHECK_EQ_INT(c.n_group, 4);
    CHECK_EQ_INT(c.topk_group, 2);
    CHECK_EQ_INT(c.first_k_dense_replace, 1);
    CHECK_EQ_INT(c.moe_layer_freq, 1);
    CHECK_EQ_INT(c.norm_topk_prob, 1);
    CHECK_EQ_INT(c.scoring_func, DSR1_SCORE_SIGMOID);
    CHECK_EQ_INT(c.topk_method, DSR1_TOPK_NOAUX_TC);
    CHECK_NEAR(c.routed_scaling_factor, 2.5, 0);
    CHECK_NEAR(c.rms_norm_eps, 1e-6f, 0);
    CHECK_NEAR(c.rope_theta, 10000, 0);
    CHECK_EQ_INT(c.max_position_embeddings, 5120);
    CHECK_EQ_INT(c.has_yarn, 1);
    CHECK_NEAR(c.rope_scaling_factor, 40, 0);
    CHECK_EQ_INT(c.original_max_position_embeddings, 128);
    CHECK_NEAR(c.beta_fast, 32, 0);
    CHECK_NEAR(c.beta_slow, 1, 0);
    CHECK_NEAR(c.mscale, 1, 0);
    CHECK_NEAR(c.mscale_all_dim, 1, 0);
    CHECK_EQ_INT(c.bos_token_id, 0);
    CHECK_EQ_INT(c.eos_token_id, 1);
    CHECK_EQ_INT(c.tie_word_embeddings, 0);
    CHECK_EQ_INT(c.fp8_block_out, 128);
    CHECK_EQ_INT(c.fp8_block_in, 128);
    CHECK_EQ_INT(c.int8_channel, 0);
    CHECK(!dsr1_config_is_moe_layer(&c, 0));
    CHECK(dsr1_config_is_moe_layer(&c, 1));
    CHECK(dsr1_config_is_moe_layer(&c, 4)); /* the MTP block is MoE too */
    /* 48^-0.5 * (0.1 ln 40 + 1)^2, computed with Python's math module. */
    CHECK_NEAR(dsr1_config_softmax_scale(&c), 0.2704675577217602, 1e-6);
}

DSR1_TEST(config_v2_lite)
{
    dsr1_config c;
    dsr1_error e = {0};
    CHECK_OK(dsr1_config_parse_hf(&c, v2_lite_json, "v2-lite", &e), &e);
    CHECK_EQ_INT(c.family, DSR1_FAMILY_V2);
    CHECK_EQ_INT(c.q_lora_rank, 0);
    CHECK_EQ_INT(c.scoring_func, DSR1_SCORE_SOFTMAX);
    CHECK_EQ_INT(c.topk_method, DSR1_TOPK_GREEDY);
    CHECK_EQ_INT(c.norm_topk_prob, 0);
    CHECK_EQ_INT(c.num_nextn_predict_layers, 0); /* V2 has no MTP */
    CHECK_EQ_INT(c.n_routed_experts, 64);
    CHECK_EQ_INT(c.n_shared_experts, 2);
    CHECK_EQ_INT(c.num_experts_per_tok, 6);
    CHECK_EQ_INT(c.fp8_block_out, 0);
    CHECK_EQ_INT(c.bos_token_id, 100000);
    CHECK_NEAR(c.mscale_all_dim, 0.707, 1e-7);
    /* 192^-0.5 * (0.1 * 0.707 * ln 40 + 1)^2 (Python). */
    CHECK_NEAR(dsr1_config_softmax_scale(&c), 0.11472138679292611, 1e-6);
    /* The model card: 15.7B total, 2.4B activated. */
    uint64_t total, active;
    dsr1_config_param_counts(&c, &total, &active);
    CHECKF(total > 15.6e9 && total < 15.8e9, "V2-Lite total %llu", (unsigned long long)total);
    CHECKF(active > 2.3e9 && active < 2.5e9, "V2-Lite active %llu", (unsigned long long)active);
    /* the engine's prompt chunk: 64 x 64 / 6 = 683 tokens, in steps of 256 */
    CHECK_EQ_INT(dsr1_engine_default_chunk(&c), 768);
}

DSR1_TEST(config_r1)
{
    dsr1_config c;
    dsr1_error e = {0};
    CHECK_OK(dsr1_config_parse_hf(&c, r1_json, "r1", &e), &e);
    CHECK_EQ_INT(c.hidden_size, 7168);
    CHECK_EQ_INT(c.n_routed_experts, 256);
    CHECK_EQ_INT(c.first_k_dense_replace, 3);
    CHECK_EQ_INT(c.fp8_block_in, 128);
    CHECK(!dsr1_config_is_moe_layer(&c, 2));
    CHECK(dsr1_config_is_moe_layer(&c, 3));
    /* 192^-0.5 * (0.1 ln 40 + 1)^2 (Python). */
    CHECK_NEAR(dsr1_config_softmax_scale(&c), 0.1352337788608801, 1e-6);
    /* Published: 671B main model + 14B MTP module = 685B; 37B activated. */
    uint64_t total, active;
    dsr1_config_param_counts(&c, &total, &active);
    CHECKF(total > 684.0e9 && total < 686.0e9, "R1 total %llu", (unsigned long long)total);
    CHECKF(active > 36.5e9 && active < 38.0e9, "R1 active %llu", (unsigned long long)active);
    dsr1_config main_only = c;
    main_only.num_nextn_predict_layers = 0;
    dsr1_config_param_counts(&main_only, &total, NULL);
    CHECKF(total > 670.5e9 && total < 671.5e9, "R1 main %llu", (unsigned long long)total);
    /* the engine's prompt chunk: each of 256 experts, 8 per token, ~64 of it */
    CHECK_EQ_INT(dsr1_engine_default_chunk(&c), 2048);
    dsr1_config few = c;
    few.n_routed_experts = 32; /* gen_ckpt's r1 preset: 256, so the floor */
    CHECK_EQ_INT(dsr1_engine_default_chunk(&few), 512);
    few.n_routed_experts = 4096; /* the cap */
    CHECK_EQ_INT(dsr1_engine_default_chunk(&few), 2048);
    few.n_routed_experts = 0; /* dense */
    CHECK_EQ_INT(dsr1_engine_default_chunk(&few), 512);
}

DSR1_TEST(config_defaults)
{
    dsr1_config c;
    dsr1_error e = {0};
    /* DeepseekV3Config defaults are V3's own shapes. */
    CHECK_OK(dsr1_config_parse_hf(&c, "{\"model_type\": \"deepseek_v3\"}", "v3", &e), &e);
    CHECK_EQ_INT(c.vocab_size, 129280);
    CHECK_EQ_INT(c.n_routed_experts, 256);
    CHECK_EQ_INT(c.topk_method, DSR1_TOPK_NOAUX_TC);
    CHECK_EQ_INT(c.scoring_func, DSR1_SCORE_SIGMOID);
    CHECK_EQ_INT(c.num_nextn_predict_layers, 1);
    CHECK_EQ_INT(c.has_yarn, 0);
    CHECK_NEAR(c.rope_scaling_factor, 1, 0);
    CHECK_NEAR(dsr1_config_softmax_scale(&c), 1 / sqrt(192.0), 1e-7);
    /* DeepseekV2Config: experts None = a dense model, "gready" top-k. */
    CHECK_OK(dsr1_config_parse_hf(&c, "{\"model_type\": \"deepseek_v2\", \"topk_method\": "
                                      "\"gready\", \"n_group\": null, \"topk_group\": null}",
                                  "v2", &e), &e);
    CHECK_EQ_INT(c.n_routed_experts, 0);
    CHECK_EQ_INT(c.n_group, 1);
    CHECK_EQ_INT(c.topk_group, 1);
    CHECK_EQ_INT(c.scoring_func, DSR1_SCORE_SOFTMAX);
    CHECK_EQ_INT(c.topk_method, DSR1_TOPK_GREEDY);
    CHECK_NEAR(c.routed_scaling_factor, 1.0, 0);
    CHECK_EQ_INT(c.norm_topk_prob, 0);
    CHECK_EQ_INT(c.vocab_size, 102400);
    CHECK(!dsr1_config_is_moe_layer(&c, 5));
    /* eos as a list: the first id. */
    CHECK_OK(dsr1_config_parse_hf(&c, "{\"model_type\": \"deepseek_v3\", \"eos_token_id\": "
                                      "[7, 9]}", "v3", &e), &e);
    CHECK_EQ_INT(c.eos_token_id, 7);
}

DSR1_TEST(config_int8_channel)
{
    cJSON *o = cJSON_Parse(r1_json);
    REQUIRE(o);
    cJSON_ReplaceItemInObject(o, "quantization_config",
                              cJSON_Parse("{\"quant_method\": \"w8a8_int8\", \"is_dynamic\": true}"));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    dsr1_config c;
    dsr1_error e = {0};
    CHECK_OK(dsr1_config_parse_hf(&c, s, "int8", &e), &e);
    free(s);
    CHECK_EQ_INT(c.int8_channel, 1);
    CHECK_EQ_INT(c.fp8_block_out, 0);
}

static void check_roundtrip(dsr1_test_ctx *t, const char *hf)
{
    dsr1_config a, b;
    dsr1_error e = {0};
    CHECK_OK(dsr1_config_parse_hf(&a, hf, "hf", &e), &e);
    char *j1 = dsr1_config_to_json(&a);
    REQUIRE(j1);
    CHECK_OK(dsr1_config_from_json(&b, j1, "norm", &e), &e);
    char *j2 = dsr1_config_to_json(&b);
    CHECK_STR(j2, j1);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    free(j1);
    free(j2);
}

DSR1_TEST(config_json_roundtrip)
{
    char *fx = fixture_config();
    REQUIRE(fx);
    check_roundtrip(t, fx);
    check_roundtrip(t, v2_lite_json);
    check_roundtrip(t, r1_json);
    free(fx);
    /* The normalised form is readable: floats print in their shortest form. */
    dsr1_config c;
    dsr1_error e = {0};
    CHECK_OK(dsr1_config_parse_hf(&c, r1_json, "r1", &e), &e);
    char *j = dsr1_config_to_json(&c);
    REQUIRE(j);
    CHECK(strstr(j, "\"rms_norm_eps\": 1e-06") != NULL);
    CHECK(strstr(j, "\"family\": \"deepseek_v3\"") != NULL);
    CHECK(strstr(j, "\"topk_method\": \"noaux_tc\"") != NULL);
    /* A missing key is refused, naming it. */
    char *cut = strstr(j, ", \"kv_lora_rank\"");
    REQUIRE(cut);
    char *comma = strchr(cut + 1, ',');
    REQUIRE(comma);
    memmove(cut, comma, strlen(comma) + 1);
    CHECK_EQ_INT(dsr1_config_from_json(&c, j, "meta", &e), DSR1_EFORMAT);
    CHECK(strstr(e.msg, "kv_lora_rank") != NULL);
    free(j);
    CHECK_EQ_INT(dsr1_config_from_json(&c, "[1]", "meta", &e), DSR1_EFORMAT);
}

/* Patch one key of the fixture config (value as JSON text, NULL = delete),
 * parse, and check the code and that the message names `needle`. */
static void refuse(dsr1_test_ctx *t, const char *key, const char *value, int code,
                   const char *needle)
{
    char *fx = fixture_config();
    cJSON *o = fx ? cJSON_Parse(fx) : NULL;
    free(fx);
    REQUIRE(o);
    if (value) {
        cJSON *v = cJSON_Parse(value);
        REQUIRE(v);
        if (cJSON_GetObjectItemCaseSensitive(o, key)) cJSON_ReplaceItemInObject(o, key, v);
        else cJSON_AddItemToObject(o, key, v);
    } else {
        cJSON_DeleteItemFromObject(o, key);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    dsr1_config c;
    dsr1_error e = {0};
    int rc = dsr1_config_parse_hf(&c, s, "cfg.json", &e);
    free(s);
    CHECKF(rc == code, "%s=%s: rc %d, expected %d (%s)", key, value ? value : "(deleted)", rc,
           code, e.msg);
    CHECKF(strstr(e.msg, needle) && strstr(e.msg, "cfg.json"), "%s=%s: message \"%s\" lacks "
           "\"%s\"", key, value ? value : "(deleted)", e.msg, needle);
}

DSR1_TEST(config_refusals)
{
    refuse(t, "model_type", "\"llama\"", DSR1_EUNSUPPORTED, "model_type: \"llama\"");
    refuse(t, "model_type", NULL, DSR1_EUNSUPPORTED, "model_type");
    refuse(t, "num_experts_per_tok", "17", DSR1_EFORMAT, "num_experts_per_tok");
    refuse(t, "num_experts_per_tok", "0", DSR1_EFORMAT, "num_experts_per_tok");
    refuse(t, "n_group", "3", DSR1_EFORMAT, "n_group");
    refuse(t, "n_group", "16", DSR1_EFORMAT, "n_group"); /* 1 expert per group under noaux_tc */
    refuse(t, "topk_group", "5", DSR1_EFORMAT, "topk_group");
    refuse(t, "hidden_size", "0", DSR1_EFORMAT, "hidden_size");
    refuse(t, "num_attention_heads", "-4", DSR1_EFORMAT, "num_attention_heads");
    refuse(t, "vocab_size", "\"2048\"", DSR1_EFORMAT, "vocab_size");
    refuse(t, "kv_lora_rank", "64.5", DSR1_EFORMAT, "kv_lora_rank");
    refuse(t, "kv_lora_rank", "null", DSR1_EFORMAT, "kv_lora_rank");
    refuse(t, "qk_rope_head_dim", "15", DSR1_EFORMAT, "qk_rope_head_dim");
    refuse(t, "first_k_dense_replace", "5", DSR1_EFORMAT, "first_k_dense_replace");
    refuse(t, "eos_token_id", "4096", DSR1_EFORMAT, "eos_token_id");
    refuse(t, "rms_norm_eps", "0", DSR1_EFORMAT, "rms_norm_eps");
    refuse(t, "norm_topk_prob", "2", DSR1_EFORMAT, "norm_topk_prob");
    refuse(t, "scoring_func", "\"tanh\"", DSR1_EUNSUPPORTED, "scoring_func: \"tanh\"");
    refuse(t, "topk_method", "\"random\"", DSR1_EUNSUPPORTED, "topk_method: \"random\"");
    refuse(t, "hidden_act", "\"gelu\"", DSR1_EUNSUPPORTED, "hidden_act");
    refuse(t, "attention_bias", "true", DSR1_EUNSUPPORTED, "attention_bias");
    refuse(t, "rope_scaling", "{\"type\": \"linear\", \"factor\": 2}", DSR1_EUNSUPPORTED,
           "rope_scaling.type: \"linear\"");
    refuse(t, "rope_scaling", "{\"type\": \"yarn\"}", DSR1_EFORMAT, "rope_scaling.factor");
    refuse(t, "rope_scaling", "{\"type\": \"yarn\", \"factor\": 0.5}", DSR1_EFORMAT,
           "rope_scaling.factor");
    refuse(t, "rope_scaling", "[40]", DSR1_EFORMAT, "rope_scaling");
    refuse(t, "quantization_config", "{\"quant_method\": \"awq\"}", DSR1_EUNSUPPORTED,
           "quant_method: \"awq\"");
    refuse(t, "quantization_config", "{\"quant_method\": \"fp8\"}", DSR1_EUNSUPPORTED,
           "weight_block_size");
    refuse(t, "quantization_config", "{\"quant_method\": \"fp8\", \"fmt\": \"e5m2\", "
           "\"weight_block_size\": [128, 128]}", DSR1_EUNSUPPORTED, "fmt: \"e5m2\"");
    refuse(t, "quantization_config", "{\"quant_method\": \"fp8\", \"weight_block_size\": "
           "[128]}", DSR1_EFORMAT, "weight_block_size");
    dsr1_config c;
    dsr1_error e = {0};
    /* Groups that cannot supply k experts (two keys at once: validate). */
    char *fx = fixture_config();
    REQUIRE(fx);
    CHECK_OK(dsr1_config_parse_hf(&c, fx, "fx", &e), &e);
    free(fx);
    c.topk_group = 1;
    c.num_experts_per_tok = 5;
    CHECK_EQ_INT(dsr1_config_validate(&c, "fx", &e), DSR1_EFORMAT);
    CHECK(strstr(e.msg, "num_experts_per_tok: 5 exceeds the 4 experts") != NULL);
    c.topk_method = DSR1_TOPK_GREEDY; /* plain top-k ignores groups */
    CHECK_OK(dsr1_config_validate(&c, "fx", &e), &e);
    CHECK_EQ_INT(dsr1_config_parse_hf(&c, "{\"model_type\": ", "broken.json", &e), DSR1_EFORMAT);
    CHECK(strstr(e.msg, "broken.json") != NULL);
    CHECK_EQ_INT(dsr1_config_parse_hf(&c, "[]", "arr.json", &e), DSR1_EFORMAT);
}
