/*
 * cpu_mla_naive.c - MLA in the naive form, for long runs of one sequence in
 * the fast mode (the absorbed form, and everything else about attention,
 * is cpu_attention.c):
 *
 *   1. expand:  [k_nope | v][p][h] = kv_b_proj[h] . latent[p]   every cached position p
 *   2. scores:  S[t][p] = [q_nope | q_pe][t][h] . [k_nope[p][h] | k_pe[p]]
 *   3. softmax: over p <= pos[t] of scale * S
 *   4. values:  out[t][h] = sum_p S[t][p] v[p][h]
 *
 * Why: per (token, position, head) the absorbed form multiplies a 576-wide
 * score and a 512-wide latent value (R1: kv_lora_rank 512 + rope 64), the
 * naive form 192 and 128. It pays with the expansion (every position once
 * through kv_b_proj: P x heads x 256 x 512 multiply-adds, a GEMM in the
 * caller's fast mode) and saves the absorb and unabsorb projections of the
 * run's tokens. For a 512-token prefill of R1 the float32 attention
 * products fall from 18.3 to 5.4 G multiply-adds per layer for 8.6 G of
 * GEMM instead of 8.6 G of per-head projections. naive_wanted counts both
 * sides and takes the cheaper, so a short chunk at the end of a long
 * context stays absorbed.
 *
 * Only in the fast mode: the two forms round differently and which one a
 * token gets depends on the length of its run (how its prompt was chunked
 * and batched), which --deterministic forbids (backend.h's contract). The
 * products stay float32 as in the absorbed form (cpu_attention.c says why
 * bf16 is too coarse there), or, on AMX, three bf16 products that come
 * within about 2^-16 of each term (naive_amx_avx512.c); the expansion rounds as the absorbed form's
 * projections do, in dsr1's kernels of the caller's mode (W8A8 on INT8
 * kv_b_proj, bf16 x against exact FP8 values), never oneDNN: its bf16 copy
 * of FP8 weights rounds them too, and with it the random tiny fixture's
 * 300-token prefill drifted further from float32 (dsr1 eval, KL mean
 * 0.071 against 0.046 with these kernels; the absorbed fast path 0.063).
 *
 * Memory: the latents in float32, the expansion of a group of heads
 * (at most NAIVE_E_FLOATS), and per thread one head's keys, a tile's
 * scores and its values transposed; grown on first use and kept with the
 * workspace. Runs beyond NAIVE_MAX_CTX positions stay absorbed.
 */
#include <stdlib.h>
#include <string.h>

#include "core/numeric.h"
#include "cpu_backend.h"
#include "matmul_impl.h" /* dsr1_pool_avx512 */

#define NAIVE_MIN_RUN 32          /* fewest tokens of one sequence */
#define NAIVE_MAX_CTX 16384       /* most positions a run attends to */
#define NAIVE_TT 64               /* tokens per score tile */
#define NAIVE_E_FLOATS (4u << 20) /* one head group's expansion: 16 MiB */
/* A multiply-add of the expansion GEMM (int8 or bf16 dot products) against
 * one of the float32 attention products: Zen 4 runs W8A8 at 4x and bf16
 * at 2x float32's rate per instruction; 0.5 keeps the naive form for
 * chunks that clearly gain. */
#define NAIVE_GEMM_COST 0.5

int dsr1_cpu_naive_wanted(const cpu_ws *w, const dsr1_mla_args *a, dsr1_act act, int t0, int t1)
{
    if (!a->wkv_b || w->dev->deterministic || act == DSR1_ACT_F32 || t1 - t0 < NAIVE_MIN_RUN)
        return 0;
    const int32_t *pos = w->step.pos;
    int P = 0;
    double pairs = 0;
    for (int t = t0; t < t1; t++) {
        P = pos[t] + 1 > P ? pos[t] + 1 : P;
        pairs += pos[t] + 1;
    }
    if (P > NAIVE_MAX_CTX) return 0;
    double r = a->kv_lora_rank, nope = a->qk_nope, v = a->v_dim, rope = a->rope_dim;
    double gemm = (nope + v) * r * NAIVE_GEMM_COST; /* per position or token, per head */
    double absorbed = pairs * (2 * r + rope) + (t1 - t0) * gemm;
    double naive = pairs * (nope + rope + v) + P * gemm;
    return naive < absorbed;
}

typedef struct naive_job {
    cpu_ws *w;
    const dsr1_mla_args *a;
    const float *q, *kpe, *e;  /* queries (ldq), rope keys (ldk), expansion (lde) */
    float *out, *scr;          /* out (ldo); per-task scratch, scr_per floats each */
    int64_t ldq, ldk, lde, ldo, ldkt; /* ldkt: kt's row stride (pad_ld(P)) */
    size_t scr_per;
    int g0, gn, t0, t1, P, nt;
    void (*softmax)(float *s, int valid, int width, float scale);
    int avx512;                /* naive_avx512.c usable */
    int amx;                   /* naive_amx_avx512.c usable: its tiles at the scratch's start */
} naive_job;

/* A row stride of at least n floats that is no multiple of 1 KiB: the
 * products read a column of 16 or 32 lanes from row after row, and rows a
 * multiple of 4 KiB apart share one L1 set (8 ways). With P = 2048 (an
 * 8 KiB stride for the keys, 8 heads' expansion for the values) the
 * products ran no faster than through dsr1_matmul. */
static int64_t pad_ld(int64_t n)
{
    n = (n + 15) & ~(int64_t)15;
    return n % 256 ? n : n + 16;
}

/* Positions a tile of cnt tokens attends to: up to its furthest. */
static int tile_span(const int32_t *pos, int cnt)
{
    int pb = 0;
    for (int i = 0; i < cnt; i++) pb = pos[i] + 1 > pb ? pos[i] + 1 : pb;
    return pb;
}

/* One head on AVX-512 (naive_avx512.c): the keys [k_nope | k_pe]
 * transposed into kt ([qk][ldkt]) once, then per tile the scores against
 * kt, the softmax, and the values straight from the expansion's rows (no
 * transpose). Against the dsr1_matmul path below, 3 interleaved rounds
 * (INT8 R1-shape file, Zen 4, 2 threads): prefill 2048 133.0-137.1 ->
 * 139.6-147.8 tok/s, prefill 512 166.5-171.5 -> 168.2-175.3. */
static void naive_head_avx512(const naive_job *j, int h, const float *eh, float *kt)
{
    const dsr1_mla_args *a = j->a;
    const int32_t *pos = j->w->step.pos;
    const int nope = a->qk_nope, rope = a->rope_dim, v = a->v_dim, qk = nope + rope, P = j->P;
    float *s = kt + (size_t)qk * (size_t)j->ldkt; /* [NAIVE_TT][pb] */
    dsr1_transpose_f32_avx512(eh, j->lde, P, nope, kt, j->ldkt);
    dsr1_transpose_f32_avx512(j->kpe, j->ldk, P, rope, kt + (size_t)nope * j->ldkt, j->ldkt);
    for (int t = j->t0; t < j->t1; t += NAIVE_TT) {
        const int cnt = j->t1 - t < NAIVE_TT ? j->t1 - t : NAIVE_TT, pb = tile_span(pos + t, cnt);
        dsr1_naive_scores_avx512(j->q + t * j->ldq + (int64_t)h * qk, j->ldq, cnt, kt, j->ldkt, qk, pb, s, pb);
        for (int i = 0; i < cnt; i++) j->softmax(s + (size_t)i * pb, pos[t + i] + 1, pb, a->scale);
        dsr1_naive_values_avx512(s, pb, cnt, eh + nope, j->lde, v, pb, j->out + t * j->ldo + (int64_t)h * v,
                                 j->ldo);
    }
}

/* One head on AMX tiles (naive_amx_avx512.c): its keys and values as
 * bf16 hi and lo once, then per tile the same steps as above. Against
 * naive_head_avx512, both in one process, prompts alternating between
 * them (R1-shape files, 2-core Emerald Rapids Xeon, 2 threads): prefill
 * 512 FP8 1.06-1.09x (medians of 8 and 12), INT8 1.04x; prefill 2048
 * 1.13-1.74x; 4096 (INT8) 1.54-1.61x. The tiny trained model in BF16:
 * KL from float32 0.000138 against 0.000131 (dsr1 eval, 423 positions). */
static void naive_head_amx(const naive_job *j, int h, const float *eh, char *scr)
{
    const dsr1_mla_args *a = j->a;
    const int32_t *pos = j->w->step.pos;
    const int nope = a->qk_nope, rope = a->rope_dim, v = a->v_dim, qk = nope + rope, P = j->P;
    dsr1_naive_tiles tl;
    dsr1_naive_tiles_place(&tl, scr, P, qk, v);
    float *s = (float *)(scr + dsr1_naive_tiles_bytes(P, qk, v)); /* [NAIVE_TT][pb] */
    dsr1_naive_keys_amx(&tl, eh, j->lde, nope, j->kpe, j->ldk, rope);
    dsr1_naive_vals_amx(&tl, eh + nope, j->lde, v);
    for (int t = j->t0; t < j->t1; t += NAIVE_TT) {
        const int cnt = j->t1 - t < NAIVE_TT ? j->t1 - t : NAIVE_TT, pb = tile_span(pos + t, cnt);
        dsr1_naive_scores_amx(&tl, j->q + t * j->ldq + (int64_t)h * qk, j->ldq, cnt, qk, pb, s, pb);
        for (int i = 0; i < cnt; i++) j->softmax(s + (size_t)i * pb, pos[t + i] + 1, pb, a->scale);
        dsr1_naive_values_amx(&tl, s, pb, cnt, pb, v, j->out + t * j->ldo + (int64_t)h * v, j->ldo);
    }
}

/* Task k: heads [g0 + k gn / nt, g0 + (k+1) gn / nt), on the k-th
 * one-thread pool (its matmul scratch). */
static void naive_task(void *ctx, int k, int nt)
{
    const naive_job *j = ctx;
    const dsr1_mla_args *a = j->a;
    const int32_t *pos = j->w->step.pos;
    int nope = a->qk_nope, rope = a->rope_dim, v = a->v_dim, qk = nope + rope, P = j->P;
    float *kh = j->scr + (size_t)k * j->scr_per;  /* [P][qk] */
    float *s = kh + (size_t)P * (size_t)qk;        /* [NAIVE_TT][P] */
    float *vt = s + (size_t)NAIVE_TT * (size_t)P; /* [v][P] */
    dsr1_pool *hp = j->w->hpool[k];
    (void)nt;
    for (int hl = j->gn * k / j->nt; hl < j->gn * (k + 1) / j->nt; hl++) {
        int h = j->g0 + hl;
        const float *eh = j->e + (size_t)hl * (size_t)(nope + v);
        if (j->amx) {
            naive_head_amx(j, h, eh, (char *)(j->scr + (size_t)k * j->scr_per));
            continue;
        }
        if (j->avx512) {
            naive_head_avx512(j, h, eh, j->scr + (size_t)k * j->scr_per);
            continue;
        }
        for (int p = 0; p < P; p++) {
            memcpy(kh + (size_t)p * qk, eh + p * j->lde, (size_t)nope * sizeof(float));
            memcpy(kh + (size_t)p * qk + nope, j->kpe + p * j->ldk, (size_t)rope * sizeof(float));
        }
        for (int t = j->t0; t < j->t1; t += NAIVE_TT) {
            int cnt = j->t1 - t < NAIVE_TT ? j->t1 - t : NAIVE_TT, pb = tile_span(pos + t, cnt);
            dsr1_wmat km = {.type = DSR1_T_F32, .rows = pb, .cols = qk, .data = kh};
            dsr1_matmul(hp, &km, j->q + t * j->ldq + (int64_t)h * qk, j->ldq, s, pb, cnt,
                        DSR1_ACT_F32);
            for (int i = 0; i < cnt; i++)
                j->softmax(s + (size_t)i * pb, pos[t + i] + 1, pb, a->scale);
            for (int p0 = 0; p0 < pb; p0 += 16) {
                const int pe = p0 + 16 < pb ? p0 + 16 : pb;
                for (int d = 0; d < v; d++) {
                    float *o = vt + (size_t)d * pb;
                    for (int p = p0; p < pe; p++) o[p] = eh[p * j->lde + nope + d];
                }
            }
            dsr1_wmat vm = {.type = DSR1_T_F32, .rows = v, .cols = pb, .data = vt};
            dsr1_matmul(hp, &vm, s, pb, j->out + t * j->ldo + (int64_t)h * v, j->ldo, cnt,
                        DSR1_ACT_F32);
        }
    }
}

static int gcd(int x, int y) { return y ? gcd(y, x % y) : x; }

int dsr1_cpu_mla_naive(cpu_ws *w, const dsr1_mla_args *a, dsr1_act act, int t0, int t1)
{
    dsr1_pool *pool = dsr1_cpu_pool(w);
    const int32_t *pos = w->step.pos;
    const dsr1_wmat *kvb = dsr1_cpu_mat(a->wkv_b, 0);
    int H = a->n_heads, r = a->kv_lora_rank, rope = a->rope_dim, nope = a->qk_nope, v = a->v_dim;
    int hw = nope + v, row = r + rope, P = 0;
    for (int t = t0; t < t1; t++) P = pos[t] + 1 > P ? pos[t] + 1 : P;
    /* heads per expansion group; FP8 groups start on a block boundary */
    size_t cap = w->nv_group_cap ? w->nv_group_cap : NAIVE_E_FLOATS;
    int G = (int)(cap / ((size_t)P * (size_t)hw));
    int unit = kvb->type == DSR1_T_FP8_E4M3 && kvb->group > 0 ? kvb->group / gcd(hw, kvb->group) : 1;
    G = G < unit ? unit : G / unit * unit;
    if (G > H) G = H;
    int nth = dsr1_pool_size(pool);
    int nt = nth < w->n_hpools ? nth : w->n_hpools;
    if (nt > G) nt = G;
    const int64_t ldkt = pad_ld(P), lde_cap = (int64_t)G * hw + 32; /* pad_ld(gn hw) <= lde_cap */
    size_t per = (size_t)ldkt * (size_t)(nope + rope + NAIVE_TT + v);
    const int amx = dsr1_pool_amx(pool) && nope + rope <= 512;
    if (amx) { /* the tiles' keys, values and rows, then the scores (floats) */
        size_t tiles = (dsr1_naive_tiles_bytes(P, nope + rope, v) + 63) / 64 * 16;
        if (tiles + (size_t)NAIVE_TT * (size_t)ldkt > per) per = tiles + (size_t)NAIVE_TT * (size_t)ldkt;
    }
    size_t need = (size_t)P * (size_t)row + (size_t)P * (size_t)lde_cap + (size_t)nt * per;
    if (need > w->nv_cap) {
        free(w->nv);
        w->nv_cap = 0;
        if (!(w->nv = malloc(need * sizeof(float)))) return -1;
        w->nv_cap = need;
    }
    float *lat = w->nv, *e = lat + (size_t)P * (size_t)row;
    dsr1_wmat k = dsr1_cpu_gather_k(w, w->step.seq[t0], a->layer, P);
    if (k.type == DSR1_T_BF16) {
        const uint16_t *src = k.data;
        for (size_t i = 0; i < (size_t)P * (size_t)row; i++) lat[i] = dsr1_bf16_to_f32(src[i]);
    } else {
        memcpy(lat, k.data, (size_t)P * (size_t)row * sizeof(float));
    }
    naive_job j = {.w = w, .a = a, .q = dsr1_cpu_ptr(a->q), .kpe = lat + r, .e = e,
                   .out = dsr1_cpu_ptr(a->out), .scr = e + (size_t)P * (size_t)lde_cap,
                   .ldq = a->q.ld, .ldk = row, .ldo = a->out.ld, .ldkt = ldkt, .scr_per = per,
                   .t0 = t0, .t1 = t1, .P = P,
                   .softmax = dsr1_pool_avx512(pool) ? dsr1_cpu_softmax_row_avx512
                                                     : dsr1_cpu_softmax_row,
                   .avx512 = dsr1_pool_avx512(pool), .amx = amx};
    for (int g0 = 0; g0 < H; g0 += G) {
        dsr1_wmat part;
        j.g0 = g0;
        j.gn = H - g0 < G ? H - g0 : G;
        j.lde = pad_ld((int64_t)j.gn * hw);
        DSR1_ASSERT(dsr1_wmat_rows(kvb, (int64_t)g0 * hw, (int64_t)j.gn * hw, &part));
        dsr1_matmul(pool, &part, lat, row, e, j.lde, P, act);
        j.nt = nt < j.gn ? nt : j.gn;
        dsr1_pool_run(pool, naive_task, &j, j.nt);
    }
    w->naive_runs++;
    return 0;
}
