/*
 * engine_seq.c - everything about one engine sequence that is not a step:
 * cancel, release, stats, and export/import of a kept sequence (its tokens
 * and KV rows) for saving a chat session.
 *
 * Export format (little-endian, version 2):
 *   "DSR1SEQ\0", u32 version, u32 kv_type, u32 n_layers, u32 row,
 *   u32 n_tokens, u32 n_kv, u32 n_mtp, i32 tokens[n_tokens],
 *   then for each layer, for each pos < n_kv: the raw row (row elements of
 *   kv_type) and, for FP8, its f32 scale.
 * n_mtp (<= n_kv) says how many rows of the MTP layer (the last layer, when
 * the model has one) are valid: an engine that did not speculate leaves
 * them unwritten. Version 1 (no n_mtp field, MTP rows taken as invalid) is
 * still read. Import refuses a buffer whose shape or KV type differs from
 * the engine's.
 */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#define SEQ_MAGIC "DSR1SEQ"
#define SEQ_VERSION 2u

eseq *dsr1_engine_free_entry(dsr1_engine *e)
{
    for (int i = 0; i < e->n_seqs; i++)
        if (e->seqs[i].state == SEQ_FREE && !e->seqs[i].report_finish) return &e->seqs[i];
    return NULL;
}

void dsr1_engine_drop_kv(dsr1_engine *e, eseq *s)
{
    dsr1_engine_prefix_publish(e, s); /* its full pages stay, for later prompts */
    if (s->slot >= 0) dsr1_kvcache_seq_free(e->kv, s->slot);
    s->slot = -1;
}

void dsr1_engine_seq_clear(dsr1_engine *e, eseq *s)
{
    dsr1_engine_drop_kv(e, s);
    free(s->tokens);
    free(s->stop_ids);
    memset(s, 0, sizeof *s);
    s->slot = -1;
    s->state = SEQ_FREE;
}

static eseq *get(const dsr1_engine *e, int seq)
{
    return seq >= 0 && seq < e->n_seqs && e->seqs[seq].state != SEQ_FREE ? &e->seqs[seq] : NULL;
}

int dsr1_engine_cancel(dsr1_engine *e, int seq)
{
    eseq *s = get(e, seq);
    if (!s) return DSR1_EINVAL;
    if (s->state == SEQ_DONE) return 0;
    s->state = SEQ_DONE;
    s->finish = DSR1_FINISH_CANCEL;
    s->n_draft = 0;
    s->stats.t_done = dsr1_engine_now();
    s->report_finish = 1;
    return 0;
}

void dsr1_engine_release(dsr1_engine *e, int seq)
{
    eseq *s = get(e, seq);
    if (!s) return;
    if (s->state == SEQ_DONE) {
        int owed = s->report_finish;
        dsr1_engine_seq_clear(e, s);
        /* A finish still owed is reported by the next step (as FREE). */
        s->report_finish = owed;
        s->finish = DSR1_FINISH_CANCEL;
        return;
    }
    /* Releasing a live sequence cancels it first. */
    dsr1_engine_cancel(e, seq);
    dsr1_engine_seq_clear(e, s);
}

int dsr1_engine_seq_fed(const dsr1_engine *e, int seq)
{
    const eseq *s = get(e, seq);
    return s ? s->n_done : -1;
}

int dsr1_engine_seq_stats(const dsr1_engine *e, int seq, dsr1_seq_stats *st)
{
    const eseq *s = get(e, seq);
    if (!s) return DSR1_EINVAL;
    *st = s->stats;
    return 0;
}

/* ---- export / import -------------------------------------------------------- */

static size_t row_bytes(const dsr1_kvcache *kv)
{
    return (size_t)kv->row * kv->elem + (kv->type == DSR1_KV_FP8 ? 4 : 0);
}

/* Rows [0, n) of every layer of slot between the cache (through the
 * backend's kv_read / kv_write) and the export form: per layer, per
 * position, the row's bytes then (FP8) its scale. A page at a time. */
static int move_rows(dsr1_kvcache *kv, int slot, int n, unsigned char *q, int to_cache,
                     dsr1_error *err)
{
    size_t rb = (size_t)kv->row * kv->elem, eb = row_bytes(kv);
    unsigned char *data = malloc((size_t)kv->block * rb);
    float *scale = malloc((size_t)kv->block * sizeof *scale);
    int rc = data && scale ? 0 : dsr1_errorf(err, DSR1_ENOMEM, "export: out of memory");
    for (int l = 0; !rc && l < kv->n_layers; l++)
        for (int p0 = 0; !rc && p0 < n; p0 += kv->block) {
            int cnt = n - p0 < kv->block ? n - p0 : kv->block;
            if (!to_cache) rc = dsr1_kvcache_get_rows(kv, slot, l, p0, cnt, data, scale, err);
            for (int i = 0; !rc && i < cnt; i++, q += eb) {
                unsigned char *d = data + (size_t)i * rb;
                if (to_cache) memcpy(d, q, rb);
                else memcpy(q, d, rb);
                if (kv->type != DSR1_KV_FP8) continue;
                if (to_cache) memcpy(&scale[i], q + rb, 4);
                else memcpy(q + rb, &scale[i], 4);
            }
            if (!rc && to_cache) rc = dsr1_kvcache_put_rows(kv, slot, l, p0, cnt, data, scale, err);
        }
    free(data);
    free(scale);
    return rc;
}

typedef struct seq_header {
    char magic[8];
    uint32_t version, kv_type, n_layers, row, n_tokens, n_kv, n_mtp;
} seq_header;

/* Version 1's header: the same without n_mtp. */
#define SEQ_HEADER_V1 (sizeof(seq_header) - sizeof(uint32_t))

int dsr1_engine_seq_export(dsr1_engine *e, int seq, void **buf, size_t *len, dsr1_error *err)
{
    *buf = NULL;
    *len = 0;
    eseq *s = get(e, seq);
    if (!s || s->state != SEQ_DONE || s->slot < 0)
        return dsr1_errorf(err, DSR1_EINVAL, "export: sequence %d is not a finished, kept sequence",
                           seq);
    const dsr1_kvcache *kv = e->kv;
    int n_kv = s->n_done;
    size_t rb = row_bytes(kv), n = sizeof(seq_header) + (size_t)s->n_tokens * 4 +
                                    (size_t)kv->n_layers * (size_t)n_kv * rb;
    unsigned char *p = malloc(n);
    if (!p) return dsr1_errorf(err, DSR1_ENOMEM, "export: out of memory (%zu bytes)", n);
    seq_header h = {.magic = SEQ_MAGIC, .version = SEQ_VERSION, .kv_type = (uint32_t)kv->type,
                    .n_layers = (uint32_t)kv->n_layers, .row = (uint32_t)kv->row,
                    .n_tokens = (uint32_t)s->n_tokens, .n_kv = (uint32_t)n_kv,
                    .n_mtp = (uint32_t)(s->n_mtp < n_kv ? s->n_mtp : n_kv)};
    memcpy(p, &h, sizeof h);
    unsigned char *q = p + sizeof h;
    memcpy(q, s->tokens, (size_t)s->n_tokens * 4);
    q += (size_t)s->n_tokens * 4;
    int rc = move_rows(e->kv, s->slot, n_kv, q, 0, err);
    if (rc) {
        free(p);
        return rc;
    }
    *buf = p;
    *len = n;
    return 0;
}

size_t dsr1_engine_seq_export_max(const dsr1_engine *e)
{
    const dsr1_kvcache *kv = e->kv;
    return sizeof(seq_header) + (size_t)e->o.ctx * 4 +
           (size_t)kv->n_layers * (size_t)e->o.ctx * row_bytes(kv);
}

int dsr1_engine_ctx(const dsr1_engine *e) { return e->o.ctx; }

static int check_import(const dsr1_engine *e, const void *buf, size_t len, seq_header *h,
                        dsr1_error *err)
{
    const dsr1_kvcache *kv = e->kv;
    if (len < SEQ_HEADER_V1)
        return dsr1_errorf(err, DSR1_EFORMAT, "import: %zu bytes is too short", len);
    memset(h, 0, sizeof *h);
    memcpy(h, buf, SEQ_HEADER_V1);
    if (memcmp(h->magic, SEQ_MAGIC, 8) || (h->version != 1 && h->version != SEQ_VERSION))
        return dsr1_errorf(err, DSR1_EFORMAT, "import: not a dsr1 sequence (version %u)", h->version);
    size_t hb = h->version == 1 ? SEQ_HEADER_V1 : sizeof *h;
    if (len < hb) return dsr1_errorf(err, DSR1_EFORMAT, "import: %zu bytes is too short", len);
    if (h->version >= 2) memcpy(&h->n_mtp, (const char *)buf + SEQ_HEADER_V1, sizeof h->n_mtp);
    if (h->kv_type != (uint32_t)kv->type || h->n_layers != (uint32_t)kv->n_layers ||
        h->row != (uint32_t)kv->row)
        return dsr1_errorf(err, DSR1_EINVAL, "import: cache shape (type %u, %u layers, row %u) "
                           "differs from this engine's (type %d, %d layers, row %d)", h->kv_type,
                           h->n_layers, h->row, (int)kv->type, kv->n_layers, kv->row);
    if (h->n_tokens < 1 || h->n_kv > h->n_tokens || h->n_tokens > (uint32_t)e->o.ctx ||
        h->n_mtp > h->n_kv)
        return dsr1_errorf(err, DSR1_EFORMAT, "import: %u tokens with %u cached (%u MTP), "
                           "context %d", h->n_tokens, h->n_kv, h->n_mtp, e->o.ctx);
    size_t want = hb + (size_t)h->n_tokens * 4 + (size_t)h->n_layers * h->n_kv * row_bytes(kv);
    if (len != want)
        return dsr1_errorf(err, DSR1_EFORMAT, "import: %zu bytes, expected %zu", len, want);
    return 0;
}

int dsr1_engine_seq_import(dsr1_engine *e, const void *buf, size_t len, int *seq, dsr1_error *err)
{
    seq_header h;
    DSR1_TRY(check_import(e, buf, len, &h, err));
    eseq *s = dsr1_engine_free_entry(e);
    if (!s) return dsr1_errorf(err, DSR1_ERANGE, "import: no free sequence entry");
    dsr1_kvcache *kv = e->kv;
    int slot;
    DSR1_TRY(dsr1_kvcache_seq_alloc(kv, &slot, err));
    int rc = dsr1_kvcache_reserve(kv, slot, (int)h.n_kv, err);
    s->tokens = malloc((size_t)e->o.ctx * 4);
    if (!rc && !s->tokens) rc = dsr1_errorf(err, DSR1_ENOMEM, "import: out of memory");
    if (rc) {
        dsr1_kvcache_seq_free(kv, slot);
        free(s->tokens);
        s->tokens = NULL;
        return rc;
    }
    const unsigned char *q = (const unsigned char *)buf + (h.version == 1 ? SEQ_HEADER_V1 : sizeof h);
    memcpy(s->tokens, q, (size_t)h.n_tokens * 4);
    q += (size_t)h.n_tokens * 4;
    for (uint32_t i = 0; i < h.n_tokens; i++)
        if (s->tokens[i] < 0 || s->tokens[i] >= e->m->cfg.vocab_size) {
            int32_t bad = s->tokens[i];
            dsr1_kvcache_seq_free(kv, slot);
            free(s->tokens);
            s->tokens = NULL;
            return dsr1_errorf(err, DSR1_EFORMAT, "import: token %d at %u out of the vocabulary "
                               "(%d)", (int)bad, i, e->m->cfg.vocab_size);
        }
    rc = move_rows(kv, slot, (int)h.n_kv, (unsigned char *)(uintptr_t)q, 1, err);
    if (rc) {
        dsr1_kvcache_seq_free(kv, slot);
        free(s->tokens);
        s->tokens = NULL;
        return rc;
    }
    s->slot = slot;
    s->n_tokens = s->n_prompt = (int)h.n_tokens;
    s->n_done = (int)h.n_kv;
    s->n_mtp = (int)h.n_mtp;
    s->state = SEQ_DONE;
    s->finish = DSR1_FINISH_STOP;
    s->order = ++e->counter;
    s->stats.n_prompt = s->n_prompt;
    *seq = (int)(s - e->seqs);
    return 0;
}
