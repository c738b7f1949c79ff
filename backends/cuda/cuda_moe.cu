/*
 * cuda_moe.cu - the MoE stages of the CUDA/HIP backend around the grouped
 * expert matmuls (cuda_matmul.cu):
 *
 *   route:    core/moe.c's algorithm per token (sigmoid or softmax scores,
 *             bias-corrected choice for noaux_tc, group limiting by top-2
 *             sum or max, greedy top-k, V2/V3 normalisation and scaling),
 *             ties to the lower index, one thread per token;
 *   dispatch: the (token, k) pairs bucketed by expert, stable (pair order
 *             inside a bucket, as cpu_moe.c), plus the ascending list of
 *             active experts: the grouped matmul runs each active expert
 *             once over its tokens, and a graph replays it with new counts;
 *   combine:  per token, the expert outputs weighted in routing order, then
 *             the shared experts' output (the CPU's multiply-then-add).
 *
 * Determinism: routing is a pure function of a token's logits; dispatch
 * counts with plain loops (no atomics), so bucket order is the pair order;
 * the combine order is k order. A token's result never depends on the
 * others: each expert row is computed by the matmul's fixed chain.
 */
#include "cuda_route.cuh"

/* ---- routing -------------------------------------------------------------------- */

__global__ void k_moe_route(cu_moe_params p, const float *logits, const float *bias, int n,
                            int32_t *idx, float *wgt, float *scratch)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const int E = p.n_experts, K = p.topk;
    cu_route_token(p, logits + (int64_t)t * E, bias, idx + (int64_t)t * K, wgt + (int64_t)t * K,
                   scratch + (int64_t)t * (2 * E + p.n_group));
}

void cu_moe_route(dsr1_gpuStream s, const cu_moe_params *p, const float *logits,
                  const float *bias, int n, int32_t *idx, float *wgt, float *scratch)
{
    if (n > 0) k_moe_route<<<(n + 63) / 64, 64, 0, s>>>(*p, logits, bias, n, idx, wgt, scratch);
}

/* ---- dispatch --------------------------------------------------------------------- */

/* One block of up to 1024 threads, thread e owns expert e: counts its pairs,
 * thread 0 takes the prefix sums in expert order, then each expert writes
 * its pairs in pair order. O(E * n * K) work spread over E threads: small
 * next to the expert matmuls even for a 4096-token prefill. */
__global__ void __launch_bounds__(1024) k_moe_dispatch(const int32_t *idx, int nk, int K, int E,
                                                       int32_t *first, int32_t *order,
                                                       int32_t *xrow, int32_t *active,
                                                       int32_t *n_active)
{
    __shared__ int32_t cnt[MOE_MAXE];
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int c = 0;
        for (int i = 0; i < nk; i++) c += idx[i] == e;
        cnt[e] = c;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int f = 0, na = 0;
        for (int e = 0; e < E; e++) {
            first[e] = f;
            f += cnt[e];
            if (cnt[e]) active[na++] = e;
        }
        first[E] = f;
        *n_active = na;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        if (!cnt[e]) continue;
        int o = first[e];
        for (int i = 0; i < nk; i++)
            if (idx[i] == e) {
                order[o] = i;
                xrow[o] = i / K;
                o++;
            }
    }
}

void cu_moe_dispatch(dsr1_gpuStream s, const int32_t *idx, int n, int K, int E, int32_t *first,
                     int32_t *order, int32_t *xrow, int32_t *active, int32_t *n_active)
{
    int thr = E < 1024 ? ((E + DSR1_WARP - 1) / DSR1_WARP) * DSR1_WARP : 1024;
    k_moe_dispatch<<<1, thr, 0, s>>>(idx, n * K, K, E, first, order, xrow, active, n_active);
}

/* ---- combine ---------------------------------------------------------------------- */

__global__ void __launch_bounds__(256) k_moe_combine(const float *slots, const float *wgt,
                                                     const int32_t *idx, const float *sh, int K,
                                                     int dim, float *y, int64_t ldy)
{
    int t = blockIdx.x;
    float *yr = y + (int64_t)t * ldy;
    if (idx[(int64_t)t * K] < 0) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = __int_as_float(0x7fc00000);
        return;
    }
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++)
            acc = __fadd_rn(acc, __fmul_rn(wgt[(int64_t)t * K + k], slots[((int64_t)t * K + k) * dim + i]));
        if (sh) acc = __fadd_rn(acc, sh[(int64_t)t * dim + i]);
        yr[i] = acc;
    }
}

void cu_moe_combine(dsr1_gpuStream s, const float *slots, const float *wgt, const int32_t *idx,
                    const float *sh, int n, int K, int dim, float *y, int64_t ldy)
{
    if (n > 0) k_moe_combine<<<n, 256, 0, s>>>(slots, wgt, idx, sh, K, dim, y, ldy);
}
