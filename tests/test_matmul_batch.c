/*
 * test_matmul_batch.c - dsr1_matmul_batch (kernels.h): many independent
 * matmuls in one pool run give each the bits it gets alone.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels.h"
#include "mat_util.h"
#include "test.h"

enum { ITEMS = 40, COLS = 7168 };

/* 40 items: 25 FP8 matrices of R1's width at 8 tokens (each of a
 * call's 8 tasks holds x' of every column: 0.9 MB of scratch a call, so
 * the 16 MB a run may take and the 32 calls a run holds both cut the
 * list), INT8 at 1 token, gate/up pairs (silu(x G^T) * (x U^T)) at 3, a
 * BF16 one at 2.
 * Each y against dsr1_matmul (or dsr1_ffn_gate_up) alone, bit for bit,
 * in both compute modes' activations; outputs sized exactly, so a write
 * past an item's rows lands in the next item's canary. */
static void batch_vs_alone(dsr1_test_ctx *t, dsr1_act act)
{
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    tmat m[ITEMS], up[ITEMS];
    dsr1_mm_item it[ITEMS];
    float *x = malloc((size_t)8 * COLS * sizeof *x), *want[ITEMS], *got[ITEMS];
    rng g = {77};
    for (int i = 0; i < 8 * COLS; i++) x[i] = dsr1_test_frand(&g, -2, 2);
    for (int i = 0; i < ITEMS; i++) {
        int kind = i % 8; /* 0-4: FP8 8 tokens; 5: INT8 1; 6: INT8 3 (a pair); 7: BF16 2 */
        dsr1_type ty = kind < 5 ? DSR1_T_FP8_E4M3 : kind == 7 ? DSR1_T_BF16 : DSR1_T_INT8;
        int64_t rows = kind < 5 ? 128 : 16 + 16 * (i % 3), cols = kind == 7 ? 1000 : COLS;
        int n = kind < 5 ? 8 : kind == 5 ? 1 : kind == 6 ? 3 : 2;
        m[i] = dsr1_test_mat(ty, rows, cols, 0, 100 + (uint64_t)i);
        int pair = kind == 6;
        if (pair) up[i] = dsr1_test_mat(ty, rows, cols, 0, 500 + (uint64_t)i);
        size_t ny = (size_t)n * (size_t)rows + 1;
        want[i] = malloc(ny * sizeof(float));
        got[i] = malloc(ny * sizeof(float));
        memset(got[i], 0xff, ny * sizeof(float)); /* NaN canary after the rows too */
        if (pair)
            dsr1_ffn_gate_up(pool, &m[i].w, &up[i].w, x, COLS, want[i], rows, n, act);
        else
            dsr1_matmul(pool, &m[i].w, x, COLS, want[i], rows, n, act);
        it[i] = (dsr1_mm_item){&m[i].w, pair ? &up[i].w : NULL, x, COLS, got[i], rows, n};
    }
    dsr1_matmul_batch(pool, it, ITEMS, act);
    int bad = 0;
    for (int i = 0; i < ITEMS; i++) {
        size_t ny = (size_t)it[i].n * (size_t)it[i].w->rows;
        bad += memcmp(want[i], got[i], ny * sizeof(float)) != 0;
        uint32_t canary;
        memcpy(&canary, got[i] + ny, 4);
        bad += canary != 0xffffffffu;
    }
    CHECKF(bad == 0, "act %d: %d of %d items differ from their matmul alone (or wrote past it)",
           (int)act, bad, ITEMS);
    for (int i = 0; i < ITEMS; i++) {
        dsr1_test_mat_free(&m[i]);
        if (i % 8 == 6) dsr1_test_mat_free(&up[i]);
        free(want[i]);
        free(got[i]);
    }
    free(x);
    dsr1_pool_free(pool);
}

DSR1_TEST(matmul_batch_matches_alone_fast) { batch_vs_alone(t, DSR1_ACT_INT8); }
DSR1_TEST(matmul_batch_matches_alone_bf16) { batch_vs_alone(t, DSR1_ACT_BF16); }
