/*
 * matmul_dnnl.c - the fast mode's prefill GEMM: y = x W^T through oneDNN's
 * matmul primitive (bf16 x bf16 -> f32; AVX-512 BF16 kernels on Zen 4 and
 * Cooper Lake, AMX on Sapphire Rapids and later), for the large-n matmuls
 * of a prefill chunk.
 *
 * How a call runs: x is rounded to bf16 once (the bits dsr1_matmul's BF16
 * mode uses); the output rows are cut into panels of DSR1_DNNL_PANEL rows;
 * each thread of dsr1's own pool takes a fixed set of panels, dequantises a
 * panel's weights to bf16 into its own buffer (the same bf16 values as the
 * BF16-mode kernels use, except FP8: there the block scale is folded into
 * the weight, bf16(e4m3 * scale), where our kernels fold it into x) and runs
 * one oneDNN matmul on it, writing its columns of y in place. The model is
 * mmap'd and never fits twice in memory: only one panel per thread exists
 * in bf16 at a time.
 *
 * Threading: Debian's libdnnl is built with OpenMP. dsr1 keeps its own pool
 * and gives oneDNN one thread per pool thread: every primitive is created
 * and executed with the calling thread's OpenMP thread count set to 1 (an
 * ICV of that thread only), so oneDNN never starts an OpenMP team that
 * would compete with the pool for the cores. Each pool slot has its own
 * stream and its own scratchpad (user scratchpad mode), so slots never
 * share mutable oneDNN state.
 *
 * Not deterministic in dsr1's sense: oneDNN's blocking (and so a token's
 * summation order) may depend on n and on the panel shape. That is why the
 * backend uses this only in the fast mode, never with --deterministic, and
 * why tests compare it with the reference within a tolerance.
 *
 * State: the primitive cache (per shape) and the slots live in a
 * dsr1_dnnl owned by one CPU workspace; nothing here is global. oneDNN's
 * own primitive cache is a library-internal one we do not rely on.
 */
#include "kernels.h"
#include "matmul_impl.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>

#include "../../core/numeric.h"

/* libgomp (linked by libdnnl; -lgomp in the Makefile): the calling
 * thread's OpenMP thread count. Declared here so no <omp.h> is needed
 * (clang in Debian has none without libomp-dev). */
extern void omp_set_num_threads(int n);

#define CACHE_CAP 32 /* shapes: a prefill chunk of R1 has about 12 */
#define MAX_SLOTS 256

typedef struct prim_entry {
    int64_t n, k, p, ldx, ldy; /* tokens, cols, panel rows, x/y strides */
    dnnl_primitive_t prim;
    const_dnnl_primitive_desc_t pd; /* owned by prim */
    size_t scratch;                 /* its scratchpad bytes */
    uint64_t used;                  /* last use (LRU eviction) */
} prim_entry;

typedef struct slot {
    dnnl_stream_t stream;
    uint16_t *panel;           /* [DSR1_DNNL_PANEL][ldw] bf16, 64-aligned */
    size_t panel_cap;          /* bytes */
    void *scratch;             /* oneDNN scratchpad, 64-aligned */
    size_t scratch_cap;
} slot;

struct dsr1_dnnl {
    dnnl_engine_t engine;
    prim_entry cache[CACHE_CAP];
    int n_cache;
    uint64_t clock;
    slot slots[MAX_SLOTS];
    int n_slots;
    uint16_t *xb;              /* [n][ldxb] bf16(x), 64-aligned */
    size_t xb_cap;
    char impl[64];             /* oneDNN's name for the last kernel created */
};

/* ---- context ---------------------------------------------------------------- */

int dsr1_dnnl_usable(void)
{
    /* avx512_core_bf16 and amx contain each other's bit patterns: test
     * that every bit of avx512_core_bf16 is present. */
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    return (isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) == (unsigned)dnnl_cpu_isa_avx512_core_bf16;
}

int dsr1_dnnl_has_amx(void)
{
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    return (isa & (unsigned)dnnl_cpu_isa_avx512_core_amx) == (unsigned)dnnl_cpu_isa_avx512_core_amx;
}

int dsr1_dnnl_create(dsr1_dnnl **out, dsr1_error *err)
{
    *out = NULL;
    dsr1_dnnl *d = calloc(1, sizeof *d);
    if (!d) return dsr1_errorf(err, DSR1_ENOMEM, "onednn: out of memory");
    dnnl_status_t st = dnnl_engine_create(&d->engine, dnnl_cpu, 0);
    if (st != dnnl_success) {
        free(d);
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "onednn: cannot create a CPU engine (status %d)",
                           (int)st);
    }
    *out = d;
    return 0;
}

void dsr1_dnnl_free(dsr1_dnnl *d)
{
    if (!d) return;
    for (int i = 0; i < d->n_cache; i++) dnnl_primitive_destroy(d->cache[i].prim);
    for (int i = 0; i < d->n_slots; i++) {
        dnnl_stream_destroy(d->slots[i].stream);
        free(d->slots[i].panel);
        free(d->slots[i].scratch);
    }
    free(d->xb);
    dnnl_engine_destroy(d->engine);
    free(d);
}

const char *dsr1_dnnl_impl(const dsr1_dnnl *d) { return d && d->impl[0] ? d->impl : "none"; }

/* Grow *buf to at least `bytes` (64-aligned, contents dropped). */
static int grow(void **buf, size_t *cap, size_t bytes)
{
    if (*cap >= bytes) return 0;
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) return -1;
    free(*buf);
    *buf = p;
    *cap = bytes;
    return 0;
}

/* ---- primitives ------------------------------------------------------------------ */

static int md(dnnl_memory_desc_t *m, int64_t d0, int64_t d1, int64_t s0, int64_t s1,
              dnnl_data_type_t t)
{
    dnnl_dims_t dims = {d0, d1}, strides = {s0, s1};
    return dnnl_memory_desc_init_by_strides(m, 2, dims, t, strides) == dnnl_success ? 0 : -1;
}

/* The primitive for src [n][k] (stride ldx) x weights [k][p] stored
 * transposed (the panel's rows, stride ldw) -> dst [n][p] (stride ldy).
 * NULL when oneDNN has no kernel for it, or only its reference one. */
static prim_entry *prim_for(dsr1_dnnl *d, int64_t n, int64_t k, int64_t p, int64_t ldx,
                            int64_t ldw, int64_t ldy)
{
    d->clock++;
    for (int i = 0; i < d->n_cache; i++) {
        prim_entry *e = &d->cache[i];
        if (e->n == n && e->k == k && e->p == p && e->ldx == ldx && e->ldy == ldy) {
            e->used = d->clock;
            return e;
        }
    }
    dnnl_memory_desc_t src, wei, dst;
    if (md(&src, n, k, ldx, 1, dnnl_bf16) || md(&wei, k, p, 1, ldw, dnnl_bf16) ||
        md(&dst, n, p, ldy, 1, dnnl_f32))
        return NULL;
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &src, &wei, NULL, &dst) != dnnl_success) return NULL;
    dnnl_primitive_attr_t attr;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success) return NULL;
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    dnnl_primitive_desc_t pd = NULL;
    omp_set_num_threads(1); /* oneDNN sizes its decomposition for one thread */
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, d->engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return NULL;
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    if (!impl || strstr(impl, "ref")) { /* the reference kernel: slower than ours */
        dnnl_primitive_desc_destroy(pd);
        return NULL;
    }
    snprintf(d->impl, sizeof d->impl, "%s", impl);
    dnnl_primitive_t prim = NULL;
    st = dnnl_primitive_create(&prim, pd);
    size_t scratch = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) return NULL;
    int at = d->n_cache;
    if (at == CACHE_CAP) { /* evict the least recently used */
        at = 0;
        for (int i = 1; i < CACHE_CAP; i++)
            if (d->cache[i].used < d->cache[at].used) at = i;
        dnnl_primitive_destroy(d->cache[at].prim);
    } else {
        d->n_cache++;
    }
    prim_entry *e = &d->cache[at];
    *e = (prim_entry){.n = n, .k = k, .p = p, .ldx = ldx, .ldy = ldy, .prim = prim,
                      .scratch = scratch, .used = d->clock};
    return e;
}

/* ---- one call ----------------------------------------------------------------- */

typedef struct dnnl_job {
    dsr1_dnnl *d;
    const dsr1_wmat *w;
    int n, avx, failed;
    int64_t ldxb, ldw, ldy;
    float *y;
    prim_entry *full, *tail; /* panels of DSR1_DNNL_PANEL rows, the last one */
} dnnl_job;

/* Rows [r0, r0 + pr) of w as bf16 into panel (stride ldw, zero padded). */
static void dequant_panel(const dnnl_job *j, int64_t r0, int64_t pr, uint16_t *panel, float *tmp)
{
    const dsr1_wmat *w = j->w;
    for (int64_t i = 0; i < pr; i++) {
        uint16_t *o = panel + i * j->ldw;
        if (j->avx) {
            dsr1_mm_deq_bf16_avx512(w, r0 + i, 0, w->cols, o);
            continue;
        }
        for (int64_t c0 = 0; c0 < w->cols; c0 += DSR1_MM_KC_BF16) {
            int64_t len = w->cols - c0 < DSR1_MM_KC_BF16 ? w->cols - c0 : DSR1_MM_KC_BF16;
            dsr1_wmat_dequant_span(w, r0 + i, c0, len, tmp);
            for (int64_t c = 0; c < len; c++) o[c0 + c] = dsr1_mm_to_bf16(tmp[c]);
        }
    }
}

static int exec(const dnnl_job *j, slot *s, prim_entry *e, int64_t r0)
{
    const_dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_get_primitive_desc(e->prim, &pd);
    dnnl_memory_t m[4] = {0};
    const dnnl_query_t q[4] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md,
                               dnnl_query_scratchpad_md};
    void *h[4] = {j->d->xb, s->panel, j->y + r0, s->scratch};
    const int arg[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
    dnnl_exec_arg_t args[4];
    int nargs = e->scratch ? 4 : 3, rc = 0;
    for (int i = 0; i < nargs && !rc; i++) {
        rc = dnnl_memory_create(&m[i], dnnl_primitive_desc_query_md(pd, q[i], 0), j->d->engine,
                                h[i]) != dnnl_success;
        args[i] = (dnnl_exec_arg_t){arg[i], m[i]};
    }
    if (!rc) rc = dnnl_primitive_execute(e->prim, s->stream, nargs, args) != dnnl_success;
    for (int i = 0; i < 4; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    return rc;
}

/* Pool task `task` of `ntasks`: panels task, task + ntasks, ... (a fixed
 * split, so each slot's stream and buffers serve one thread). */
static void dnnl_task(void *ctx, int task, int ntasks)
{
    dnnl_job *j = ctx;
    slot *s = &j->d->slots[task];
    float tmp[DSR1_MM_KC_BF16];
    omp_set_num_threads(1);
    int64_t rows = j->w->rows;
    for (int64_t r0 = (int64_t)task * DSR1_DNNL_PANEL; r0 < rows; r0 += (int64_t)ntasks * DSR1_DNNL_PANEL) {
        int64_t pr = rows - r0 < DSR1_DNNL_PANEL ? rows - r0 : DSR1_DNNL_PANEL;
        dequant_panel(j, r0, pr, s->panel, tmp);
        if (exec(j, s, pr == DSR1_DNNL_PANEL ? j->full : j->tail, r0)) j->failed = 1;
    }
}

/* Streams and buffers for `nslots` pool threads, each holding a panel of
 * ldw columns and a scratchpad of `scratch` bytes. */
static int slots_ready(dsr1_dnnl *d, int nslots, int64_t ldw, size_t scratch)
{
    if (nslots > MAX_SLOTS) return -1;
    for (; d->n_slots < nslots; d->n_slots++)
        if (dnnl_stream_create(&d->slots[d->n_slots].stream, d->engine, dnnl_stream_default_flags) !=
            dnnl_success)
            return -1;
    for (int i = 0; i < nslots; i++) {
        slot *s = &d->slots[i];
        if (grow((void **)&s->panel, &s->panel_cap, (size_t)DSR1_DNNL_PANEL * (size_t)ldw * 2) ||
            grow(&s->scratch, &s->scratch_cap, scratch))
            return -1;
    }
    return 0;
}

int dsr1_dnnl_matmul(dsr1_dnnl *d, dsr1_pool *p, const dsr1_wmat *w, const float *x,
                     int64_t ldx, float *y, int64_t ldy, int n)
{
    if (!d || n <= 0 || w->rows <= 0) return -1;
    int avx = p ? dsr1_pool_avx512(p) : dsr1_mm_avx512_usable();
    dnnl_job j = {.d = d, .w = w, .n = n, .avx = avx, .y = y, .ldy = ldy};
    j.ldxb = (w->cols + 31) & ~(int64_t)31;
    /* A panel row stride off a multiple of 4 KiB (rows 4 KiB apart would
     * share L1 sets in oneDNN's copy of the panel). */
    j.ldw = j.ldxb % 2048 == 0 ? j.ldxb + 32 : j.ldxb;
    int64_t rows = w->rows, tail = rows % DSR1_DNNL_PANEL;
    if (rows >= DSR1_DNNL_PANEL)
        j.full = prim_for(d, n, w->cols, DSR1_DNNL_PANEL, j.ldxb, j.ldw, ldy);
    if (tail) j.tail = prim_for(d, n, w->cols, tail, j.ldxb, j.ldw, ldy);
    if ((rows >= DSR1_DNNL_PANEL && !j.full) || (tail && !j.tail)) return -1;
    size_t scratch = 0;
    if (j.full) scratch = j.full->scratch;
    if (j.tail && j.tail->scratch > scratch) scratch = j.tail->scratch;
    int npanels = (int)((rows + DSR1_DNNL_PANEL - 1) / DSR1_DNNL_PANEL);
    int nslots = dsr1_pool_size(p);
    if (nslots > npanels) nslots = npanels;
    if (slots_ready(d, nslots, j.ldw, scratch) ||
        grow((void **)&d->xb, &d->xb_cap, (size_t)n * (size_t)j.ldxb * 2))
        return -1;
    /* x to bf16, the bits the BF16-mode kernels use. */
    if (avx) {
        dsr1_mm_bf16_rows_avx512(x, ldx, n, w->cols, d->xb, j.ldxb);
    } else {
        for (int t = 0; t < n; t++)
            for (int64_t c = 0; c < j.ldxb; c++)
                d->xb[t * j.ldxb + c] = c < w->cols ? dsr1_mm_to_bf16(x[t * ldx + c]) : 0;
    }
    dsr1_pool_run(p, dnnl_task, &j, nslots);
    return j.failed ? -1 : 0;
}
