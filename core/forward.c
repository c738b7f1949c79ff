/*
 * forward.c - the layer order, written once (see forward.h):
 *
 *   x = embed(ids)
 *   for each main layer:  x += MLA(rmsnorm(x));  x += FFN-or-MoE(rmsnorm(x))
 *   rows = norm(x[wanted]);  logits = lm_head(rows)
 *
 * and the MTP (NextN) layer, composed the way DeepSeek's reference and
 * SGLang's deepseek_nextn do it. Also dsr1_model_forward, the one-shot
 * entry point (logits, eval, tests) built on the same code.
 *
 * Every activation lives in backend buffers (backends/backend.h); each
 * forward is one backend step (step_begin with the batch and the cache's
 * page tables, the ops, step_end with the error code). The host sees only
 * what it asks for: logits and hidden rows come back through `read`, the
 * MTP layer's input hidden states go in through `write`.
 *
 * Invariants: every buffer is sized in dsr1_fwd_create for max_tokens; the
 * forward itself allocates nothing. A token's outputs depend only on its
 * own sequence (backend determinism contract), never on the batch.
 */
#include "forward.h"

#include <stdlib.h>
#include <string.h>

/* Rows of logits computed per LM-head call: bounds the backend's logits
 * buffer; a row's logits do not depend on its neighbours (backend.h). */
#define LOGIT_ROWS 128

/* ---- context ------------------------------------------------------------- */

static void fill_sizes(const dsr1_model *m, const dsr1_kvcache *kv, int max_tokens,
                       dsr1_ws_sizes *s)
{
    const dsr1_config *c = &m->cfg;
    s->max_tokens = max_tokens;
    s->hidden = c->hidden_size;
    s->inter = c->intermediate_size;
    s->moe_inter = c->moe_intermediate_size;
    s->n_experts = c->n_routed_experts;
    s->topk = c->num_experts_per_tok;
    s->shared_inter = c->moe_intermediate_size * c->n_shared_experts;
    s->n_heads = c->num_attention_heads;
    /* widest matmul input: o_proj, q_b, the MTP's eh_proj [hidden, 2 hidden] */
    s->max_in = 2 * c->hidden_size;
    if (c->q_lora_rank > s->max_in) s->max_in = c->q_lora_rank;
    if (c->num_attention_heads * c->v_head_dim > s->max_in)
        s->max_in = c->num_attention_heads * c->v_head_dim;
    s->kv_lora_rank = c->kv_lora_rank;
    s->rope_dim = c->qk_rope_head_dim;
    s->max_ctx = kv->ctx;
    s->kv_type = kv->type;
}

static int new_buf(dsr1_fwd *f, size_t n, dsr1_bbuf **b, dsr1_error *err)
{
    return f->m->be->buf_create(f->m->dev, n, b, err);
}

static int alloc_bufs(dsr1_fwd *f, dsr1_error *err)
{
    const dsr1_config *c = &f->m->cfg;
    size_t T = (size_t)f->max_tokens, D = (size_t)c->hidden_size, H = (size_t)c->num_attention_heads;
    size_t L = T < LOGIT_ROWS ? T : LOGIT_ROWS;
    DSR1_TRY(new_buf(f, T * D, &f->x, err));
    DSR1_TRY(new_buf(f, T * D, &f->xn, err));
    DSR1_TRY(new_buf(f, T * D, &f->tmp, err));
    DSR1_TRY(new_buf(f, T * D, &f->rows, err));
    DSR1_TRY(new_buf(f, T * 2 * D, &f->cat, err));
    DSR1_TRY(new_buf(f, T * (size_t)c->q_lora_rank, &f->qa, err));
    DSR1_TRY(new_buf(f, T * H * (size_t)dsr1_config_qk_head_dim(c), &f->q, err));
    DSR1_TRY(new_buf(f, T * (size_t)(c->kv_lora_rank + c->qk_rope_head_dim), &f->kva, err));
    DSR1_TRY(new_buf(f, T * H * (size_t)c->v_head_dim, &f->attn, err));
    return new_buf(f, L * (size_t)c->vocab_size, &f->logits, err);
}

int dsr1_fwd_create(dsr1_fwd **out, dsr1_model *m, dsr1_kvcache *kv, int max_tokens,
                    dsr1_error *err)
{
    *out = NULL;
    const dsr1_config *c = &m->cfg;
    if (max_tokens < 1) return dsr1_errorf(err, DSR1_EINVAL, "forward: max_tokens %d", max_tokens);
    if (kv->n_layers < m->n_layers || kv->kv_lora_rank != c->kv_lora_rank ||
        kv->rope_dim != c->qk_rope_head_dim)
        return dsr1_errorf(err, DSR1_EINVAL, "forward: kv cache shape does not fit the model");
    if (kv->be != m->be || kv->dev != m->dev)
        return dsr1_errorf(err, DSR1_EINVAL, "forward: kv cache pages live on another backend");
    dsr1_fwd *f = calloc(1, sizeof *f);
    if (!f) return dsr1_errorf(err, DSR1_ENOMEM, "forward: out of memory");
    f->m = m;
    f->kv = kv;
    f->max_tokens = max_tokens;
    f->act = dsr1_model_act(m);
    dsr1_ws_sizes s;
    fill_sizes(m, kv, max_tokens, &s);
    int rc = alloc_bufs(f, err);
    if (!rc) rc = m->be->ws_create(m->dev, &s, &f->ws, err);
    if (rc) {
        dsr1_fwd_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

void dsr1_fwd_free(dsr1_fwd *f)
{
    if (!f) return;
    const dsr1_backend_ops *be = f->m->be;
    if (f->ws) be->ws_free(f->ws);
    dsr1_bbuf *b[] = {f->x, f->xn, f->tmp, f->rows, f->cat, f->qa, f->q, f->kva, f->attn, f->logits};
    for (size_t i = 0; i < sizeof b / sizeof *b; i++) be->buf_free(f->m->dev, b[i]);
    free(f);
}

void dsr1_fwd_threads(dsr1_fwd *f, int threads) { f->m->be->ws_threads(f->ws, threads); }

/* ---- layers ---------------------------------------------------------------- */

/* One decoder block over f->x (n tokens): attention and FFN with residuals.
 * The last block of a forward (`last`: the main model's last layer, or the
 * MTP layer) runs its FFN on the output rows only, gathered in order into
 * f->rows, and returns 1 (outputs() then finds them there): nothing reads
 * the other rows' final states, and their keys and values are in the
 * cache already (the attention wrote them). A row's FFN does not depend on
 * the others in the batch (backend.h), so the output rows keep their bits
 * in the deterministic mode. A prefill chunk that is not a prompt's last
 * has no output rows and skips the layer's FFN whole; llama.cpp and
 * ik_llama.cpp skip it the same way. Not with routes recorded (every
 * row's experts are wanted). */
static int block(dsr1_fwd *f, int layer, const dsr1_fwd_batch *b, int last)
{
    const dsr1_model *m = f->m;
    const dsr1_backend_ops *be = m->be;
    const dsr1_config *c = &m->cfg;
    const dsr1_layer_weights *L = &m->layers[layer];
    int D = c->hidden_size, n = b->n, compact = last && b->n_out < n && !f->routes;
    dsr1_view x = dsr1_fwd_view(f->x, D), xn = dsr1_fwd_view(f->xn, D);
    dsr1_view tmp = dsr1_fwd_view(f->tmp, D);
    be->rmsnorm(f->ws, x, L->attn_norm.h, D, c->rms_norm_eps, n, xn);
    dsr1_attention_forward(f, L, layer, b, xn, tmp);
    be->add(f->ws, x, tmp, n, D);
    if (compact) {
        n = b->n_out;
        if (!n) return 1;
        dsr1_view rows = dsr1_fwd_view(f->rows, D);
        be->gather(f->ws, x, b->out_rows, n, D, rows);
        x = rows;
    }
    if (last) f->last_ffn_rows += (uint64_t)n;
    be->rmsnorm(f->ws, x, L->ffn_norm.h, D, c->rms_norm_eps, n, xn);
    if (L->is_moe) {
        be->moe(f->ws, &L->moe, &m->moe, xn, n, tmp, f->act);
        if (f->routes && layer < c->num_hidden_layers)
            be->moe_choice(f->ws, f->routes + ((size_t)layer * (size_t)f->routes_n +
                                               (size_t)f->routes_at) * (size_t)m->moe.topk, n);
    } else
        be->ffn(f->ws, L->gate.h, L->up.h, L->down.h, xn, n, tmp, f->act);
    be->add(f->ws, x, tmp, n, D);
    return compact;
}

static int check_batch(const dsr1_fwd *f, const dsr1_fwd_batch *b, dsr1_error *err)
{
    const dsr1_config *c = &f->m->cfg;
    if (b->n < 1 || b->n > f->max_tokens || b->n_out < 0 || b->n_out > b->n)
        return dsr1_errorf(err, DSR1_EINVAL, "forward: batch of %d tokens (%d outputs), limit %d",
                           b->n, b->n_out, f->max_tokens);
    for (int t = 0; t < b->n; t++) {
        if (b->ids[t] < 0 || b->ids[t] >= c->vocab_size)
            return dsr1_errorf(err, DSR1_EINVAL, "forward: token id %d out of the vocabulary (%d)",
                               b->ids[t], c->vocab_size);
        int s = b->seq[t];
        if (s < 0 || s >= f->kv->max_seqs || !f->kv->used[s] || b->pos[t] < 0 ||
            b->pos[t] >= f->kv->len[s])
            return dsr1_errorf(err, DSR1_EINVAL, "forward: position %d of slot %d not reserved",
                               b->pos[t], s);
    }
    for (int i = 0; i < b->n_out; i++)
        if (b->out_rows[i] < 0 || b->out_rows[i] >= b->n)
            return dsr1_errorf(err, DSR1_EINVAL, "forward: output row %d of %d", b->out_rows[i], b->n);
    return 0;
}

/* LM head on the first n rows of f->rows (final-normed), logits to the
 * host in pieces of LOGIT_ROWS rows. */
static void head_rows(dsr1_fwd *f, const dsr1_mw *head, int n, float *logits)
{
    const dsr1_backend_ops *be = f->m->be;
    int D = f->m->cfg.hidden_size, V = f->m->cfg.vocab_size;
    for (int i = 0; i < n; i += LOGIT_ROWS) {
        int k = n - i < LOGIT_ROWS ? n - i : LOGIT_ROWS;
        dsr1_view rows = {f->rows, (int64_t)i * D, D}, lg = dsr1_fwd_view(f->logits, V);
        be->matmul(f->ws, head->h, rows, lg, k, f->act);
        be->read(f->ws, lg, k, V, logits + (size_t)i * (size_t)V, V);
    }
}

/* The wanted rows of f->x (or, `compact`, f->rows as the last block left
 * them), normalised with w, then head and outputs. */
static void outputs(dsr1_fwd *f, const dsr1_fwd_batch *b, int compact, const dsr1_mw *w,
                    const dsr1_mw *head, float *logits, float *hidden)
{
    const dsr1_model *m = f->m;
    const dsr1_config *c = &m->cfg;
    int D = c->hidden_size;
    if (!b->n_out) return;
    dsr1_view rows = dsr1_fwd_view(f->rows, D);
    if (!compact) m->be->gather(f->ws, dsr1_fwd_view(f->x, D), b->out_rows, b->n_out, D, rows);
    m->be->rmsnorm(f->ws, rows, w->h, D, c->rms_norm_eps, b->n_out, rows);
    if (hidden) m->be->read(f->ws, rows, b->n_out, D, hidden, D);
    if (logits) head_rows(f, head, b->n_out, logits);
}

/* step_begin with the batch and the cache's page tables. */
static int begin(dsr1_fwd *f, const dsr1_fwd_batch *b, dsr1_error *err)
{
    dsr1_step st = {.n = b->n, .ids = b->ids, .pos = b->pos, .seq = b->seq, .n_out = b->n_out,
                    .out_rows = b->out_rows};
    dsr1_kvcache_step(f->kv, &st);
    return f->m->be->step_begin(f->ws, &st, err);
}

int dsr1_forward(dsr1_fwd *f, const dsr1_fwd_batch *b, float *logits, float *hidden,
                 dsr1_error *err)
{
    DSR1_TRY(check_batch(f, b, err));
    const dsr1_model *m = f->m;
    DSR1_TRY(begin(f, b, err));
    m->be->embed(f->ws, m->embed.h, dsr1_fwd_view(f->x, m->cfg.hidden_size));
    int nl = m->cfg.num_hidden_layers, compact = 0;
    for (int l = 0; l < nl; l++) compact = block(f, l, b, l == nl - 1);
    outputs(f, b, compact, &m->norm, &m->lm_head, logits, hidden);
    return m->be->step_end(f->ws, err);
}

int dsr1_forward_head(dsr1_fwd *f, const float *hidden, const int32_t *rows, int n,
                      float *logits, dsr1_error *err)
{
    const dsr1_model *m = f->m;
    size_t D = (size_t)m->cfg.hidden_size;
    if (n < 0 || n > f->max_tokens)
        return dsr1_errorf(err, DSR1_EINVAL, "forward: %d head rows, limit %d", n, f->max_tokens);
    if (!n) return 0;
    dsr1_step st = {.n = n};
    DSR1_TRY(m->be->step_begin(f->ws, &st, err));
    for (int i = 0; i < n; i++)
        m->be->write(f->ws, hidden + (size_t)rows[i] * D, (int64_t)D, 1, (int)D,
                     (dsr1_view){f->rows, (int64_t)i * (int64_t)D, (int64_t)D});
    head_rows(f, &m->lm_head, n, logits);
    return m->be->step_end(f->ws, err);
}

int dsr1_forward_mtp(dsr1_fwd *f, const dsr1_fwd_batch *b, const float *h, int64_t ldh,
                     float *logits, float *hidden, dsr1_error *err)
{
    const dsr1_model *m = f->m;
    const dsr1_backend_ops *be = m->be;
    const dsr1_config *c = &m->cfg;
    if (!m->n_mtp)
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: model has no MTP layer",
                           dsr1_file_path(m->file));
    DSR1_TRY(check_batch(f, b, err));
    int l = c->num_hidden_layers, D = c->hidden_size, n = b->n;
    const dsr1_layer_weights *L = &m->layers[l];
    DSR1_TRY(begin(f, b, err));
    /* cat = [enorm(embed(next token)) | hnorm(h)] */
    dsr1_view xn = dsr1_fwd_view(f->xn, D), tmp = dsr1_fwd_view(f->tmp, D);
    dsr1_view cat = dsr1_fwd_view(f->cat, 2 * D);
    be->embed(f->ws, L->mtp_embed.h, xn);
    be->rmsnorm(f->ws, xn, L->enorm.h, D, c->rms_norm_eps, n, cat);
    be->write(f->ws, h, ldh, n, D, tmp);
    be->rmsnorm(f->ws, tmp, L->hnorm.h, D, c->rms_norm_eps, n, dsr1_view_at(cat, D));
    be->matmul(f->ws, L->eh_proj.h, cat, dsr1_fwd_view(f->x, D), n, f->act);
    int compact = block(f, l, b, 1);
    outputs(f, b, compact, &L->head_norm, &L->head, logits, hidden);
    return be->step_end(f->ws, err);
}

/* ---- one-shot forward -------------------------------------------------------- */

/* Run one chunk [start, start+len) of ids through the main model, every row
 * wanted; logits or hidden rows go to the given pointers (either NULL). */
static int run_chunk(dsr1_fwd *f, const int32_t *ids, int start, int len, int32_t *idx,
                     float *logits, float *hidden, dsr1_error *err)
{
    int32_t *pos = idx + len, *seq = idx + 2 * len;
    for (int i = 0; i < len; i++) {
        idx[i] = i;
        pos[i] = start + i;
        seq[i] = 0;
    }
    DSR1_TRY(dsr1_kvcache_reserve(f->kv, 0, start + len, err));
    dsr1_fwd_batch b = {.n = len, .ids = ids + start, .pos = pos, .seq = seq, .n_out = len,
                        .out_rows = idx};
    return dsr1_forward(f, &b, logits, hidden, err);
}

/* MTP rows 0..n-2 in pieces of at most f->max_tokens. */
static int run_mtp(dsr1_fwd *f, const int32_t *ids, int n, const float *h, int32_t *idx,
                   float *out, dsr1_error *err)
{
    const dsr1_config *c = &f->m->cfg;
    for (int start = 0; start < n - 1; start += f->max_tokens) {
        int len = n - 1 - start < f->max_tokens ? n - 1 - start : f->max_tokens;
        int32_t *pos = idx + len, *seq = idx + 2 * len;
        for (int i = 0; i < len; i++) {
            idx[i] = i;
            pos[i] = start + i;
            seq[i] = 0;
        }
        dsr1_fwd_batch b = {.n = len, .ids = ids + start + 1, .pos = pos, .seq = seq,
                            .n_out = len, .out_rows = idx};
        DSR1_TRY(dsr1_forward_mtp(f, &b, h + (size_t)start * (size_t)c->hidden_size,
                                  c->hidden_size, out + (size_t)start * (size_t)c->vocab_size,
                                  NULL, err));
    }
    return 0;
}

static int oneshot(dsr1_fwd *f, const int32_t *ids, int n, const size_t *chunks, size_t n_chunks,
                   dsr1_output what, float *out, float *hid, int32_t *idx, dsr1_error *err)
{
    const dsr1_config *c = &f->m->cfg;
    size_t V = (size_t)c->vocab_size, D = (size_t)c->hidden_size;
    int start = 0;
    for (size_t k = 0; k < (chunks ? n_chunks : 1); k++) {
        int len = chunks ? (int)chunks[k] : n;
        f->routes_at = start;
        float *lg = what == DSR1_OUT_LOGITS ? out + (size_t)start * V : NULL;
        float *hd = what == DSR1_OUT_HIDDEN ? out + (size_t)start * D
                    : what == DSR1_OUT_MTP  ? hid + (size_t)start * D : NULL;
        DSR1_TRY(run_chunk(f, ids, start, len, idx, lg, hd, err));
        start += len;
    }
    return what == DSR1_OUT_MTP ? run_mtp(f, ids, n, hid, idx, out, err) : 0;
}

static int model_forward(dsr1_model *m, const int32_t *ids, size_t n, const size_t *chunks,
                         size_t n_chunks, dsr1_output what, float *out, int32_t *routes,
                         dsr1_error *err)
{
    size_t sum = 0, maxc = 0;
    for (size_t k = 0; chunks && k < n_chunks; k++) {
        if (!chunks[k]) return dsr1_errorf(err, DSR1_EINVAL, "forward: empty chunk %zu", k);
        sum += chunks[k];
        maxc = chunks[k] > maxc ? chunks[k] : maxc;
    }
    if (!chunks) sum = maxc = n;
    if (n < 1 || n > INT32_MAX / 4 || sum != n)
        return dsr1_errorf(err, DSR1_EINVAL, "forward: chunks sum to %zu, expected %zu ids", sum, n);
    if (what == DSR1_OUT_MTP && (n < 2 || !m->n_mtp))
        return dsr1_errorf(err, n < 2 ? DSR1_EINVAL : DSR1_EUNSUPPORTED,
                           "forward: MTP logits need %s", n < 2 ? "at least 2 ids" : "an MTP layer");
    dsr1_kvcache_options ko = {.type = dsr1_model_kv_type(m), .n_layers = m->n_layers,
                               .kv_lora_rank = m->cfg.kv_lora_rank,
                               .rope_dim = m->cfg.qk_rope_head_dim, .max_seqs = 1, .ctx = (int)n,
                               .be = m->be, .dev = m->dev};
    dsr1_kvcache *kv = NULL;
    dsr1_fwd *f = NULL;
    int seq, rc = dsr1_kvcache_create(&kv, &ko, err);
    if (!rc) rc = dsr1_kvcache_seq_alloc(kv, &seq, err);
    if (!rc) rc = dsr1_fwd_create(&f, m, kv, (int)maxc, err);
    if (!rc) {
        f->routes = routes;
        f->routes_n = (int)n;
    }
    float *hid = NULL;
    int32_t *idx = malloc(3 * n * sizeof *idx);
    if (!rc && what == DSR1_OUT_MTP) hid = malloc(n * (size_t)m->cfg.hidden_size * sizeof *hid);
    if (!rc && (!idx || (what == DSR1_OUT_MTP && !hid)))
        rc = dsr1_errorf(err, DSR1_ENOMEM, "forward: out of memory");
    if (!rc) rc = oneshot(f, ids, (int)n, chunks, n_chunks, what, out, hid, idx, err);
    free(hid);
    free(idx);
    dsr1_fwd_free(f);
    dsr1_kvcache_free(kv);
    return rc;
}

int dsr1_model_forward(dsr1_model *m, const int32_t *ids, size_t n, const size_t *chunks,
                       size_t n_chunks, dsr1_output what, float *out, dsr1_error *err)
{
    return model_forward(m, ids, n, chunks, n_chunks, what, out, NULL, err);
}

int dsr1_forward_routes(dsr1_model *m, const int32_t *ids, size_t n, float *logits,
                        int32_t *experts, dsr1_error *err)
{
    size_t per = n * (size_t)m->moe.topk;
    for (int l = 0; l < m->cfg.num_hidden_layers; l++)
        if (!m->layers[l].is_moe)
            for (size_t i = 0; i < per; i++) experts[(size_t)l * per + i] = -1;
    return model_forward(m, ids, n, NULL, 0, DSR1_OUT_LOGITS, logits, experts, err);
}
