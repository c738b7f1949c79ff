/*
 * cuda_matmul.cu - y = x W^T on the GPU for every .dsr1 weight type, the
 * weights dequantised in registers (FP8 stays FP8 in memory with its
 * 128x128 block scales), in the three activation modes of
 * backends/cpu/kernels.h, grouped (experts, heads) with row gathers and
 * scatters read from device memory, and gate/up + SiLU fused.
 *
 * Canonical order on the GPU (what makes a token's result independent of
 * its batch, of the token tile and of the kernel variant):
 *   F32 / BF16 modes: the columns are cut into packs of 8; lane l of a warp
 *   (DSR1_WARP lanes) takes packs l, l + W, l + 2W, ... in that order and
 *   accumulates their 8 columns in column order with one fused multiply-add
 *   each into one float32 accumulator; the W lane sums are then added by
 *   the xor butterfly of cu_warp_sum (half-warp first). Nothing of this
 *   depends on n, on which tokens share the warp (NT), or on the rows a
 *   warp handles (R): every (token, row) pair is its own chain.
 *   Values: F32 mode uses w = one float32 rounding of raw * scale (exactly
 *   matmul_ref.c's dequantised value) and x as is. BF16 mode uses the CPU
 *   fast path's rounding points: x' = bf16(x), w' = bf16(raw * scale)
 *   (denormals to zero, nearest even); FP8 weights stay exact and the block
 *   scale goes to x: x' = bf16(x * s). The bf16 products are exact in
 *   float32, so BF16 mode differs from the CPU's only by summation order.
 *   INT8 mode (W8A8, INT8 weights): x quantised per token as the CPU does
 *   (s = amax/127, q = rint(x * 127/amax)); integer dot products per group
 *   are exact whatever the order, and the float steps follow matmul.c's
 *   row_int8 one for one, so INT8 mode gives the CPU's bits.
 *
 * Not here: tensor-core GEMM for long prefills (cuda_gemm_lt.cu: its order
 * depends on n, so it is a named mode, off by default); the work per row is
 * SIMT fused multiply-adds, memory-bound at decode batch sizes, which is
 * where the decode time goes.
 */
#include <stdio.h>

#include "cuda_common.cuh"

#define MM_WARPS 4
#define MM_THREADS (MM_WARPS * DSR1_WARP)
#define MM_R 2     /* rows per warp */
#define MM_TT 64   /* tokens per block (grid y) */

typedef struct mm_args {
    cu_wmat w, u;            /* u: the up matrix when gated */
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy;
    int n, tblocks;
    /* scale of (r, c) at (r / srdiv) * sncols + c / scdiv: cu_wscale's
     * index with the divisions hoisted and in 32 bits (the hot loop) */
    uint32_t srdiv, scdiv, sncols;
    cu_mm_rows g;
    const int8_t *xq;        /* INT8: [xgroups][x_rows][ldxq] */
    const float *xs;         /* INT8: [xgroups][x_rows] */
    int64_t ldxq;
    int x_rows;
} mm_args;

/* ---- locating a block's work ----------------------------------------------------- */

typedef struct mm_work {
    int z, m, t0, t1;
} mm_work;

/* Decode grid-y index ty into (group, matrix, token range); 0 = no work. */
static __device__ int mm_locate(const mm_args &a, int ty, mm_work *wk)
{
    int z = ty / a.tblocks, tb = ty % a.tblocks;
    if (z >= a.g.groups || (a.g.ngroups && z >= *a.g.ngroups)) return 0;
    int m = a.g.wsel ? a.g.wsel[z] : (a.w.count > 1 ? z : 0);
    int f0 = a.g.first ? a.g.first[m] : 0, f1 = a.g.first ? a.g.first[m + 1] : a.n;
    wk->z = z;
    wk->m = m;
    wk->t0 = f0 + tb * MM_TT;
    wk->t1 = min(f1, wk->t0 + MM_TT);
    return wk->t0 < wk->t1;
}

static __device__ const float *mm_xrow(const mm_args &a, const mm_work &wk, int i)
{
    return a.x + wk.z * a.g.x_gstride + (int64_t)(a.g.xrow ? a.g.xrow[i] : i) * a.ldx;
}

static __device__ float *mm_yrow(const mm_args &a, const mm_work &wk, int i)
{
    return a.y + wk.z * a.g.y_gstride + (int64_t)(a.g.yrow ? a.g.yrow[i] : i) * a.ldy;
}

CU_DEV float mm_silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/* ---- one pack of 8 weights -------------------------------------------------------- */

/* Raw values of columns 8p..8p+7 of row r (exact floats), vector loads. */
template <int TYPE>
CU_DEV void load_pack(const cu_wmat &w, const uint8_t *data, int64_t r, int64_t p, float v[8])
{
    int64_t c = 8 * p;
    if (TYPE == CU_T_F32) {
        const float4 *q = (const float4 *)((const float *)data + r * w.cols + c);
        float4 a = __ldg(q), b = __ldg(q + 1);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else if (TYPE == CU_T_BF16 || TYPE == CU_T_F16) {
        uint4 q = __ldg((const uint4 *)((const uint16_t *)data + r * w.cols + c));
        uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            v[2 * i] = TYPE == CU_T_BF16 ? cu_bf16_f32(u[i] & 0xffffu) : cu_f16_f32(u[i] & 0xffffu);
            v[2 * i + 1] = TYPE == CU_T_BF16 ? cu_bf16_f32(u[i] >> 16) : cu_f16_f32(u[i] >> 16);
        }
    } else if (TYPE == CU_T_FP8 || TYPE == CU_T_INT8) {
        uint2 q = __ldg((const uint2 *)(data + r * w.cols + c));
        uint32_t u[2] = {q.x, q.y};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint32_t b = (u[i / 4] >> (8 * (i % 4))) & 0xffu;
            v[i] = TYPE == CU_T_FP8 ? cu_fp8_f32(b) : (float)(int8_t)b;
        }
    } else { /* INT4: 8 nibbles, element 2k low */
        uint32_t q = __ldg((const uint32_t *)(data + r * (w.cols / 2) + c / 2));
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = (float)((int)((q >> (4 * i)) & 15u) - 8);
    }
}

/* ---- the vector kernel (cols % 8 == 0, aligned) ------------------------------------ */

template <int TYPE, int ACT, int NT, bool GATED>
__global__ void __launch_bounds__(MM_THREADS) mm_vec(mm_args a)
{
    const int lane = threadIdx.x % DSR1_WARP, warp = threadIdx.x / DSR1_WARP;
    const int64_t r0 = ((int64_t)blockIdx.x * MM_WARPS + warp) * MM_R;
    const int64_t npk = a.w.cols / 8;
    if (r0 >= a.w.rows) return; /* whole warp: no barrier in this kernel */
    for (int ty = blockIdx.y; ty < a.g.groups * a.tblocks; ty += gridDim.y) {
        mm_work wk;
        if (!mm_locate(a, ty, &wk)) continue;
        const uint8_t *wd = (const uint8_t *)a.w.data + wk.m * a.w.mat_bytes;
        const void *ws = a.w.scale ? (const uint8_t *)a.w.scale + wk.m * a.w.scale_bytes : NULL;
        const uint8_t *ud = GATED ? (const uint8_t *)a.u.data + wk.m * a.u.mat_bytes : NULL;
        const void *us = GATED && a.u.scale ? (const uint8_t *)a.u.scale + wk.m * a.u.scale_bytes : NULL;
        for (int t = wk.t0; t < wk.t1; t += NT) {
            float acc[MM_R][NT], accu[MM_R][NT];
            const float *xr[NT];
#pragma unroll
            for (int k = 0; k < NT; k++) {
                xr[k] = mm_xrow(a, wk, t + k < wk.t1 ? t + k : t);
#pragma unroll
                for (int rr = 0; rr < MM_R; rr++) acc[rr][k] = accu[rr][k] = 0.0f;
            }
            uint32_t srow[MM_R];
#pragma unroll
            for (int rr = 0; rr < MM_R; rr++) srow[rr] = (uint32_t)((r0 + rr) / a.srdiv) * a.sncols;
            for (int64_t p = lane; p < npk; p += DSR1_WARP) {
                float xv[NT][8];
                const uint32_t scol = (uint32_t)(8 * p) / a.scdiv;
#pragma unroll
                for (int k = 0; k < NT; k++) {
                    float4 x0 = __ldg((const float4 *)(xr[k] + 8 * p));
                    float4 x1 = __ldg((const float4 *)(xr[k] + 8 * p) + 1);
                    xv[k][0] = x0.x; xv[k][1] = x0.y; xv[k][2] = x0.z; xv[k][3] = x0.w;
                    xv[k][4] = x1.x; xv[k][5] = x1.y; xv[k][6] = x1.z; xv[k][7] = x1.w;
                }
#pragma unroll
                for (int rr = 0; rr < MM_R; rr++) {
                    int64_t r = r0 + rr;
                    if (r >= a.w.rows) break;
                    float v[8], s = ws ? cu_scale_at(a.w, ws, srow[rr] + scol) : 1.0f;
                    load_pack<TYPE>(a.w, wd, r, p, v);
                    mode_weights<TYPE, ACT>(v, s);
#pragma unroll
                    for (int k = 0; k < NT; k++)
#pragma unroll
                        for (int i = 0; i < 8; i++)
                            acc[rr][k] = fmaf(v[i], mode_x<TYPE, ACT>(xv[k][i], s), acc[rr][k]);
                    if (GATED) {
                        float su = us ? cu_scale_at(a.u, us, srow[rr] + scol) : 1.0f;
                        load_pack<TYPE>(a.u, ud, r, p, v);
                        mode_weights<TYPE, ACT>(v, su);
#pragma unroll
                        for (int k = 0; k < NT; k++)
#pragma unroll
                            for (int i = 0; i < 8; i++)
                                accu[rr][k] = fmaf(v[i], mode_x<TYPE, ACT>(xv[k][i], su), accu[rr][k]);
                    }
                }
            }
#pragma unroll
            for (int rr = 0; rr < MM_R; rr++)
#pragma unroll
                for (int k = 0; k < NT; k++) {
                    float sg = cu_warp_sum(acc[rr][k]);
                    float su = GATED ? cu_warp_sum(accu[rr][k]) : 0.0f;
                    if (lane == 0 && r0 + rr < a.w.rows && t + k < wk.t1)
                        mm_yrow(a, wk, t + k)[r0 + rr] = GATED ? mm_silu_mul(sg, su) : sg;
                }
        }
    }
}

/* ---- the scalar kernel (any shape; same order, element loads) ---------------------- */

template <int ACT, bool GATED>
__global__ void __launch_bounds__(MM_THREADS) mm_scalar(mm_args a)
{
    const int lane = threadIdx.x % DSR1_WARP, warp = threadIdx.x / DSR1_WARP;
    const int64_t r = (int64_t)blockIdx.x * MM_WARPS + warp;
    if (r >= a.w.rows) return;
    const int64_t npk = (a.w.cols + 7) / 8;
    for (int ty = blockIdx.y; ty < a.g.groups * a.tblocks; ty += gridDim.y) {
        mm_work wk;
        if (!mm_locate(a, ty, &wk)) continue;
        const uint8_t *wd = (const uint8_t *)a.w.data + wk.m * a.w.mat_bytes;
        const void *ws = a.w.scale ? (const uint8_t *)a.w.scale + wk.m * a.w.scale_bytes : NULL;
        const uint8_t *ud = GATED ? (const uint8_t *)a.u.data + wk.m * a.u.mat_bytes : NULL;
        const void *us = GATED && a.u.scale ? (const uint8_t *)a.u.scale + wk.m * a.u.scale_bytes : NULL;
        for (int t = wk.t0; t < wk.t1; t++) {
            const float *xr = mm_xrow(a, wk, t);
            float acc = 0.0f, accu = 0.0f;
            for (int64_t p = lane; p < npk; p += DSR1_WARP)
                for (int64_t c = 8 * p; c < 8 * p + 8 && c < a.w.cols; c++) {
                    float wv, xv;
                    scalar_pair<ACT>(a.w, wd, ws, r, c, xr[c], &wv, &xv);
                    acc = fmaf(wv, xv, acc);
                    if (GATED) {
                        scalar_pair<ACT>(a.u, ud, us, r, c, xr[c], &wv, &xv);
                        accu = fmaf(wv, xv, accu);
                    }
                }
            float sg = cu_warp_sum(acc), su = GATED ? cu_warp_sum(accu) : 0.0f;
            if (lane == 0) mm_yrow(a, wk, t)[r] = GATED ? mm_silu_mul(sg, su) : sg;
        }
    }
}

/* ---- INT8 activations (W8A8) -------------------------------------------------------- */

/* Quantise source rows as matmul.c's prep_int8: block per (row, x group). */
__global__ void __launch_bounds__(256) mm_quant_int8(mm_args a)
{
    __shared__ float red[256 / DSR1_WARP];
    int row = blockIdx.x, zg = blockIdx.y;
    const float *x = a.x + zg * a.g.x_gstride + (int64_t)row * a.ldx;
    int8_t *q = (int8_t *)a.xq + ((int64_t)zg * a.x_rows + row) * a.ldxq;
    float m = 0.0f;
    for (int64_t c = threadIdx.x; c < a.w.cols; c += blockDim.x) m = fmaxf(m, fabsf(x[c]));
    m = cu_warp_max(m);
    if (threadIdx.x % DSR1_WARP == 0) red[threadIdx.x / DSR1_WARP] = m;
    __syncthreads();
    float amax = 0.0f;
    for (int i = 0; i < (int)blockDim.x / DSR1_WARP; i++) amax = fmaxf(amax, red[i]);
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int64_t c = threadIdx.x; c < a.w.cols; c += blockDim.x) {
        float v = rintf(__fmul_rn(x[c], inv));
        q[c] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
    }
    if (threadIdx.x == 0) ((float *)a.xs)[(int64_t)zg * a.x_rows + row] = amax / 127.0f;
}

__global__ void __launch_bounds__(MM_THREADS) mm_int8(mm_args a)
{
    const int lane = threadIdx.x % DSR1_WARP, warp = threadIdx.x / DSR1_WARP;
    const int64_t r = (int64_t)blockIdx.x * MM_WARPS + warp;
    if (r >= a.w.rows) return;
    const int64_t g = a.w.group ? a.w.group : a.w.cols;
    for (int ty = blockIdx.y; ty < a.g.groups * a.tblocks; ty += gridDim.y) {
        mm_work wk;
        if (!mm_locate(a, ty, &wk)) continue;
        const int8_t *wq = (const int8_t *)a.w.data + wk.m * a.w.mat_bytes + r * a.w.cols;
        const void *ws = (const uint8_t *)a.w.scale + wk.m * a.w.scale_bytes;
        int zg = a.g.x_gstride ? wk.z : 0;
        for (int t = wk.t0; t < wk.t1; t++) {
            int64_t src = (int64_t)zg * a.x_rows + (a.g.xrow ? a.g.xrow[t] : t);
            const int8_t *xq = a.xq + src * a.ldxq;
            float xs = a.xs[src], acc = 0.0f;
            for (int64_t c0 = 0; c0 < a.w.cols; c0 += g) {
                int dot = 0;
                for (int64_t c = c0 + lane; c < c0 + g; c += DSR1_WARP) dot += (int)wq[c] * (int)xq[c];
                dot = cu_warp_sum_i(dot); /* exact: order does not matter */
                if (a.w.group == 0)
                    acc = __fmul_rn(__fmul_rn((float)dot, xs), cu_wscale(a.w, ws, r, 0));
                else
                    acc = fmaf((float)dot, cu_wscale(a.w, ws, r, c0), acc);
            }
            if (lane == 0) mm_yrow(a, wk, t)[r] = a.w.group == 0 ? acc : __fmul_rn(acc, xs);
        }
    }
}

/* ---- launch ------------------------------------------------------------------------- */

int cu_mm_effective_act(int act, const cu_wmat *w)
{
    if (act == CU_ACT_INT8 && (w->type != CU_T_INT8 || w->cols > 65536)) return CU_ACT_BF16;
    return act;
}

size_t cu_mm_int8_scratch_bytes(int tokens, int64_t cols)
{
    size_t ld = (size_t)((cols + 63) & ~(int64_t)63);
    return (size_t)tokens * (ld + sizeof(float)) + 256;
}

typedef void (*mm_kernel)(mm_args);

template <int TYPE, int ACT>
static mm_kernel pick_vec(int nt, bool gated)
{
    if (gated) return nt == 1 ? mm_vec<TYPE, ACT, 1, true> : nt == 4 ? mm_vec<TYPE, ACT, 4, true>
                                                                      : mm_vec<TYPE, ACT, 8, true>;
    return nt == 1 ? mm_vec<TYPE, ACT, 1, false> : nt == 4 ? mm_vec<TYPE, ACT, 4, false>
                                                           : mm_vec<TYPE, ACT, 8, false>;
}

template <int ACT>
static mm_kernel pick_type(int type, int nt, bool gated)
{
    switch (type) {
    case CU_T_F32: return pick_vec<CU_T_F32, ACT>(nt, gated);
    case CU_T_F16: return pick_vec<CU_T_F16, ACT>(nt, gated);
    case CU_T_BF16: return pick_vec<CU_T_BF16, ACT>(nt, gated);
    case CU_T_FP8: return pick_vec<CU_T_FP8, ACT>(nt, gated);
    case CU_T_INT8: return pick_vec<CU_T_INT8, ACT>(nt, gated);
    default: return pick_vec<CU_T_INT4, ACT>(nt, gated);
    }
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* The vector kernel needs 8-column packs that never straddle a scale
 * group and 16-byte aligned rows of x and W. */
static int vec_ok(const cu_wmat *w, const cu_wmat *up, const float *x, int64_t ldx,
                  const cu_mm_rows *g)
{
    if (w->cols % 8 || ldx % 4 || g->x_gstride % 4 || !aligned16(x) || !aligned16(w->data)) return 0;
    if ((w->type == CU_T_FP8 || w->type == CU_T_INT8 || w->type == CU_T_INT4) && w->group % 8) return 0;
    if (w->mat_bytes % 16) return 0;
    if (up && (!aligned16(up->data) || up->mat_bytes % 16)) return 0;
    return 1;
}

int cu_matmul(dsr1_gpuStream s, const cu_wmat *w, const cu_wmat *up, const float *x, int64_t ldx,
              float *y, int64_t ldy, int n, int act, const cu_mm_rows *rows, void *xq_scratch,
              char *msg, size_t msgsz)
{
    cu_mm_rows one = {1, NULL, NULL, NULL, NULL, NULL, 0, 0, 0};
    const cu_mm_rows *g = rows ? rows : &one;
    if (n <= 0 || w->rows <= 0 || g->groups <= 0) return 0;
    if (up && (up->type != w->type || up->rows != w->rows || up->cols != w->cols ||
               up->group != w->group || up->scale_type != w->scale_type)) {
        snprintf(msg, msgsz, "cuda matmul: gate and up differ in type or shape");
        return -1;
    }
    act = cu_mm_effective_act(act, w);
    mm_args a;
    a.w = *w;
    a.u = up ? *up : *w;
    a.x = x;
    a.ldx = ldx;
    a.y = y;
    a.ldy = ldy;
    a.n = n;
    a.g = *g;
    a.tblocks = (n + MM_TT - 1) / MM_TT;
    a.srdiv = 1;
    a.scdiv = (uint32_t)w->cols;
    a.sncols = 1;
    if (w->type == CU_T_FP8) {
        a.srdiv = a.scdiv = (uint32_t)w->group;
        a.sncols = (uint32_t)((w->cols + w->group - 1) / w->group);
    } else if ((w->type == CU_T_INT8 || w->type == CU_T_INT4) && w->group > 0) {
        a.scdiv = (uint32_t)w->group;
        a.sncols = (uint32_t)(w->cols / w->group);
    }
    a.xq = NULL;
    a.xs = NULL;
    a.ldxq = (w->cols + 63) & ~(int64_t)63;
    a.x_rows = g->x_rows > 0 ? g->x_rows : n; /* INT8: source rows (per group with x_gstride) */
    long long ny = (long long)g->groups * a.tblocks;
    dim3 grid(1, (unsigned)(ny < 65535 ? ny : 65535));
    if (act == CU_ACT_INT8) {
        if (up) {
            /* gate and up as two passes, then the product (same bits) */
            snprintf(msg, msgsz, "cuda matmul: fused gate/up is not offered in INT8 mode");
            return -1;
        }
        int xg = g->x_gstride ? g->groups : 1;
        a.xq = (const int8_t *)xq_scratch;
        a.xs = (const float *)((char *)xq_scratch + (size_t)xg * (size_t)a.x_rows * (size_t)a.ldxq);
        mm_quant_int8<<<dim3((unsigned)a.x_rows, (unsigned)xg), 256, 0, s>>>(a);
        grid.x = (unsigned)((w->rows + MM_WARPS - 1) / MM_WARPS);
        mm_int8<<<grid, MM_THREADS, 0, s>>>(a);
    } else if (vec_ok(w, up, x, ldx, g)) {
        int nt = n == 1 ? 1 : n <= 4 ? 4 : 8;
        mm_kernel k = act == CU_ACT_BF16 ? pick_type<CU_ACT_BF16>(w->type, nt, up != NULL)
                                         : pick_type<CU_ACT_F32>(w->type, nt, up != NULL);
        grid.x = (unsigned)((w->rows + MM_WARPS * MM_R - 1) / (MM_WARPS * MM_R));
        k<<<grid, MM_THREADS, 0, s>>>(a);
    } else {
        mm_kernel k = act == CU_ACT_BF16 ? (up ? mm_scalar<CU_ACT_BF16, true> : mm_scalar<CU_ACT_BF16, false>)
                                         : (up ? mm_scalar<CU_ACT_F32, true> : mm_scalar<CU_ACT_F32, false>);
        grid.x = (unsigned)((w->rows + MM_WARPS - 1) / MM_WARPS);
        k<<<grid, MM_THREADS, 0, s>>>(a);
    }
    dsr1_gpuError e = dsr1_gpuGetLastError();
    if (e != dsr1_gpuSuccess) {
        snprintf(msg, msgsz, "cuda matmul: launch failed: %s", dsr1_gpuGetErrorString(e));
        return -1;
    }
    return 0;
}
