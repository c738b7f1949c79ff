/*
 * cuda_attention.cu - absorbed MLA attention over the device-resident paged
 * latent cache, steps 2-4 of backends/cpu/cpu_attention.c (scores over
 * latent + rope key, softmax, weighted latent); the absorb and unabsorb
 * projections are grouped matmuls (cuda_matmul.cu), one group per head.
 *
 * Layout of the work: a block takes one token, a tile of ATT_HT heads and
 * one split of CU_MLA_SPLIT absolute positions. The cache rows of a chunk
 * of ATT_C positions are read once into shared memory (converted to
 * float32: BF16 and F32 exactly, FP8 as value * row scale like the CPU's
 * gather) and used by every head of the tile (MLA shares one latent row
 * across all heads). Within a split the softmax runs online over the
 * chunks in position order; a second kernel merges the splits in split
 * order. Decode gets parallelism from heads x splits; prefill from tokens.
 *
 * Determinism: everything a (token, head) result depends on is fixed by
 * the token's own absolute position: the split boundaries (multiples of
 * CU_MLA_SPLIT), the chunk boundaries inside a split, the score dot
 * products (two fixed interleaved halves, then their sum), the order of
 * the online updates and of the merge. Other tokens of the call, their
 * number and the token tile never enter. No atomics.
 *
 * Accuracy: float32 throughout (q, scores, probabilities, values), as the
 * CPU backend keeps its attention products in float32 in every mode (see
 * the reason in cpu_attention.c); expf is the device's (a few ulp from the
 * CPU's), and the online normalisation rounds differently from the CPU's
 * two-pass softmax: the conformance test states the tolerance.
 */
#include <stdio.h>

#include "cuda_common.cuh"

#define ATT_THREADS 256
#define ATT_HT 8                     /* heads per block */
#define ATT_C 16                     /* positions per chunk */
#define ATT_HG (ATT_THREADS / ATT_HT) /* threads per head in the value step */
#define ATT_MAXR 512                 /* kv_lora_rank the accumulators hold */
#define ATT_J (ATT_MAXR / ATT_HG)

/* Per (token, head, split) partial: m, l, then o[kv_lora_rank]. */
static __host__ __device__ size_t part_floats(int r) { return 2 + (size_t)r; }

static size_t att_smem(int row) { return ((size_t)(ATT_HT + ATT_C) * row + ATT_HT * ATT_C) * 4; }

/* Row `p` of (seq, layer) converted to float32 into dst[row]. */
static __device__ void load_row(const cu_kv &kv, int seq, int layer, int p, float *dst, int tid,
                                int nthr)
{
    int32_t page = kv.table[(int64_t)seq * kv.max_pages + p / kv.block];
    int64_t r = ((int64_t)page * kv.n_layers + layer) * kv.block + p % kv.block;
    if (kv.type == CU_KV_F32) {
        const float *s = (const float *)kv.data + r * kv.row;
        for (int i = tid; i < kv.row; i += nthr) dst[i] = s[i];
    } else if (kv.type == CU_KV_BF16) {
        const uint16_t *s = (const uint16_t *)kv.data + r * kv.row;
        for (int i = tid; i < kv.row; i += nthr) dst[i] = cu_bf16_f32(s[i]);
    } else {
        const uint8_t *s = (const uint8_t *)kv.data + r * kv.row;
        float sc = kv.scale[r];
        for (int i = tid; i < kv.row; i += nthr) dst[i] = __fmul_rn(cu_fp8_f32_as<false>(s[i]), sc);
    }
}

typedef struct att_args {
    cu_kv kv;
    int layer, heads, nsplit, t_base;
    float scale;
    const float *qcat;       /* [n][heads][row] */
    const int32_t *seq, *pos;
    float *part;             /* [tile tokens][heads][nsplit][2 + r] */
} att_args;

__global__ void __launch_bounds__(ATT_THREADS) k_mla_split(att_args a)
{
    extern __shared__ float sm[];
    const int row = a.kv.row, r = a.kv.kv_lora_rank, tid = threadIdx.x;
    float *q = sm, *kc = sm + ATT_HT * row, *sc = kc + ATT_C * row;
    const int tl = blockIdx.x, t = a.t_base + tl, h0 = blockIdx.y * ATT_HT, sp = blockIdx.z;
    const int P = a.pos[t] + 1, seq = a.seq[t];
    const int p0 = sp * CU_MLA_SPLIT, p1 = min(P, p0 + CU_MLA_SPLIT);
    const int hh = tid / ATT_HG, hl = tid % ATT_HG, h = h0 + hh;
    float m = -INFINITY, l = 0.0f, o[ATT_J];
#pragma unroll
    for (int j = 0; j < ATT_J; j++) o[j] = 0.0f;
    if (p0 < p1) {
        for (int i = tid; i < ATT_HT * row; i += ATT_THREADS) {
            int qh = h0 + i / row;
            q[i] = qh < a.heads ? a.qcat[((int64_t)t * a.heads + qh) * row + i % row] : 0.0f;
        }
        for (int c0 = p0; c0 < p1; c0 += ATT_C) {
            __syncthreads(); /* previous chunk's values are consumed */
            for (int i = 0; i < ATT_C; i++) {
                if (c0 + i < p1) {
                    load_row(a.kv, seq, a.layer, c0 + i, kc + i * row, tid, ATT_THREADS);
                } else {
                    /* past the split: zeros, so 0-probability terms stay 0 */
                    for (int d = tid; d < row; d += ATT_THREADS) kc[i * row + d] = 0.0f;
                }
            }
            __syncthreads();
            /* scores: pair (head, position) = tid / 2, two interleaved halves */
            {
                int pr = tid / 2, half = tid % 2, sh = pr / ATT_C, si = pr % ATT_C;
                float acc = 0.0f;
                if (c0 + si < p1)
                    for (int d = half; d < row; d += 2) acc = fmaf(q[sh * row + d], kc[si * row + d], acc);
                float other = DSR1_SHFL_XOR(acc, 1);
                float s = half == 0 ? acc + other : other + acc;
                if (half == 0) sc[sh * ATT_C + si] = c0 + si < p1 ? __fmul_rn(s, a.scale) : -INFINITY;
            }
            __syncthreads();
            /* online softmax update for head hh, in position order */
            float cm = -INFINITY;
            for (int i = 0; i < ATT_C; i++) cm = fmaxf(cm, sc[hh * ATT_C + i]);
            float mn = fmaxf(m, cm), alpha = expf(m - mn), ls = 0.0f;
#pragma unroll
            for (int j = 0; j < ATT_J; j++) o[j] *= alpha;
            for (int i = 0; i < ATT_C; i++) {
                float pi = expf(sc[hh * ATT_C + i] - mn);
                ls += pi;
#pragma unroll
                for (int j = 0; j < ATT_J; j++) {
                    int d = hl + ATT_HG * j;
                    if (d < r) o[j] = fmaf(pi, kc[i * row + d], o[j]);
                }
            }
            l = fmaf(l, alpha, ls);
            m = mn;
        }
    }
    if (h < a.heads) {
        float *pp = a.part + (((int64_t)tl * a.heads + h) * a.nsplit + sp) * part_floats(r);
        if (hl == 0) {
            pp[0] = m;
            pp[1] = l;
        }
#pragma unroll
        for (int j = 0; j < ATT_J; j++) {
            int d = hl + ATT_HG * j;
            if (d < r) pp[2 + d] = o[j];
        }
    }
}

/* Merge the splits of (token, head) in split order into olat. */
__global__ void __launch_bounds__(ATT_THREADS) k_mla_merge(att_args a, float *olat)
{
    const int tl = blockIdx.x, h = blockIdx.y, r = a.kv.kv_lora_rank, t = a.t_base + tl;
    const int ns = (a.pos[t] + CU_MLA_SPLIT) / CU_MLA_SPLIT; /* splits holding positions */
    const float *pp = a.part + ((int64_t)tl * a.heads + h) * a.nsplit * part_floats(r);
    float M = -INFINITY;
    for (int s = 0; s < ns; s++) M = fmaxf(M, pp[s * part_floats(r)]);
    float L = 0.0f;
    for (int s = 0; s < ns; s++) L = fmaf(pp[s * part_floats(r) + 1], expf(pp[s * part_floats(r)] - M), L);
    float inv = 1.0f / L;
    for (int d = threadIdx.x; d < r; d += ATT_THREADS) {
        float acc = 0.0f;
        for (int s = 0; s < ns; s++) {
            const float *q = pp + s * part_floats(r);
            acc = fmaf(q[2 + d], expf(q[0] - M), acc);
        }
        olat[((int64_t)t * a.heads + h) * r + d] = __fmul_rn(acc, inv);
    }
}

int cu_mla_init(void)
{
#if DSR1_GPU_HIP
    return 0; /* CDNA gives a workgroup 64 KiB of LDS without asking */
#endif
    /* the largest row the kernel takes: kv_lora_rank 512 + rope 64 */
    size_t smem = att_smem(ATT_MAXR + 64);
    if (dsr1_gpuFuncSetMaxDynSmem(k_mla_split, (int)smem) != dsr1_gpuSuccess) {
        (void)dsr1_gpuGetLastError();
        return -1;
    }
    return 0;
}

size_t cu_mla_scratch_bytes(int heads, int kv_lora_rank, int max_ctx)
{
    int nsplit = (max_ctx + CU_MLA_SPLIT - 1) / CU_MLA_SPLIT;
    /* at least one token's partials; the caller may give more (faster prefill) */
    return (size_t)heads * (size_t)nsplit * part_floats(kv_lora_rank) * sizeof(float);
}

int cu_mla_attend(dsr1_gpuStream s, const cu_kv *kv, int layer, const float *qcat, int heads,
                  float scale, const int32_t *seq, const int32_t *pos, int n, int max_pos,
                  float *olat, void *scratch, size_t scratch_bytes, char *msg, size_t msgsz)
{
    if (n <= 0) return 0;
    if (kv->kv_lora_rank > ATT_MAXR || kv->row != kv->kv_lora_rank + kv->rope_dim) {
        snprintf(msg, msgsz, "cuda attention: kv_lora_rank %d over the kernel's %d", kv->kv_lora_rank,
                 ATT_MAXR);
        return -1;
    }
    size_t smem = att_smem(kv->row);
    if (smem > att_smem(ATT_MAXR + 64)) {
        snprintf(msg, msgsz, "cuda attention: rows of %d values over the kernel's %d", kv->row,
                 ATT_MAXR + 64);
        return -1;
    }
    att_args a;
    a.kv = *kv;
    a.layer = layer;
    a.heads = heads;
    a.scale = scale;
    a.qcat = qcat;
    a.seq = seq;
    a.pos = pos;
    a.nsplit = (max_pos + 1 + CU_MLA_SPLIT - 1) / CU_MLA_SPLIT;
    a.part = (float *)scratch;
    size_t per_tok = (size_t)heads * a.nsplit * part_floats(kv->kv_lora_rank) * sizeof(float);
    int tile = (int)(scratch_bytes / per_tok);
    if (tile < 1) {
        snprintf(msg, msgsz, "cuda attention: scratch of %zu bytes below one token's %zu", scratch_bytes,
                 per_tok);
        return -1;
    }
    for (int t0 = 0; t0 < n; t0 += tile) {
        int cnt = n - t0 < tile ? n - t0 : tile;
        a.t_base = t0;
        dim3 g1((unsigned)cnt, (unsigned)((heads + ATT_HT - 1) / ATT_HT), (unsigned)a.nsplit);
        k_mla_split<<<g1, ATT_THREADS, smem, s>>>(a);
        k_mla_merge<<<dim3((unsigned)cnt, (unsigned)heads), ATT_THREADS, 0, s>>>(a, olat);
    }
    dsr1_gpuError e = dsr1_gpuGetLastError();
    if (e != dsr1_gpuSuccess) {
        snprintf(msg, msgsz, "cuda attention: launch failed: %s", dsr1_gpuGetErrorString(e));
        return -1;
    }
    return 0;
}
