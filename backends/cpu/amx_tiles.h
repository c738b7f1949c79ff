/*
 * amx_tiles.h - the AMX tile instructions as inline asm, shared by the
 * tile kernels (matmul_amx_avx512.c, naive_amx_avx512.c). Why asm and not
 * GCC's intrinsics, and why the full configuration is read-only data:
 * matmul_amx_avx512.c's header. Only the assembler sees these
 * instructions, and they run only behind dsr1_pool_amx's check.
 */
#ifndef DSR1_AMX_TILES_H
#define DSR1_AMX_TILES_H

#include <stdint.h>

/* ldtilecfg's 64 bytes: palette 1, tiles 0-7 of 16 rows x 64 bytes. */
typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

static const amx_cfg amx_16x64 = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

#define T_CFG(p) __asm__ volatile("ldtilecfg %0" ::"m"(*(p)))

/* The few-token GEMVs' tiles (matmul_fp8amx_avx512.c,
 * matmul_bf16amx_avx512.c): C 0 (m rows x n tokens), A 1 and 2 (m weight
 * rows x 32 bf16), B 3 and 4 (16 column pairs x n tokens); past 16
 * tokens (the FP8 kernel's) C 0 and B 3, 4 take the first 16 and C 5, B
 * 6, 7 the rest. Built on the stack and given to ldtilecfg as the asm's
 * memory operand, which orders the stores before it
 * (matmul_amx_avx512.c says why not otherwise). */
static inline void amx_cfg_gemv(int n, int m)
{
    _Alignas(64) amx_cfg c = {.palette = 1};
    const int n0 = n < 16 ? n : 16, n1 = n - n0;
    const uint16_t colsb[8] = {(uint16_t)(4 * n0), 64, 64, (uint16_t)(4 * n0), (uint16_t)(4 * n0),
                               (uint16_t)(4 * n1), (uint16_t)(4 * n1), (uint16_t)(4 * n1)};
    const uint8_t rows[8] = {(uint8_t)m, (uint8_t)m, (uint8_t)m, 16, 16, (uint8_t)m, 16, 16};
    for (int i = 0; i < (n1 ? 8 : 5); i++) {
        c.rows[i] = rows[i];
        c.colsb[i] = colsb[i];
    }
    __asm__ volatile("ldtilecfg %0" ::"m"(c) : "memory");
}
#define T_RELEASE() __asm__ volatile("tilerelease" ::: "memory")
#define T_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define T_LOAD(t, base, stride) \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"((long)(stride)) : "memory")
#define T_STORE(t, base, stride) \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"((long)(stride)) : "memory")
/* tmm_c += tmm_a (signed bytes) . tmm_b (unsigned bytes); AT&T order */
#define T_DP(c, a, b) __asm__ volatile("tdpbsud %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
/* tmm_c (float) += tmm_a (bf16 pairs) . tmm_b (bf16 pairs) */
#define T_DPBF(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#endif
