/*
 * cpu_attention.c - absorbed MLA attention over the paged latent cache
 * (the mla_attention op of backends/backend.h), written as matrix products
 * so that all of its arithmetic runs in the matmul kernels (kernels.h):
 *
 *   1. absorb:   qcat[t][h] = [wk_t[h] . q_nope[t][h] | q_pe[t][h]]   (per head)
 *   2. scores:   S[t,h][p] = qcat[t][h] . K[p]          K = cache rows [P][576]
 *   3. softmax:  over p <= pos[t] of scale * S; zero for later p
 *   4. values:   olat[t][h] = sum_p S[t,h][p] latent[p] (latent^T [512][P])
 *   5. unabsorb: out[t][h] = wv[h] . olat[t][h]                       (per head)
 *
 * For each run of consecutive batch tokens of one sequence, the sequence's
 * cache rows are gathered once into a contiguous buffer (K, read in place
 * from bf16/f32 pages, FP8 converted); its tokens are cut into tiles whose
 * scores fit the workspace, and each tile does steps 2-4 with all of its
 * (token, head) rows as the matmul's tokens, so every cache byte is read
 * once per tile and the kernels run at GEMM speed (decode: 128 head rows;
 * prefill: up to thousands).
 *
 * Determinism (backend.h's contract): a score is one dot product of 576
 * columns in the kernels' fixed order, whatever the tile. The value product
 * of a token whose position is below the tile's last one sums extra
 * columns whose weights are exactly zero; in the kernels' canonical order
 * (matmul_impl.h) adding a zero product leaves every partial sum unchanged,
 * so its result equals that of a tile ending at its own position: a
 * token's output is the same alone, in any batch, with any thread count,
 * and in a prefill chunk or decoded one by one.
 *
 * Accuracy: the score and value products always run in DSR1_ACT_F32 (the
 * cache values are exact in float32; q and the probabilities stay float32).
 * Rounding q and the probabilities to bf16 as the fast modes do elsewhere
 * costs too much: attention logits are large, so a 2^-9 relative error in q
 * moves probabilities by percents, and on the tiny fixture the fast path's
 * worst logit cosine against f32 fell from 0.9999 to 0.74 (KL 2.6 nats).
 * The per-head projections (absorb, unabsorb) use the caller's mode.
 *
 * Softmax: the deterministic mode and the float32 path keep the scalar
 * row's bits (libm's expf: the same bits on every machine; on AVX-512
 * machines computed 16 at a time by softmax_avx512.c's exact row, glibc's
 * expf in vector lanes and the sum in the row's order); the fast mode, on
 * AVX-512 machines, the vector row of softmax_avx512.c (about 1 ulp from
 * libm's expf; a row's bits still depend only on its scores and valid
 * length, so batch invariance holds). At long contexts the scalar row was
 * the largest part of a decoded token's attention: R1-shape INT8 file, Zen
 * 5, context 2048, per layer: softmax 1.58 ms of 4.3 (scores 1.03,
 * transpose 0.73, values 0.96).
 *
 * (Tried: each product as two bf16 products over x = bf16(x) + bf16(x -
 * bf16(x)), 1e-5 relative to float32; the bf16 kernels are 2.5-4x faster
 * than float32 on these shapes alone, but a 512-token prefill of the
 * R1-shape model did not get faster, so the simpler float32 stays. On
 * AMX the naive form's products do split, three ways: naive_amx_avx512.c.)
 *
 * Costs: the gather copies P rows per (sequence run, layer) and the
 * transpose P x kv_lora_rank values per tile: small next to the products
 * (P x 576 x 2 x heads x tokens flops), but it is O(P) per decoded token
 * per layer, a few percent of a long-context decode step.
 *
 * The naive form (keys and values expanded through kv_b once per position,
 * then 192/128-wide heads) does about a third of these flops at 512
 * tokens; cpu_mla_naive.c runs it for long runs of one sequence, in the
 * fast mode only: which form a token gets depends on how its prompt was
 * chunked and batched, and the forms round differently, so it would break
 * the contract above. dsr1_cpu_mla_attention picks per run.
 */
#include <math.h>
#include <string.h>

#include "core/numeric.h"
#include "cpu_backend.h"
#include "matmul_impl.h" /* dsr1_pool_avx512 */

/* ---- per-head projections (absorb / unabsorb) ------------------------------- */

typedef struct head_job {
    cpu_ws *w;
    const dsr1_mla_args *a;
    const float *q;          /* a->q on the host, row stride ldq */
    float *out;              /* a->out, row stride ldo */
    int64_t ldq, ldo;
    dsr1_act act;
    int nt;
    const int32_t *seg;      /* [nseg][2]: the absorbed tokens, [t0, t1) ranges */
    int nseg;
} head_job;

/* Task k of nt: heads [k H / nt, (k+1) H / nt), on the caller's thread with
 * the k-th private scratch (a one-thread pool: no allocation per call). */
static void head_range(const head_job *j, int k, int *h0, int *h1)
{
    *h0 = (int)((long long)j->a->n_heads * k / j->nt);
    *h1 = (int)((long long)j->a->n_heads * (k + 1) / j->nt);
}

static void absorb_task(void *ctx, int k, int nt)
{
    const head_job *j = ctx;
    const dsr1_mla_args *a = j->a;
    int64_t qk = a->qk_nope + a->rope_dim, r = a->kv_lora_rank, row = r + a->rope_dim;
    int64_t H = a->n_heads;
    int h0, h1;
    (void)nt;
    head_range(j, k, &h0, &h1);
    for (int h = h0; h < h1; h++)
        for (int i = 0; i < j->nseg; i++) {
            int64_t t0 = j->seg[2 * i], t1 = j->seg[2 * i + 1];
            dsr1_matmul(j->w->hpool[k], dsr1_cpu_mat(a->wk_t, h), j->q + t0 * j->ldq + h * qk,
                        j->ldq, j->w->qcat + (t0 * H + h) * row, H * row, (int)(t1 - t0), j->act);
            for (int64_t t = t0; t < t1; t++)
                memcpy(j->w->qcat + (t * H + h) * row + r, j->q + t * j->ldq + h * qk + a->qk_nope,
                       (size_t)a->rope_dim * sizeof(float));
        }
}

static void unabsorb_task(void *ctx, int k, int nt)
{
    const head_job *j = ctx;
    const dsr1_mla_args *a = j->a;
    int64_t r = a->kv_lora_rank, v = a->v_dim, H = a->n_heads;
    int h0, h1;
    (void)nt;
    head_range(j, k, &h0, &h1);
    for (int h = h0; h < h1; h++)
        for (int i = 0; i < j->nseg; i++) {
            int64_t t0 = j->seg[2 * i], t1 = j->seg[2 * i + 1];
            dsr1_matmul(j->w->hpool[k], dsr1_cpu_mat(a->wv, h), j->w->olat + (t0 * H + h) * r,
                        H * r, j->out + t0 * j->ldo + h * v, j->ldo, (int)(t1 - t0), j->act);
        }
}

/* ---- gathering the cache ---------------------------------------------------------- */

dsr1_wmat dsr1_cpu_gather_k(cpu_ws *w, int seq, int layer, int P)
{
    const dsr1_bkv *kv = w->step.kv;
    size_t row = (size_t)kv->l.row;
    int bf = kv->l.type == DSR1_KV_BF16, block = w->step.block;
    for (int p0 = 0; p0 < P; p0 += block) {
        int len = P - p0 < block ? P - p0 : block;
        size_t r = dsr1_cpu_kv_row(&w->step, seq, layer, p0);
        if (kv->l.type == DSR1_KV_FP8) {
            const uint8_t *d = (const uint8_t *)kv->data + r * row;
            float *o = (float *)w->kbuf + (size_t)p0 * row;
            for (int i = 0; i < len; i++)
                for (size_t c = 0; c < row; c++)
                    o[i * row + c] = dsr1_fp8e4m3_to_f32(d[i * row + c]) * kv->scale[r + (size_t)i];
        } else {
            memcpy((char *)w->kbuf + (size_t)p0 * row * kv->elem,
                   (const char *)kv->data + r * row * kv->elem, (size_t)len * row * kv->elem);
        }
    }
    return (dsr1_wmat){.type = bf ? DSR1_T_BF16 : DSR1_T_F32, .rows = P, .cols = (int64_t)row,
                       .data = w->kbuf};
}

typedef struct tile_job {
    cpu_ws *w;
    const dsr1_mla_args *a;
    const dsr1_wmat *k;      /* gathered rows */
    int t0, cnt, P;          /* tile tokens [t0, t0 + cnt), columns 0..P-1 */
    int nt;
    dsr1_cpu_softmax_fn softmax;
} tile_job;

/* vt[d][p] = K[p][d] for d < kv_lora_rank, p < P (task k: a range of d).
 * A copy, so the AVX-512 16x16 blocks give the same vt. R1-shape INT8 file,
 * Zen 5, per layer of a decoded token: context 2048 0.56 -> 0.32 ms,
 * context 1500 0.29 -> 0.21 (vt's rows 4 KiB apart near 2048 positions put
 * a block's 16 stores in one L1 set; a padded row stride would avoid that,
 * but the values product reads vt as a plain matrix). */
static void transpose_task(void *ctx, int k, int nt)
{
    const tile_job *j = ctx;
    int r = j->a->kv_lora_rank, P = j->P;
    int64_t row = j->k->cols;
    int d0 = (int)((long long)r * k / nt), d1 = (int)((long long)r * (k + 1) / nt);
    int avx = dsr1_pool_avx512(dsr1_cpu_pool(j->w));
    if (j->k->type == DSR1_T_BF16) {
        const uint16_t *src = j->k->data;
        uint16_t *dst = j->w->vt;
        if (avx) {
            dsr1_transpose_u16_avx512(src + d0, row, P, d1 - d0, dst + (size_t)d0 * P, P);
            return;
        }
        for (int p = 0; p < P; p++)
            for (int d = d0; d < d1; d++) dst[(size_t)d * P + p] = src[p * row + d];
    } else {
        const float *src = j->k->data;
        float *dst = j->w->vt;
        if (avx) {
            dsr1_transpose_f32_avx512(src + d0, row, P, d1 - d0, dst + (size_t)d0 * P, P);
            return;
        }
        for (int p = 0; p < P; p++)
            for (int d = d0; d < d1; d++) dst[(size_t)d * P + p] = src[p * row + d];
    }
}

/* ---- softmax ---------------------------------------------------------------------- */

void dsr1_cpu_softmax_row(float *s, int valid, int width, float scale)
{
    float mx = -INFINITY;
    for (int p = 0; p < valid; p++) {
        s[p] *= scale;
        mx = s[p] > mx ? s[p] : mx;
    }
    double sum = 0;
    for (int p = 0; p < valid; p++) sum += s[p] = expf(s[p] - mx);
    float inv = (float)(1.0 / sum);
    for (int p = 0; p < valid; p++) s[p] *= inv;
    for (int p = valid; p < width; p++) s[p] = 0.0f;
}

/* Rows of the tile's score matrix: row i is (token t0 + i / H, head i % H)
 * and attends to positions 0..pos[t]; later columns become exactly 0. */
static void softmax_task(void *ctx, int k, int nt)
{
    const tile_job *j = ctx;
    const dsr1_mla_args *a = j->a;
    int rows = j->cnt * a->n_heads;
    const int32_t *pos = j->w->step.pos;
    int i0 = (int)((long long)rows * k / nt), i1 = (int)((long long)rows * (k + 1) / nt);
    for (int i = i0; i < i1; i++)
        j->softmax(j->w->scores + (size_t)i * (size_t)j->P, pos[j->t0 + i / a->n_heads] + 1, j->P,
                   a->scale);
}

/* ---- one tile --------------------------------------------------------------------- */

static void attend_tile(cpu_ws *w, const dsr1_mla_args *a, const dsr1_wmat *k, int t0, int cnt,
                        dsr1_cpu_softmax_fn softmax)
{
    dsr1_pool *pool = dsr1_cpu_pool(w);
    int H = a->n_heads, r = a->kv_lora_rank, P = 0;
    int64_t row = k->cols;
    const int32_t *pos = w->step.pos;
    for (int t = t0; t < t0 + cnt; t++) P = pos[t] + 1 > P ? pos[t] + 1 : P;
    tile_job j = {.w = w, .a = a, .k = k, .t0 = t0, .cnt = cnt, .P = P,
                  .softmax = softmax};
    dsr1_wmat kp = *k;
    kp.rows = P;
    int rows = cnt * H, nth = dsr1_pool_size(pool);
    /* 2. scores for every (token, head) row of the tile (float32 products:
     * see the file comment) */
    dsr1_matmul(pool, &kp, w->qcat + (size_t)t0 * (size_t)H * (size_t)row, row, w->scores, P,
                rows, DSR1_ACT_F32);
    /* 3. softmax; 4. latent values through latent^T */
    j.nt = rows < 4 * nth ? rows : 4 * nth;
    dsr1_pool_run(pool, softmax_task, &j, j.nt);
    j.nt = nth;
    dsr1_pool_run(pool, transpose_task, &j, j.nt);
    dsr1_wmat vt = {.type = k->type, .rows = r, .cols = P, .data = w->vt};
    dsr1_matmul(pool, &vt, w->scores, P, w->olat + (size_t)t0 * (size_t)H * (size_t)r, r, rows,
                DSR1_ACT_F32);
}

/* Tokens [t0, t1) of one sequence (consecutive in the batch): gather its
 * rows once, then tiles of tokens whose score rows fit the workspace. */
static void attend_run(cpu_ws *w, const dsr1_mla_args *a, int t0, int t1, dsr1_cpu_softmax_fn softmax)
{
    int P = 0, H = a->n_heads;
    const int32_t *pos = w->step.pos;
    for (int t = t0; t < t1; t++) P = pos[t] + 1 > P ? pos[t] + 1 : P;
    dsr1_wmat k = dsr1_cpu_gather_k(w, w->step.seq[t0], a->layer, P);
    for (int s = t0; s < t1;) {
        int e = s + 1, pmax = pos[s] + 1;
        for (; e < t1; e++) {
            int pm = pos[e] + 1 > pmax ? pos[e] + 1 : pmax;
            size_t rows = (size_t)(e - s + 1) * (size_t)H;
            if (rows * (size_t)pm > w->score_cap || rows > w->tile_rows) break;
            pmax = pm;
        }
        attend_tile(w, a, &k, s, e - s, softmax);
        s = e;
    }
}

dsr1_cpu_softmax_fn dsr1_cpu_attention_softmax(const cpu_ws *w, dsr1_act act)
{
    if (!dsr1_pool_avx512(dsr1_cpu_pool(w))) return dsr1_cpu_softmax_row;
    return !w->dev->deterministic && act != DSR1_ACT_F32 ? dsr1_cpu_softmax_row_avx512
                                                         : dsr1_cpu_softmax_row_exact_avx512;
}

void dsr1_cpu_mla_attention(void *wsp, const dsr1_mla_args *a, dsr1_act act)
{
    cpu_ws *w = wsp;
    dsr1_pool *pool = dsr1_cpu_pool(w);
    const dsr1_bkv *kv = w->step.kv;
    act = dsr1_cpu_act(w, act);
    const int32_t *seq = w->step.seq, *pos = w->step.pos;
    DSR1_ASSERT(kv && a->n == w->step.n && a->n <= w->s.max_tokens && a->n_heads <= w->s.n_heads &&
                kv->l.row == a->kv_lora_rank + a->rope_dim &&
                a->kv_lora_rank <= w->s.kv_lora_rank && a->rope_dim <= w->s.rope_dim &&
                dsr1_cpu_kv_elem(kv->l.type) <= w->kelem);
    for (int t = 0; t < a->n; t++)
        DSR1_ASSERT(pos[t] < w->s.max_ctx &&
                    (size_t)a->n_heads * (size_t)(pos[t] + 1) <= w->score_cap);
    /* Runs of one sequence: the long ones of the fast mode in the naive
     * form (cpu_mla_naive.c), the others absorbed, their tokens merged into
     * segments of consecutive absorbed tokens (decode batches stay one
     * matmul per head). */
    int nseg = 0;
    int32_t *seg = w->segs;
    for (int t0 = 0; t0 < a->n;) {
        int t1 = t0 + 1;
        while (t1 < a->n && seq[t1] == seq[t0]) t1++;
        if (!dsr1_cpu_naive_wanted(w, a, act, t0, t1) || dsr1_cpu_mla_naive(w, a, act, t0, t1)) {
            if (nseg && seg[2 * nseg - 1] == t0) {
                seg[2 * nseg - 1] = t1;
            } else {
                seg[2 * nseg] = t0;
                seg[2 * nseg + 1] = t1;
                nseg++;
            }
        }
        t0 = t1;
    }
    if (!nseg) return;
    int nth = dsr1_pool_size(pool);
    head_job hj = {.w = w, .a = a, .q = dsr1_cpu_ptr(a->q), .ldq = a->q.ld,
                   .out = dsr1_cpu_ptr(a->out), .ldo = a->out.ld, .act = act,
                   .nt = nth < w->n_hpools ? nth : w->n_hpools, .seg = seg, .nseg = nseg};
    dsr1_pool_run(pool, absorb_task, &hj, hj.nt);
    dsr1_cpu_softmax_fn softmax = dsr1_cpu_attention_softmax(w, act);
    for (int i = 0; i < nseg; i++)
        for (int t0 = seg[2 * i]; t0 < seg[2 * i + 1];) {
            int t1 = t0 + 1;
            while (t1 < seg[2 * i + 1] && seq[t1] == seq[t0]) t1++;
            attend_run(w, a, t0, t1, softmax);
            t0 = t1;
        }
    dsr1_pool_run(pool, unabsorb_task, &hj, hj.nt);
}
