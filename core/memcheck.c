/*
 * memcheck.c - memory estimate before loading, and preload (memcheck.h).
 *
 * The estimate mirrors what engine creation will allocate: the KV cache is
 * sized by the engine's own rule (dsr1_engine_size_cache) in whole pages of
 * the cache's default 64 tokens; the per-step buffers are counted from the
 * same shapes as engine.c's alloc_buffers (logits, draft distributions,
 * hidden rows) plus an allowance for the forward pass's activations
 * (16 hidden-size float rows per batch row), which is approximate: the KV
 * cache and the weights dominate by orders of magnitude on real models.
 *
 * The weights are a read-only shared mapping of the file: they live in the
 * page cache, reclaimable, so they are judged apart from the anonymous
 * memory (KV, buffers) that must be allocated (see dsr1_mem_judge).
 */
#include "memcheck.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsr1file.h"
#include "engine.h"
#include "kvcache.h"
#include "spec.h"

enum { KV_BLOCK = 64 }; /* the cache's default page, as the engine uses it */

void dsr1_mem_estimate_config(const dsr1_config *cfg, int n_layers, dsr1_compute compute,
                              const dsr1_engine_options *opt, dsr1_mem_estimate *out)
{
    dsr1_engine_options o = *opt;
    if (!o.prefill_chunk) o.prefill_chunk = dsr1_engine_default_chunk(cfg);
    if (compute == DSR1_COMPUTE_F32) o.kv_type = DSR1_KV_F32;
    int row = cfg->kv_lora_rank + cfg->qk_rope_head_dim;
    uint64_t tok = dsr1_kvcache_token_bytes(o.kv_type, n_layers, row);
    dsr1_engine_size_cache(cfg->max_position_embeddings, &o, tok);
    uint64_t page = tok * KV_BLOCK;
    uint64_t want = ((uint64_t)o.ctx + KV_BLOCK - 1) / KV_BLOCK * (uint64_t)o.max_seqs;
    uint64_t pages = o.kv_bytes / page < want ? o.kv_bytes / page : want;
    memset(out, 0, sizeof *out);
    out->ctx = o.ctx;
    out->max_seqs = o.max_seqs;
    out->kv_token_bytes = tok;
    out->kv = pages * page;
    int mtp = n_layers > cfg->num_hidden_layers;
    uint64_t K = !mtp || o.spec_draft == 0 ? 0
                 : o.spec_draft < 0        ? DSR1_SPEC_ADAPTIVE_MAX
                                           : (uint64_t)o.spec_draft;
    uint64_t S = (uint64_t)o.max_seqs, V = (uint64_t)cfg->vocab_size,
             D = (uint64_t)cfg->hidden_size;
    uint64_t B = (uint64_t)o.prefill_chunk + S * (K + 1) + (K && o.spec_draft < 0 ? S * 32 : 0);
    uint64_t b = S * (K + 1) * V * 4 + 2 * V * 4; /* logits, probs, sampler */
    if (K) b += S * K * V * 4 + S * V * 4 + 2 * B * D * 4; /* q, draft logits, hidden rows */
    b += B * D * 4 * 16;                                   /* activations (allowance) */
    out->buffers = b;
}

/* MemAvailable in bytes, 0 when /proc/meminfo cannot say. */
static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* Bytes of the file that are in the page cache (mincore of a mapping that
 * is never touched, so measuring reads nothing). */
static uint64_t cached_bytes(const char *path, uint64_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || size == 0) {
        if (fd >= 0) close(fd);
        return 0;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return 0;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = (size + pg - 1) / pg, chunk = 1 << 16;
    unsigned char vec[1 << 16];
    uint64_t res = 0;
    for (size_t i = 0; i < n; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        if (mincore((char *)map + i * pg, k * pg, vec)) break;
        for (size_t j = 0; j < k; j++) res += vec[j] & 1;
    }
    munmap(map, size);
    res *= pg;
    return res < size ? res : size;
}

int dsr1_mem_estimate_file(const char *path, dsr1_compute compute, const dsr1_engine_options *o,
                           dsr1_mem_estimate *out, dsr1_error *err)
{
    dsr1_file *f;
    DSR1_TRY(dsr1_file_open(&f, path, err));
    cJSON *meta = cJSON_Parse(dsr1_file_metadata(f));
    cJSON *cfgj = cJSON_GetObjectItemCaseSensitive(meta, "config");
    char *text = cJSON_IsObject(meta) ? cJSON_PrintUnformatted(cJSON_IsObject(cfgj) ? cfgj : meta)
                                      : NULL;
    cJSON_Delete(meta);
    dsr1_config cfg;
    int rc = text ? dsr1_config_from_json(&cfg, text, path, err)
                  : dsr1_errorf(err, DSR1_EFORMAT, "%s: metadata is not a JSON object", path);
    free(text);
    int mtp = 0;
    if (!rc && cfg.num_nextn_predict_layers > 0) {
        char n[64];
        snprintf(n, sizeof n, "model.layers.%d.eh_proj.weight", cfg.num_hidden_layers);
        mtp = dsr1_file_find(f, n) != NULL;
    }
    dsr1_file_close(f);
    if (rc) return rc;
    dsr1_mem_estimate_config(&cfg, cfg.num_hidden_layers + mtp, compute, o, out);
    struct stat st;
    out->weights = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    out->weights_cached = cached_bytes(path, out->weights);
    out->available = mem_available();
    return 0;
}

dsr1_mem_verdict dsr1_mem_judge(const dsr1_mem_estimate *e)
{
    if (!e->available) return DSR1_MEM_OK;
    uint64_t anon = e->kv + e->buffers;
    if (anon > e->available) return DSR1_MEM_REFUSE;
    if (anon + e->weights > e->available) return DSR1_MEM_WARN;
    return DSR1_MEM_OK;
}

int dsr1_mem_max_ctx(const dsr1_mem_estimate *e)
{
    if (e->available <= e->buffers || !e->kv_token_bytes || e->max_seqs < 1) return 0;
    /* Room for the weights too when there is any (the context that gets
     * an OK); else what the KV cache alone may take (a WARN). */
    uint64_t room = e->available - e->buffers;
    if (room > e->weights && room - e->weights >= e->kv_token_bytes * KV_BLOCK * e->max_seqs)
        room -= e->weights;
    uint64_t per_seq = room / (uint64_t)e->max_seqs;
    uint64_t pages = per_seq / (e->kv_token_bytes * KV_BLOCK);
    uint64_t ctx = pages * KV_BLOCK;
    return ctx > (1u << 30) ? 1 << 30 : (int)ctx;
}

/* ---- preload -------------------------------------------------------------- */

struct dsr1_preload {
    void *map;
    size_t size;
    int locked;
};

void dsr1_mem_preload_free(dsr1_preload *p)
{
    if (!p) return;
    if (p->locked) munlock(p->map, p->size);
    munmap(p->map, p->size);
    free(p);
}

int dsr1_mem_preload(dsr1_preload **out, const char *path, int lock,
                     void (*progress)(uint64_t done, uint64_t total, void *ctx), void *ctx,
                     dsr1_error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        if (fd >= 0) close(fd);
        return dsr1_errorf(err, DSR1_EIO, "%s: %s", path, strerror(errno));
    }
    size_t size = (size_t)st.st_size;
    void *map = size ? mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED)
        return dsr1_errorf(err, DSR1_EIO, "%s: cannot map for preloading: %s", path,
                           size ? strerror(errno) : "empty file");
    /* Sequential read-ahead, in 64 MiB steps so progress can be reported;
     * one byte per page faults each page in from the file. */
    madvise(map, size, MADV_SEQUENTIAL);
    (void)madvise(map, size, MADV_HUGEPAGE); /* 2 MiB folios: see map_file in dsr1file.c */
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), step = (size_t)64 << 20;
    volatile unsigned char sink = 0;
    for (size_t off = 0; off < size; off += step) {
        size_t end = size - off < step ? size : off + step;
        if (end < size) madvise((char *)map + end, size - end < step ? size - end : step,
                                MADV_WILLNEED);
        for (size_t i = off; i < end; i += pg) sink ^= ((const unsigned char *)map)[i];
        if (progress) progress(end, size, ctx);
    }
    (void)sink;
    madvise(map, size, MADV_NORMAL);
    if (!lock) {
        munmap(map, size);
        return 0;
    }
    dsr1_preload *p = calloc(1, sizeof *p);
    if (!p) {
        munmap(map, size);
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    }
    p->map = map;
    p->size = size;
    if (mlock(map, size)) {
        int e = errno;
        dsr1_mem_preload_free(p);
        return dsr1_errorf(err, DSR1_EIO, "%s: --mlock: cannot lock %zu bytes: %s%s", path, size,
                           strerror(e), e == ENOMEM || e == EPERM
                               ? " (raise the limit: ulimit -l, or LimitMEMLOCK= for a service)"
                               : "");
    }
    p->locked = 1;
    *out = p;
    return 0;
}
