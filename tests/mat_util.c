/*
 * mat_util.c - random weight matrices for the tests (see mat_util.h).
 */
#include "mat_util.h"

#include <stdlib.h>

#include "core/numeric.h"


uint32_t dsr1_test_rnd(rng *g)
{
    g->s = g->s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g->s >> 33);
}

float dsr1_test_frand(rng *g, float lo, float hi)
{
    return lo + (hi - lo) * (float)(dsr1_test_rnd(g) & 0xffffff) / (float)0x1000000;
}

tmat dsr1_test_mat(dsr1_type type, int64_t rows, int64_t cols, int variant, uint64_t seed)
{
    rng g = {seed};
    tmat m = {.w = {.type = type, .rows = rows, .cols = cols, .scale_type = DSR1_T_F32}};
    size_t n = (size_t)(rows * cols), nscale = 0;
    switch (type) {
    case DSR1_T_F32: {
        float *d = malloc(n * 4);
        for (size_t i = 0; i < n; i++) d[i] = dsr1_test_frand(&g, -1, 1);
        m.data = d;
        m.what = "f32";
        break;
    }
    case DSR1_T_F16:
    case DSR1_T_BF16: {
        uint16_t *d = malloc(n * 2);
        for (size_t i = 0; i < n; i++) {
            float f = dsr1_test_frand(&g, -1, 1);
            d[i] = type == DSR1_T_F16 ? dsr1_f32_to_f16(f) : dsr1_f32_to_bf16(f);
        }
        m.data = d;
        m.what = type == DSR1_T_F16 ? "f16" : "bf16";
        break;
    }
    case DSR1_T_FP8_E4M3: {
        uint8_t *d = malloc(n);
        for (size_t i = 0; i < n; i++) {
            uint8_t b = (uint8_t)dsr1_test_rnd(&g);
            d[i] = (b & 0x7f) == 0x7f ? 0x7e : b; /* no NaN in weights */
        }
        m.data = d;
        m.w.group = 128;
        nscale = (size_t)(((rows + 127) / 128) * ((cols + 127) / 128));
        m.what = "fp8";
        break;
    }
    case DSR1_T_INT8: {
        int8_t *d = malloc(n);
        for (size_t i = 0; i < n; i++) d[i] = (int8_t)((int)(dsr1_test_rnd(&g) % 255) - 127);
        m.data = d;
        m.w.group = variant == 2 ? 128 : variant ? 64 : 0;
        nscale = m.w.group ? n / (size_t)m.w.group : (size_t)rows;
        m.what = variant == 2 ? "int8/g128" : variant ? "int8/g64" : "int8";
        break;
    }
    case DSR1_T_INT4: {
        uint8_t *d = malloc(n / 2);
        for (size_t i = 0; i < n / 2; i++) d[i] = (uint8_t)dsr1_test_rnd(&g);
        m.data = d;
        m.w.group = variant ? 128 : 32;
        m.w.scale_type = variant == 1 ? DSR1_T_BF16 : DSR1_T_F16;
        nscale = n / (size_t)m.w.group;
        m.what = variant == 2 ? "int4/g128" : variant ? "int4/g128bf16" : "int4/g32f16";
        break;
    }
    default:
        break;
    }
    if (nscale) {
        if (m.w.scale_type == DSR1_T_F32) {
            float *s = malloc(nscale * 4);
            for (size_t i = 0; i < nscale; i++) s[i] = dsr1_test_frand(&g, 0.001f, 0.02f);
            m.scale = s;
        } else {
            uint16_t *s = malloc(nscale * 2);
            for (size_t i = 0; i < nscale; i++) {
                float f = dsr1_test_frand(&g, 0.001f, 0.02f);
                s[i] = m.w.scale_type == DSR1_T_F16 ? dsr1_f32_to_f16(f) : dsr1_f32_to_bf16(f);
            }
            m.scale = s;
        }
    }
    m.w.data = m.data;
    m.w.scale = m.scale;
    return m;
}

void dsr1_test_mat_free(tmat *m)
{
    free(m->data);
    free(m->scale);
}
