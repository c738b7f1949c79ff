/*
 * cuda_elementwise.cu - the row-wise stages of the CUDA/HIP backend:
 * embedding rows, RMSNorm (with the residual add fused), interleaved RoPE,
 * row adds and gathers, and the store into the device-resident paged latent
 * cache (BF16, FP8 with a per-row scale, F32).
 *
 * Each mirrors the CPU backend's arithmetic step for step (cpu_backend.c,
 * core/kvcache.c): RMSNorm sums squares in double and scales with two
 * float32 products, RoPE takes cos/sin in double of the float32 angle, the
 * cache conversions are core/numeric.h's. Products are written with
 * __fmul_rn/__fadd_rn where the CPU rounds twice, so the compiler cannot
 * contract them into a fused multiply-add the CPU does not do.
 *
 * One block per token everywhere: a token's result never depends on the
 * other tokens of the call. Reductions are in a fixed tree (thread-strided
 * partials, then cu_warp_sum, then warps in order).
 */
#include "cuda_common.cuh"

#define EW_THREADS 256
#define EW_WARPS (EW_THREADS / DSR1_WARP)

/* ---- embedding -------------------------------------------------------------------- */

__global__ void __launch_bounds__(EW_THREADS) k_embed(cu_wmat t, const int32_t *ids, float *out,
                                                      int64_t ldo)
{
    int64_t r = ids[blockIdx.x];
    float *o = out + (int64_t)blockIdx.x * ldo;
    for (int64_t c = threadIdx.x; c < t.cols; c += EW_THREADS) o[c] = cu_wdeq(t, t.data, t.scale, r, c);
}

void cu_embed(dsr1_gpuStream s, const cu_wmat *table, const int32_t *ids, int n, float *out,
              int64_t ldo)
{
    if (n > 0) k_embed<<<n, EW_THREADS, 0, s>>>(*table, ids, out, ldo);
}

/* ---- RMSNorm ---------------------------------------------------------------------- */

/* Block-wide double sum in a fixed order (thread partials -> warp tree ->
 * warps in index order); every thread gets the result. */
static __device__ double block_sum_d(double v, double *red)
{
    v = cu_warp_sum_d(v);
    if (threadIdx.x % DSR1_WARP == 0) red[threadIdx.x / DSR1_WARP] = v;
    __syncthreads();
    double s = 0;
    for (int i = 0; i < EW_WARPS; i++) s += red[i];
    __syncthreads();
    return s;
}

__global__ void __launch_bounds__(EW_THREADS) k_rmsnorm(float *x, int64_t ldx, const float *res,
                                                        int64_t ldr, const float *w, int dim,
                                                        float eps, float *y, int64_t ldy)
{
    __shared__ double red[EW_WARPS];
    float *xr = x + (int64_t)blockIdx.x * ldx;
    float *yr = y + (int64_t)blockIdx.x * ldy;
    double ss = 0;
    for (int i = threadIdx.x; i < dim; i += EW_THREADS) {
        float v = xr[i];
        if (res) {
            v = __fadd_rn(v, res[(int64_t)blockIdx.x * ldr + i]);
            xr[i] = v;
        }
        ss += (double)v * v;
    }
    ss = block_sum_d(ss, red);
    float r = (float)(1.0 / sqrt(ss / dim + (double)eps));
    for (int i = threadIdx.x; i < dim; i += EW_THREADS) yr[i] = __fmul_rn(__fmul_rn(xr[i], r), w[i]);
}

void cu_rmsnorm(dsr1_gpuStream s, float *x, int64_t ldx, const float *res, int64_t ldr,
                const float *w, int dim, float eps, int n, float *y, int64_t ldy)
{
    if (n > 0) k_rmsnorm<<<n, EW_THREADS, 0, s>>>(x, ldx, res, ldr, w, dim, eps, y, ldy);
}

/* ---- RoPE ------------------------------------------------------------------------- */

__global__ void __launch_bounds__(EW_THREADS) k_rope(float *x, int64_t ldx, int heads,
                                                     int64_t hstride, int half,
                                                     const float *freqs, const int32_t *pos)
{
    float *xt = x + (int64_t)blockIdx.x * ldx;
    float p = (float)pos[blockIdx.x];
    for (int j = threadIdx.x; j < heads * half; j += EW_THREADS) {
        int h = j / half, i = j % half;
        float a = __fmul_rn(p, freqs[i]); /* float32 product, as the reference table */
        float cs = (float)cos((double)a), sn = (float)sin((double)a);
        float *v = xt + h * hstride;
        float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
        v[2 * i + 1] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs));
    }
}

void cu_rope(dsr1_gpuStream s, float *x, int64_t ldx, int heads, int64_t hstride, int rope_dim,
             const float *freqs, const int32_t *pos, int n)
{
    if (n > 0) k_rope<<<n, EW_THREADS, 0, s>>>(x, ldx, heads, hstride, rope_dim / 2, freqs, pos);
}

/* ---- rows ------------------------------------------------------------------------- */

__global__ void __launch_bounds__(EW_THREADS) k_add_rows(float *y, int64_t ldy, const float *x,
                                                         int64_t ldx, int dim, int add)
{
    float *yr = y + (int64_t)blockIdx.x * ldy;
    const float *xr = x + (int64_t)blockIdx.x * ldx;
    for (int i = threadIdx.x; i < dim; i += EW_THREADS) yr[i] = add ? __fadd_rn(yr[i], xr[i]) : xr[i];
}

void cu_add_rows(dsr1_gpuStream s, float *y, int64_t ldy, const float *x, int64_t ldx, int dim,
                 int n, int add)
{
    if (n > 0) k_add_rows<<<n, EW_THREADS, 0, s>>>(y, ldy, x, ldx, dim, add);
}

__global__ void __launch_bounds__(EW_THREADS) k_gather(float *d, int64_t ldd, const float *src,
                                                       int64_t lds, const int32_t *idx, int dim)
{
    const float *sr = src + (int64_t)(idx ? idx[blockIdx.x] : (int)blockIdx.x) * lds;
    float *dr = d + (int64_t)blockIdx.x * ldd;
    for (int i = threadIdx.x; i < dim; i += EW_THREADS) dr[i] = sr[i];
}

void cu_gather_rows(dsr1_gpuStream s, float *dst, int64_t ldd, const float *src, int64_t lds,
                    const int32_t *idx, int dim, int n)
{
    if (n > 0) k_gather<<<n, EW_THREADS, 0, s>>>(dst, ldd, src, lds, idx, dim);
}

__global__ void __launch_bounds__(EW_THREADS) k_scatter(float *d, int64_t ldd, const float *src,
                                                        int64_t lds, const int32_t *idx, int dim)
{
    const float *sr = src + (int64_t)blockIdx.x * lds;
    float *dr = d + (int64_t)idx[blockIdx.x] * ldd;
    for (int i = threadIdx.x; i < dim; i += EW_THREADS) dr[i] = sr[i];
}

void cu_scatter_rows(dsr1_gpuStream s, float *dst, int64_t ldd, const float *src, int64_t lds,
                     const int32_t *idx, int dim, int n)
{
    if (n > 0) k_scatter<<<n, EW_THREADS, 0, s>>>(dst, ldd, src, lds, idx, dim);
}

/* Row j = (t, h) of n * heads: dst[j * ldd + i] = src[t * lds + h * hs + i]. */
__global__ void __launch_bounds__(EW_THREADS) k_copy_heads(float *d, int64_t ldd, const float *src,
                                                           int64_t lds, int64_t hs, int heads,
                                                           int dim)
{
    int j = blockIdx.x, t = j / heads, h = j % heads;
    const float *sr = src + (int64_t)t * lds + (int64_t)h * hs;
    float *dr = d + (int64_t)j * ldd;
    for (int i = threadIdx.x; i < dim; i += EW_THREADS) dr[i] = sr[i];
}

void cu_copy_heads(dsr1_gpuStream s, float *dst, int64_t ldd, const float *src, int64_t lds,
                   int64_t hstride, int heads, int dim, int n)
{
    if (n > 0 && heads > 0)
        k_copy_heads<<<n * heads, EW_THREADS, 0, s>>>(dst, ldd, src, lds, hstride, heads, dim);
}

/* g = silu(g) * u elementwise (the gate/up product when they cannot be
 * fused: different types, or INT8 mode). */
__global__ void __launch_bounds__(EW_THREADS) k_silu_mul(float *g, const float *u, int64_t len)
{
    for (int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; i < len;
         i += (int64_t)gridDim.x * EW_THREADS)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void cu_silu_mul(dsr1_gpuStream s, float *g, const float *u, int64_t len)
{
    if (len <= 0) return;
    int64_t blocks = (len + EW_THREADS - 1) / EW_THREADS;
    k_silu_mul<<<(unsigned)(blocks < 65535 ? blocks : 65535), EW_THREADS, 0, s>>>(g, u, len);
}

/* ---- KV store ---------------------------------------------------------------------- */

static __device__ float block_max(float v, float *red)
{
    v = cu_warp_max(v);
    if (threadIdx.x % DSR1_WARP == 0) red[threadIdx.x / DSR1_WARP] = v;
    __syncthreads();
    float m = 0.0f;
    for (int i = 0; i < EW_WARPS; i++) m = fmaxf(m, red[i]);
    return m;
}

__global__ void __launch_bounds__(EW_THREADS) k_kv_store(cu_kv kv, int layer, const float *latent,
                                                         int64_t ldl, const float *pe, int64_t ldp,
                                                         const int32_t *seq, const int32_t *pos)
{
    __shared__ float red[EW_WARPS];
    int t = blockIdx.x, p = pos[t], nl = kv.kv_lora_rank;
    int32_t page = kv.table[(int64_t)seq[t] * kv.max_pages + p / kv.block];
    int64_t r = ((int64_t)page * kv.n_layers + layer) * kv.block + p % kv.block;
    const float *lt = latent + (int64_t)t * ldl, *pt = pe + (int64_t)t * ldp;
    if (kv.type == CU_KV_F32) {
        float *d = (float *)kv.data + r * kv.row;
        for (int i = threadIdx.x; i < kv.row; i += EW_THREADS) d[i] = i < nl ? lt[i] : pt[i - nl];
    } else if (kv.type == CU_KV_BF16) {
        uint16_t *d = (uint16_t *)kv.data + r * kv.row;
        for (int i = threadIdx.x; i < kv.row; i += EW_THREADS)
            d[i] = (uint16_t)cu_f32_bf16(i < nl ? lt[i] : pt[i - nl]);
    } else {
        uint8_t *d = (uint8_t *)kv.data + r * kv.row;
        float m = 0.0f;
        for (int i = threadIdx.x; i < kv.row; i += EW_THREADS) m = fmaxf(m, fabsf(i < nl ? lt[i] : pt[i - nl]));
        float amax = block_max(m, red);
        float sc = amax > 0 ? amax / 448.0f : 1.0f, inv = 1.0f / sc;
        for (int i = threadIdx.x; i < kv.row; i += EW_THREADS)
            d[i] = (uint8_t)cu_f32_fp8_as<false>(__fmul_rn(i < nl ? lt[i] : pt[i - nl], inv));
        if (threadIdx.x == 0) kv.scale[r] = sc;
    }
}

void cu_kv_store(dsr1_gpuStream s, const cu_kv *kv, int layer, const float *latent, int64_t ldl,
                 const float *pe, int64_t ldp, const int32_t *seq, const int32_t *pos, int n)
{
    if (n > 0) k_kv_store<<<n, EW_THREADS, 0, s>>>(*kv, layer, latent, ldl, pe, ldp, seq, pos);
}
