/*
 * matmul.c - dsr1_matmul: choose the activation mode and kernel, prepare the
 * activations once per call (bf16 rounding, int8 quantisation), split the
 * output rows over the pool; plus the portable kernels, which follow the
 * canonical order of matmul_impl.h in plain C (the AVX-512 kernels must give
 * the same bits, and the tests check that they do).
 *
 * Does not: dequantise whole matrices (weights stay packed; each kernel
 * expands a chunk of a row at a time), or split work over columns (that
 * would change the summation order with the thread count).
 */
#include "kernels.h"
#include "matmul_impl.h"
#include "pftune.h"

#include <math.h>
#include <stdatomic.h>
#include <time.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "../../core/numeric.h"


/* ---- CPU check ------------------------------------------------------------ */

int dsr1_mm_avx512_usable(void)
{
    /* __builtin_cpu_supports reads what libgcc's constructor found with
     * cpuid and xgetbv (OS-enabled zmm state included): no cpuid per call,
     * which matters in VMs where cpuid traps to the hypervisor (the
     * attention calls this per head with a NULL pool). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

int dsr1_mm_avx2_usable(void)
{
    /* F16C (the FP8 decode's vcvtph2ps) came before AVX2 on both vendors
     * (Ivy Bridge, Piledriver): every AVX2 CPU has it, and clang 14's
     * __builtin_cpu_supports does not know the name. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

int dsr1_mm_vbmi_usable(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return dsr1_mm_avx512_usable() && __builtin_cpu_supports("avx512vbmi");
#else
    return 0;
#endif
}

int dsr1_mm_amx_permit(void)
{
#if defined(__x86_64__) && defined(__linux__)
    /* Linux hands out the tile data state only on request, once per
     * process (all its threads): without it the first tile instruction
     * faults. ARCH_GET_XCOMP_PERM / ARCH_REQ_XCOMP_PERM, XTILEDATA. */
    enum { GET_PERM = 0x1022, REQ_PERM = 0x1023, XTILEDATA = 18 };
    unsigned long bits = 0;
    if (syscall(SYS_arch_prctl, GET_PERM, &bits) == 0 && (bits & (1ul << XTILEDATA))) return 1;
    if (syscall(SYS_arch_prctl, REQ_PERM, XTILEDATA) != 0) return 0;
    return syscall(SYS_arch_prctl, GET_PERM, &bits) == 0 && (bits & (1ul << XTILEDATA));
#else
    return 0;
#endif
}

int dsr1_mm_amx_usable(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    unsigned a, b, c, d, max = __get_cpuid_max(0, NULL);
    if (max < 7 || !dsr1_mm_avx512_usable()) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    /* AMX-TILE, AMX-INT8, and AMX-BF16 (the BF16 weights' and the naive
     * attention's tiles): every AMX CPU so far has all three */
    if (!((d >> 24) & 1) || !((d >> 25) & 1) || !((d >> 22) & 1)) return 0;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    (void)xhi;
    if (((xlo >> 17) & 3) != 3) return 0; /* the OS saves XTILECFG and XTILEDATA */
    return dsr1_mm_amx_permit();
#else
    return 0;
#endif
}

const char *dsr1_mm_kernels_name(void)
{
    if (!dsr1_mm_avx512_usable()) return dsr1_mm_avx2_usable() ? "avx2-fma" : "portable";
    if (dsr1_mm_amx_usable()) /* W8A8 on tiles (matmul_amx_avx512.c) */
        return dsr1_mm_vbmi_usable() ? "avx512-bf16-vnni-vbmi-amx" : "avx512-bf16-vnni-amx";
    return dsr1_mm_vbmi_usable() ? "avx512-bf16-vnni-vbmi" : "avx512-bf16-vnni";
}

/* ---- portable kernels ------------------------------------------------------- */

/* float32 multiply with flush-to-zero on denormal inputs, as vdpbf16ps. */
static float dp_mul(float a, float b)
{
    if (fpclassify(a) == FP_SUBNORMAL) a = copysignf(0.0f, a);
    if (fpclassify(b) == FP_SUBNORMAL) b = copysignf(0.0f, b);
    return a * b;
}

static float ftz(float a) { return fpclassify(a) == FP_SUBNORMAL ? copysignf(0.0f, a) : a; }

static void row_f32(const dsr1_mm_job *j, int64_t r, float *wbuf)
{
    const dsr1_wmat *w = j->w;
    for (int64_t c0 = 0; c0 < w->cols; c0 += DSR1_MM_KC_F32) {
        int64_t len = w->cols - c0 < DSR1_MM_KC_F32 ? w->cols - c0 : DSR1_MM_KC_F32;
        int64_t padded = (len + 15) & ~(int64_t)15;
        dsr1_wmat_dequant_span(w, r, c0, len, wbuf);
        for (int t = 0; t < j->n; t++) {
            const float *x = j->x + t * j->ldx + c0;
            float lane[16] = {0};
            for (int64_t k = 0; k < padded; k++) {
                float wk = k < len ? wbuf[k] : 0.0f, xk = k < len ? x[k] : 0.0f;
                lane[k & 15] = fmaf(wk, xk, lane[k & 15]);
            }
            float s = dsr1_mm_hsum16(lane);
            float *y = j->y + t * j->ldy + r;
            *y = c0 == 0 ? s : *y + s;
        }
    }
}

/* FP8 in BF16 mode: w[k] = the exact e4m3 values of row r's span (zero
 * padded to `padded`), and x' = bf16(x * block scale) happens per token. */
static void fp8_codes(const dsr1_wmat *w, int64_t r, int64_t c0, int64_t len, int64_t padded,
                      float *wbuf)
{
    const uint8_t *q = (const uint8_t *)w->data + r * w->cols + c0;
    for (int64_t k = 0; k < padded; k++)
        wbuf[k] = k < len ? dsr1_bf16_to_f32(dsr1_mm_fp8_bf16(q[k])) : 0.0f;
}

/* The bf16 value of x for column c0 + k of row r (zero past the end). */
static float bf16_x(const dsr1_mm_job *j, int t, int64_t r, int64_t c0, int64_t k, int64_t len)
{
    if (k >= len) return 0.0f;
    if (j->w->type == DSR1_T_FP8_E4M3) {
        float v = j->x[t * j->ldx + c0 + k] * dsr1_wmat_scale(j->w, r, c0 + k);
        return dsr1_bf16_to_f32(dsr1_mm_to_bf16(v));
    }
    return dsr1_bf16_to_f32(j->xb[t * j->ldxb + c0 + k]);
}

static void row_bf16(const dsr1_mm_job *j, int64_t r, float *wbuf)
{
    const dsr1_wmat *w = j->w;
    for (int64_t c0 = 0; c0 < w->cols; c0 += DSR1_MM_KC_BF16) {
        int64_t len = w->cols - c0 < DSR1_MM_KC_BF16 ? w->cols - c0 : DSR1_MM_KC_BF16;
        int64_t padded = (len + 31) & ~(int64_t)31;
        if (w->type == DSR1_T_FP8_E4M3) {
            fp8_codes(w, r, c0, len, padded, wbuf);
        } else {
            dsr1_wmat_dequant_span(w, r, c0, len, wbuf);
            for (int64_t k = 0; k < padded; k++)
                wbuf[k] = k < len ? dsr1_bf16_to_f32(dsr1_mm_to_bf16(wbuf[k])) : 0.0f;
        }
        for (int t = 0; t < j->n; t++) {
            float lane[16] = {0};
            for (int64_t k = 0; k < padded; k += 32)
                for (int l = 0; l < 16; l++) {
                    int64_t e = k + 2 * l, o = e + 1;
                    float ev = dp_mul(wbuf[e], bf16_x(j, t, r, c0, e, len));
                    float od = dp_mul(wbuf[o], bf16_x(j, t, r, c0, o, len));
                    lane[l] = ftz(ftz(lane[l] + od) + ev);
                }
            float s = dsr1_mm_hsum16(lane);
            float *y = j->y + t * j->ldy + r;
            *y = c0 == 0 ? s : *y + s;
        }
    }
}

static void row_int8(const dsr1_mm_job *j, int64_t r)
{
    const dsr1_wmat *w = j->w;
    const int8_t *q = (const int8_t *)w->data + r * w->cols;
    int64_t g = w->group ? w->group : w->cols;
    for (int t = 0; t < j->n; t++) {
        const int8_t *xq = j->xq + t * j->ldxq;
        float acc = 0.0f;
        for (int64_t c0 = 0; c0 < w->cols; c0 += g) {
            int32_t dot = 0;
            for (int64_t c = c0; c < c0 + g; c++) dot += (int32_t)q[c] * xq[c];
            if (w->group == 0)
                acc = (float)dot * j->xs[t] * dsr1_wmat_scale(w, r, 0);
            else
                acc = fmaf((float)dot, dsr1_wmat_scale(w, r, c0), acc);
        }
        j->y[t * j->ldy + r] = w->group == 0 ? acc : acc * j->xs[t];
    }
}

/* FP8 as W8A8 (matmul_impl.h): the requantised INT8 rows with a scale per
 * block of DSR1_MM_XG columns, x with one per DSR1_MM_XG columns too. */
static void row_int8_groups(const dsr1_mm_job *j, int64_t r)
{
    const dsr1_wmat *w = j->w;
    const int8_t *q = (const int8_t *)w->data + r * w->cols;
    const float *sw = w->scale; /* [rows][ldg]: the last group may be partial */
    for (int t = 0; t < j->n; t++) {
        const int8_t *xq = j->xq + t * j->ldxq;
        float acc = 0.0f;
        for (int64_t g = 0; g < j->ldg; g++) {
            const int64_t c0 = g * DSR1_MM_XG, c1 = c0 + DSR1_MM_XG < w->cols ? c0 + DSR1_MM_XG : w->cols;
            int32_t dot = 0;
            for (int64_t c = c0; c < c1; c++) dot += (int32_t)q[c] * xq[c];
            acc = fmaf((float)dot, sw[r * j->ldg + g] * j->xgs[t * j->ldg + g], acc);
        }
        j->y[t * j->ldy + r] = acc;
    }
}

/* W4A8 (matmul_impl.h): per group the exact dot of the codes (q - 8)
 * with xq, then acc = fma((float)dot, s_w, acc) in group order. */
static void row_int4(const dsr1_mm_job *j, int64_t r)
{
    const dsr1_wmat *w = j->w;
    const uint8_t *q = (const uint8_t *)w->data + r * (w->cols / 2);
    int64_t g = w->group;
    for (int t = 0; t < j->n; t++) {
        const int8_t *xq = j->xq + t * j->ldxq;
        float acc = 0.0f;
        for (int64_t c0 = 0; c0 < w->cols; c0 += g) {
            int32_t dot = 0;
            for (int64_t c = c0; c < c0 + g; c++) {
                int code = (c & 1) ? q[c / 2] >> 4 : q[c / 2] & 15;
                dot += (code - 8) * xq[c];
            }
            acc = fmaf((float)dot, dsr1_wmat_scale(w, r, c0), acc);
        }
        j->y[t * j->ldy + r] = acc * j->xs[t];
    }
}

void dsr1_mm_rows_portable(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    float wbuf[DSR1_MM_KC_BF16]; /* one chunk of one row, dequantised */
    for (int64_t r = r0; r < r1; r++) {
        if (j->xgs)
            row_int8_groups(j, r);
        else if (j->act == DSR1_ACT_INT8 && j->w->type == DSR1_T_INT4)
            row_int4(j, r);
        else if (j->act == DSR1_ACT_INT8)
            row_int8(j, r);
        else if (j->act == DSR1_ACT_BF16)
            row_bf16(j, r, wbuf);
        else
            row_f32(j, r, wbuf);
    }
}

/* ---- FP8 as INT8 (DSR1_ACT_INT8_FAST) ---------------------------------------- */

static float fp8_f32(uint8_t b)
{
    uint32_t u = (uint32_t)dsr1_mm_fp8_bf16(b) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* rint(127 v / m), ties to even, for e4m3 values 0 <= v <= m, m > 0: the
 * double quotient of these short mantissas is exact where it is a tie
 * (x.5), so ties go to even as in exact arithmetic. A float multiply by
 * 127 / m decides them by that factor's rounding instead, the same way for
 * every block whose largest code is m: tiny-r1's eval measured that bias
 * (top-1 98.43% against 99.14%, KL 6.3e-3 against 4.7e-3). */
static int8_t rq_ratio(float v, float m)
{
    double q = nearbyint(127.0 * (double)v / (double)m);
    return (int8_t)(q > 127 ? 127 : q);
}

void dsr1_mm_fp8_requant_row(const dsr1_wmat *w, int64_t r, int8_t *q, float *s)
{
    const uint8_t *row = (const uint8_t *)w->data + r * w->cols;
    for (int64_t c0 = 0, k = 0; c0 < w->cols; c0 += w->group, k++) {
        const int64_t c1 = c0 + w->group < w->cols ? c0 + w->group : w->cols;
        const float bs = dsr1_wmat_scale(w, r, c0);
        int top = 0; /* magnitudes order as their codes */
        for (int64_t c = c0; c < c1; c++) top = (row[c] & 0x7f) > top ? row[c] & 0x7f : top;
        s[k] = fmaxf(0.0f, fp8_f32((uint8_t)top) * fabsf(bs)) / 127.0f;
        if (!(s[k] > 0)) {
            memset(q + c0, 0, (size_t)(c1 - c0));
            continue;
        }
        const float m = fp8_f32((uint8_t)top);
        const int neg = bs < 0;
        for (int64_t c = c0; c < c1; c++) {
            const int8_t v = rq_ratio(fp8_f32(row[c] & 0x7f), m);
            q[c] = (int8_t)((row[c] >> 7) ^ neg ? -v : v);
        }
    }
}

void dsr1_mm_fp8_rq_tab_fill(dsr1_mm_rq_tab *t)
{
    for (int m = 0; m < 128; m++) t->value[m] = fp8_f32((uint8_t)m);
    memset(t->code[0], 0, sizeof t->code[0]);
    for (int top = 1; top < 128; top++)
        for (int m = 0; m < 128; m++) t->code[top][m] = rq_ratio(t->value[m], t->value[top]);
}

/* ---- dispatch ----------------------------------------------------------------- */

typedef struct mm_task {
    const dsr1_mm_job *job;
    const dsr1_mm_job *up;   /* gate+up: the up matrix's job (output in tmp), or NULL */
    int64_t rows_per_task;
    char *task_mem;          /* [ntasks][job->task_bytes] */
    void (*rows)(const dsr1_mm_job *, int64_t, int64_t);
    int avx;                 /* rows is the AVX-512 kernel */
    int avx2;                /* rows is the AVX2 kernel */
} mm_task;

/* Rows [r0, r1) of j. An rq job requantises them rq_rows at a time
 * into its task memory (the scales, then the codes) and runs the INT8
 * kernels on that as a one-scale-per-row INT8 matrix. */
static void run_rows(const mm_task *mt, const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    if (!j->rq) {
        mt->rows(j, r0, r1);
        return;
    }
    float *sc = j->task_mem;
    const int64_t cols = j->w->cols, ng = j->ldg, rqr = j->rq_rows;
    int8_t *q = (int8_t *)j->task_mem + rqr * ng * sizeof(float);
    for (int64_t r = r0; r < r1; r += rqr) {
        int64_t pr = r1 - r < rqr ? r1 - r : rqr;
        /* tokens in lanes: the blocks' code sums after the codes */
        int32_t *wsum = j->xt ? (int32_t *)(q + rqr * cols) : NULL;
        for (int64_t a = 0; a < pr; a++) {
            if (mt->avx)
                dsr1_mm_fp8_requant_row_avx512(j->w, r + a, q + a * cols, sc + a * ng, wsum ? wsum + a * ng : NULL,
                                               j->rqt, j->vbmi);
            else if (mt->avx2) dsr1_mm_fp8_requant_row_avx2(j->w, r + a, q + a * cols, sc + a * ng, j->rqt);
            else dsr1_mm_fp8_requant_row(j->w, r + a, q + a * cols, sc + a * ng);
        }
        dsr1_wmat t = {.type = DSR1_T_INT8, .rows = pr, .cols = cols, .data = q, .scale = sc,
                       .scale_type = DSR1_T_F32, .group = DSR1_MM_XG};
        dsr1_mm_job tj = *j;
        tj.w = &t;
        tj.y = j->y + r;
        tj.rq = 0;
        tj.wsum = wsum;
        /* the next rows' FP8 bytes come into L2 during these rows' tiles, so
         * their requantisation reads L2, not DRAM at one row's pace */
        tj.pf_rows = (int)(r1 - (r + pr) < rqr ? r1 - (r + pr) : rqr);
        tj.pf = tj.pf_rows > 0 ? (const char *)j->w->data + (r + pr) * cols : NULL;
        /* the AVX2 kernel's interleaved copy goes after the codes */
        tj.task_mem = mt->avx2 ? q + rqr * cols : NULL;
        mt->rows(&tj, 0, pr);
    }
}

static void run_task(void *ctx, int task, int ntasks)
{
    (void)ntasks;
    const mm_task *mt = ctx;
    dsr1_mm_job j = *mt->job;
    int64_t r0 = task * mt->rows_per_task, r1 = r0 + mt->rows_per_task;
    if (r1 > j.w->rows) r1 = j.w->rows;
    j.task_mem = mt->task_mem ? mt->task_mem + (size_t)task * j.task_bytes : NULL;
    j.amx_mem = j.task_mem && j.amx_bytes ? (char *)j.task_mem + j.task_bytes - j.amx_bytes : NULL;
    run_rows(mt, &j, r0, r1);
    if (!mt->up) return;
    dsr1_mm_job u = *mt->up;
    u.task_mem = j.task_mem; /* j is done with it: the same call's memory */
    u.amx_mem = j.amx_mem;
    run_rows(mt, &u, r0, r1);
    for (int t = 0; t < j.n; t++)
        if (mt->avx)
            dsr1_silu_mul_avx512(j.y + t * j.ldy + r0, u.y + t * u.ldy + r0, r1 - r0);
        else if (mt->avx2)
            dsr1_silu_mul_avx2(j.y + t * j.ldy + r0, u.y + t * u.ldy + r0, r1 - r0);
        else
            dsr1_silu_mul_ref(j.y + t * j.ldy + r0, u.y + t * u.ldy + r0, r1 - r0);
}

void dsr1_silu_mul_ref(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void dsr1_silu_mul(float *g, const float *u, int64_t n)
{
    if (dsr1_mm_avx512_usable())
        dsr1_silu_mul_avx512(g, u, n);
    else if (dsr1_mm_avx2_usable())
        dsr1_silu_mul_avx2(g, u, n);
    else
        dsr1_silu_mul_ref(g, u, n);
}

int dsr1_mm_rq_min_n(const dsr1_pool *p)
{
    const int avx512 = p ? dsr1_pool_avx512(p) : dsr1_mm_avx512_usable();
    return !avx512 && dsr1_mm_avx2_usable() ? DSR1_MM_RQ_MIN_N_AVX2 : DSR1_MM_RQ_MIN_N;
}

/* INT8 mode is W8A8 on INT8 weights and W4A8 on grouped INT4 weights,
 * BF16 on the rest; the fast INT8 mode also W8A8 on FP8 weights (*rq)
 * from min_n tokens (dsr1_mm_rq_min_n), in the shapes the lanes kernel
 * takes. */
static dsr1_act effective_act(dsr1_act act, const dsr1_wmat *w, int n, int min_n, int *rq)
{
    *rq = 0;
    if (act == DSR1_ACT_INT8_FAST) {
        if (w->type == DSR1_T_FP8_E4M3 && n >= min_n && w->cols % 64 == 0 &&
            w->group == DSR1_MM_XG && w->scale_type == DSR1_T_F32) {
            *rq = 1;
            return DSR1_ACT_INT8;
        }
        act = DSR1_ACT_INT8;
    }
    if (act != DSR1_ACT_INT8) return act;
    /* W4A8's dots are per group: exact in int32 for any group of the
     * format (|q - 8| <= 8, |xq| <= 127). */
    if (w->type == DSR1_T_INT4)
        return w->group > 0 && w->cols % w->group == 0 ? act : DSR1_ACT_BF16;
    if (w->type != DSR1_T_INT8) return DSR1_ACT_BF16;
    /* Integer dot products stay exact in int32 only up to 2^31 / (127*255). */
    if (w->cols > 65536) return DSR1_ACT_BF16;
    return act;
}

/* Tasks per thread of a one-token matmul run alone (a decode step's
 * GEMVs; a batch run's items keep MM_SPLIT). The tasks are claimed one by
 * one, so the thread that finishes first waits at most one task for the
 * other: with four a thread that was an eighth of a 1.85 GB LM head, and
 * on these VMs one core often streams slower than the other for a while.
 * Measured in one process, alternate calls split each way (a temporary
 * switch; `dsr1 bench --prompt 1 --gen 64`, R1-shape files, Emerald Rapids
 * Xeon VM, 2 threads, the one-token matmuls outside batch runs, summed
 * time weighted by calls, fine / coarse): BF16 0.93-0.97 in 6 of 6 runs
 * (0.934, 0.973, 0.972, 0.952, 0.968, 0.956), INT8 0.90-1.05 (median
 * 0.98), FP8 0.90-1.04 (about even: its unit is a 128-row scale block, so
 * its tasks split least). Split the same way, the experts' batch runs
 * came out from 0.89 to 1.10 (above 1 in 5 of 6), so they keep theirs. */
#define MM_SPLIT 4
#define MM_SPLIT_GEMV 64

/* Rows per task: `split` tasks per thread so uneven progress balances,
 * in whole 16-row panels (the AVX-512 kernels' unit); for FP8 in whole
 * scale blocks when there are enough, so a task prepares x' once per block. */
static int64_t task_rows(const dsr1_mm_job *j, int nth, int split)
{
    int64_t rows = j->w->rows, per = (rows + split * nth - 1) / (split * nth);
    int64_t unit = 16, g = j->w->group;
    int fp8 = j->w->type == DSR1_T_FP8_E4M3 && j->act == DSR1_ACT_BF16;
    if (fp8 && g % 16 == 0 && rows >= 2 * nth * g) unit = g;
    if (j->rq) unit = DSR1_MM_RQ_ROWS;
    if (j->b16l) unit = 32; /* its row blocks */
    return (per + unit - 1) / unit * unit;
}

/* One matmul's job, as matmul_run and dsr1_matmul_batch set it up: what
 * it needs of the scratch (total: x prepared, up's output, task memory),
 * then its task table once that memory is placed. */
typedef struct mm_call {
    dsr1_mm_job j, uj;
    mm_task mt;
    const dsr1_wmat *up;
    size_t bytes, tmp_bytes, total;
    int ntasks, avx, avx2;
} mm_call;

/* alone: a call of its own (matmul_run), not an item of a batch run. */
static void call_setup(mm_call *c, dsr1_pool *p, const dsr1_wmat *w, const dsr1_wmat *up,
                       const float *x, int64_t ldx, float *y, int64_t ldy, int n, dsr1_act act,
                       dsr1_mm_kernel k, int alone)
{
    /* The kernel set first: AVX-512 where the pool found it (unless the
     * caller asks for another), else AVX2 where the CPU has it. */
    c->avx = k == DSR1_MM_PORTABLE || k == DSR1_MM_AVX2 ? 0 : p ? dsr1_pool_avx512(p) : dsr1_mm_avx512_usable();
    c->avx2 = !c->avx && k != DSR1_MM_PORTABLE && dsr1_mm_avx2_usable();
    /* FP8 GEMVs of a few tokens in the fast mode on AMX-BF16 tiles
     * (matmul_fp8amx_avx512.c), before W8A8 would take them: the
     * byte-table decode needs VBMI, the tiles whole 64-column steps */
    const int fp8amx = c->avx && p && k != DSR1_MM_AVX512_NOAMX && k != DSR1_MM_AVX512_NOVBMI &&
                       act == DSR1_ACT_INT8_FAST && w->type == DSR1_T_FP8_E4M3 &&
                       n >= DSR1_MM_FP8_AMX_MIN_N && n <= DSR1_MM_FP8_AMX_MAX_N && w->cols % 64 == 0 &&
                       w->group > 0 && w->group % 64 == 0 && w->scale_type == DSR1_T_F32 &&
                       dsr1_pool_amx(p) && dsr1_mm_vbmi_usable();
    int rq;
    const dsr1_act ea = effective_act(act, w, n, fp8amx ? n + 1 : dsr1_mm_rq_min_n(p), &rq);
    dsr1_mm_job j = {.w = w, .n = n, .act = ea, .x = x, .ldx = ldx, .y = y, .ldy = ldy, .rq = rq,
                     .rq_rows = DSR1_MM_RQ_ROWS, .fp8amx = fp8amx};
    j.ldxb = (w->cols + 31) & ~(int64_t)31;
    j.ldxq = (w->cols + 63) & ~(int64_t)63;
    j.ldxp = (w->cols + 127) & ~(int64_t)127;
    j.ldxg = j.ldxp / 32;
    j.ldg = (w->cols + DSR1_MM_XG - 1) / DSR1_MM_XG;
    /* BF16 weights in the fast mode: rows in lanes, whose order is not
     * the canonical one (matmul_lanes_avx512.c; its panel is on the stack) */
    j.b16l = c->avx && act == DSR1_ACT_INT8_FAST && ea == DSR1_ACT_BF16 && w->type == DSR1_T_BF16 &&
             n >= DSR1_MM_B16L_MIN_N && w->cols % 32 == 0;
    if (j.b16l) j.ldxb += 32; /* x rows off 4 KiB strides: a tile's 6 rows in 6 L1 sets */
    j.amx = c->avx && p && k != DSR1_MM_AVX512_NOAMX && n >= DSR1_MM_AMX_MIN_N && dsr1_pool_amx(p);
    /* W8A8 and W4A8 on AMX (the conditions of dsr1_mm_rows_avx512 and
     * dsr1_mm_rows_w4a8_avx512): its panels and accumulators in the task
     * memory, and an rq job's requantised rows enough for all the stripes
     * the kernel takes at once */
    const int amx_w8a8 = j.amx && ((ea == DSR1_ACT_INT8 && w->cols % 64 == 0 &&
                                    (rq || (w->type == DSR1_T_INT8 && w->group == 0) ||
                                     (w->type == DSR1_T_INT4 && w->group == 128))) ||
                                   j.b16l); /* and BF16 in the fast mode (dsr1_mm_rows_bf16_amx) */
    if (amx_w8a8 && rq) j.rq_rows = DSR1_MM_RQ_ROWS * DSR1_MM_AMX_STRIPES;
    /* BF16 GEMVs of 2 to 16 tokens in the fast mode on the tiles too
     * (matmul_bf16amx_avx512.c) */
    j.b16gv = c->avx && p && k != DSR1_MM_AVX512_NOAMX && act == DSR1_ACT_INT8_FAST &&
              ea == DSR1_ACT_BF16 && w->type == DSR1_T_BF16 && n >= DSR1_MM_B16_AMX_MIN_N && n <= 16 &&
              w->cols % 32 == 0 && dsr1_pool_amx(p);
    if (amx_w8a8 || j.fp8amx || j.b16gv) j.amx_runs = dsr1_pool_amx_counter(p);
    /* FP8 in BF16 mode: x' of a scale block, all columns for up to
     * DSR1_MM_FP8_GV tokens (GEMV), else one chunk for a block of tokens;
     * the AVX2 kernel's x' is float32, 4 tokens at a time. */
    if (j.act == DSR1_ACT_BF16 && w->type == DSR1_T_FP8_E4M3 && c->avx2)
        j.task_bytes = (size_t)(n < 4 ? n : 4) * (size_t)j.ldxb * sizeof(float);
    else if (j.fp8amx) /* x' of a row block; the tables are the call's (dsr1_mm_prep) */
        j.task_bytes = dsr1_mm_fp8_amx_task_bytes(n, w->cols);
    else if (j.act == DSR1_ACT_BF16 && w->type == DSR1_T_FP8_E4M3)
        j.task_bytes = n <= DSR1_MM_FP8_GV ? (size_t)n * (size_t)j.ldxb * 2
                              : (size_t)(n < DSR1_MM_FP8_TB ? n : DSR1_MM_FP8_TB) * DSR1_MM_FP8_LDP * 2 +
                                    DSR1_MM_BIG_BYTES;
    else if (j.act == DSR1_ACT_BF16 && n > 4 && !j.b16l && !j.b16gv)
        j.task_bytes = DSR1_MM_BIG_BYTES; /* the big weight panel */
    else if (j.act == DSR1_ACT_INT8 && w->type == DSR1_T_INT4 && c->avx2 && n > 4 && w->group % 32 == 0)
        j.task_bytes = 16 * ((size_t)w->cols + (size_t)(w->cols / w->group) * sizeof(float)); /* 16 rows' codes */
    else if (j.rq) /* the requantised rows: scales, codes (AVX2: twice, the second interleaved) */
        j.task_bytes = (size_t)j.rq_rows * ((size_t)j.ldg * sizeof(float) + (size_t)w->cols) * (c->avx2 ? 2 : 1) +
                       (c->avx ? (size_t)j.rq_rows * (size_t)j.ldg * sizeof(int32_t) : 0); /* code sums */
    j.task_bytes = (j.task_bytes + 63) & ~(size_t)63;
    if (amx_w8a8) {
        j.amx_bytes = (dsr1_mm_amx_task_bytes() + 63) & ~(size_t)63;
        j.task_bytes += j.amx_bytes;
    }
    const int nth = dsr1_pool_size(p);
    int64_t per = task_rows(&j, nth, alone && n == 1 && nth > 1 ? MM_SPLIT_GEMV : MM_SPLIT);
    c->ntasks = (int)((w->rows + per - 1) / per);
    c->bytes = (dsr1_mm_prep_bytes(&j, c->avx) + 63) & ~(size_t)63;
    c->tmp_bytes = up ? ((size_t)n * (size_t)w->rows * sizeof(float) + 63) & ~(size_t)63 : 0;
    c->total = c->bytes + c->tmp_bytes + (size_t)c->ntasks * j.task_bytes;
    j.vbmi = c->avx && k != DSR1_MM_AVX512_NOVBMI && dsr1_mm_vbmi_usable();
    c->j = j;
    c->up = up;
    c->mt = (mm_task){.rows_per_task = per,
                      .rows = c->avx ? dsr1_mm_rows_avx512 : c->avx2 ? dsr1_mm_rows_avx2 : dsr1_mm_rows_portable,
                      .avx = c->avx, .avx2 = c->avx2};
}

static double now_s(void);

/* The GEMV variant (DSR1_GEMV_*) into a call's job. */
static void set_variant(mm_call *c, int v)
{
    c->j.hwpf = (v & DSR1_GEMV_HWPF) != 0;
    c->j.i8t4 = (v & DSR1_GEMV_I8T4) != 0;
}

/* A call's variant: the pool's, or in a decode trial step (pftune.h) the
 * tuner's next one for a one-token call, which *tu then times. Calls of
 * more tokens read their weights once for many and take no part. */
static int call_variant(mm_call *c, dsr1_pool *p, dsr1_pftune **tu)
{
    dsr1_pftune *t = dsr1_pool_tune(p);
    int v = dsr1_pool_hwpf(p);
    if (t && c->j.n == 1) {
        v = dsr1_pftune_call(t);
        *tu = t;
    }
    set_variant(c, v);
    return v;
}

/* mem: c->total bytes (NULL when that is 0); x is prepared into it. */
static void call_place(mm_call *c, dsr1_pool *p, char *mem)
{
    if (mem && dsr1_mm_prep(&c->j, mem, c->avx, c->avx2)) dsr1_mm_fill_all(p, &c->j, c->avx, c->avx2);
    c->uj = c->j;
    if (c->up) {
        c->uj.w = c->up;
        c->uj.y = (float *)(mem + c->bytes);
        c->uj.ldy = c->j.w->rows;
    }
    /* mem is NULL when nothing needs scratch (total == 0): NULL + 0 is
     * undefined in C (clang's UBSan stops on it), so no arithmetic then. */
    c->mt.job = &c->j;
    c->mt.up = c->up ? &c->uj : NULL;
    c->mt.task_mem = mem ? mem + c->bytes + c->tmp_bytes : NULL;
}

/* y = x W^T, or with `up`: y = silu(x W^T) * (x Up^T). One pool run; the
 * activations are prepared once for both matrices. */
static void matmul_run(dsr1_pool *p, const dsr1_wmat *w, const dsr1_wmat *up, const float *x,
                       int64_t ldx, float *y, int64_t ldy, int n, dsr1_act act, dsr1_mm_kernel k)
{
    if (n <= 0 || w->rows <= 0) return;
    mm_call c;
    call_setup(&c, p, w, up, x, ldx, y, ldy, n, act, k, 1);
    void *mem = NULL, *owned = NULL;
    if (c.total) {
        mem = p ? dsr1_pool_scratch(p, c.total) : NULL;
        if (!mem) mem = owned = aligned_alloc(64, c.total);
        DSR1_ASSERT(mem != NULL); /* small and per call: see dsr1_pool_reserve */
    }
    dsr1_pftune *tu = NULL;
    const int v = call_variant(&c, p, &tu);
    call_place(&c, p, mem);
    const double t0 = tu ? now_s() : 0;
    dsr1_pool_run(p, run_task, &c.mt, c.ntasks);
    if (tu) dsr1_pftune_call_done(tu, v, now_s() - t0);
    free(owned);
}

/* ---- several matmuls in one run ------------------------------------------------- */

#define MM_BATCH_MAX 32
/* A run's scratch stops growing past this (or past one call's own need):
 * FP8 in BF16 mode gives each task x' of every column, 115 KB at 8 tokens
 * (R1's 7168), 32 calls x 8 tasks of that would ask for 29 MB. */
#define MM_BATCH_BYTES ((size_t)16 << 20)

typedef struct mm_batch {
    mm_call *c;
    int first[MM_BATCH_MAX + 1]; /* call i's tasks: [first[i], first[i + 1]) */
} mm_batch;

static void batch_task(void *ctx, int task, int ntasks)
{
    (void)ntasks;
    const mm_batch *b = ctx;
    int i = 0;
    while (task >= b->first[i + 1]) i++;
    run_task(&b->c[i].mt, task - b->first[i], b->c[i].ntasks);
}

void dsr1_matmul_batch(dsr1_pool *p, const dsr1_mm_item *it, int count, dsr1_act act)
{
    for (int i = 0; i < count;) {
        mm_call c[MM_BATCH_MAX];
        mm_batch b = {.c = c};
        int m = 0;
        size_t total = 0;
        for (; i < count && m < MM_BATCH_MAX; i++) {
            if (it[i].n <= 0 || it[i].w->rows <= 0) continue;
            call_setup(&c[m], p, it[i].w, it[i].up, it[i].x, it[i].ldx, it[i].y, it[i].ldy, it[i].n,
                       act, DSR1_MM_AUTO, 0);
            if (m && total + c[m].total > MM_BATCH_BYTES) break; /* item i opens the next run */
            total += c[m].total;
            b.first[m + 1] = b.first[m] + c[m].ntasks;
            m++;
        }
        char *mem = NULL, *owned = NULL;
        if (total) {
            mem = p ? dsr1_pool_scratch(p, total) : NULL;
            if (!mem) mem = owned = aligned_alloc(64, total);
            DSR1_ASSERT(mem != NULL);
        }
        /* one variant for the whole run (its calls are timed together) */
        dsr1_pftune *tu = NULL;
        const int v = m ? call_variant(&c[0], p, &tu) : 0;
        for (int k = 0; k < m; k++) {
            set_variant(&c[k], v);
            call_place(&c[k], p, c[k].total ? mem : NULL);
            if (c[k].total) mem += c[k].total;
        }
        const double t0 = tu ? now_s() : 0;
        dsr1_pool_run(p, batch_task, &b, b.first[m]);
        if (tu) dsr1_pftune_call_done(tu, v, now_s() - t0);
        free(owned);
    }
}

void dsr1_matmul_with(dsr1_pool *p, const dsr1_wmat *w, const float *x, int64_t ldx,
                      float *y, int64_t ldy, int n, dsr1_act act, dsr1_mm_kernel k)
{
    matmul_run(p, w, NULL, x, ldx, y, ldy, n, act, k);
}

void dsr1_matmul(dsr1_pool *p, const dsr1_wmat *w, const float *x, int64_t ldx, float *y,
                 int64_t ldy, int n, dsr1_act act)
{
    matmul_run(p, w, NULL, x, ldx, y, ldy, n, act, DSR1_MM_AUTO);
}

void dsr1_matmul_noamx(dsr1_pool *p, const dsr1_wmat *w, const float *x, int64_t ldx, float *y,
                       int64_t ldy, int n, dsr1_act act)
{
    matmul_run(p, w, NULL, x, ldx, y, ldy, n, act, DSR1_MM_AVX512_NOAMX);
}

void dsr1_ffn_gate_up(dsr1_pool *p, const dsr1_wmat *gate, const dsr1_wmat *up, const float *x,
                      int64_t ldx, float *h, int64_t ldh, int n, dsr1_act act)
{
    /* One preparation of x serves both only when they agree on its form. */
    DSR1_ASSERT(gate->rows == up->rows && gate->cols == up->cols && gate->type == up->type);
    matmul_run(p, gate, up, x, ldx, h, ldh, n, act, DSR1_MM_AUTO);
}

/* ---- compute peak ------------------------------------------------------------- */

typedef struct peak_ctx {
    dsr1_act act;
    int64_t iters;
    _Atomic uint64_t macs;
} peak_ctx;

static void peak_task(void *ctx, int task, int ntasks)
{
    (void)task;
    (void)ntasks;
    peak_ctx *pc = ctx;
    atomic_fetch_add(&pc->macs, dsr1_mm_peak_avx512(pc->act, pc->iters));
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double dsr1_matmul_peak_gflops(dsr1_pool *p, dsr1_act act)
{
    if (!(p ? dsr1_pool_avx512(p) : dsr1_mm_avx512_usable())) return 0;
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        /* One task per thread; 2^16 rounds is about 10 ms at 3 GHz. */
        peak_ctx pc = {.act = act, .iters = 1 << 16};
        double t0 = now_s();
        dsr1_pool_run(p, peak_task, &pc, dsr1_pool_size(p));
        double gf = 2.0 * (double)atomic_load(&pc.macs) / (now_s() - t0) / 1e9;
        if (gf > best) best = gf;
    }
    return best;
}
