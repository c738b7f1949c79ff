/*
 * cpu_backend.c - the CPU implementation of the backend table
 * (backends/backend.h), built on backends/cpu/kernels.h: every projection
 * is dsr1_matmul on the packed weight, threads come from dsr1_pool.
 *
 * Owns: the device (thread pool, the kernel variant it names at start),
 * weight handles (the CPU multiplies the mapped bytes in place, so a
 * handle is the matrices' descriptions), activation buffers (host floats),
 * workspace buffers (sized once in ws_create, including the pool scratch
 * every matmul of the workspace needs, so a step never allocates), the
 * step description, the copy ops (write, read, gather, scatter, add), the
 * elementwise stages (embedding rows, RMSNorm, RoPE) and the dense FFN.
 * KV pages are cpu_kv.c, MLA attention cpu_attention.c, the MoE dispatch
 * cpu_moe.c. Every op runs at once on the calling thread (and the pool),
 * so step_end has nothing left to report.
 *
 * Determinism: each output row is computed by one thread in a fixed order
 * that depends only on that token (matmul's contract, attention products
 * whose extra columns are exact zeros, per-token expert combination in
 * routing order), so a token's result is the same alone or batched, with
 * any thread count. That holds always with `deterministic` set; in the
 * fast mode (the default) matmuls of DSR1_CPU_DNNL_MIN_N tokens or more go
 * through oneDNN (matmul_dnnl.c), whose results depend on the batch shape
 * within bf16 rounding.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_backend.h"
#include "matmul_impl.h" /* dsr1_mm_kernels_name: the variant named at start */

/* ---- device and workspace ---------------------------------------------------- */

static void cpu_destroy(void *dev);

static int cpu_probe(char *why, size_t n)
{
    if (why && n) snprintf(why, n, "%s kernels", dsr1_mm_kernels_name());
    return 1;
}

static int cpu_create(const dsr1_backend_options *o, void **out, dsr1_error *err)
{
    cpu_dev *d = calloc(1, sizeof *d);
    if (!d) return dsr1_errorf(err, DSR1_ENOMEM, "cpu backend: out of memory");
    int rc = dsr1_pool_create(&d->pool, o ? o->threads : 0, err);
    if (rc) {
        free(d);
        return rc;
    }
    if ((rc = dsr1_cpu_numa_create(d, o ? o->numa_nodes : 0, err))) {
        cpu_destroy(d);
        return rc;
    }
    d->deterministic = o && o->deterministic;
    d->fp8_w8a8 = !d->deterministic && !(o && o->fp8_bf16);
    d->fast_gemm = !d->deterministic && dsr1_dnnl_usable();
    d->amx = d->fast_gemm && dsr1_dnnl_has_amx();
    /* The banner names what FP8 runs as in every fast mode (tests grep it). */
    d->mode = d->fast_gemm ? (d->amx ? (d->fp8_w8a8 ? "fast: fp8 w8a8, int8 and bf16 on amx tiles"
                                                    : "fast: int8 and bf16 on amx tiles, fp8 bf16 on onednn amx")
                              : d->fp8_w8a8 ? "fast: onednn avx512-bf16 prefill, fp8 w8a8"
                                            : "fast: onednn avx512-bf16 prefill, fp8 bf16")
              : o && o->deterministic ? "deterministic"
              : d->fp8_w8a8 ? "fast: fp8 w8a8, no onednn bf16 kernels here"
                            : "fast: fp8 bf16, no onednn bf16 kernels here";
    *out = d;
    return 0;
}

static void cpu_destroy(void *dev)
{
    cpu_dev *d = dev;
    if (!d) return;
    while (d->weights) {
        struct dsr1_bweight *w = d->weights;
        d->weights = w->next;
        free(w->node);
        free(w);
    }
    dsr1_cpu_numa_destroy(d);
    dsr1_pool_free(d->pool);
    free(d);
}

/* The CPU reads weights where they are (the mapping): the handle holds one
 * description per matrix of the stack. */
static int cpu_load(void *dev, const dsr1_wdesc *d, dsr1_placement where, dsr1_bweight **out,
                    dsr1_error *err)
{
    cpu_dev *cd = dev;
    (void)where;
    if (d->count < 1 || d->mat.rows < 1 || d->mat.cols < 1)
        return dsr1_errorf(err, DSR1_EINVAL, "cpu backend: weight %s: empty shape",
                           d->name ? d->name : "?");
    struct dsr1_bweight *w = malloc(sizeof *w + (size_t)d->count * sizeof(dsr1_wmat));
    if (!w) return dsr1_errorf(err, DSR1_ENOMEM, "cpu backend: out of memory");
    w->count = d->count;
    w->node = NULL;
    for (int64_t i = 0; i < d->count; i++) {
        w->m[i] = dsr1_wdesc_mat(d, i);
        cd->int8_weights |= w->m[i].type == DSR1_T_INT8;
    }
    w->next = cd->weights;
    cd->weights = w;
    DSR1_TRY(dsr1_cpu_numa_load(cd, d, w, err));
    *out = w;
    return 0;
}

static int cpu_buf_create(void *dev, size_t n, dsr1_bbuf **out, dsr1_error *err)
{
    (void)dev;
    dsr1_bbuf *b = malloc(sizeof *b + (n ? n : 1) * sizeof(float));
    if (!b) return dsr1_errorf(err, DSR1_ENOMEM, "cpu backend: cannot allocate %zu floats", n);
    b->n = n;
    dsr1_touch(b, sizeof *b + n * sizeof(float)); /* the faults now, not in a step */
    *out = b;
    return 0;
}

static void cpu_buf_free(void *dev, dsr1_bbuf *b)
{
    (void)dev;
    free(b);
}

/* Built when asked: the NUMA part reports pages placed by the loads. The
 * kernel variant and the mode are named so neither is silent. */
static const char *cpu_describe(void *dev)
{
    cpu_dev *d = dev;
    char numa[sizeof d->desc];
    dsr1_cpu_numa_describe(d, numa, sizeof numa);
    snprintf(d->desc, sizeof d->desc, "cpu (%s kernels, %d threads, %s%s%s)",
             dsr1_mm_kernels_name(), dsr1_pool_size(d->pool),
             d->mode, d->topo ? ", " : "", d->topo ? numa : "");
    return d->desc;
}

static void cpu_ws_free(void *wsp)
{
    cpu_ws *w = wsp;
    if (!w) return;
    dsr1_pool_free(w->own_pool);
    dsr1_cpu_numa_ws_free(w);
    dsr1_cpu_moe_lanes_free(w);
    dsr1_dnnl_free(w->dnnl);
    for (int i = 0; i < w->n_hpools; i++) dsr1_pool_free(w->hpool[i]);
    free(w->hpool);
    float *fs[] = {w->qcat, w->olat, w->scores, w->ha, w->hb, w->router, w->ew,
                   w->xg, w->yg, w->slots, w->sh, w->route_scratch};
    for (size_t i = 0; i < sizeof fs / sizeof *fs; i++) free(fs[i]);
    free(w->kbuf);
    free(w->vt);
    free(w->nv);
    free(w->segs);
    free(w->eidx);
    free(w->order);
    free(w->count);
    free(w->first);
    free(w->items);
    free(w);
}

/* Scratch a matmul of n tokens over `cols` inputs takes from its pool (the
 * bf16 or int8 copy of x, rows padded; int8 needs less than bf16). */
static size_t mm_scratch(size_t n, size_t cols) { return n * (2 * cols + 128) + 128; }

/* One single-thread pool per task of the per-head projections, each with
 * its scratch reserved, so those calls never allocate. */
static int alloc_hpools(cpu_ws *w, int n)
{
    dsr1_pool **hp = calloc((size_t)n, sizeof *hp);
    if (!hp) return DSR1_ENOMEM;
    size_t T = (size_t)w->s.max_tokens, r = (size_t)w->s.kv_lora_rank;
    size_t bytes = mm_scratch(T, r > 256 ? r : 256) + ((size_t)2 << 20); /* + per-task blocks */
    for (int i = 0; i < n; i++)
        if (dsr1_pool_create(&hp[i], 1, NULL) || dsr1_pool_reserve(hp[i], bytes, NULL)) {
            for (int k = 0; k <= i; k++) dsr1_pool_free(hp[k]);
            free(hp);
            return DSR1_ENOMEM;
        }
    for (int i = 0; i < w->n_hpools; i++) dsr1_pool_free(w->hpool[i]);
    free(w->hpool);
    w->hpool = hp;
    w->n_hpools = n;
    return 0;
}

/* The most scratch any op of this workspace asks of the main pool: model
 * matmuls (x of up to max_in columns; gate+up also keeps the up half, [T][inter]
 * floats) and the attention's two products. */
static size_t pool_need(const cpu_ws *w)
{
    const dsr1_ws_sizes *s = &w->s;
    size_t T = (size_t)s->max_tokens, I = (size_t)s->inter, row = (size_t)(s->kv_lora_rank + s->rope_dim);
    if ((size_t)s->moe_inter > I) I = (size_t)s->moe_inter;
    if ((size_t)s->shared_inter > I) I = (size_t)s->shared_inter;
    size_t in = (size_t)s->max_in > I ? (size_t)s->max_in : I;
    size_t need = mm_scratch(T, in) + T * I * 4 + 64;
    size_t rows = T * (size_t)s->n_heads < w->tile_rows ? T * (size_t)s->n_heads : w->tile_rows;
    size_t att = mm_scratch(rows, row) > 2 * w->score_cap + rows * 192 + 128
                     ? mm_scratch(rows, row) : 2 * w->score_cap + rows * 192 + 128;
    /* plus the kernels' per-task blocks: FP8 x', tens of KiB a task at
     * four tasks a thread; a one-token matmul's 64 a thread (matmul.c,
     * MM_SPLIT_GEMV) hold one x' row of 2 bytes a column each, in whole
     * 128-row blocks, so at most ~2 MB on R1's shapes at two threads
     * (7168 x 18432: 56 tasks of 36 KiB) */
    size_t slack = (size_t)dsr1_pool_size(dsr1_cpu_pool(w)) * ((size_t)2 << 20);
    return (need > att ? need : att) + slack;
}

static int alloc_attention(cpu_ws *w)
{
    const dsr1_ws_sizes *s = &w->s;
    size_t T = (size_t)s->max_tokens, H = (size_t)s->n_heads, r = (size_t)s->kv_lora_rank;
    size_t row = r + (size_t)s->rope_dim, ctx = (size_t)(s->max_ctx > 0 ? s->max_ctx : 1);
    w->kelem = dsr1_cpu_kv_elem(s->kv_type);
    /* Scores: one token's full context at least; 16 MiB lets a prefill
     * tile hold enough (token, head) rows for GEMM speed. */
    w->score_cap = H * ctx > ((size_t)1 << 22) ? H * ctx : (size_t)1 << 22;
    w->tile_rows = H > 8192 ? H : 8192;
    w->qcat = malloc(T * H * row * 4 + 4);
    w->olat = malloc(T * H * r * 4 + 4);
    w->kbuf = malloc(ctx * row * w->kelem);
    w->vt = malloc(ctx * r * w->kelem + 64);
    w->scores = malloc(w->score_cap * 4);
    w->segs = malloc(T * 2 * sizeof *w->segs + 8);
    return w->qcat && w->olat && w->kbuf && w->vt && w->scores && w->segs ? 0 : DSR1_ENOMEM;
}

static int cpu_ws_create(void *dev, const dsr1_ws_sizes *s, void **out, dsr1_error *err)
{
    cpu_ws *w = calloc(1, sizeof *w);
    if (!w) return dsr1_errorf(err, DSR1_ENOMEM, "cpu backend: out of memory");
    w->dev = dev;
    w->s = *s;
    w->pft.arms = w->dev->int8_weights ? DSR1_PFTUNE_ARMS : 2; /* the weights are loaded by now */
    size_t T = (size_t)s->max_tokens, D = (size_t)s->hidden, E = (size_t)s->n_experts;
    size_t K = (size_t)(s->topk > 0 ? s->topk : 1), I = (size_t)s->inter;
    if ((size_t)s->moe_inter > I) I = (size_t)s->moe_inter;
    if ((size_t)s->shared_inter > I) I = (size_t)s->shared_inter;
    w->ha = malloc(T * I * 4);
    w->hb = malloc(T * I * 4);
    w->router = malloc((T * E + 1) * 4);
    w->eidx = malloc(T * K * 4);
    w->ew = malloc(T * K * 4);
    w->order = malloc(T * K * 4);
    w->count = malloc((E + 1) * 4);
    w->first = malloc((E + 2) * 4);
    w->xg = malloc(T * D * 4);
    w->yg = malloc(T * D * 4);
    w->slots = malloc(T * K * D * 4);
    w->sh = malloc(T * D * 4);
    w->route_scratch = malloc((3 * E + 1) * 4);
    w->items = malloc((E + 1) * sizeof *w->items);
    int rc = alloc_attention(w);
    int drc = !rc && w->dev->fast_gemm ? dsr1_dnnl_create(&w->dnnl, err) : 0;
    if (drc) {
        cpu_ws_free(w);
        return drc;
    }
    if (!rc) rc = alloc_hpools(w, dsr1_pool_size(w->dev->pool));
    if (!rc) rc = dsr1_pool_reserve(w->dev->pool, pool_need(w), NULL);
    if (!rc) rc = dsr1_cpu_numa_ws(w);
    if (!rc && !w->dev->topo) rc = dsr1_cpu_moe_lanes(w);
    if (rc || !w->ha || !w->hb || !w->router || !w->eidx || !w->ew || !w->order || !w->count ||
        !w->first || !w->xg || !w->yg || !w->slots || !w->sh || !w->route_scratch || !w->items) {
        cpu_ws_free(w);
        return dsr1_errorf(err, DSR1_ENOMEM, "cpu backend: cannot allocate a workspace for %d tokens",
                           s->max_tokens);
    }
    /* The buffers a step of max_tokens writes take their page faults now
     * (dsr1_touch); the context-sized ones (kbuf, vt) fill as a context
     * grows and are left alone. */
    size_t H = (size_t)s->n_heads, r = (size_t)s->kv_lora_rank, row = r + (size_t)s->rope_dim;
    void *const bufs[] = {w->ha, w->hb, w->xg, w->yg, w->slots, w->sh, w->router, w->qcat, w->olat, w->scores};
    const size_t sizes[] = {T * I * 4, T * I * 4, T * D * 4, T * D * 4, T * K * D * 4, T * D * 4,
                            (T * E + 1) * 4, T * H * row * 4, T * H * r * 4, w->score_cap * 4};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) dsr1_touch(bufs[i], sizes[i]);
    *out = w;
    return 0;
}

static void cpu_ws_threads(void *wsp, int threads)
{
    cpu_ws *w = wsp;
    dsr1_pool_free(w->own_pool);
    w->own_pool = NULL;
    if (threads > 0 && dsr1_pool_create(&w->own_pool, threads, NULL) != 0) w->own_pool = NULL;
    if (w->own_pool && dsr1_pool_reserve(w->own_pool, pool_need(w), NULL) != 0) {
        dsr1_pool_free(w->own_pool);
        w->own_pool = NULL;
    }
    int need = dsr1_pool_size(dsr1_cpu_pool(w));
    /* Fewer scratch pools than threads only narrows the per-head split. */
    if (need > w->n_hpools) (void)alloc_hpools(w, need);
    /* Fewer lanes than threads keeps the MoE's experts split (cpu_moe.c). */
    if (!w->dev->topo) (void)dsr1_cpu_moe_lanes(w);
}

/* ---- steps and copies ----------------------------------------------------------- */

static int cpu_step_begin(void *wsp, const dsr1_step *s, dsr1_error *err)
{
    cpu_ws *w = wsp;
    if (s->n < 0 || s->n > w->s.max_tokens)
        return dsr1_errorf(err, DSR1_EINVAL, "cpu backend: step of %d tokens, workspace holds %d",
                           s->n, w->s.max_tokens);
    w->step = *s;
    w->in_step = 1;
    /* Every pool runs pftune's kept variant (DSR1_GEMV_*); in a one-token
     * trial step the workspace's pool hands its one-token matmuls the
     * trial's variants instead, call by call (pftune.h). The per-head and
     * per-node pools keep the choice: their calls run side by side, so
     * their times would not say which variant was faster. */
    const int hw = w->pft.choice;
    dsr1_pool_set_hwpf(dsr1_cpu_pool(w), hw);
    for (int k = 0; k < w->n_hpools; k++) dsr1_pool_set_hwpf(w->hpool[k], hw);
    for (int k = 0; k < DSR1_NUMA_MAX_NODES; k++) dsr1_pool_set_hwpf(w->dev->npool[k], hw);
    w->one_token = s->n == 1;
    dsr1_pool_set_tune(dsr1_cpu_pool(w), w->one_token && dsr1_pftune_trial(&w->pft) ? &w->pft : NULL);
    return 0;
}

/* Every op ran to completion when it was called. */
static int cpu_step_end(void *wsp, dsr1_error *err)
{
    cpu_ws *w = wsp;
    (void)err;
    w->in_step = 0;
    dsr1_pool_set_tune(dsr1_cpu_pool(w), NULL);
    if (w->one_token) dsr1_pftune_step_done(&w->pft);
    w->one_token = 0;
    return 0;
}

static void copy_rows(const float *src, int64_t lds, int n, int cols, float *dst, int64_t ldd)
{
    for (int t = 0; t < n; t++)
        memmove(dst + t * ldd, src + t * lds, (size_t)cols * sizeof(float));
}

static void cpu_write(void *ws, const float *src, int64_t lds, int n, int cols, dsr1_view dst)
{
    (void)ws;
    copy_rows(src, lds, n, cols, dsr1_cpu_ptr(dst), dst.ld);
}

static void cpu_read(void *ws, dsr1_view src, int n, int cols, float *dst, int64_t ldd)
{
    (void)ws;
    copy_rows(dsr1_cpu_ptr(src), src.ld, n, cols, dst, ldd);
}

static void cpu_gather(void *ws, dsr1_view src, const int32_t *rows, int n, int cols, dsr1_view dst)
{
    (void)ws;
    const float *s = dsr1_cpu_ptr(src);
    float *d = dsr1_cpu_ptr(dst);
    for (int i = 0; i < n; i++)
        memcpy(d + i * dst.ld, s + rows[i] * src.ld, (size_t)cols * sizeof(float));
}

static void cpu_scatter(void *ws, dsr1_view src, const int32_t *rows, int n, int cols, dsr1_view dst)
{
    (void)ws;
    const float *s = dsr1_cpu_ptr(src);
    float *d = dsr1_cpu_ptr(dst);
    for (int i = 0; i < n; i++)
        memcpy(d + rows[i] * dst.ld, s + i * src.ld, (size_t)cols * sizeof(float));
}

static void cpu_add(void *ws, dsr1_view y, dsr1_view x, int n, int cols)
{
    (void)ws;
    float *yp = dsr1_cpu_ptr(y);
    const float *xp = dsr1_cpu_ptr(x);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < cols; i++) yp[t * y.ld + i] += xp[t * x.ld + i];
}

/* ---- elementwise stages --------------------------------------------------------- */

static void cpu_embed(void *wsp, const dsr1_bweight *table, dsr1_view out)
{
    cpu_ws *w = wsp;
    const dsr1_wmat *m = dsr1_cpu_mat(table, 0);
    float *o = dsr1_cpu_ptr(out);
    for (int t = 0; t < w->step.n; t++) dsr1_wmat_dequant_row(m, w->step.ids[t], o + t * out.ld);
}

/* ---- tokens on the pool ------------------------------------------------------------ */

typedef struct par_job {
    void (*fn)(void *ctx, int t0, int t1);
    void *ctx;
    int n;
} par_job;

static void par_task(void *c, int task, int ntasks)
{
    const par_job *j = c;
    int t0 = task * DSR1_CPU_PAR_ROWS, t1 = t0 + DSR1_CPU_PAR_ROWS < j->n ? t0 + DSR1_CPU_PAR_ROWS : j->n;
    (void)ntasks;
    j->fn(j->ctx, t0, t1);
}

void dsr1_cpu_par_rows(cpu_ws *w, int n, void (*fn)(void *ctx, int t0, int t1), void *ctx)
{
    int tasks = (n + DSR1_CPU_PAR_ROWS - 1) / DSR1_CPU_PAR_ROWS;
    if (tasks < 2) {
        fn(ctx, 0, n);
        return;
    }
    par_job j = {fn, ctx, n};
    dsr1_pool_run(dsr1_cpu_pool(w), par_task, &j, tasks);
}

typedef struct norm_job {
    const float *x, *w;
    float *y;
    int64_t ldx, ldy;
    int dim;
    float eps;
} norm_job;

static void norm_rows(void *c, int t0, int t1)
{
    const norm_job *j = c;
    for (int t = t0; t < t1; t++) {
        const float *xr = j->x + t * j->ldx;
        float *yr = j->y + t * j->ldy;
        double ss = 0;
        for (int i = 0; i < j->dim; i++) ss += (double)xr[i] * xr[i];
        float r = (float)(1.0 / sqrt(ss / j->dim + (double)j->eps));
        for (int i = 0; i < j->dim; i++) yr[i] = xr[i] * r * j->w[i];
    }
}

static void cpu_rmsnorm(void *ws, dsr1_view xv, const dsr1_bweight *wt, int dim, float eps, int n,
                        dsr1_view yv)
{
    DSR1_ASSERT(dsr1_cpu_mat(wt, 0)->type == DSR1_T_F32);
    norm_job j = {.x = dsr1_cpu_ptr(xv), .w = dsr1_cpu_mat(wt, 0)->data, .y = dsr1_cpu_ptr(yv),
                  .ldx = xv.ld, .ldy = yv.ld, .dim = dim, .eps = eps};
    dsr1_cpu_par_rows(ws, n, norm_rows, &j);
}

/* Whether the fast mode sends this matmul to oneDNN: never in the exact
 * F32 mode; FP8 weights from DSR1_CPU_DNNL_MIN_N tokens when they run in
 * bf16 (--fp8-prefill bf16). Measured on Zen 4 (README, "Fast and
 * deterministic mode"), oneDNN's AVX-512 BF16 kernels won there from 128
 * tokens, lost or tied for BF16 weights (0.54-0.99 of our speed), and
 * INT8's W8A8 kernel beat them. With AMX every 8-bit weight runs W8A8 and
 * BF16 weights run on our own tiles (matmul_amx_avx512.c), which beat
 * oneDNN's bf16 tiles: for BF16 on an Emerald Rapids Xeon, 2 threads,
 * `bench kernels --type bf16 --n 32,512` on 2048x7168, 7168x2048,
 * 24576x1536, 7168x16384, 18432x7168 and 576x7168 ran 1.3-2.6x oneDNN's
 * GFLOP/s in two runs (README, "AMX"). */
int dsr1_cpu_take_dnnl(const cpu_ws *w, const dsr1_wmat *m, int n, dsr1_act act)
{
    if (!w->dnnl || act == DSR1_ACT_F32) return 0;
    return n >= DSR1_CPU_DNNL_MIN_N && m->type == DSR1_T_FP8_E4M3 && act != DSR1_ACT_INT8_FAST;
}

void dsr1_cpu_matmul(cpu_ws *w, const dsr1_wmat *m, const float *x, int64_t ldx, float *y,
                     int64_t ldy, int n, dsr1_act act)
{
    /* A refusal (no fast kernel for the shape, out of memory) leaves y to
     * our kernels, in the same bf16 precision. */
    if (dsr1_cpu_take_dnnl(w, m, n, act) && dsr1_dnnl_matmul(w->dnnl, dsr1_cpu_pool(w), m, x, ldx, y, ldy, n) == 0)
        return;
    dsr1_matmul(dsr1_cpu_pool(w), m, x, ldx, y, ldy, n, act);
}

static void cpu_matmul(void *ws, const dsr1_bweight *w, dsr1_view x, dsr1_view y, int n, dsr1_act act)
{
    dsr1_cpu_matmul(ws, dsr1_cpu_mat(w, 0), dsr1_cpu_ptr(x), x.ld, dsr1_cpu_ptr(y), y.ld, n,
                    dsr1_cpu_act(ws, act));
}

typedef struct rope_job {
    float *x;
    int64_t ld, hstride;
    const float *freqs;
    const int32_t *pos;
    int heads, half;
} rope_job;

static void rope_rows(void *c, int t0, int t1)
{
    const rope_job *j = c;
    const float *freqs = j->freqs;
    const int32_t *pos = j->pos;
    const int half = j->half, heads = j->heads;
    const int64_t hstride = j->hstride;
    float *x = j->x, cs[256], sn[256];
    for (int t = t0; t < t1; t++) {
        for (int i = 0; i < half; i++) {
            float a = (float)pos[t] * freqs[i]; /* float32 product, as the reference table */
            cs[i] = (float)cos((double)a);
            sn[i] = (float)sin((double)a);
        }
        for (int h = 0; h < heads; h++) {
            float *v = x + t * j->ld + h * hstride;
            for (int i = 0; i < half; i++) {
                float x0 = v[2 * i], x1 = v[2 * i + 1];
                v[2 * i] = x0 * cs[i] - x1 * sn[i];
                v[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
            }
        }
    }
}

static void cpu_rope(void *wsp, dsr1_view xv, int heads, int64_t hstride, int rope_dim,
                     const dsr1_bweight *fw)
{
    cpu_ws *ws = wsp;
    DSR1_ASSERT(rope_dim / 2 <= 256);
    rope_job j = {.x = dsr1_cpu_ptr(xv), .ld = xv.ld, .hstride = hstride,
                  .freqs = dsr1_cpu_mat(fw, 0)->data, .pos = ws->step.pos, .heads = heads,
                  .half = rope_dim / 2};
    dsr1_cpu_par_rows(ws, ws->step.n, rope_rows, &j);
}

/* gate/up with silu into ha (hb scratch) on pool p, our kernels. */
static void gate_up_on(dsr1_pool *p, float *ha, float *hb, const dsr1_wmat *gate,
                       const dsr1_wmat *up, const float *x, int64_t ldx, int n, dsr1_act act)
{
    int64_t I = gate->rows;
    if (gate->type == up->type) {
        /* one pool run and one preparation of x for both halves */
        dsr1_ffn_gate_up(p, gate, up, x, ldx, ha, I, n, act);
    } else {
        dsr1_matmul(p, gate, x, ldx, ha, I, n, act);
        dsr1_matmul(p, up, x, ldx, hb, I, n, act);
        dsr1_silu_mul(ha, hb, (int64_t)n * I);
    }
}

void dsr1_cpu_gated_mlp_on(dsr1_pool *p, float *ha, float *hb, const dsr1_wmat *gate,
                           const dsr1_wmat *up, const dsr1_wmat *down, const float *x,
                           int64_t ldx, int n, float *y, int64_t ldy, dsr1_act act)
{
    gate_up_on(p, ha, hb, gate, up, x, ldx, n, act);
    dsr1_matmul(p, down, ha, gate->rows, y, ldy, n, act);
}

void dsr1_cpu_gated_mlp(cpu_ws *w, const dsr1_wmat *gate, const dsr1_wmat *up, const dsr1_wmat *down,
                      const float *x, int64_t ldx, int n, float *y, int64_t ldy, dsr1_act act)
{
    int64_t I = gate->rows;
    if (dsr1_cpu_take_dnnl(w, gate, n, act) && dsr1_cpu_take_dnnl(w, up, n, act)) {
        dsr1_cpu_matmul(w, gate, x, ldx, w->ha, I, n, act);
        dsr1_cpu_matmul(w, up, x, ldx, w->hb, I, n, act);
        dsr1_silu_mul(w->ha, w->hb, (int64_t)n * I);
    } else {
        gate_up_on(dsr1_cpu_pool(w), w->ha, w->hb, gate, up, x, ldx, n, act);
    }
    dsr1_cpu_matmul(w, down, w->ha, I, y, ldy, n, act);
}

static void cpu_ffn(void *ws, const dsr1_bweight *gate, const dsr1_bweight *up,
                    const dsr1_bweight *down, dsr1_view x, int n, dsr1_view y, dsr1_act act)
{
    dsr1_cpu_gated_mlp(ws, dsr1_cpu_mat(gate, 0), dsr1_cpu_mat(up, 0), dsr1_cpu_mat(down, 0),
                       dsr1_cpu_ptr(x), x.ld, n, dsr1_cpu_ptr(y), y.ld, dsr1_cpu_act(ws, act));
}

/* ---- the table ------------------------------------------------------------------ */

static const dsr1_backend_ops cpu_ops = {
    .version = DSR1_BACKEND_VERSION,
    .size = sizeof(dsr1_backend_ops),
    .name = "cpu",
    .priority = 0,
    .probe = cpu_probe,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .describe = cpu_describe,
    .load = cpu_load,
    .buf_create = cpu_buf_create,
    .buf_free = cpu_buf_free,
    .kv_create = dsr1_cpu_kv_create,
    .kv_free = dsr1_cpu_kv_free,
    .kv_read = dsr1_cpu_kv_read,
    .kv_write = dsr1_cpu_kv_write,
    .kv_copy = dsr1_cpu_kv_copy,
    .ws_create = cpu_ws_create,
    .ws_free = cpu_ws_free,
    .ws_threads = cpu_ws_threads,
    .step_begin = cpu_step_begin,
    .step_end = cpu_step_end,
    .write = cpu_write,
    .read = cpu_read,
    .gather = cpu_gather,
    .scatter = cpu_scatter,
    .add = cpu_add,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .rope = cpu_rope,
    .kv_store = dsr1_cpu_kv_store,
    .mla_attention = dsr1_cpu_mla_attention,
    .ffn = cpu_ffn,
    .moe = dsr1_cpu_moe,
    .moe_choice = dsr1_cpu_moe_choice,
    .mla_naive = 1,
};

const dsr1_backend_ops *dsr1_backend_cpu(void) { return &cpu_ops; }
