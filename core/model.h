/*
 * model.h - the inside of a dsr1_model (opaque in dsr1.h): the mapped
 * .dsr1 file, the config, and each layer's weights as matrices the backend
 * can multiply. Used by core/ only (forward, engine); the CLI sees dsr1.h.
 *
 * Each weight is kept twice, on purpose: core's host description (a
 * dsr1_wdesc, for checks, references and byte counts) and the backend's
 * handle (dsr1_bweight, what ops take), made by the backend's load step
 * once per weight at open (backends/backend.h).
 *
 * Every description points into the read-only mapping except some of the
 * per-head parts of kv_b_proj (wk_t, wv) that the absorbed attention
 * multiplies by (core/model_kvb.c): value parts are views of the file's
 * rows; key parts are transposed, as FP8 bytes and block scales when the
 * 128x128 blocks line up with the heads (R1), else (and where a view is
 * impossible) dequantised into float32 for the exact path and bf16 for the
 * fast path. For R1 in FP8 that is 128 heads x 512 x 128 = 8.4M bytes per
 * layer, 0.5 GiB over 61+1 layers (bf16 copies of both parts: 2.0 GiB).
 * Norm vectors are float32 (copied only when the file stores another type).
 */
#ifndef DSR1_MODEL_H
#define DSR1_MODEL_H

#include "backends/backend.h"
#include "dsr1file.h"
#include "dsr1.h"

/* A model weight: core's host description and the backend's handle. */
typedef struct dsr1_mw {
    dsr1_wdesc d;
    dsr1_bweight *h;
} dsr1_mw;

typedef struct dsr1_layer_weights {
    dsr1_mw attn_norm, ffn_norm; /* [hidden] input_layernorm, post_attention_layernorm */
    /* MLA */
    dsr1_mw q_a, q_b;           /* q_lora_rank > 0 */
    dsr1_mw q_a_norm;           /* [q_lora_rank] */
    dsr1_mw q;                  /* q_lora_rank == 0: q_proj */
    dsr1_mw kv_a;               /* [kv_lora_rank + rope, hidden] kv_a_proj_with_mqa */
    dsr1_mw kv_a_norm;          /* [kv_lora_rank] */
    dsr1_mw wk_t;               /* n_heads x [kv_lora_rank, nope], derived (model_kvb.c) */
    dsr1_mw wv;                 /* n_heads x [v_dim, kv_lora_rank], derived */
    dsr1_mw kv_b;               /* kv_b_proj whole, only for a backend's naive form
                                 * (ops->mla_naive, not float32); else no handle */
    dsr1_mw o;                  /* [hidden, n_heads * v_dim] */
    /* FFN: dense or MoE */
    int is_moe;
    dsr1_mw gate, up, down;     /* dense */
    dsr1_mw router, bias;       /* MoE router [E, hidden], bias vector (or no handle) */
    dsr1_mw e_gate, e_up, e_down; /* expert stacks */
    dsr1_mw sh_gate, sh_up, sh_down;
    dsr1_moe_weights moe;       /* the handles above, as the moe op takes them */
    /* MTP (NextN) layer only */
    int is_mtp;
    dsr1_mw mtp_embed;          /* its own embed_tokens (or the main one) */
    dsr1_mw enorm, hnorm, head_norm; /* [hidden] */
    dsr1_mw eh_proj;            /* [hidden, 2 * hidden] */
    dsr1_mw head;               /* [vocab, hidden] shared_head.head */
} dsr1_layer_weights;

struct dsr1_model {
    dsr1_file *file;            /* owned: the mapping every pointer is into */
    dsr1_config cfg;
    dsr1_compute compute;
    int kv_fp8;                 /* dsr1_model_options.kv_fp8 */
    dsr1_tokenizer *tok;        /* owned or NULL */
    char *chat_template;        /* owned or NULL */
    const dsr1_backend_ops *be;
    void *dev;                  /* backend device context, owned */
    int threads;
    void (*progress)(double frac, const char *what, void *ctx); /* load only, may be NULL */
    void *progress_ctx;
    dsr1_mw embed;              /* [vocab, hidden] */
    dsr1_mw norm;               /* [hidden] final norm */
    dsr1_mw lm_head;            /* [vocab, hidden] */
    int n_layers;               /* main + MTP layers present */
    int n_mtp;                  /* MTP layers present (0 or 1) */
    dsr1_layer_weights *layers; /* [n_layers], owned */
    dsr1_moe_params moe;
    float freqs[256];           /* RoPE frequencies [qk_rope_head_dim / 2] */
    dsr1_mw freqs_w;            /* the same, loaded as a vector */
    float softmax_scale;
    void **owned;               /* derived buffers to free at close */
    int n_owned, cap_owned;
    char describe[256];
    char backend_why[160];      /* how the backend was chosen (registry) */
};

/* Take ownership of p (freed at close); p NULL or no room: DSR1_ENOMEM
 * (p freed). */
int dsr1_model_own(dsr1_model *m, void *p, dsr1_error *err);

/* wk_t and wv of one layer from its kv_b_proj (core/model_kvb.c), the
 * copies made over the model's load threads; descriptions only (the
 * caller loads them). */
int dsr1_model_derive_kv_b(dsr1_model *m, dsr1_layer_weights *L, const dsr1_wmat *kvb,
                           dsr1_error *err);

/* Give the backend a described weight (its load step); w->h is set. */
int dsr1_model_load_weight(dsr1_model *m, dsr1_mw *w, dsr1_error *err);

/* The activation arithmetic of the model's compute mode. The fast mode
 * asks for INT8: the CPU kernels use W8A8 (int8 x int8 dot products, x
 * quantised per token) on INT8 weights, W4A8 (the same x against 4-bit
 * codes) on INT4 weights and BF16 on every other weight type (kernels.h),
 * so each matrix gets its own type's fast path from one mode. */
static inline dsr1_act dsr1_model_act(const dsr1_model *m)
{
    return m->compute == DSR1_COMPUTE_F32 ? DSR1_ACT_F32 : DSR1_ACT_INT8;
}

/* The KV type a compute mode uses unless told otherwise. */
static inline dsr1_kv_type dsr1_model_kv_type(const dsr1_model *m)
{
    return m->compute == DSR1_COMPUTE_F32 ? DSR1_KV_F32 : m->kv_fp8 ? DSR1_KV_FP8 : DSR1_KV_BF16;
}

#endif
