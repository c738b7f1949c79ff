/*
 * checkpoint.h - a Hugging Face checkpoint directory as DeepSeek publishes
 * it: config.json, model.safetensors.index.json + shards (or a single
 * model.safetensors), tokenizer.json, tokenizer_config.json.
 *
 * Opening validates everything that can be checked without reading the
 * payloads: every shard's header (offsets inside the file, size = shape x
 * dtype size, no overlaps), every tensor named by the index present in its
 * shard, the config. Shards are mmap'd read-only; payload pointers stay valid
 * until dsr1_checkpoint_close. Nothing is copied, so memory stays bounded.
 */
#ifndef DSR1_CHECKPOINT_H
#define DSR1_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "../core/config.h"
#include "../core/error.h"

/* safetensors dtypes dsr1 reads (others are refused naming the tensor). */
typedef enum dsr1_st_dtype {
    DSR1_ST_F32, DSR1_ST_F16, DSR1_ST_BF16, DSR1_ST_F8_E4M3, DSR1_ST_I8,
    DSR1_ST_COUNT
} dsr1_st_dtype;

typedef struct dsr1_st_tensor {
    const char *name;      /* owned by the checkpoint */
    dsr1_st_dtype dtype;
    int ndim;
    int64_t dims[4];
    const void *data;      /* into the shard's mapping */
    uint64_t size;         /* bytes */
    uint64_t file_offset;  /* of data in the shard file: 8 + header length +
                              data_offsets begin (what shard hashing and
                              pread need without re-parsing the header) */
    int shard;             /* index into the shard list */
} dsr1_st_tensor;

typedef struct dsr1_checkpoint dsr1_checkpoint;

int dsr1_checkpoint_open(dsr1_checkpoint **out, const char *dir, dsr1_error *err);
void dsr1_checkpoint_close(dsr1_checkpoint *ck); /* NULL is a no-op */

const dsr1_config *dsr1_checkpoint_config(const dsr1_checkpoint *ck);
const char *dsr1_checkpoint_dir(const dsr1_checkpoint *ck);
/* Raw text of config.json / tokenizer.json / tokenizer_config.json (NUL
 * terminated, owned by ck); NULL when the file is absent (tokenizer files are
 * optional: the tiny fixture has none). */
const char *dsr1_checkpoint_file_text(const dsr1_checkpoint *ck, const char *basename,
                                      size_t *len);

size_t dsr1_checkpoint_n_tensors(const dsr1_checkpoint *ck);
const dsr1_st_tensor *dsr1_checkpoint_tensor(const dsr1_checkpoint *ck, size_t i);
const dsr1_st_tensor *dsr1_checkpoint_find(const dsr1_checkpoint *ck, const char *name);

size_t dsr1_checkpoint_n_shards(const dsr1_checkpoint *ck);
/* Shard file name (base name), size in bytes. */
const char *dsr1_checkpoint_shard_name(const dsr1_checkpoint *ck, size_t i, uint64_t *size);

/* The checkpoint file (base name: a shard, the index, config.json or a
 * tokenizer file) that path is, or points to (by device and inode, through
 * symlinks and hard links); NULL when path is none of them or does not
 * exist. Convert refuses such an output before writing anything. */
const char *dsr1_checkpoint_source_of(const dsr1_checkpoint *ck, const char *path);

const char *dsr1_st_dtype_name(dsr1_st_dtype t); /* "F8_E4M3", "BF16", ... */
size_t dsr1_st_dtype_size(dsr1_st_dtype t);

/* ---- the architecture's tensors (added by H1) ---------------------------- */

/* How a checkpoint stores a tensor of the architecture. */
typedef enum dsr1_ck_role {
    DSR1_CK_LINEAR, /* projection weight [out, in]: F8_E4M3 with a
                       `<name>_scale_inv` F32 [ceil(out/B), ceil(in/B)] in
                       fp8 sources, I8 with `<name>_scale` ("...weight_scale")
                       [out, 1] in channel-INT8 ones, else BF16/F16/F32.
                       Includes the MTP eh_proj: a linear layer like the
                       others (released checkpoints store it BF16; a
                       quantised one with its scale is accepted) */
    DSR1_CK_NORM,   /* RMSNorm weight [n], BF16 in released checkpoints */
    DSR1_CK_PLAIN,  /* never quantised in a checkpoint: embeddings, LM
                       heads, the router mlp.gate.weight */
    DSR1_CK_BIAS,   /* mlp.gate.e_score_correction_bias [E], F32 */
} dsr1_ck_role;

typedef struct dsr1_ck_expect {
    const char *name;  /* full tensor name; valid during the callback only */
    dsr1_ck_role role;
    int ndim;          /* 1 or 2 */
    int64_t dims[2];
    const char *why;   /* the config keys the shape comes from, e.g.
                          "num_attention_heads*v_head_dim" */
    int layer;         /* decoder layer (MTP: >= num_hidden_layers); -1 outside */
} dsr1_ck_expect;

/* Call fn for every tensor the architecture described by c has, in the
 * order Hugging Face checkpoints list them (embedding, layers 0.. including
 * MTP layers, final norm, lm_head); scale tensors are not listed (they
 * follow from role and dtype). fn returns 0 to go on; a non-zero return
 * stops the walk and is returned. */
int dsr1_checkpoint_expected(const dsr1_config *c,
                             int (*fn)(const dsr1_ck_expect *t, void *ctx), void *ctx);

/* Name of the scale tensor that goes with LINEAR weight `name` stored as
 * dtype (F8_E4M3: "<name>_scale_inv"; I8: "<name>_scale"), written
 * into buf; returns buf, or NULL when that dtype has no scale. */
const char *dsr1_checkpoint_scale_name(const char *name, dsr1_st_dtype dtype, char *buf,
                                       size_t size);

/* Check every expected tensor is present with the shape config.json implies,
 * a dtype its role allows and, for quantised ones, its scale tensor with the
 * right shape; and that the checkpoint holds nothing else. Errors name the
 * shard file, the tensor, found and expected shape and the config keys. */
int dsr1_checkpoint_check_shapes(const dsr1_checkpoint *ck, dsr1_error *err);

#endif
