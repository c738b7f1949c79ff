/*
 * wmat.c - the scalar definitions of the packed weight types
 * (backends/backend.h): picking one matrix out of a .dsr1 tensor,
 * describing a tensor for a backend's load step, and dequantising a row of
 * any packed type to float32. Core uses them at load (derived attention
 * parts) and in references; every backend's kernels are tested against
 * them.
 *
 * Does not: choose kernels, use threads or vector instructions. Speed is not
 * a goal here; being obviously right is.
 *
 * Invariant: dsr1_wmat_dequant_span produces, for every weight, exactly the
 * float32 the fast kernels use in DSR1_ACT_F32 mode (one rounding of
 * value * scale), so F32-mode results differ from the reference only by
 * summation order.
 */
#include "backends/backend.h"

#include "numeric.h"

/* ---- one matrix of a tensor --------------------------------------------- */

dsr1_wmat dsr1_wmat_of(const dsr1_tensor *t, int64_t index)
{
    dsr1_wmat w = {0};
    int64_t e = 1;
    w.type = t->type;
    if (t->ndim == 1) {
        w.rows = 1;
        w.cols = t->dims[0];
    } else if (t->ndim == 2) {
        w.rows = t->dims[0];
        w.cols = t->dims[1];
    } else {
        /* 3-D stack [E, out, in]: expert e at data + e * (size / E). */
        e = t->dims[0];
        w.rows = t->dims[1];
        w.cols = t->dims[2];
    }
    DSR1_ASSERT(index >= 0 && index < e);
    w.data = (const uint8_t *)t->data + (size_t)index * (size_t)(t->size / (uint64_t)e);
    w.scale = t->scale ? (const uint8_t *)t->scale +
                             (size_t)index * (size_t)(t->scale_size / (uint64_t)e)
                       : NULL;
    w.scale_type = t->scale_type;
    w.group = t->group;
    return w;
}

dsr1_wdesc dsr1_wdesc_of(const dsr1_tensor *t, dsr1_wrole role)
{
    dsr1_wdesc d = {.name = t->name, .role = role, .count = 1};
    d.mat = dsr1_wmat_of(t, 0);
    if (t->ndim == 3) {
        d.count = t->dims[0];
        d.stride = (size_t)(t->size / (uint64_t)d.count);
        d.scale_stride = t->scale ? (size_t)(t->scale_size / (uint64_t)d.count) : 0;
    }
    return d;
}

/* Rows of one matrix: what the scale layout allows to split (model_kvb.c's
 * per-head views, the CPU's naive attention's head groups). */
int dsr1_wmat_rows(const dsr1_wmat *w, int64_t r0, int64_t n, dsr1_wmat *out)
{
    if (w->type == DSR1_T_FP8_E4M3 && (w->group <= 0 || r0 % w->group)) return 0;
    int64_t head[2] = {r0, w->cols};
    *out = *w;
    out->rows = n;
    out->data = (const uint8_t *)w->data + dsr1_type_payload_size(w->type, 2, head);
    if (w->scale)
        out->scale = (const uint8_t *)w->scale +
                     dsr1_type_scale_size(w->type, w->scale_type, w->group, 2, head);
    return 1;
}

/* ---- dequantisation ----------------------------------------------------- */

static float scale_at(const dsr1_wmat *w, int64_t i)
{
    if (w->scale_type == DSR1_T_F16) return dsr1_f16_to_f32(((const uint16_t *)w->scale)[i]);
    if (w->scale_type == DSR1_T_BF16) return dsr1_bf16_to_f32(((const uint16_t *)w->scale)[i]);
    return ((const float *)w->scale)[i];
}

float dsr1_wmat_scale(const dsr1_wmat *w, int64_t r, int64_t c)
{
    switch (w->type) {
    case DSR1_T_FP8_E4M3: {
        int64_t b = w->group, ncb = (w->cols + b - 1) / b;
        return scale_at(w, (r / b) * ncb + c / b);
    }
    case DSR1_T_INT8:
        if (w->group == 0) return scale_at(w, r);
        return scale_at(w, r * (w->cols / w->group) + c / w->group);
    case DSR1_T_INT4:
        return scale_at(w, r * (w->cols / w->group) + c / w->group);
    default:
        return 1.0f;
    }
}

void dsr1_wmat_dequant_span(const dsr1_wmat *w, int64_t r, int64_t c0, int64_t len,
                            float *out)
{
    const uint8_t *row8 = (const uint8_t *)w->data;
    switch (w->type) {
    case DSR1_T_F32:
        for (int64_t i = 0; i < len; i++)
            out[i] = ((const float *)w->data)[r * w->cols + c0 + i];
        break;
    case DSR1_T_F16:
        for (int64_t i = 0; i < len; i++)
            out[i] = dsr1_f16_to_f32(((const uint16_t *)w->data)[r * w->cols + c0 + i]);
        break;
    case DSR1_T_BF16:
        for (int64_t i = 0; i < len; i++)
            out[i] = dsr1_bf16_to_f32(((const uint16_t *)w->data)[r * w->cols + c0 + i]);
        break;
    case DSR1_T_FP8_E4M3:
        for (int64_t i = 0; i < len; i++)
            out[i] = dsr1_fp8e4m3_to_f32(row8[r * w->cols + c0 + i]) *
                     dsr1_wmat_scale(w, r, c0 + i);
        break;
    case DSR1_T_INT8:
        for (int64_t i = 0; i < len; i++)
            out[i] = (float)(int8_t)row8[r * w->cols + c0 + i] * dsr1_wmat_scale(w, r, c0 + i);
        break;
    case DSR1_T_INT4:
        for (int64_t i = 0; i < len; i++) {
            int64_t c = c0 + i;
            uint8_t b = row8[r * (w->cols / 2) + c / 2];
            int q = (int)((c & 1) ? b >> 4 : b & 15) - 8;
            out[i] = (float)q * dsr1_wmat_scale(w, r, c);
        }
        break;
    default:
        DSR1_ASSERT(!"dsr1_wmat: not a weight type");
    }
}

void dsr1_wmat_dequant_row(const dsr1_wmat *w, int64_t r, float *out)
{
    dsr1_wmat_dequant_span(w, r, 0, w->cols, out);
}

