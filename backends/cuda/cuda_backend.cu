/*
 * cuda_backend.cu - the CUDA (and, through cuda_compat.h, HIP) backend's
 * table for the seam (backends/backend.h): probing for a device, the
 * device context, weight upload, activation buffers, the KV page storage,
 * workspaces, steps (with CUDA graphs for decode) and the shared-library
 * entry point the registry dlopens (libdsr1-cuda.so / libdsr1-hip.so).
 * The ops themselves are cuda_ops.cu; the kernels the other .cu files.
 *
 * Steps and graphs: step_begin stages the batch (ids, positions, slots,
 * page tables) through a pinned arena into device arrays; every op then
 * enqueues kernels on the workspace's stream. For steps of at most
 * CU_GRAPH_MAX_N tokens the stream is captured instead of run: each op
 * mixes its arguments (pointers, shapes, modes; never the data the kernels
 * read from device memory) into a signature, and step_end replays the
 * graph cached under that signature, or instantiates the new capture. A
 * steady decode batch thus replays one graph per step; the data that
 * changes (ids, positions, routing, page tables) is read by the kernels
 * from device memory that the graph's own copies refresh. Results are the
 * same bits with or without graphs (the same kernels with the same
 * arguments); DSR1_CUDA_GRAPHS=0 turns capture off for debugging.
 *
 * Not done: placing weights in host memory (DSR1_PLACE_HOST is refused
 * with a message rather than uploaded silently), several GPUs.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

/* Keep the mirrored enums in step with core's. */
#define SAME(a, b) ((int)(a) == (int)(b))
static_assert(SAME(CU_T_F32, DSR1_T_F32) && SAME(CU_T_F16, DSR1_T_F16) && SAME(CU_T_BF16, DSR1_T_BF16) &&
                  SAME(CU_T_FP8, DSR1_T_FP8_E4M3) && SAME(CU_T_INT8, DSR1_T_INT8) &&
                  SAME(CU_T_INT4, DSR1_T_INT4),
              "weight types");
static_assert(SAME(CU_KV_BF16, DSR1_KV_BF16) && SAME(CU_KV_FP8, DSR1_KV_FP8) && SAME(CU_KV_F32, DSR1_KV_F32),
              "kv types");
static_assert(SAME(CU_ACT_F32, DSR1_ACT_F32) && SAME(CU_ACT_BF16, DSR1_ACT_BF16) &&
                  SAME(CU_ACT_INT8, DSR1_ACT_INT8),
              "activation modes");

/* ---- errors ------------------------------------------------------------------------ */

int cu_errorf(dsr1_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

void cu_fail(cu_ws *w, int code, const char *fmt, ...)
{
    if (w->err_code) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err_msg, sizeof w->err_msg, fmt, ap);
    va_end(ap);
    w->err_code = code;
}

int cu_check(cu_ws *w, const char *what)
{
    dsr1_gpuError e = dsr1_gpuGetLastError();
    if (e == dsr1_gpuSuccess) return 0;
    cu_fail(w, DSR1_EIO, "%s %s: %s", DSR1_GPU_NAME, what, dsr1_gpuGetErrorString(e));
    return -1;
}

/* FNV-1a over the bytes: the graph signature. */
void cu_sig(cu_ws *w, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) w->sig = (w->sig ^ b[i]) * 1099511628211ull;
}

/* ---- the pinned arena ----------------------------------------------------------------- */

void *cu_arena_take(cu_ws *w, size_t bytes, void **dev_mirror)
{
    size_t off = (w->arena_used + 255) & ~(size_t)255;
    if (off + bytes > w->arena_cap) {
        cu_fail(w, DSR1_ERANGE, "%s: step staging arena full (%zu of %zu bytes)", DSR1_GPU_NAME,
                off + bytes, w->arena_cap);
        return NULL;
    }
    w->arena_used = off + bytes;
    *dev_mirror = w->d_arena + off;
    return w->h_arena + off;
}

void *cu_stage(cu_ws *w, const void *src, size_t bytes)
{
    void *dev;
    void *h = cu_arena_take(w, bytes, &dev);
    if (!h) return NULL;
    memcpy(h, src, bytes);
    if (dsr1_gpuMemcpyAsync(dev, h, bytes, dsr1_gpuMemcpyHostToDevice, w->st) != dsr1_gpuSuccess) {
        cu_check(w, "staging copy");
        return NULL;
    }
    return dev;
}

int cu_pending_add(cu_ws *w, const void *src, void *dst, size_t row_bytes, int64_t ld_bytes, int rows)
{
    if (w->n_pend == w->pend_cap) {
        int cap = w->pend_cap ? 2 * w->pend_cap : 64;
        cu_pending *p = (cu_pending *)realloc(w->pend, (size_t)cap * sizeof *p);
        if (!p) {
            cu_fail(w, DSR1_ENOMEM, "%s: out of host memory", DSR1_GPU_NAME);
            return -1;
        }
        w->pend = p;
        w->pend_cap = cap;
    }
    w->pend[w->n_pend++] = cu_pending{src, dst, row_bytes, ld_bytes, rows};
    return 0;
}

/* ---- device ---------------------------------------------------------------------------- */

/* Why the runtime found no device, in the user's terms. */
static void no_device_why(dsr1_gpuError e, char *why, size_t n)
{
#if DSR1_GPU_HIP
    snprintf(why, n, "no HIP device or driver (%s)", dsr1_gpuGetErrorString(e));
#else
    if (e == cudaErrorInsufficientDriver) {
        /* the static runtime opens the driver itself: say which half is missing */
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(why, n, "no CUDA driver (libcuda.so.1 not found)");
            return;
        }
        dlclose(h);
        snprintf(why, n, "the CUDA driver is too old for this build (CUDA %d runtime)",
                 CUDART_VERSION / 1000);
    } else if (e == cudaErrorNoDevice) {
        snprintf(why, n, "no CUDA device");
    } else {
        snprintf(why, n, "no usable CUDA device (%s)", dsr1_gpuGetErrorString(e));
    }
#endif
}

static int cu_probe(char *why, size_t n)
{
    int count = 0;
    dsr1_gpuError e = dsr1_gpuGetDeviceCount(&count);
    if (e != dsr1_gpuSuccess) {
        (void)dsr1_gpuGetLastError();
        no_device_why(e, why, n);
        return 0;
    }
    if (count == 0) {
        snprintf(why, n, "no %s device", DSR1_GPU_HIP ? "HIP" : "CUDA");
        return 0;
    }
    dsr1_gpuDeviceProp p;
    if (dsr1_gpuGetDeviceProperties(&p, 0) != dsr1_gpuSuccess) {
        snprintf(why, n, "device 0 does not answer");
        return 0;
    }
#if !DSR1_GPU_HIP
    if (p.major < 8) {
        snprintf(why, n, "%s is compute capability %d.%d; this build needs 8.0 or newer", p.name,
                 p.major, p.minor);
        return 0;
    }
#endif
    int drv = 0;
    (void)dsr1_gpuDriverGetVersion(&drv);
    /* what `dsr1 info --hw` shows for the GPU */
    snprintf(why, n, "%d device%s; 0: %s, %.1f GiB, %s %d.%d, %d SMs, driver %d.%d", count,
             count > 1 ? "s" : "", p.name, (double)p.totalGlobalMem / (1 << 30),
             DSR1_GPU_HIP ? "arch" : "compute capability", p.major, p.minor, p.multiProcessorCount,
             drv / 1000, (drv % 1000) / 10);
    return 1;
}

static int cu_create(const dsr1_backend_options *o, void **out, dsr1_error *err)
{
    char why[160];
    if (!cu_probe(why, sizeof why)) return cu_errorf(err, DSR1_EUNSUPPORTED, "%s backend: %s", DSR1_GPU_NAME, why);
    cu_dev *d = (cu_dev *)calloc(1, sizeof *d);
    if (!d) return cu_errorf(err, DSR1_ENOMEM, "%s backend: out of memory", DSR1_GPU_NAME);
    d->device = o ? o->device : 0;
    int count = 0;
    (void)dsr1_gpuGetDeviceCount(&count);
    if (d->device < 0 || d->device >= count) {
        free(d);
        return cu_errorf(err, DSR1_EINVAL, "%s backend: device %d, expected 0..%d", DSR1_GPU_NAME,
                         o ? o->device : 0, count - 1);
    }
    if (dsr1_gpuSetDevice(d->device) != dsr1_gpuSuccess ||
        dsr1_gpuGetDeviceProperties(&d->prop, d->device) != dsr1_gpuSuccess ||
        dsr1_gpuStreamCreate(&d->stream) != dsr1_gpuSuccess) {
        free(d);
        return cu_errorf(err, DSR1_EIO, "%s backend: cannot open device %d: %s", DSR1_GPU_NAME,
                         o ? o->device : 0, dsr1_gpuGetErrorString(dsr1_gpuGetLastError()));
    }
    if (cu_mla_init() != 0) {
        (void)dsr1_gpuStreamDestroy(d->stream);
        free(d);
        return cu_errorf(err, DSR1_EUNSUPPORTED, "%s backend: the attention kernel's shared memory "
                         "is refused on this device", DSR1_GPU_NAME);
    }
    const char *g = getenv("DSR1_CUDA_GRAPHS");
    d->graphs = !(g && !strcmp(g, "0"));
    size_t fr = 0, tot = 0;
    (void)dsr1_gpuMemGetInfo(&fr, &tot);
    snprintf(d->desc, sizeof d->desc, "%s (%s, sm_%d%d, %.1f GiB, %d SMs, warp %d, graphs %s)",
             DSR1_GPU_NAME, d->prop.name, d->prop.major, d->prop.minor, (double)tot / (1 << 30),
             d->prop.multiProcessorCount, DSR1_WARP, d->graphs ? "on" : "off");
    *out = d;
    return 0;
}

static void cu_destroy(void *dev)
{
    cu_dev *d = (cu_dev *)dev;
    if (!d) return;
    for (dsr1_bweight *w = d->weights, *nx; w; w = nx) {
        nx = w->next;
        (void)dsr1_gpuFree(w->d_data);
        (void)dsr1_gpuFree(w->d_scale);
        free(w);
    }
    (void)dsr1_gpuStreamDestroy(d->stream);
    free(d);
}

static const char *cu_describe(void *dev) { return ((cu_dev *)dev)->desc; }

/* ---- weights ----------------------------------------------------------------------------- */

static size_t scale_elem(dsr1_type t) { return t == DSR1_T_F32 ? 4 : 2; }

/* Bytes of one matrix's scales (matmul_ref.c's indexing). */
static size_t scale_bytes(const dsr1_wmat *m)
{
    if (!m->scale) return 0;
    int64_t g = m->group;
    switch (m->type) {
    case DSR1_T_FP8_E4M3:
        return (size_t)(((m->rows + g - 1) / g) * ((m->cols + g - 1) / g)) * scale_elem(m->scale_type);
    case DSR1_T_INT8:
        return (size_t)(g ? m->rows * (m->cols / g) : m->rows) * scale_elem(m->scale_type);
    case DSR1_T_INT4:
        return (size_t)(m->rows * (m->cols / g)) * scale_elem(m->scale_type);
    default:
        return 0;
    }
}

static size_t data_bytes(const dsr1_wmat *m)
{
    size_t e = m->type == DSR1_T_F32 ? 4 : m->type == DSR1_T_F16 || m->type == DSR1_T_BF16 ? 2 : 1;
    if (m->type == DSR1_T_INT4) return (size_t)(m->rows * (m->cols / 2));
    return (size_t)(m->rows * m->cols) * e;
}

/* Device copy of n bytes; HIP's FP8 wants e4m3fnuz (see cuda_compat.h). */
static int upload(cu_dev *d, const void *src, size_t n, void **out, int fp8_bytes, int fp8_scales,
                  const char *name, dsr1_error *err)
{
    *out = NULL;
    if (!n) return 0;
    if (dsr1_gpuMalloc(out, n) != dsr1_gpuSuccess) {
        size_t fr = 0, tot = 0;
        (void)dsr1_gpuGetLastError();
        (void)dsr1_gpuMemGetInfo(&fr, &tot);
        return cu_errorf(err, DSR1_ENOMEM,
                         "%s: %s needs %.1f MiB of GPU memory, %.1f MiB free of %.1f MiB (%.1f GiB "
                         "of weights loaded); use a smaller type (convert --type int4) or --backend cpu",
                         DSR1_GPU_NAME, name, n / 1048576.0, fr / 1048576.0, tot / 1048576.0,
                         d->weight_bytes / 1073741824.0);
    }
    const void *from = src;
    void *tmp = NULL;
    if (DSR1_FP8_FNUZ && (fp8_bytes || fp8_scales)) {
        tmp = malloc(n);
        if (!tmp) return cu_errorf(err, DSR1_ENOMEM, "%s: out of host memory", DSR1_GPU_NAME);
        memcpy(tmp, src, n);
        if (fp8_bytes)
            for (size_t i = 0; i < n; i++) ((uint8_t *)tmp)[i] = ((uint8_t *)tmp)[i] == 0x80 ? 0 : ((uint8_t *)tmp)[i];
        else
            for (size_t i = 0; i < n / 4; i++) ((float *)tmp)[i] *= 2.0f;
        from = tmp;
    }
    dsr1_gpuError e = dsr1_gpuMemcpy(*out, from, n, dsr1_gpuMemcpyHostToDevice);
    free(tmp);
    if (e != dsr1_gpuSuccess)
        return cu_errorf(err, DSR1_EIO, "%s: uploading %s: %s", DSR1_GPU_NAME, name, dsr1_gpuGetErrorString(e));
    d->weight_bytes += n;
    return 0;
}

static int cu_load(void *dev, const dsr1_wdesc *wd, dsr1_placement where, dsr1_bweight **out,
                   dsr1_error *err)
{
    cu_dev *d = (cu_dev *)dev;
    const char *name = wd->name ? wd->name : "weight";
    if (where == DSR1_PLACE_HOST)
        return cu_errorf(err, DSR1_EUNSUPPORTED, "%s: %s: host placement is not implemented by this "
                         "backend", DSR1_GPU_NAME, name);
    const dsr1_wmat *m = &wd->mat;
    if (m->type > DSR1_T_INT4 || wd->count < 1)
        return cu_errorf(err, DSR1_EINVAL, "%s: %s: type %d x %lld matrices, expected a weight type",
                         DSR1_GPU_NAME, name, (int)m->type, (long long)wd->count);
    size_t mb = wd->count > 1 ? wd->stride : data_bytes(m);
    size_t sb = wd->count > 1 ? wd->scale_stride : scale_bytes(m);
    if (mb < data_bytes(m) || (m->scale && sb < scale_bytes(m)))
        return cu_errorf(err, DSR1_EINVAL, "%s: %s: matrix stride %zu below its %zu bytes",
                         DSR1_GPU_NAME, name, mb, data_bytes(m));
    dsr1_bweight *w = (dsr1_bweight *)calloc(1, sizeof *w);
    if (!w) return cu_errorf(err, DSR1_ENOMEM, "%s: out of host memory", DSR1_GPU_NAME);
    int fp8 = m->type == DSR1_T_FP8_E4M3;
    int rc = upload(d, m->data, mb * (size_t)(wd->count - 1) + data_bytes(m), &w->d_data, fp8, 0, name, err);
    if (!rc && m->scale)
        rc = upload(d, m->scale, sb * (size_t)(wd->count - 1) + scale_bytes(m), &w->d_scale, 0,
                    fp8 && m->scale_type == DSR1_T_F32, name, err);
    if (rc) {
        (void)dsr1_gpuFree(w->d_data);
        free(w);
        return rc;
    }
    w->role = wd->role;
    w->m = cu_wmat{(int)m->type, m->rows, m->cols, w->d_data, w->d_scale, (int)m->scale_type,
                   m->group, (int)wd->count, mb, sb};
    w->next = d->weights;
    d->weights = w;
    *out = w;
    return 0;
}

/* ---- buffers ------------------------------------------------------------------------------ */

static int cu_buf_create(void *dev, size_t n, dsr1_bbuf **out, dsr1_error *err)
{
    (void)dev;
    dsr1_bbuf *b = (dsr1_bbuf *)calloc(1, sizeof *b);
    if (!b) return cu_errorf(err, DSR1_ENOMEM, "%s: out of host memory", DSR1_GPU_NAME);
    if (dsr1_gpuMalloc((void **)&b->d, (n ? n : 1) * sizeof(float)) != dsr1_gpuSuccess) {
        (void)dsr1_gpuGetLastError();
        free(b);
        return cu_errorf(err, DSR1_ENOMEM, "%s: an activation buffer of %.1f MiB does not fit",
                         DSR1_GPU_NAME, n * 4 / 1048576.0);
    }
    b->n = n;
    *out = b;
    return 0;
}

static void cu_buf_free(void *dev, dsr1_bbuf *b)
{
    (void)dev;
    if (!b) return;
    (void)dsr1_gpuFree(b->d);
    free(b);
}

/* ---- KV page storage ------------------------------------------------------------------------ */

static int cu_kv_create(void *dev, const dsr1_kv_layout *l, dsr1_bkv **out, dsr1_error *err)
{
    (void)dev;
    dsr1_bkv *kv = (dsr1_bkv *)calloc(1, sizeof *kv);
    if (!kv) return cu_errorf(err, DSR1_ENOMEM, "%s: out of host memory", DSR1_GPU_NAME);
    kv->l = *l;
    kv->elem = l->type == DSR1_KV_F32 ? 4 : l->type == DSR1_KV_BF16 ? 2 : 1;
    size_t rows = (size_t)l->n_pages * (size_t)l->n_layers * (size_t)l->block;
    size_t bytes = rows * (size_t)l->row * kv->elem;
    if (dsr1_gpuMalloc(&kv->d_data, bytes) != dsr1_gpuSuccess ||
        (l->type == DSR1_KV_FP8 && dsr1_gpuMalloc((void **)&kv->d_scale, rows * 4) != dsr1_gpuSuccess)) {
        (void)dsr1_gpuGetLastError();
        size_t fr = 0, tot = 0;
        (void)dsr1_gpuMemGetInfo(&fr, &tot);
        (void)dsr1_gpuFree(kv->d_data);
        free(kv);
        return cu_errorf(err, DSR1_ENOMEM, "%s: KV cache of %d pages needs %.1f MiB, %.1f MiB free",
                         DSR1_GPU_NAME, l->n_pages, bytes / 1048576.0, fr / 1048576.0);
    }
    *out = kv;
    return 0;
}

static void cu_kv_free(void *dev, dsr1_bkv *kv)
{
    (void)dev;
    if (!kv) return;
    (void)dsr1_gpuFree(kv->d_data);
    (void)dsr1_gpuFree(kv->d_scale);
    free(kv);
}

static size_t kv_row0(const dsr1_bkv *kv, int page, int layer, int first)
{
    return ((size_t)page * (size_t)kv->l.n_layers + (size_t)layer) * (size_t)kv->l.block + (size_t)first;
}

static int kv_range_ok(const dsr1_bkv *kv, int page, int layer, int first, int count, dsr1_error *err)
{
    if (page < 0 || page >= kv->l.n_pages || layer < 0 || layer >= kv->l.n_layers || first < 0 ||
        count < 0 || first + count > kv->l.block)
        return cu_errorf(err, DSR1_EINVAL, "%s kv: page %d layer %d rows %d+%d outside %d pages x %d "
                         "layers x %d rows", DSR1_GPU_NAME, page, layer, first, count, kv->l.n_pages,
                         kv->l.n_layers, kv->l.block);
    return 0;
}

static int cu_kv_read(void *dev, dsr1_bkv *kv, int page, int layer, int first, int count, void *data,
                      float *scale, dsr1_error *err)
{
    cu_dev *d = (cu_dev *)dev;
    DSR1_TRY(kv_range_ok(kv, page, layer, first, count, err));
    size_t r0 = kv_row0(kv, page, layer, first), rb = (size_t)kv->l.row * kv->elem;
    (void)dsr1_gpuStreamSynchronize(d->stream);
    dsr1_gpuError e = dsr1_gpuMemcpy(data, (char *)kv->d_data + r0 * rb, (size_t)count * rb,
                                     dsr1_gpuMemcpyDeviceToHost);
    if (e == dsr1_gpuSuccess && kv->d_scale && scale)
        e = dsr1_gpuMemcpy(scale, kv->d_scale + r0, (size_t)count * 4, dsr1_gpuMemcpyDeviceToHost);
    if (e != dsr1_gpuSuccess)
        return cu_errorf(err, DSR1_EIO, "%s kv: read failed: %s", DSR1_GPU_NAME, dsr1_gpuGetErrorString(e));
    return 0;
}

static int cu_kv_write(void *dev, dsr1_bkv *kv, int page, int layer, int first, int count,
                       const void *data, const float *scale, dsr1_error *err)
{
    cu_dev *d = (cu_dev *)dev;
    DSR1_TRY(kv_range_ok(kv, page, layer, first, count, err));
    size_t r0 = kv_row0(kv, page, layer, first), rb = (size_t)kv->l.row * kv->elem;
    size_t nb = (size_t)count * rb;
    (void)dsr1_gpuStreamSynchronize(d->stream);
    dsr1_gpuError e = dsr1_gpuMemcpy((char *)kv->d_data + r0 * rb, data, nb, dsr1_gpuMemcpyHostToDevice);
    if (e == dsr1_gpuSuccess && kv->d_scale && scale)
        e = dsr1_gpuMemcpy(kv->d_scale + r0, scale, (size_t)count * 4, dsr1_gpuMemcpyHostToDevice);
    if (e != dsr1_gpuSuccess)
        return cu_errorf(err, DSR1_EIO, "%s kv: write failed: %s", DSR1_GPU_NAME, dsr1_gpuGetErrorString(e));
    return 0;
}

static int cu_kv_copy(void *dev, dsr1_bkv *kv, int dst, int src, dsr1_error *err)
{
    cu_dev *d = (cu_dev *)dev;
    DSR1_TRY(kv_range_ok(kv, dst, 0, 0, 0, err));
    DSR1_TRY(kv_range_ok(kv, src, 0, 0, 0, err));
    size_t rows = (size_t)kv->l.n_layers * (size_t)kv->l.block, rb = (size_t)kv->l.row * kv->elem;
    size_t r_dst = kv_row0(kv, dst, 0, 0), r_src = kv_row0(kv, src, 0, 0);
    dsr1_gpuError e = dsr1_gpuMemcpyAsync((char *)kv->d_data + r_dst * rb, (char *)kv->d_data + r_src * rb,
                                          rows * rb, dsr1_gpuMemcpyDeviceToDevice, d->stream);
    if (e == dsr1_gpuSuccess && kv->d_scale)
        e = dsr1_gpuMemcpyAsync(kv->d_scale + r_dst, kv->d_scale + r_src, rows * 4,
                                dsr1_gpuMemcpyDeviceToDevice, d->stream);
    if (e == dsr1_gpuSuccess) e = dsr1_gpuStreamSynchronize(d->stream);
    if (e != dsr1_gpuSuccess)
        return cu_errorf(err, DSR1_EIO, "%s kv: page copy failed: %s", DSR1_GPU_NAME, dsr1_gpuGetErrorString(e));
    return 0;
}

/* ---- workspaces ----------------------------------------------------------------------------- */

static void cu_ws_free(void *wsp)
{
    cu_ws *w = (cu_ws *)wsp;
    if (!w) return;
    for (int i = 0; i < w->n_graphs; i++) (void)dsr1_gpuGraphExecDestroy(w->graph[i].exec);
    void *dev[] = {w->d_ids, w->d_pos, w->d_seq, w->d_table, w->d_arena, w->qcat, w->olat, w->h,
                   w->hu, w->hk, w->hku, w->slots, w->logits, w->wgt, w->sh, w->route, w->idx,
                   w->first, w->order, w->xrow, w->active_e, w->n_active, w->mla, w->xq};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) (void)dsr1_gpuFree(dev[i]);
    (void)dsr1_gpuFreeHost(w->h_arena);
    free(w->pend);
    free(w);
}

static size_t zmax(size_t a, size_t b) { return a > b ? a : b; }

/* Device scratch for the largest call (dsr1_ws_sizes). */
static int ws_alloc(cu_ws *w)
{
    const dsr1_ws_sizes *s = &w->s;
    size_t T = (size_t)s->max_tokens, H = (size_t)zmax((size_t)s->n_heads, 1);
    size_t r = (size_t)s->kv_lora_rank, row = r + (size_t)s->rope_dim, D = (size_t)s->hidden;
    size_t E = zmax((size_t)s->n_experts, 1), K = zmax((size_t)s->topk, 1);
    size_t I = zmax(zmax((size_t)s->inter, (size_t)s->moe_inter), (size_t)s->shared_inter);
    size_t ctx = zmax((size_t)s->max_ctx, 1);
    /* attention partials: up to 64 tokens per launch (at least one) */
    size_t one = cu_mla_scratch_bytes((int)H, (int)r, (int)ctx);
    w->mla_bytes = one * (T < 64 ? T : 64);
    if (w->mla_bytes > ((size_t)256 << 20)) w->mla_bytes = zmax(one, (size_t)256 << 20);
    /* INT8 sources: model inputs, expert hidden rows (K per token), heads */
    size_t xq_cols = zmax(zmax((size_t)s->max_in, K * I), H * zmax(r, 256));
    struct {
        void **p;
        size_t bytes;
    } a[] = {
        {(void **)&w->d_ids, T * 4}, {(void **)&w->d_pos, T * 4}, {(void **)&w->d_seq, T * 4},
        {(void **)&w->qcat, T * H * row * 4}, {(void **)&w->olat, T * H * r * 4},
        {(void **)&w->h, T * I * 4}, {(void **)&w->hu, T * I * 4},
        {(void **)&w->hk, T * K * I * 4}, {(void **)&w->hku, T * K * I * 4},
        {(void **)&w->slots, T * K * D * 4}, {(void **)&w->logits, T * E * 4},
        {(void **)&w->wgt, T * K * 4}, {(void **)&w->sh, T * D * 4},
        {(void **)&w->route, T * (2 * E + 256) * 4}, {(void **)&w->idx, T * K * 4},
        {(void **)&w->first, (E + 1) * 4}, {(void **)&w->order, T * K * 4},
        {(void **)&w->xrow, T * K * 4}, {(void **)&w->active_e, E * 4}, {(void **)&w->n_active, 4},
        {(void **)&w->mla, w->mla_bytes}, {(void **)&w->xq, cu_mm_int8_scratch_bytes((int)T, (int64_t)xq_cols) + T * (H + K) * 4},
    };
    for (size_t i = 0; i < sizeof a / sizeof *a; i++)
        if (dsr1_gpuMalloc(a[i].p, a[i].bytes ? a[i].bytes : 4) != dsr1_gpuSuccess) {
            (void)dsr1_gpuGetLastError();
            return -1;
        }
    /* staging: the step's arrays, page tables, gathers and reads */
    w->arena_cap = zmax((size_t)8 << 20, T * D * 4 * 4 + ((size_t)4 << 20));
    if (dsr1_gpuMallocHost((void **)&w->h_arena, w->arena_cap) != dsr1_gpuSuccess ||
        dsr1_gpuMalloc((void **)&w->d_arena, w->arena_cap) != dsr1_gpuSuccess) {
        (void)dsr1_gpuGetLastError();
        return -1;
    }
    return 0;
}

static int cu_ws_create(void *dev, const dsr1_ws_sizes *s, void **out, dsr1_error *err)
{
    cu_ws *w = (cu_ws *)calloc(1, sizeof *w);
    if (!w) return cu_errorf(err, DSR1_ENOMEM, "%s: out of host memory", DSR1_GPU_NAME);
    w->dev = (cu_dev *)dev;
    w->s = *s;
    w->st = w->dev->stream;
    if (s->kv_lora_rank > 512 || s->n_experts > 1024) {
        free(w);
        return cu_errorf(err, DSR1_EUNSUPPORTED, "%s: kv_lora_rank %d / %d experts over the kernels' "
                         "512 / 1024", DSR1_GPU_NAME, s->kv_lora_rank, s->n_experts);
    }
    if (ws_alloc(w)) {
        cu_ws_free(w);
        return cu_errorf(err, DSR1_ENOMEM, "%s: cannot allocate a workspace for %d tokens",
                         DSR1_GPU_NAME, s->max_tokens);
    }
    *out = w;
    return 0;
}

static void cu_ws_threads(void *ws, int threads)
{
    (void)ws;
    (void)threads; /* one stream; the kernels' parallelism is the device's */
}

/* ---- steps ------------------------------------------------------------------------------------ */

static int grow_table(cu_ws *w, size_t entries, dsr1_error *err)
{
    if (entries <= w->table_cap) return 0;
    (void)dsr1_gpuFree(w->d_table);
    w->d_table = NULL;
    w->table_cap = 0;
    if (dsr1_gpuMalloc((void **)&w->d_table, entries * 4) != dsr1_gpuSuccess) {
        (void)dsr1_gpuGetLastError();
        return cu_errorf(err, DSR1_ENOMEM, "%s: page table of %zu entries", DSR1_GPU_NAME, entries);
    }
    w->table_cap = entries;
    return 0;
}

static void stage_to(cu_ws *w, void *dst, const void *src, size_t bytes)
{
    if (!bytes || !src) return;
    void *dev = cu_stage(w, src, bytes);
    if (dev && dsr1_gpuMemcpyAsync(dst, dev, bytes, dsr1_gpuMemcpyDeviceToDevice, w->st) != dsr1_gpuSuccess)
        cu_check(w, "step copy");
}

static int cu_step_begin(void *ws, const dsr1_step *st, dsr1_error *err)
{
    cu_ws *w = (cu_ws *)ws;
    if (st->n < 0 || st->n > w->s.max_tokens)
        return cu_errorf(err, DSR1_ERANGE, "%s: step of %d tokens, workspace holds %d", DSR1_GPU_NAME,
                         st->n, w->s.max_tokens);
    size_t tab = st->kv ? (size_t)st->max_seqs * (size_t)st->max_pages : 0;
    DSR1_TRY(grow_table(w, tab, err)); /* before any capture: allocation is not capturable */
    w->step = *st;
    w->n = st->n;
    w->max_pos = 0;
    for (int t = 0; st->pos && t < st->n; t++) w->max_pos = st->pos[t] > w->max_pos ? st->pos[t] : w->max_pos;
    w->arena_used = 0;
    w->n_pend = 0;
    w->err_code = 0;
    w->err_msg[0] = 0;
    w->sig = 1469598103934665603ull;
    w->has_kv = st->kv != NULL;
    if (st->kv) {
        const dsr1_bkv *kv = st->kv;
        w->kv = cu_kv{(int)kv->l.type, kv->l.n_layers, kv->l.kv_lora_rank, kv->l.rope_dim, kv->l.row,
                      kv->l.block, st->max_pages, kv->d_data, kv->d_scale, w->d_table};
        if (st->block != kv->l.block)
            return cu_errorf(err, DSR1_EINVAL, "%s: step pages of %d tokens, cache pages of %d",
                             DSR1_GPU_NAME, st->block, kv->l.block);
    }
    w->capturing = w->dev->graphs && st->n > 0 && st->n <= CU_GRAPH_MAX_N;
    if (w->capturing && dsr1_gpuStreamBeginCapture(w->st) != dsr1_gpuSuccess) {
        (void)dsr1_gpuGetLastError();
        w->capturing = 0;
    }
    cu_sig(w, &st->n, sizeof st->n);
    cu_sig(w, &w->kv, sizeof w->kv);
    stage_to(w, w->d_ids, st->ids, (size_t)st->n * 4);
    stage_to(w, w->d_pos, st->pos, (size_t)st->n * 4);
    stage_to(w, w->d_seq, st->seq, (size_t)st->n * 4);
    if (st->kv) stage_to(w, w->d_table, st->page_table, tab * 4);
    w->active = 1;
    return 0;
}

/* End the capture; run the cached graph of the same signature or this one. */
static void run_graph(cu_ws *w)
{
    dsr1_gpuGraph g = NULL;
    if (dsr1_gpuStreamEndCapture(w->st, &g) != dsr1_gpuSuccess || !g) {
        cu_check(w, "graph capture");
        return;
    }
    if (w->err_code) {
        (void)dsr1_gpuGraphDestroy(g);
        return;
    }
    for (int i = 0; i < w->n_graphs; i++)
        if (w->graph[i].sig == w->sig) {
            (void)dsr1_gpuGraphDestroy(g);
            if (dsr1_gpuGraphLaunch(w->graph[i].exec, w->st) != dsr1_gpuSuccess) cu_check(w, "graph launch");
            return;
        }
    dsr1_gpuGraphExec ex;
    if (dsr1_gpuGraphInstantiate(&ex, g) != dsr1_gpuSuccess) {
        (void)dsr1_gpuGraphDestroy(g);
        cu_check(w, "graph instantiate");
        return;
    }
    (void)dsr1_gpuGraphDestroy(g);
    int slot;
    if (w->n_graphs < CU_GRAPH_SLOTS) {
        slot = w->n_graphs++;
    } else {
        slot = (int)(w->sig % CU_GRAPH_SLOTS); /* evict one */
        (void)dsr1_gpuGraphExecDestroy(w->graph[slot].exec);
    }
    w->graph[slot] = cu_graph{w->sig, ex};
    if (dsr1_gpuGraphLaunch(ex, w->st) != dsr1_gpuSuccess) cu_check(w, "graph launch");
}

static int cu_step_end(void *ws, dsr1_error *err)
{
    cu_ws *w = (cu_ws *)ws;
    if (!w->active) return cu_errorf(err, DSR1_EINVAL, "%s: step_end without step_begin", DSR1_GPU_NAME);
    w->active = 0;
    if (w->capturing) run_graph(w);
    w->capturing = 0;
    dsr1_gpuError e = dsr1_gpuStreamSynchronize(w->st);
    if (e != dsr1_gpuSuccess) cu_fail(w, DSR1_EIO, "%s: step failed on the device: %s", DSR1_GPU_NAME,
                                      dsr1_gpuGetErrorString(e));
    if (w->err_code) return cu_errorf(err, w->err_code, "%s", w->err_msg);
    for (int i = 0; i < w->n_pend; i++) {
        const cu_pending *p = &w->pend[i];
        for (int r = 0; r < p->rows; r++)
            memcpy((char *)p->dst + (size_t)r * (size_t)p->ld_bytes,
                   (const char *)p->src + (size_t)r * p->row_bytes, p->row_bytes);
    }
    w->n_pend = 0;
    return 0;
}

/* ---- the table ---------------------------------------------------------------------------------- */

static const dsr1_backend_ops cu_ops = {
    DSR1_BACKEND_VERSION,
    sizeof(dsr1_backend_ops),
    DSR1_GPU_NAME,
    DSR1_GPU_HIP ? 20 : 30, /* auto: a usable GPU before the CPU */
    cu_probe,
    cu_create,
    cu_destroy,
    cu_describe,
    cu_load,
    cu_buf_create,
    cu_buf_free,
    cu_kv_create,
    cu_kv_free,
    cu_kv_read,
    cu_kv_write,
    cu_kv_copy,
    cu_ws_create,
    cu_ws_free,
    cu_ws_threads,
    cu_step_begin,
    cu_step_end,
    cu_op_write,
    cu_op_read,
    cu_op_gather,
    cu_op_scatter,
    cu_op_add,
    cu_op_embed,
    cu_op_rmsnorm,
    cu_op_matmul,
    cu_op_rope,
    cu_op_kv_store,
    cu_op_mla_attention,
    cu_op_ffn,
    cu_op_moe,
    cu_op_moe_choice,
    0, /* mla_naive: absorbed only */
};

/* The registry's entry point (backends/backend.h): the table when the
 * caller speaks our version, else NULL. */
extern "C" __attribute__((visibility("default"))) const dsr1_backend_ops *dsr1_backend_entry(int version)
{
    return version == DSR1_BACKEND_VERSION ? &cu_ops : NULL;
}
