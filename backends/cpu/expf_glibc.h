/*
 * expf_glibc.h - the constants of glibc's expf (2.28 and later) that the
 * vector code giving libm's bits follows step for step: the SwiGLU steps
 * (silu_avx512.c, silu_avx2.c; silu_avx512.c says why) and the
 * deterministic softmax row (softmax_avx512.c), through expf_avx512.h.
 * The bits are glibc's: against another libm (musl) the scalar loops give
 * that libm's and the tests comparing the two would say so.
 */
#ifndef DSR1_EXPF_GLIBC_H
#define DSR1_EXPF_GLIBC_H

#include <stdint.h>

/* The table: bits of 2^(i/32) minus i << 47 (the exponent part k adds back). */
static const uint64_t dsr1_exp_tab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};

#define DSR1_EXP_INVLN2N 0x40471547652b82feULL /* 32 / ln 2 */
#define DSR1_EXP_SHIFT 0x4338000000000000ULL   /* 1.5 * 2^52: rounds k to an integer */
#define DSR1_EXP_C0 0x3ebc6af84b912394ULL      /* the polynomial, highest power first */
#define DSR1_EXP_C1 0x3f2ebfce50fac4f3ULL
#define DSR1_EXP_C2 0x3f962e42ff0c52d6ULL

/* glibc leaves its main path where top12 of |x| (bits 30..20) exceeds
 * this: |x| >= 88, infinities and NaN. */
#define DSR1_EXP_TOP_MAX 0x42a

#endif
