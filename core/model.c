/*
 * model.c - opening a .dsr1 file as a model: config from the metadata,
 * every tensor a layer needs looked up by its Hugging Face name and checked
 * against the config's shapes, the derived per-head kv_b_proj parts, the
 * tokenizer and chat template, and the backend.
 *
 * Does not compute anything (forward.c) and never copies a weight matrix:
 * the dsr1_wmat descriptors point into the file's read-only mapping. The
 * only allocations are the layer table, float32 copies of norm vectors the
 * file stores in another type, and the derived attention parts
 * (core/model_kvb.c; model.h says what they cost).
 *
 * Metadata: a JSON object; the normalised config is its "config" member
 * (or the object itself when it has no such member); the chat template is
 * its "chat_template" string or the one inside a "tokenizer_config.json"
 * BLOB; the tokenizer is the "tokenizer.json" BLOB.
 */
#include "model.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numeric.h"
#include "rope.h"
#include "moe.h"

/* ---- lookups ------------------------------------------------------------ */

int dsr1_model_own(dsr1_model *m, void *p, dsr1_error *err)
{
    if (!p) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", dsr1_file_path(m->file));
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **o = realloc(m->owned, (size_t)cap * sizeof *o);
        if (!o) {
            free(p);
            return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", dsr1_file_path(m->file));
        }
        m->owned = o;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return 0;
}

int dsr1_model_load_weight(dsr1_model *m, dsr1_mw *w, dsr1_error *err)
{
    return m->be->load(m->dev, &w->d, DSR1_PLACE_AUTO, &w->h, err);
}

static int find(dsr1_model *m, const char *name, const dsr1_tensor **t, dsr1_error *err)
{
    *t = dsr1_file_find(m->file, name);
    if (!*t)
        return dsr1_errorf(err, DSR1_ENOTFOUND, "%s: tensor %s missing",
                           dsr1_file_path(m->file), name);
    return 0;
}

/* ---- the one check of a tensor against the config ------------------------- */

/* What a loader expects of a tensor. */
typedef enum { WANT_MATRIX, WANT_VECTOR } want_kind;

static int bad_shape(dsr1_model *m, const dsr1_tensor *t, int ndim, const int64_t *dims,
                     dsr1_error *err)
{
    char got[96], want[96];
    int k = snprintf(got, sizeof got, "[");
    for (int i = 0; i < t->ndim && i < DSR1_MAX_DIMS; i++)
        k += snprintf(got + k, sizeof got - (size_t)k, i ? ", %lld" : "%lld", (long long)t->dims[i]);
    snprintf(got + k, sizeof got - (size_t)k, "]");
    k = snprintf(want, sizeof want, "[");
    for (int i = 0; i < ndim; i++)
        k += snprintf(want + k, sizeof want - (size_t)k, i ? ", %lld" : "%lld", (long long)dims[i]);
    snprintf(want + k, sizeof want - (size_t)k, "]");
    return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: expected shape %s, found %s",
                       dsr1_file_path(m->file), t->name, want, got);
}

/* Every tensor a model uses passes here, by one rule (issue: the MTP
 * layer's embedding was once taken unchecked): the name exists, the shape
 * is what the config says, the type is one a backend multiplies (a vector:
 * a float type), and payload and scales have exactly the sizes the type
 * rules give and lie inside the file's mapping. */
static int check_tensor(dsr1_model *m, const char *name, want_kind kind, int ndim,
                        const int64_t *dims, const dsr1_tensor **out, dsr1_error *err)
{
    const char *path = dsr1_file_path(m->file);
    const dsr1_tensor *t;
    DSR1_TRY(find(m, name, &t, err));
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->dims[i] == dims[i];
    if (!same) return bad_shape(m, t, ndim, dims, err);
    int float_type = t->type == DSR1_T_F32 || t->type == DSR1_T_BF16 || t->type == DSR1_T_F16;
    if (kind == WANT_VECTOR ? !float_type : (t->type == DSR1_T_BLOB || t->type >= DSR1_T_COUNT))
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: tensor %s: expected a %s, found type %s",
                           path, name, kind == WANT_VECTOR ? "float vector" : "weight matrix",
                           dsr1_type_name(t->type));
    uint64_t size = dsr1_type_payload_size(t->type, t->ndim, t->dims);
    uint64_t ssize = dsr1_type_scale_size(t->type, t->scale_type, t->group, t->ndim, t->dims);
    int scaled = t->type == DSR1_T_FP8_E4M3 || t->type == DSR1_T_INT8 || t->type == DSR1_T_INT4;
    if (!size || size != t->size || (scaled && (!ssize || ssize != t->scale_size || !t->scale)) ||
        !dsr1_file_contains(m->file, t->data, t->size) ||
        (t->scale && !dsr1_file_contains(m->file, t->scale, t->scale_size)))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: expected %llu payload bytes and %llu "
                           "scale bytes inside the file, found %llu and %llu", path, name,
                           (unsigned long long)size, (unsigned long long)ssize,
                           (unsigned long long)t->size, (unsigned long long)t->scale_size);
    *out = t;
    return 0;
}

/* A 2-D weight [rows, cols] named name, loaded. */
static int get_mat(dsr1_model *m, const char *name, int64_t rows, int64_t cols, dsr1_mw *w,
                   dsr1_error *err)
{
    const dsr1_tensor *t;
    int64_t dims[2] = {rows, cols};
    DSR1_TRY(check_tensor(m, name, WANT_MATRIX, 2, dims, &t, err));
    w->d = dsr1_wdesc_of(t, DSR1_W_MATRIX);
    return dsr1_model_load_weight(m, w, err);
}

/* An embedding table [vocab, hidden] (gathered by token id), loaded. */
static int get_embed(dsr1_model *m, const char *name, dsr1_mw *w, dsr1_error *err)
{
    const dsr1_tensor *t;
    int64_t dims[2] = {m->cfg.vocab_size, m->cfg.hidden_size};
    DSR1_TRY(check_tensor(m, name, WANT_MATRIX, 2, dims, &t, err));
    w->d = dsr1_wdesc_of(t, DSR1_W_EMBED);
    return dsr1_model_load_weight(m, w, err);
}

/* A 3-D expert stack [E, rows, cols], loaded. */
static int get_stack(dsr1_model *m, const char *name, int64_t e, int64_t rows, int64_t cols,
                     dsr1_mw *w, dsr1_error *err)
{
    const dsr1_tensor *t;
    int64_t dims[3] = {e, rows, cols};
    DSR1_TRY(check_tensor(m, name, WANT_MATRIX, 3, dims, &t, err));
    w->d = dsr1_wdesc_of(t, DSR1_W_EXPERTS);
    return dsr1_model_load_weight(m, w, err);
}

/* A float32 vector [1, n] over data (owned by the model or the mapping), loaded. */
static int put_vec(dsr1_model *m, const char *name, const float *data, int64_t n, dsr1_mw *w,
                   dsr1_error *err)
{
    w->d = (dsr1_wdesc){.name = name, .role = DSR1_W_VECTOR, .count = 1,
                        .mat = {.type = DSR1_T_F32, .rows = 1, .cols = n, .data = data}};
    return dsr1_model_load_weight(m, w, err);
}

/* A 1-D vector of n floats (converted to float32 when stored otherwise). */
static int get_vec(dsr1_model *m, const char *name, int64_t n, dsr1_mw *w, dsr1_error *err)
{
    const dsr1_tensor *t;
    DSR1_TRY(check_tensor(m, name, WANT_VECTOR, 1, &n, &t, err));
    if (t->type == DSR1_T_F32) return put_vec(m, t->name, t->data, n, w, err);
    float *v = malloc((size_t)n * sizeof *v);
    DSR1_TRY(dsr1_model_own(m, v, err));
    const uint16_t *h = t->data;
    for (int64_t i = 0; i < n; i++)
        v[i] = t->type == DSR1_T_BF16 ? dsr1_bf16_to_f32(h[i]) : dsr1_f16_to_f32(h[i]);
    return put_vec(m, t->name, v, n, w, err);
}

/* ---- layers ------------------------------------------------------------- */

static int load_attention(dsr1_model *m, int l, dsr1_layer_weights *L, dsr1_error *err)
{
    const dsr1_config *c = &m->cfg;
    char n[160];
    int64_t D = c->hidden_size, H = c->num_attention_heads;
    int64_t qk = dsr1_config_qk_head_dim(c), r = c->kv_lora_rank;
#define NAME(s) (snprintf(n, sizeof n, "model.layers.%d.%s", l, s), n)
    DSR1_TRY(get_vec(m, NAME("input_layernorm.weight"), D, &L->attn_norm, err));
    DSR1_TRY(get_vec(m, NAME("post_attention_layernorm.weight"), D, &L->ffn_norm, err));
    if (c->q_lora_rank > 0) {
        DSR1_TRY(get_mat(m, NAME("self_attn.q_a_proj.weight"), c->q_lora_rank, D, &L->q_a, err));
        DSR1_TRY(get_vec(m, NAME("self_attn.q_a_layernorm.weight"), c->q_lora_rank, &L->q_a_norm, err));
        DSR1_TRY(get_mat(m, NAME("self_attn.q_b_proj.weight"), H * qk, c->q_lora_rank, &L->q_b, err));
    } else {
        DSR1_TRY(get_mat(m, NAME("self_attn.q_proj.weight"), H * qk, D, &L->q, err));
    }
    DSR1_TRY(get_mat(m, NAME("self_attn.kv_a_proj_with_mqa.weight"), r + c->qk_rope_head_dim, D,
                     &L->kv_a, err));
    DSR1_TRY(get_vec(m, NAME("self_attn.kv_a_layernorm.weight"), r, &L->kv_a_norm, err));
    const dsr1_tensor *t;
    int64_t kvb_dims[2] = {H * (c->qk_nope_head_dim + c->v_head_dim), r};
    DSR1_TRY(check_tensor(m, NAME("self_attn.kv_b_proj.weight"), WANT_MATRIX, 2, kvb_dims, &t, err));
    dsr1_wmat kvb = dsr1_wmat_of(t, 0);
    DSR1_TRY(dsr1_model_derive_kv_b(m, L, &kvb, err));
    DSR1_TRY(dsr1_model_load_weight(m, &L->wk_t, err));
    DSR1_TRY(dsr1_model_load_weight(m, &L->wv, err));
    if (m->be->mla_naive && m->compute != DSR1_COMPUTE_F32) {
        L->kv_b.d = (dsr1_wdesc){.name = t->name, .role = DSR1_W_MATRIX, .mat = kvb, .count = 1};
        DSR1_TRY(dsr1_model_load_weight(m, &L->kv_b, err));
    }
    DSR1_TRY(get_mat(m, NAME("self_attn.o_proj.weight"), D, H * c->v_head_dim, &L->o, err));
    return 0;
}

static int load_ffn(dsr1_model *m, int l, dsr1_layer_weights *L, dsr1_error *err)
{
    const dsr1_config *c = &m->cfg;
    char n[160];
    int64_t D = c->hidden_size, E = c->n_routed_experts, I = c->moe_intermediate_size;
    /* The MTP layer is a decoder layer with index num_hidden_layers (as in
     * Hugging Face's layer_idx), so the same rule picks dense or MoE. */
    L->is_moe = dsr1_config_is_moe_layer(c, l);
    if (!L->is_moe) {
        int64_t F = c->intermediate_size;
        DSR1_TRY(get_mat(m, NAME("mlp.gate_proj.weight"), F, D, &L->gate, err));
        DSR1_TRY(get_mat(m, NAME("mlp.up_proj.weight"), F, D, &L->up, err));
        DSR1_TRY(get_mat(m, NAME("mlp.down_proj.weight"), D, F, &L->down, err));
        return 0;
    }
    DSR1_TRY(get_mat(m, NAME("mlp.gate.weight"), E, D, &L->router, err));
    if (c->topk_method == DSR1_TOPK_NOAUX_TC)
        DSR1_TRY(get_vec(m, NAME("mlp.gate.e_score_correction_bias"), E, &L->bias, err));
    DSR1_TRY(get_stack(m, NAME("mlp.experts.gate_proj.weight"), E, I, D, &L->e_gate, err));
    DSR1_TRY(get_stack(m, NAME("mlp.experts.up_proj.weight"), E, I, D, &L->e_up, err));
    DSR1_TRY(get_stack(m, NAME("mlp.experts.down_proj.weight"), E, D, I, &L->e_down, err));
    int shared = c->n_shared_experts > 0;
    if (shared) {
        int64_t S = I * c->n_shared_experts;
        DSR1_TRY(get_mat(m, NAME("mlp.shared_experts.gate_proj.weight"), S, D, &L->sh_gate, err));
        DSR1_TRY(get_mat(m, NAME("mlp.shared_experts.up_proj.weight"), S, D, &L->sh_up, err));
        DSR1_TRY(get_mat(m, NAME("mlp.shared_experts.down_proj.weight"), D, S, &L->sh_down, err));
    }
    L->moe = (dsr1_moe_weights){.router = L->router.h, .bias = L->bias.h, .gate = L->e_gate.h,
                                .up = L->e_up.h, .down = L->e_down.h, .has_shared = shared,
                                .sh_gate = L->sh_gate.h, .sh_up = L->sh_up.h,
                                .sh_down = L->sh_down.h};
    return 0;
}

/* NextN extras; its own embed_tokens / shared_head.head when present. */
static int load_mtp(dsr1_model *m, int l, dsr1_layer_weights *L, dsr1_error *err)
{
    const dsr1_config *c = &m->cfg;
    char n[160];
    int64_t D = c->hidden_size, V = c->vocab_size;
    L->is_mtp = 1;
    DSR1_TRY(get_vec(m, NAME("enorm.weight"), D, &L->enorm, err));
    DSR1_TRY(get_vec(m, NAME("hnorm.weight"), D, &L->hnorm, err));
    DSR1_TRY(get_vec(m, NAME("shared_head.norm.weight"), D, &L->head_norm, err));
    DSR1_TRY(get_mat(m, NAME("eh_proj.weight"), D, 2 * D, &L->eh_proj, err));
    if (dsr1_file_find(m->file, NAME("embed_tokens.weight")))
        DSR1_TRY(get_embed(m, n, &L->mtp_embed, err));
    else
        L->mtp_embed = m->embed;
    if (dsr1_file_find(m->file, NAME("shared_head.head.weight")))
        DSR1_TRY(get_mat(m, n, V, D, &L->head, err));
    else
        L->head = m->lm_head;
    return 0;
#undef NAME
}

static int load_layers(dsr1_model *m, dsr1_error *err)
{
    const dsr1_config *c = &m->cfg;
    char n[160];
    snprintf(n, sizeof n, "model.layers.%d.eh_proj.weight", c->num_hidden_layers);
    m->n_mtp = c->num_nextn_predict_layers > 0 && dsr1_file_find(m->file, n) ? 1 : 0;
    m->n_layers = c->num_hidden_layers + m->n_mtp;
    m->layers = calloc((size_t)m->n_layers, sizeof *m->layers);
    DSR1_TRY(dsr1_model_own(m, m->layers, err));
    for (int l = 0; l < m->n_layers; l++) {
        if (m->progress) m->progress((double)l / m->n_layers, "layers", m->progress_ctx);
        DSR1_TRY(load_attention(m, l, &m->layers[l], err));
        DSR1_TRY(load_ffn(m, l, &m->layers[l], err));
        if (l >= c->num_hidden_layers) DSR1_TRY(load_mtp(m, l, &m->layers[l], err));
    }
    return 0;
}

/* ---- metadata, tokenizer, template ---------------------------------------- */

static int load_config(dsr1_model *m, dsr1_error *err)
{
    const char *path = dsr1_file_path(m->file);
    cJSON *meta = cJSON_Parse(dsr1_file_metadata(m->file));
    if (!meta || !cJSON_IsObject(meta)) {
        cJSON_Delete(meta);
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: metadata is not a JSON object", path);
    }
    cJSON *cfg = cJSON_GetObjectItemCaseSensitive(meta, "config");
    char *text = cJSON_PrintUnformatted(cJSON_IsObject(cfg) ? cfg : meta);
    int rc = text ? dsr1_config_from_json(&m->cfg, text, path, err)
                  : dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    free(text);
    cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(meta, "chat_template");
    if (!rc && cJSON_IsString(tmpl)) {
        m->chat_template = strdup(tmpl->valuestring);
        if (!m->chat_template) rc = dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    }
    cJSON_Delete(meta);
    return rc;
}

static const dsr1_tensor *blob(dsr1_model *m, const char *name)
{
    const dsr1_tensor *t = dsr1_file_find(m->file, name);
    return t && t->type == DSR1_T_BLOB ? t : NULL;
}

static int load_tokenizer(dsr1_model *m, dsr1_error *err)
{
    const dsr1_tensor *t = blob(m, "tokenizer.json");
    if (t) DSR1_TRY(dsr1_tokenizer_create(&m->tok, t->data, t->size, "tokenizer.json", err));
    t = blob(m, "tokenizer_config.json");
    if (m->chat_template || !t) return 0;
    cJSON *j = cJSON_ParseWithLength(t->data, t->size);
    cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    if (cJSON_IsString(tmpl)) m->chat_template = strdup(tmpl->valuestring);
    cJSON_Delete(j);
    return 0;
}

/* ---- open / close ----------------------------------------------------------- */

/* What the activations of the compute mode become for this file's weight
 * types (dsr1_model_act): the line dsr1 info / bench / eval print. */
static const char *act_label(const dsr1_model *m)
{
    if (m->compute == DSR1_COMPUTE_F32) return "f32 compute";
    dsr1_type t = m->layers[0].kv_a.d.mat.type;
    if (t == DSR1_T_INT8) return "w8a8 int8 compute (bf16 on bf16 tensors)";
    /* W4A8 is the CPU kernels' (backends/cpu/matmul_impl.h); the GPU
     * backends still run INT4 weights with bf16 activations. */
    if (t == DSR1_T_INT4 && !strcmp(m->be->name, "cpu"))
        return "w4a8 int8 compute (w8a8 on int8, bf16 on bf16 tensors)";
    return "bf16 compute";
}

typedef struct verify_cb {
    const dsr1_model_options *o;
} verify_cb;

static void verify_progress(uint64_t done, uint64_t total, void *ctx)
{
    const verify_cb *v = ctx;
    if (v->o->progress)
        v->o->progress(total ? (double)done / (double)total : 1.0, "verifying hashes",
                       v->o->progress_ctx);
}

static int load(dsr1_model *m, const char *path, const dsr1_model_options *o, dsr1_error *err)
{
    DSR1_TRY(dsr1_file_open(&m->file, path, err));
    if (o && o->verify) { /* payload hashes: only on request (reads the whole file) */
        verify_cb v = {o};
        DSR1_TRY(dsr1_file_verify(m->file, verify_progress, &v, err));
    }
    DSR1_TRY(load_config(m, err));
    const dsr1_config *c = &m->cfg;
    /* Limits of fixed-size scratch in rope/routing (far above any release). */
    if (c->qk_rope_head_dim / 2 > (int)(sizeof m->freqs / sizeof *m->freqs) ||
        c->n_routed_experts > 1024 || c->n_group > 256)
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: qk_rope_head_dim %d, n_routed_experts %d "
                           "or n_group %d beyond what dsr1 supports (512, 1024, 256)", path,
                           c->qk_rope_head_dim, c->n_routed_experts, c->n_group);
    /* The backend first: each weight is handed to it once as it is found. */
    DSR1_TRY(dsr1_backend_find(o ? o->backend : NULL, &m->be, m->backend_why,
                               sizeof m->backend_why, err));
    dsr1_backend_options bo = {.threads = m->threads, .device = 0,
                               .numa_nodes = o ? o->numa_nodes : 0,
                               .deterministic = o && o->deterministic,
                               .fp8_bf16 = o && o->fp8_bf16};
    DSR1_TRY(m->be->create(&bo, &m->dev, err));
    DSR1_TRY(get_embed(m, "model.embed_tokens.weight", &m->embed, err));
    DSR1_TRY(get_vec(m, "model.norm.weight", c->hidden_size, &m->norm, err));
    const char *head = dsr1_file_find(m->file, "lm_head.weight") || !c->tie_word_embeddings
                           ? "lm_head.weight" : "model.embed_tokens.weight";
    DSR1_TRY(get_mat(m, head, c->vocab_size, c->hidden_size, &m->lm_head, err));
    dsr1_rope_freqs(c, m->freqs);
    DSR1_TRY(put_vec(m, "rope frequencies", m->freqs, c->qk_rope_head_dim / 2, &m->freqs_w, err));
    DSR1_TRY(load_layers(m, err));
    DSR1_TRY(load_tokenizer(m, err));
    m->softmax_scale = dsr1_rope_softmax_scale(c);
    dsr1_moe_params_of(c, &m->moe);
    snprintf(m->describe, sizeof m->describe, "%s, %s weights, %s, %d layers%s",
             m->be->describe(m->dev), dsr1_type_name(m->layers[0].kv_a.d.mat.type), act_label(m),
             c->num_hidden_layers, m->n_mtp ? " + MTP" : "");
    return 0;
}

int dsr1_model_open(dsr1_model **out, const char *path, const dsr1_model_options *opt,
                    dsr1_error *err)
{
    *out = NULL;
    dsr1_model *m = calloc(1, sizeof *m);
    if (!m) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    if (opt) {
        m->compute = opt->compute;
        m->kv_fp8 = opt->kv_fp8;
        m->threads = opt->threads;
        m->progress = opt->progress;
        m->progress_ctx = opt->progress_ctx;
    }
    int rc = load(m, path, opt, err);
    if (rc) {
        dsr1_model_close(m);
        return rc;
    }
    if (m->progress) m->progress(1.0, "done", m->progress_ctx);
    *out = m;
    return 0;
}

void dsr1_model_close(dsr1_model *m)
{
    if (!m) return;
    if (m->be && m->dev) m->be->destroy(m->dev);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    dsr1_tokenizer_free(m->tok);
    free(m->chat_template);
    dsr1_file_close(m->file);
    free(m);
}

const dsr1_config *dsr1_model_config(const dsr1_model *m) { return &m->cfg; }
const dsr1_tokenizer *dsr1_model_tokenizer(const dsr1_model *m) { return m->tok; }
const char *dsr1_model_chat_template(const dsr1_model *m) { return m->chat_template; }
const char *dsr1_model_describe(const dsr1_model *m) { return m->describe; }
const char *dsr1_model_backend_choice(const dsr1_model *m) { return m->backend_why; }
const char *dsr1_model_backend_name(const dsr1_model *m) { return m->be->name; }
int dsr1_model_has_mtp(const dsr1_model *m) { return m->n_mtp > 0; }

int dsr1_backends(dsr1_backend_info *out, int max)
{
    dsr1_backend_status st[8];
    int n = dsr1_backend_list(st, max < 8 ? max : 8);
    for (int i = 0; i < n; i++) {
        out[i].name = st[i].name;
        out[i].available = st[i].available;
        snprintf(out[i].why, sizeof out[i].why, "%s", st[i].why);
    }
    return n;
}

static uint64_t mat_bytes(const dsr1_mw *w)
{
    if (!w->d.mat.data) return 0;
    int64_t dims[2] = {w->d.mat.rows, w->d.mat.cols};
    return dsr1_type_payload_size(w->d.mat.type, 2, dims) * (uint64_t)w->d.count;
}

/* Bytes one layer reads for one token: everything but the routed experts,
 * plus num_experts_per_tok of those (that part also in *routed). */
static uint64_t layer_bytes(const dsr1_config *c, const dsr1_layer_weights *L, uint64_t *routed)
{
    uint64_t b = mat_bytes(&L->q_a) + mat_bytes(&L->q_b) + mat_bytes(&L->q) + mat_bytes(&L->kv_a) +
                 mat_bytes(&L->o) + mat_bytes(&L->wk_t) + mat_bytes(&L->wv) +
                 mat_bytes(&L->eh_proj);
    *routed = 0;
    if (!L->is_moe) return b + mat_bytes(&L->gate) + mat_bytes(&L->up) + mat_bytes(&L->down);
    uint64_t per = (mat_bytes(&L->e_gate) + mat_bytes(&L->e_up) + mat_bytes(&L->e_down)) /
                   (uint64_t)c->n_routed_experts;
    *routed = per * (uint64_t)c->num_experts_per_tok;
    b += mat_bytes(&L->router) + *routed;
    if (c->n_shared_experts > 0)
        b += mat_bytes(&L->sh_gate) + mat_bytes(&L->sh_up) + mat_bytes(&L->sh_down);
    return b;
}

uint64_t dsr1_model_active_weight_bytes(const dsr1_model *m)
{
    const dsr1_config *c = &m->cfg;
    uint64_t b = mat_bytes(&m->lm_head), routed;
    for (int l = 0; l < c->num_hidden_layers; l++) b += layer_bytes(c, &m->layers[l], &routed);
    return b;
}

/* A verify row beyond the first shares every weight read except its own
 * routed experts; an MTP draft reads the MTP layer and a vocabulary head.
 * Both in bytes relative to a decode step's, with ROW_FLOOR for the
 * arithmetic that bytes do not count (attention, the head's dot products:
 * measurable on small models, where the extra rows' share is ~0). */
#define ROW_FLOOR 0.05f
void dsr1_model_spec_costs(const dsr1_model *m, float *row, float *draft)
{
    const dsr1_config *c = &m->cfg;
    uint64_t step = mat_bytes(&m->lm_head), routed = 0, r;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        step += layer_bytes(c, &m->layers[l], &r);
        routed += r;
    }
    uint64_t mtp = 0;
    for (int l = c->num_hidden_layers; l < m->n_layers; l++) {
        const dsr1_layer_weights *L = &m->layers[l];
        mtp += layer_bytes(c, L, &r) + (L->head.d.mat.data ? mat_bytes(&L->head) : mat_bytes(&m->lm_head));
    }
    *row = step ? (float)((double)routed / (double)step) : 1.0f;
    if (*row < ROW_FLOOR) *row = ROW_FLOOR;
    *draft = step ? (float)((double)mtp / (double)step) : 1.0f;
}
