/*
 * cuda_common.cuh - device helpers shared by the kernel files of
 * backends/cuda: number conversions with the CPU reference's exact rules
 * (core/numeric.h, backends/cpu/matmul_impl.h), warp reductions with one
 * fixed tree, and the weight decoders.
 *
 * Conversions are written with integer bit operations, not the toolkit's
 * intrinsics, so they give the same bits as the CPU's definitions under
 * nvcc and hipcc alike (the intrinsics differ in denormal and NaN
 * handling between vendors). Everything but the warp reductions is
 * __host__ __device__: tests/cuda_host_check.cu runs these very functions
 * on the CPU against core/numeric.h and the CPU matmul's rounding points,
 * which checks them without a GPU.
 */
#ifndef DSR1_CUDA_COMMON_CUH
#define DSR1_CUDA_COMMON_CUH

#include <stdint.h>

#include "cuda_compat.h"
#include "cuda_kernels.h"

#include <math.h>
#include <string.h>

#define CU_DEV static __device__ __forceinline__
#define CU_HD static __host__ __device__ __forceinline__

/* Bit casts and the roundings the CPU does separately (a product, then a
 * sum): intrinsics on the device (no contraction into an FMA), plain
 * operations on the host (the host check builds with -ffp-contract=off). */
CU_HD float cu_as_float(uint32_t u)
{
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

CU_HD uint32_t cu_as_uint(float f)
{
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

CU_HD float cu_mul(float a, float b)
{
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}


/* ---- conversions ------------------------------------------------------------- */

CU_HD float cu_bf16_f32(uint32_t h) { return cu_as_float(h << 16); }

/* float32 -> bf16 as the CPU matmul's dsr1_mm_to_bf16: denormals become
 * signed zero, NaN stays quiet NaN, else round to nearest even. */
CU_HD uint32_t cu_f32_bf16_ftz(float f)
{
    uint32_t u = cu_as_uint(f);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
}

/* float32 -> bf16 as core/numeric.h dsr1_f32_to_bf16 (denormals kept). */
CU_HD uint32_t cu_f32_bf16(float f)
{
    uint32_t u = cu_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
}

/* The bf16 value of f as a float (BF16 mode's rounding point). */
CU_HD float cu_round_bf16(float f) { return cu_bf16_f32(cu_f32_bf16_ftz(f)); }

CU_HD float cu_f16_f32(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24 is exact in float32 */
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (exp == 31) return cu_as_float(sign | 0x7f800000u | (man << 13));
    return cu_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

/* e4m3 byte -> float, exact. OCP e4m3fn (bias 7, 0x7f/0xff NaN), or with
 * FNUZ e4m3fnuz (bias 8, 0x80 NaN), the form the HIP upload stores. */
template <bool FNUZ>
CU_HD float cu_fp8_f32_as(uint32_t b)
{
    uint32_t sign = (b & 0x80u) << 24, exp = (b >> 3) & 0xfu, man = b & 7u;
    if (FNUZ) {
        if (b == 0x80u) return cu_as_float(0x7fc00000u);
        if (exp == 0) {
            float f = (float)man * 0.0009765625f; /* man * 2^-10 */
            return sign ? -f : f;
        }
        return cu_as_float(sign | ((exp + 119u) << 23) | (man << 20));
    }
    if (exp == 0xfu && man == 7u) return cu_as_float(sign | 0x7fc00000u);
    if (exp == 0) {
        float f = (float)man * 0.001953125f; /* man * 2^-9 */
        return sign ? -f : f;
    }
    return cu_as_float(sign | ((exp + 120u) << 23) | (man << 20));
}

CU_HD float cu_fp8_f32(uint32_t b) { return cu_fp8_f32_as<DSR1_FP8_FNUZ>(b); }

/* float -> e4m3 byte with core/numeric.h's rule (RNE, saturate at 448),
 * in the stored form: with FNUZ the same bits read as fnuz, whose value is
 * half, so every scale stored next to FP8 bytes there is doubled
 * (CU_FP8_SCALE_MUL); -0 (0x80) is fnuz's NaN, so it becomes +0. */
template <bool FNUZ>
CU_HD uint32_t cu_f32_fp8_as(float f)
{
    if (f != f) return FNUZ ? 0x80u : 0x7fu;
    uint32_t sign = f < 0 ? 0x80u : 0u;
    float a = fabsf(f);
    uint32_t code;
    if (a >= 448.0f) {
        code = 0x7eu;
    } else if (a < 0.0009765625f) {
        code = 0; /* below half the smallest subnormal */
    } else {
        int e;
        frexpf(a, &e);
        int ue = e - 1 < -6 ? -6 : e - 1;
        int mi = (int)rintf(ldexpf(a, 3 - ue));
        if (mi >= 16) {
            ue++;
            mi >>= 1;
        }
        if (ue > 8) code = 0x7eu;
        else if (mi < 8) code = (uint32_t)mi;
        else code = (uint32_t)(((ue + 7) << 3) | (mi & 7));
    }
    if (FNUZ && code == 0) return 0;
    return sign | code;
}

CU_HD uint32_t cu_f32_fp8(float f) { return cu_f32_fp8_as<DSR1_FP8_FNUZ>(f); }

/* ---- reductions (one fixed tree: xor butterfly, half-warp first) -------------- */

CU_DEV float cu_warp_sum(float v)
{
#pragma unroll
    for (int m = DSR1_WARP / 2; m >= 1; m /= 2) v += DSR1_SHFL_XOR(v, m);
    return v;
}

CU_DEV double cu_warp_sum_d(double v)
{
#pragma unroll
    for (int m = DSR1_WARP / 2; m >= 1; m /= 2) v += DSR1_SHFL_XOR(v, m);
    return v;
}

CU_DEV int cu_warp_sum_i(int v)
{
#pragma unroll
    for (int m = DSR1_WARP / 2; m >= 1; m /= 2) v += DSR1_SHFL_XOR(v, m);
    return v;
}

CU_DEV float cu_warp_max(float v)
{
#pragma unroll
    for (int m = DSR1_WARP / 2; m >= 1; m /= 2) v = fmaxf(v, DSR1_SHFL_XOR(v, m));
    return v;
}

/* ---- weights ------------------------------------------------------------------- */

CU_HD float cu_scale_at(const cu_wmat &w, const void *scale, int64_t i)
{
    if (w.scale_type == CU_T_F16) return cu_f16_f32(((const uint16_t *)scale)[i]);
    if (w.scale_type == CU_T_BF16) return cu_bf16_f32(((const uint16_t *)scale)[i]);
    return ((const float *)scale)[i];
}

/* Scale of weight (r, c) (matmul_ref.c dsr1_wmat_scale); 1 if unscaled. */
CU_HD float cu_wscale(const cu_wmat &w, const void *scale, int64_t r, int64_t c)
{
    switch (w.type) {
    case CU_T_FP8: {
        int64_t b = w.group, ncb = (w.cols + b - 1) / b;
        return cu_scale_at(w, scale, (r / b) * ncb + c / b);
    }
    case CU_T_INT8:
        if (w.group == 0) return cu_scale_at(w, scale, r);
        return cu_scale_at(w, scale, r * (w.cols / w.group) + c / w.group);
    case CU_T_INT4:
        return cu_scale_at(w, scale, r * (w.cols / w.group) + c / w.group);
    default:
        return 1.0f;
    }
}

/* The raw value of weight (r, c) before its scale (exact in float32). */
CU_HD float cu_wraw(const cu_wmat &w, const void *data, int64_t r, int64_t c)
{
    const uint8_t *b = (const uint8_t *)data;
    switch (w.type) {
    case CU_T_F32: return ((const float *)data)[r * w.cols + c];
    case CU_T_F16: return cu_f16_f32(((const uint16_t *)data)[r * w.cols + c]);
    case CU_T_BF16: return cu_bf16_f32(((const uint16_t *)data)[r * w.cols + c]);
    case CU_T_FP8: return cu_fp8_f32(b[r * w.cols + c]);
    case CU_T_INT8: return (float)(int8_t)b[r * w.cols + c];
    default: {
        uint32_t q = b[r * (w.cols / 2) + c / 2];
        return (float)((int)((c & 1) ? q >> 4 : q & 15u) - 8);
    }
    }
}

/* The dequantised float32 weight, one rounding of raw * scale: exactly
 * matmul_ref.c's dsr1_wmat_dequant_span value. */
CU_HD float cu_wdeq(const cu_wmat &w, const void *data, const void *scale, int64_t r, int64_t c)
{
    float v = cu_wraw(w, data, r, c);
    if (w.type == CU_T_FP8 || w.type == CU_T_INT8 || w.type == CU_T_INT4)
        v = cu_mul(v, cu_wscale(w, scale, r, c));
    return v;
}

/* ---- the activation modes' rounding points (cuda_matmul.cu) ------------------ */

/* The 8 weights and the 8 x values of each token as the mode multiplies
 * them: turns raw weights into w (F32), w' (BF16); x into x' (BF16). */
template <int TYPE, int ACT>
CU_HD void mode_weights(float v[8], float s)
{
    const bool scaled = TYPE == CU_T_FP8 || TYPE == CU_T_INT8 || TYPE == CU_T_INT4;
    for (int i = 0; i < 8; i++) { /* constant trip count: unrolled without a pragma */
        if (ACT == CU_ACT_BF16 && TYPE == CU_T_FP8) continue; /* exact e4m3 */
        float d = scaled ? cu_mul(v[i], s) : v[i];
        v[i] = ACT == CU_ACT_BF16 ? cu_round_bf16(d) : d;
    }
}

template <int TYPE, int ACT>
CU_HD float mode_x(float x, float s)
{
    if (ACT != CU_ACT_BF16) return x;
    if (TYPE == CU_T_FP8) return cu_round_bf16(cu_mul(x, s));
    return cu_round_bf16(x);
}

/* Weight and x of column c as mode ACT multiplies them (mode_weights and
 * mode_x of one element): the same values as the vector kernel. */
template <int ACT>
CU_HD void scalar_pair(const cu_wmat &w, const uint8_t *d, const void *s, int64_t r, int64_t c,
                        float x, float *wv, float *xv)
{
    float v = cu_wraw(w, d, r, c), sc = cu_wscale(w, s, r, c);
    const bool scaled = w.type == CU_T_FP8 || w.type == CU_T_INT8 || w.type == CU_T_INT4;
    if (ACT == CU_ACT_BF16 && w.type == CU_T_FP8) {
        *wv = v;
        *xv = cu_round_bf16(cu_mul(x, sc));
        return;
    }
    float dq = scaled ? cu_mul(v, sc) : v;
    *wv = ACT == CU_ACT_BF16 ? cu_round_bf16(dq) : dq;
    *xv = ACT == CU_ACT_BF16 ? cu_round_bf16(x) : x;
}


#endif
