/*
 * attention.c - Multi-head Latent Attention for one layer, as DeepSeek-V3's
 * inference/model.py MLA.forward (absorb path):
 *
 *   q  = q_b(q_a_layernorm(q_a(x)))          (or q_proj(x) when q_lora_rank 0)
 *   q  -> per head [q_nope | q_pe], RoPE on q_pe
 *   kv = kv_a_proj_with_mqa(x) -> [latent | k_pe]; latent = kv_a_layernorm;
 *        RoPE on k_pe (one rope key shared by all heads)
 *   cache (latent, k_pe) at the token's position
 *   attention over the cached latents (absorbed through kv_b, backend op)
 *   out = o_proj(heads)
 *
 * Only the orchestration lives here; the arithmetic is the backend's. Also
 * the naive form (keys and values expanded per head), kept as the test
 * reference that the absorbed form must agree with.
 */
#include "forward.h"

#include <math.h>
#include <stdlib.h>

void dsr1_attention_forward(dsr1_fwd *f, const dsr1_layer_weights *L, int layer,
                            const dsr1_fwd_batch *b, dsr1_view xn, dsr1_view out)
{
    const dsr1_model *m = f->m;
    const dsr1_config *c = &m->cfg;
    const dsr1_backend_ops *be = m->be;
    int n = b->n, H = c->num_attention_heads, qk = dsr1_config_qk_head_dim(c);
    int r = c->kv_lora_rank, rope = c->qk_rope_head_dim;
    int64_t ldq = (int64_t)H * qk, ldkv = r + rope;
    dsr1_view q = dsr1_fwd_view(f->q, ldq), kva = dsr1_fwd_view(f->kva, ldkv);

    if (c->q_lora_rank > 0) {
        dsr1_view qa = dsr1_fwd_view(f->qa, c->q_lora_rank);
        be->matmul(f->ws, L->q_a.h, xn, qa, n, f->act);
        be->rmsnorm(f->ws, qa, L->q_a_norm.h, c->q_lora_rank, c->rms_norm_eps, n, qa);
        be->matmul(f->ws, L->q_b.h, qa, q, n, f->act);
    } else {
        be->matmul(f->ws, L->q.h, xn, q, n, f->act);
    }
    be->rope(f->ws, dsr1_view_at(q, c->qk_nope_head_dim), H, qk, rope, m->freqs_w.h);

    be->matmul(f->ws, L->kv_a.h, xn, kva, n, f->act);
    be->rmsnorm(f->ws, kva, L->kv_a_norm.h, r, c->rms_norm_eps, n, kva);
    be->rope(f->ws, dsr1_view_at(kva, r), 1, rope, rope, m->freqs_w.h);
    be->kv_store(f->ws, layer, kva, dsr1_view_at(kva, r));

    dsr1_view attn = dsr1_fwd_view(f->attn, (int64_t)H * c->v_head_dim);
    dsr1_mla_args a = {
        .n = n, .n_heads = H, .qk_nope = c->qk_nope_head_dim, .rope_dim = rope,
        .v_dim = c->v_head_dim, .kv_lora_rank = r, .scale = m->softmax_scale,
        .q = q, .layer = layer, .wk_t = L->wk_t.h, .wv = L->wv.h, .out = attn,
        .wkv_b = L->kv_b.h,
    };
    be->mla_attention(f->ws, &a, f->act);
    be->matmul(f->ws, L->o.h, attn, out, n, f->act);
}

/* ---- naive reference ------------------------------------------------------- */

/* All rows of w dequantised into out[rows][cols]. */
static void dequant_all(const dsr1_wmat w, float *out)
{
    for (int64_t i = 0; i < w.rows; i++) dsr1_wmat_dequant_row(&w, i, out + i * w.cols);
}

typedef struct naive_in {
    const dsr1_mla_args *a;
    const float *q;
    const int32_t *seq, *pos;
    const dsr1_kvcache *kv;
} naive_in;

/* One (token, head): expand every cached latent into its key and value
 * (model.py's naive path), softmax in double, write out[v_dim]. */
static void naive_head(const naive_in *in, int t, int h, const float *wk, const float *wv,
                       float *row, double *sc, double *vacc, float *out)
{
    const dsr1_mla_args *a = in->a;
    int r = a->kv_lora_rank, qk = a->qk_nope + a->rope_dim, P = in->pos[t] + 1;
    const float *q = in->q + ((size_t)t * (size_t)a->n_heads + (size_t)h) * (size_t)qk;
    double mx = -INFINITY, sum = 0;
    for (int p = 0; p < P; p++) {
        dsr1_kvcache_read(in->kv, in->seq[t], a->layer, p, row);
        double s = 0;
        for (int d = 0; d < a->qk_nope; d++) {
            double k = 0;
            for (int i = 0; i < r; i++) k += (double)wk[(size_t)i * (size_t)a->qk_nope + (size_t)d] * row[i];
            s += q[d] * k;
        }
        for (int d = 0; d < a->rope_dim; d++) s += (double)q[a->qk_nope + d] * row[r + d];
        sc[p] = s * a->scale;
        if (sc[p] > mx) mx = sc[p];
    }
    for (int p = 0; p < P; p++) sum += sc[p] = exp(sc[p] - mx);
    for (int d = 0; d < a->v_dim; d++) vacc[d] = 0;
    for (int p = 0; p < P; p++) {
        dsr1_kvcache_read(in->kv, in->seq[t], a->layer, p, row);
        for (int d = 0; d < a->v_dim; d++) {
            double v = 0;
            for (int i = 0; i < r; i++) v += (double)wv[(size_t)d * (size_t)r + (size_t)i] * row[i];
            vacc[d] += sc[p] / sum * v;
        }
    }
    for (int d = 0; d < a->v_dim; d++) out[d] = (float)vacc[d];
}

void dsr1_attention_naive(const dsr1_mla_args *a, const float *q, const int32_t *seq,
                          const int32_t *pos, const dsr1_kvcache *kv, const dsr1_wdesc *wk_t,
                          const dsr1_wdesc *wv_d, float *out)
{
    naive_in in = {a, q, seq, pos, kv};
    int r = a->kv_lora_rank, maxp = 1;
    for (int t = 0; t < a->n; t++) maxp = pos[t] + 1 > maxp ? pos[t] + 1 : maxp;
    float *row = malloc((size_t)(r + a->rope_dim) * sizeof *row);
    float *wk = malloc((size_t)r * (size_t)a->qk_nope * sizeof *wk);
    float *wv = malloc((size_t)r * (size_t)a->v_dim * sizeof *wv);
    double *sc = malloc((size_t)maxp * sizeof *sc), *vacc = malloc((size_t)a->v_dim * sizeof *vacc);
    DSR1_ASSERT(row && wk && wv && sc && vacc);
    for (int h = 0; h < a->n_heads; h++) {
        dequant_all(dsr1_wdesc_mat(wk_t, h), wk);
        dequant_all(dsr1_wdesc_mat(wv_d, h), wv);
        for (int t = 0; t < a->n; t++)
            naive_head(&in, t, h, wk, wv, row, sc, vacc,
                       out + ((size_t)t * (size_t)a->n_heads + (size_t)h) * (size_t)a->v_dim);
    }
    free(row);
    free(wk);
    free(wv);
    free(sc);
    free(vacc);
}
