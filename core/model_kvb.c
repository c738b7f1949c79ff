/*
 * model_kvb.c - the per-head parts of kv_b_proj that absorbed MLA multiplies
 * by (model.h): for head h, kv_b_proj's rows [h (nope + v), +nope) are the
 * key part and the next v rows the value part, all kv_lora_rank wide.
 *
 *   wv[h]   = the value rows [v, kv_lora] as they are: a view into the
 *             mapped file in the file's own type whenever the type's scales
 *             split there (always, except FP8 rows not on a block boundary);
 *   wk_t[h] = the key rows transposed, [kv_lora, nope]: FP8 bytes and block
 *             scales transposed when the 128x128 blocks line up with the
 *             head (R1: nope = v = 128); INT8 and INT4 rows in the fast
 *             path requantised to INT8, one scale per transposed row (see
 *             requant_key); else dequantised into float32 (exact path) or
 *             bf16 (fast path), as is every part that cannot be a view.
 *
 * Views and transposed FP8 keep the checkpoint's bytes: a decoded token
 * reads half of what bf16 copies cost (R1: 1 GB less per token over 61
 * layers) and in the float32 path the kernels dequantise them to the same
 * values the float32 copies held, so results there do not change.
 * The copies are made over load threads (core/par.h; R1: 61 layers x 16.8M
 * values). Every buffer is owned by the model (dsr1_model_own). Both parts
 * are described as stacks of n_heads matrices with a fixed stride (views
 * step through kv_b_proj by whole heads), which the caller loads into the
 * backend like any other weight.
 */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numeric.h"
#include "par.h"

typedef struct kvb_job {
    const dsr1_wmat *kvb;
    int H, nope, vd, r;
    int copy_k, copy_v;      /* parts dequantised into k_buf / v_buf */
    size_t es;               /* 4 (float32) or 2 (bf16) */
    unsigned char *k_buf;    /* [H][r][nope] copies, or NULL */
    int8_t *kq;              /* [H][r][nope] INT8 key rows (fast path), or NULL */
    float *kq_scale;         /* [H][r] their scales */
    unsigned char *v_buf;    /* [H][vd][r] copies, or NULL */
    uint8_t *k8;             /* [H][r][nope] FP8 bytes transposed, or NULL */
    float *k8_scale;         /* [H][r / g][nope / g] */
    float *rows;             /* [ntasks][r] scratch; with kq [ntasks][r + r * nope] */
} kvb_job;

static void put(unsigned char *base, size_t at, size_t es, float v)
{
    if (es == 4) ((float *)base)[at] = v;
    else ((uint16_t *)base)[at] = dsr1_f32_to_bf16(v);
}

/* FP8 key rows of head h transposed: bytes and the block-scale grid. */
static void transpose_fp8(const kvb_job *j, int h)
{
    const dsr1_wmat *w = j->kvb;
    int g = w->group, ncb = (j->r + g - 1) / g;
    int64_t r0 = (int64_t)h * (j->nope + j->vd);
    const uint8_t *src = (const uint8_t *)w->data + r0 * w->cols;
    uint8_t *dst = j->k8 + (size_t)h * (size_t)j->r * (size_t)j->nope;
    for (int d = 0; d < j->nope; d++)
        for (int i = 0; i < j->r; i++) dst[(size_t)i * (size_t)j->nope + (size_t)d] = src[(size_t)d * (size_t)w->cols + (size_t)i];
    float *s = j->k8_scale + (size_t)h * (size_t)(j->r / g) * (size_t)(j->nope / g);
    for (int bi = 0; bi < j->r / g; bi++)
        for (int bd = 0; bd < j->nope / g; bd++)
            s[bi * (j->nope / g) + bd] = ((const float *)w->scale)[((r0 / g) + bd) * ncb + bi];
}

/* Head h's key part as INT8, one scale per row of wk_t (a kv_lora index i,
 * nope values): the dequantised values of the file (tk, [r][nope]) through
 * convert's INT8 rule (amax / 127, round half away from zero). A decoded
 * token reads 1 byte per value instead of bf16's 2 (R1: 8.4 MB less per
 * layer) and the absorb runs in the W8A8 GEMV. The second rounding is of
 * the order of the file's own INT8 rounding (each transposed row mixes
 * scales of 128 file rows), the fast path's kind of error (it quantises
 * every activation to int8 the same way). */
static void requant_key(const kvb_job *j, int h, const float *tk)
{
    size_t nope = (size_t)j->nope;
    for (size_t i = 0; i < (size_t)j->r; i++) {
        const float *v = tk + i * nope;
        int8_t *q = j->kq + ((size_t)h * (size_t)j->r + i) * nope;
        float a = 0;
        for (size_t d = 0; d < nope; d++) a = fmaxf(a, fabsf(v[d]));
        float s = a / 127.0f;
        j->kq_scale[(size_t)h * (size_t)j->r + i] = s;
        for (size_t d = 0; d < nope; d++) {
            float x = s > 0 ? roundf(v[d] / s) : 0.0f;
            q[d] = (int8_t)(x > 127.0f ? 127 : x < -127.0f ? -127 : x);
        }
    }
}

static void kvb_head(const kvb_job *j, int h, float *row)
{
    size_t r = (size_t)j->r, nope = (size_t)j->nope, es = j->es;
    float *tk = row + r; /* with kq: [r][nope] dequantised key part, transposed */
    if (j->k8) transpose_fp8(j, h);
    for (int d = 0; d < j->nope + j->vd; d++) {
        int key = d < j->nope;
        if (key ? !j->copy_k && !j->kq : !j->copy_v) continue;
        dsr1_wmat_dequant_row(j->kvb, (int64_t)h * (j->nope + j->vd) + d, row);
        if (key && j->kq) {
            for (size_t i = 0; i < r; i++) tk[i * nope + (size_t)d] = row[i];
        } else if (key) {
            unsigned char *kb = j->k_buf + (size_t)h * r * nope * es;
            for (size_t i = 0; i < r; i++) put(kb, i * nope + (size_t)d, es, row[i]);
        } else {
            unsigned char *vb = j->v_buf + ((size_t)h * (size_t)j->vd + (size_t)(d - j->nope)) * r * es;
            for (size_t i = 0; i < r; i++) put(vb, i, es, row[i]);
        }
    }
    if (j->kq) requant_key(j, h, tk);
}

static void kvb_task(void *ctx, int k, int nt)
{
    const kvb_job *j = ctx;
    float *row = j->rows + (size_t)k * (size_t)j->r * (j->kq ? 1 + (size_t)j->nope : 1);
    for (int h = (int)((long long)j->H * k / nt); h < (int)((long long)j->H * (k + 1) / nt); h++)
        kvb_head(j, h, row);
}

/* Allocate n bytes owned by the model. */
static void *owned(dsr1_model *m, size_t n, dsr1_error *err)
{
    void *p = malloc(n ? n : 1);
    return dsr1_model_own(m, p, err) ? NULL : p;
}

/* Decide views / FP8 transposes / copies and allocate what they need. */
static int plan(dsr1_model *m, kvb_job *j, dsr1_error *err)
{
    const dsr1_wmat *w = j->kvb;
    dsr1_wmat probe;
    int g = w->group;
    j->es = m->compute == DSR1_COMPUTE_F32 ? 4 : 2;
    j->copy_v = !dsr1_wmat_rows(w, j->nope, j->vd, &probe) ||
                (w->type == DSR1_T_FP8_E4M3 && (j->nope + j->vd) % g);
    int fp8_k = w->type == DSR1_T_FP8_E4M3 && w->scale_type == DSR1_T_F32 && g > 0 &&
                j->nope % g == 0 && (j->nope + j->vd) % g == 0 && j->r % g == 0;
    int int_k = !fp8_k && m->compute != DSR1_COMPUTE_F32 &&
                (w->type == DSR1_T_INT8 || w->type == DSR1_T_INT4);
    j->copy_k = !fp8_k && !int_k;
    size_t H = (size_t)j->H, r = (size_t)j->r;
    if (int_k && (!(j->kq = owned(m, H * r * (size_t)j->nope, err)) ||
                  !(j->kq_scale = owned(m, H * r * sizeof(float), err))))
        return err->code;
    if (j->copy_k && !(j->k_buf = owned(m, H * r * (size_t)j->nope * j->es, err))) return err->code;
    if (j->copy_v && !(j->v_buf = owned(m, H * r * (size_t)j->vd * j->es, err))) return err->code;
    if (fp8_k) {
        if (!(j->k8 = owned(m, H * r * (size_t)j->nope, err))) return err->code;
        if (!(j->k8_scale = owned(m, H * (r / (size_t)g) * ((size_t)j->nope / (size_t)g) * 4, err)))
            return err->code;
    }
    return 0;
}

/* The descriptors of head h (after the copies are made). */
static void describe_head(const kvb_job *j, int h, dsr1_wmat *wk, dsr1_wmat *wv)
{
    dsr1_type ty = j->es == 4 ? DSR1_T_F32 : DSR1_T_BF16;
    size_t r = (size_t)j->r, nope = (size_t)j->nope, g = (size_t)j->kvb->group;
    if (j->kq)
        *wk = (dsr1_wmat){.type = DSR1_T_INT8, .rows = j->r, .cols = j->nope,
                          .data = j->kq + (size_t)h * r * nope, .scale = j->kq_scale + (size_t)h * r,
                          .scale_type = DSR1_T_F32, .group = 0};
    else if (j->k8)
        *wk = (dsr1_wmat){.type = DSR1_T_FP8_E4M3, .rows = j->r, .cols = j->nope,
                          .data = j->k8 + (size_t)h * r * nope,
                          .scale = j->k8_scale + (size_t)h * (r / g) * (nope / g),
                          .scale_type = DSR1_T_F32, .group = (int)g};
    else
        *wk = (dsr1_wmat){.type = ty, .rows = j->r, .cols = j->nope,
                          .data = j->k_buf + (size_t)h * r * nope * j->es};
    if (j->copy_v)
        *wv = (dsr1_wmat){.type = ty, .rows = j->vd, .cols = j->r,
                          .data = j->v_buf + (size_t)h * (size_t)j->vd * r * j->es};
    else
        (void)dsr1_wmat_rows(j->kvb, (int64_t)h * (j->nope + j->vd) + j->nope, j->vd, wv);
}

/* Byte distance from matrix a to matrix b (0 when both are NULL). */
static size_t gap(const void *a, const void *b)
{
    return a && b ? (size_t)((const uint8_t *)b - (const uint8_t *)a) : 0;
}

static void as_stack(const char *name, const dsr1_wmat *h0, const dsr1_wmat *h1, int H,
                     dsr1_wdesc *d)
{
    *d = (dsr1_wdesc){.name = name, .role = DSR1_W_MATRIX, .mat = *h0, .count = H};
    if (H > 1) {
        d->stride = gap(h0->data, h1->data);
        d->scale_stride = gap(h0->scale, h1->scale);
    }
}

int dsr1_model_derive_kv_b(dsr1_model *m, dsr1_layer_weights *L, const dsr1_wmat *kvb,
                           dsr1_error *err)
{
    const dsr1_config *c = &m->cfg;
    kvb_job j = {.kvb = kvb, .H = c->num_attention_heads, .nope = c->qk_nope_head_dim,
                 .vd = c->v_head_dim, .r = c->kv_lora_rank};
    int nt = dsr1_par_threads(m->threads);
    if (nt > j.H) nt = j.H;
    DSR1_TRY(plan(m, &j, err));
    if (j.copy_k || j.copy_v || j.k8 || j.kq) {
        size_t per = (size_t)j.r * (j.kq ? 1 + (size_t)j.nope : 1);
        j.rows = malloc((size_t)nt * per * sizeof *j.rows);
        if (!j.rows) return dsr1_errorf(err, DSR1_ENOMEM, "kv_b_proj: out of memory");
        dsr1_par_run(kvb_task, &j, nt);
        free(j.rows);
    }
    dsr1_wmat k0, v0, k1 = {0}, v1 = {0};
    describe_head(&j, 0, &k0, &v0);
    if (j.H > 1) describe_head(&j, 1, &k1, &v1);
    as_stack("kv_b_proj (key part, transposed)", &k0, &k1, j.H, &L->wk_t.d);
    as_stack("kv_b_proj (value part)", &v0, &v1, j.H, &L->wv.d);
    return 0;
}
