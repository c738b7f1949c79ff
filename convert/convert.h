/*
 * convert.h - Hugging Face checkpoint directory -> one .dsr1 file
 * (`dsr1 convert`; dsr1-convert(1) is the user's view, dsr1(5) the format).
 *
 * What the output holds:
 *   - every tensor under its Hugging Face name, except routed experts, which
 *     are stacked per layer and projection:
 *       model.layers.L.mlp.experts.{gate,up,down}_proj.weight  [E, out, in]
 *     (the MTP layer, model.layers.{num_hidden_layers}, likewise);
 *   - scales (weight_scale_inv, I8 weight_scale) folded into their weight's
 *     record, never separate entries;
 *   - tokenizer.json / tokenizer_config.json as BLOB tensors when present;
 *   - metadata JSON: config, chat template, bos/eos, provenance.
 * Types: by default FP8 stays FP8 (bytes and scales bit-exact), BF16 stays
 * BF16, I8 becomes INT8 per channel; `type` changes the 2-D linear weights
 * (projections incl. experts and the MTP eh_proj; not embed_tokens); the LM
 * heads (lm_head, shared_head.head) become INT8 under int8 and int4, BF16
 * under bf16, and keep their type otherwise; 1-D tensors and the router mlp.gate.weight are
 * always F32 (exact upcast); type_for globs (fnmatch on output names, later
 * wins) override. INT4 needs `in` % 32 == 0; other tensors asked to be INT4
 * keep their source type and are counted in the stats.
 *
 * Memory is bounded by a few tensors: sources are read from the mapped
 * shards matrix by matrix and released (madvise) after use; outputs go
 * through dsr1_writer, which never holds payloads.
 * Failure or cancellation at any point leaves nothing under out_path.
 */
#ifndef DSR1_CONVERT_H
#define DSR1_CONVERT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"
#include "dsr1file.h"

/* Quantiser threads beyond this are not used: each holds band buffers of
 * up to ~20 MB (128 rows of R1's widest matrix, decoded and encoded). */
#define DSR1_CONVERT_MAX_THREADS 32

typedef struct dsr1_convert_rule {
    const char *pattern;   /* fnmatch(3) glob on output tensor names */
    dsr1_type type;
} dsr1_convert_rule;

typedef struct dsr1_convert_progress {
    int phase;             /* 0 converting, 1 verifying */
    uint64_t done, total;  /* bytes: source bytes consumed / file bytes hashed */
    const char *tensor;    /* output tensor being written (phase 0) */
} dsr1_convert_progress;

typedef struct dsr1_convert_opts {
    const char *src_dir, *out_path;
    int has_type;          /* 0: keep source types for linear weights */
    dsr1_type type;        /* fp8, int8, int4, bf16 (f16, f32 also work) */
    const dsr1_convert_rule *rules;
    size_t n_rules;
    int threads;           /* quantiser threads; <= 0 means 1, at most
                              DSR1_CONVERT_MAX_THREADS are used */
    int no_verify;         /* skip reopening + dsr1_file_verify at the end */
    volatile sig_atomic_t *cancel; /* polled; non-zero -> DSR1_EINTR, cleanup */
    /* Called every few MB (and at phase ends) when non-NULL. */
    void (*progress)(const dsr1_convert_progress *p, void *ctx);
    void *progress_ctx;
} dsr1_convert_opts;

typedef struct dsr1_convert_stats {
    uint64_t count[DSR1_T_COUNT], bytes[DSR1_T_COUNT]; /* output tensors by type */
    uint64_t file_size;    /* the .dsr1 file */
    uint64_t src_bytes;    /* tensor bytes read from the shards */
    size_t n_kept;         /* tensors that stayed at source type (INT4 shape) */
    char first_kept[160];  /* the first of them, for the summary */
    double seconds;        /* wall time, verification included */
    int usage_error;       /* set when the failure is a bad option (exit 2) */
} dsr1_convert_stats;

/* Convert o->src_dir into o->out_path. Returns 0, or a DSR1_E* code with a
 * one-line message naming the file and tensor; stats->usage_error tells a
 * bad --type-for (pattern matching nothing, quantised type on a 1-D tensor)
 * from bad input. */
int dsr1_convert(const dsr1_convert_opts *o, dsr1_convert_stats *stats, dsr1_error *err);

#endif
