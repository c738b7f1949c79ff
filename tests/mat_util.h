/*
 * mat_util.h - random weight matrices in the layouts convert writes, for the
 * kernel and oneDNN tests (one generator, so both test the same values).
 */
#ifndef DSR1_TEST_MAT_UTIL_H
#define DSR1_TEST_MAT_UTIL_H

#include <stdint.h>

#include "backends/backend.h"

/* The tests' random numbers: a 64-bit LCG, uniform in [lo, hi). */
typedef struct rng { uint64_t s; } rng;
uint32_t dsr1_test_rnd(rng *g);
float dsr1_test_frand(rng *g, float lo, float hi);

typedef struct tmat {
    dsr1_wmat w;
    void *data, *scale;
    const char *what;
} tmat;

/* A random rows x cols matrix of `type` (F32, F16, BF16, FP8 with 128x128
 * block scales, INT8, INT4) from seed; variant picks the scale layout:
 * int8 0 per row, 1 group 64, 2 group 128; int4 0 f16 group 32, 1 bf16
 * group 128, 2 f16 group 128. */
tmat dsr1_test_mat(dsr1_type type, int64_t rows, int64_t cols, int variant, uint64_t seed);
void dsr1_test_mat_free(tmat *m);

#endif
