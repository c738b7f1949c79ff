/*
 * cpu_kv.c - the CPU backend's KV page storage (backend.h: kv_create,
 * kv_read, kv_write, kv_copy) and the kv_store op.
 *
 * Pages are one host allocation, [n_pages][n_layers][block][row] elements
 * of the cache type plus a float scale per row for FP8, so one page of one
 * layer is `block` contiguous rows and cpu_attention.c can copy a run of
 * rows with one memcpy. Rows are encoded with core's row codec
 * (dsr1_kv_encode_row), the bits every backend must store.
 *
 * The step's page tables (step_begin) say where a (slot, position) lives;
 * this file never decides which pages a slot gets (core/kvcache.c does).
 *
 * NUMA: with more than one real node the pages interleave over the nodes
 * before first touch (numa.c says why not node-local: every head's thread
 * reads a sequence's latent rows).
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"

int dsr1_cpu_kv_create(void *dev, const dsr1_kv_layout *l, dsr1_bkv **out, dsr1_error *err)
{
    const cpu_dev *d = dev;
    *out = NULL;
    dsr1_bkv *kv = calloc(1, sizeof *kv);
    if (!kv) return dsr1_errorf(err, DSR1_ENOMEM, "kv cache: out of memory");
    kv->l = *l;
    kv->elem = dsr1_kv_elem_size(l->type);
    size_t rows = (size_t)l->n_pages * (size_t)l->n_layers * (size_t)l->block;
    size_t bytes = rows * (size_t)l->row * kv->elem;
    kv->data = malloc(bytes ? bytes : 1);
    if (l->type == DSR1_KV_FP8) kv->scale = malloc(rows * sizeof(float) + 1);
    if (!kv->data || (l->type == DSR1_KV_FP8 && !kv->scale)) {
        dsr1_cpu_kv_free(dev, kv);
        uint64_t total = (uint64_t)bytes + (l->type == DSR1_KV_FP8 ? rows * 4 : 0);
        return dsr1_errorf(err, DSR1_ENOMEM, "not enough memory for a KV cache of %.1f GB",
                           (double)total / 1e9);
    }
    if (d && d->topo) { /* best effort: placement never changes a result */
        dsr1_error e;
        (void)dsr1_numa_interleave(kv->data, bytes, d->topo, &e);
    }
    *out = kv;
    return 0;
}

void dsr1_cpu_kv_free(void *dev, dsr1_bkv *kv)
{
    (void)dev;
    if (!kv) return;
    free(kv->data);
    free(kv->scale);
    free(kv);
}

/* First row index of (page, layer) and a bounds check. */
static int rows_of(const dsr1_bkv *kv, int page, int layer, int first, int count, size_t *r,
                   dsr1_error *err)
{
    const dsr1_kv_layout *l = &kv->l;
    if (page < 0 || page >= l->n_pages || layer < 0 || layer >= l->n_layers || first < 0 ||
        count < 0 || first + count > l->block)
        return dsr1_errorf(err, DSR1_EINVAL, "kv cache: rows %d+%d of page %d layer %d out of range",
                           first, count, page, layer);
    *r = ((size_t)page * (size_t)l->n_layers + (size_t)layer) * (size_t)l->block + (size_t)first;
    return 0;
}

int dsr1_cpu_kv_read(void *dev, dsr1_bkv *kv, int page, int layer, int first, int count,
                     void *data, float *scale, dsr1_error *err)
{
    (void)dev;
    size_t r = 0;
    DSR1_TRY(rows_of(kv, page, layer, first, count, &r, err));
    size_t rb = (size_t)kv->l.row * kv->elem;
    memcpy(data, (const char *)kv->data + r * rb, (size_t)count * rb);
    if (kv->scale && scale) memcpy(scale, kv->scale + r, (size_t)count * sizeof(float));
    return 0;
}

int dsr1_cpu_kv_write(void *dev, dsr1_bkv *kv, int page, int layer, int first, int count,
                      const void *data, const float *scale, dsr1_error *err)
{
    (void)dev;
    size_t r = 0;
    DSR1_TRY(rows_of(kv, page, layer, first, count, &r, err));
    size_t rb = (size_t)kv->l.row * kv->elem;
    memcpy((char *)kv->data + r * rb, data, (size_t)count * rb);
    if (kv->scale && scale) memcpy(kv->scale + r, scale, (size_t)count * sizeof(float));
    return 0;
}

int dsr1_cpu_kv_copy(void *dev, dsr1_bkv *kv, int dst, int src, dsr1_error *err)
{
    (void)dev;
    const dsr1_kv_layout *l = &kv->l;
    if (dst < 0 || src < 0 || dst >= l->n_pages || src >= l->n_pages)
        return dsr1_errorf(err, DSR1_EINVAL, "kv cache: copy of page %d to %d out of range", src,
                           dst);
    size_t prow = (size_t)l->n_layers * (size_t)l->block, rb = (size_t)l->row * kv->elem;
    if (dst != src) {
        memcpy((char *)kv->data + (size_t)dst * prow * rb, (const char *)kv->data + (size_t)src * prow * rb,
               prow * rb);
        if (kv->scale)
            memcpy(kv->scale + (size_t)dst * prow, kv->scale + (size_t)src * prow,
                   prow * sizeof(float));
    }
    return 0;
}

void dsr1_cpu_kv_store(void *wsp, int layer, dsr1_view latent, dsr1_view pe)
{
    cpu_ws *w = wsp;
    const dsr1_step *s = &w->step;
    dsr1_bkv *kv = s->kv;
    DSR1_ASSERT(kv && layer >= 0 && layer < kv->l.n_layers);
    const float *lat = dsr1_cpu_ptr(latent), *p = dsr1_cpu_ptr(pe);
    size_t rb = (size_t)kv->l.row * kv->elem;
    for (int t = 0; t < s->n; t++) {
        size_t r = dsr1_cpu_kv_row(s, s->seq[t], layer, s->pos[t]);
        dsr1_kv_encode_row(kv->l.type, lat + t * latent.ld, kv->l.kv_lora_rank, p + t * pe.ld,
                           kv->l.rope_dim, (char *)kv->data + r * rb,
                           kv->scale ? kv->scale + r : NULL);
    }
}
