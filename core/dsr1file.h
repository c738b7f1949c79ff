/*
 * dsr1file.h - the .dsr1 packed model file: one mmap-able file holding a
 * whole model (weights in their packed types, config, tokenizer, template,
 * provenance). man/dsr1.5 is the normative description; this header is the
 * C view of it and the API to read it (core/: the runtime maps models).
 * The writer is convert/'s (convert/dsr1file.h), which builds on this.
 *
 * Layout (all integers little-endian):
 *
 *   [0, 4096)          header page: struct dsr1_file_header, zero padded
 *   [4096, data_end)   tensor payloads; each payload and each scale block
 *                      starts at a multiple of header.alignment (64)
 *   [meta_offset, +meta_size)  metadata: UTF-8 JSON object (not NUL-terminated)
 *   [dir_offset, +dir_size)    tensor directory: n_tensors records
 *
 * The directory and metadata come last so a converter can stream payloads
 * first and describe them when it knows their hashes; the header is
 * rewritten at the end. A file whose header.file_size differs from its real
 * size is truncated (or grown) and refused.
 *
 * Tensor types (what a kernel finds at `data`, for a 2-D weight [out, in],
 * row-major like Hugging Face; 3-D [E, out, in] stacks E experts, expert e
 * at data + e * (size / E) and scale + e * (scale_size / E)):
 *   F32, F16, BF16   plain values, no scale.
 *   FP8_E4M3         e4m3fn bytes; scale F32 [ceil(out/B), ceil(in/B)] with
 *                    B = block (128): the checkpoint's weight_scale_inv, copied
 *                    bit-exactly. w = fp8 * scale[r/B][c/B]. Edge blocks partial.
 *   INT8             int8 q in [-127,127]; group == 0: scale F32 [out] (per
 *                    output channel); group > 0: scale F32 [out, in/group].
 *                    w = q * scale.
 *   INT4             two values per byte along `in` (element 2k in the low
 *                    nibble, 2k+1 in the high), stored as q + 8 with q in
 *                    [-8,7] (quantiser uses [-7,7]); group 32 or 128 along
 *                    `in` (in % group == 0); scale F16 or BF16 [out, in/group].
 *   BLOB             raw bytes (ndim 1): tokenizer.json, tokenizer_config.json.
 */
#ifndef DSR1_FILE_H
#define DSR1_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define DSR1_FILE_MAGIC "DSR1MODL"
#define DSR1_FILE_VERSION 1
#define DSR1_FILE_ALIGN 64
#define DSR1_FILE_HEADER_SIZE 4096
#define DSR1_MAX_DIMS 4

typedef enum dsr1_type {
    DSR1_T_F32 = 0,
    DSR1_T_F16 = 1,
    DSR1_T_BF16 = 2,
    DSR1_T_FP8_E4M3 = 3,
    DSR1_T_INT8 = 4,
    DSR1_T_INT4 = 5,
    DSR1_T_BLOB = 6,
    DSR1_T_COUNT
} dsr1_type;

/* On-disk header at offset 0 (the rest of the 4096-byte page is zero). */
typedef struct dsr1_file_header {
    char magic[8];        /* DSR1_FILE_MAGIC, no NUL */
    uint32_t version;     /* DSR1_FILE_VERSION */
    uint32_t alignment;   /* payload alignment, DSR1_FILE_ALIGN */
    uint64_t file_size;   /* total bytes; truncation check */
    uint64_t meta_offset, meta_size;
    uint64_t dir_offset, dir_size;
    uint64_t n_tensors;
    uint64_t checksum;    /* dsr1_hash64 of metadata bytes then directory bytes */
    uint8_t reserved[56]; /* zero */
} dsr1_file_header;       /* 128 bytes */

/*
 * On-disk directory record: this fixed part, then name_len bytes of name,
 * then zero padding to a multiple of 8. Offsets are absolute file offsets.
 */
typedef struct dsr1_dir_record {
    uint16_t name_len;
    uint8_t type;         /* dsr1_type */
    uint8_t ndim;         /* 1..4 */
    uint8_t scale_type;   /* dsr1_type of the scales (F32/F16/BF16), 0 if none */
    uint8_t reserved8[3];
    uint32_t group;       /* FP8: block size; INT8/INT4: group along in (0 = per channel) */
    uint32_t reserved32;
    uint64_t dims[DSR1_MAX_DIMS]; /* logical shape; unused dims are 0 */
    uint64_t offset, size;        /* payload */
    uint64_t scale_offset, scale_size; /* 0, 0 when the type has no scale */
    uint64_t hash;        /* dsr1_hash64 of payload bytes then scale bytes */
} dsr1_dir_record;        /* 88 bytes */

/* A tensor as the reader hands it out: pointers into the mapping. */
typedef struct dsr1_tensor {
    const char *name;     /* NUL-terminated copy owned by the dsr1_file */
    dsr1_type type;
    int ndim;
    int64_t dims[DSR1_MAX_DIMS];
    const void *data;     /* mmap'd payload, size bytes, DSR1_FILE_ALIGN aligned */
    uint64_t size;
    const void *scale;    /* mmap'd scales or NULL */
    uint64_t scale_size;
    dsr1_type scale_type;
    int group;
    uint64_t hash;
} dsr1_tensor;

typedef struct dsr1_file dsr1_file;

/* ---- reading ---------------------------------------------------------- */

/* Map `path` read-only and validate header, sizes, checksum and every
 * directory record (types, shapes agree with sizes, regions inside the data
 * area, no overlaps). Payload hashes are not checked here (that reads the
 * whole file): see dsr1_file_verify. */
int dsr1_file_open(dsr1_file **out, const char *path, dsr1_error *err);
void dsr1_file_close(dsr1_file *f); /* NULL is a no-op */

const char *dsr1_file_path(const dsr1_file *f);
/* Whether [p, p + n) lies inside the file's mapping (a loader's last check
 * before handing a pointer to a backend). */
int dsr1_file_contains(const dsr1_file *f, const void *p, uint64_t n);
const dsr1_file_header *dsr1_file_header_of(const dsr1_file *f);
/* Metadata JSON text (NUL-terminated copy owned by f). */
const char *dsr1_file_metadata(const dsr1_file *f);
size_t dsr1_file_n_tensors(const dsr1_file *f);
const dsr1_tensor *dsr1_file_tensor(const dsr1_file *f, size_t i);
/* Lookup by exact name; NULL when absent. */
const dsr1_tensor *dsr1_file_find(const dsr1_file *f, const char *name);

/* Recompute every payload hash; progress(done_bytes, total_bytes, ctx) is
 * called now and then when non-NULL. Names the first bad tensor on error. */
int dsr1_file_verify(const dsr1_file *f,
                     void (*progress)(uint64_t, uint64_t, void *), void *ctx,
                     dsr1_error *err);

/* ---- type helpers ----------------------------------------------------- */

const char *dsr1_type_name(dsr1_type t);           /* "f32", "fp8", "int4", ... */
int dsr1_type_from_name(const char *s, dsr1_type *t); /* 0 or DSR1_EINVAL */
/* Payload bytes of a tensor of `type` with logical dims; for 3-D stacks the
 * result is E * per-matrix size. 0 when the shape is invalid for the type
 * (ndim outside 1..4, a dim < 1, overflow; FP8/INT8/INT4 need ndim 2 or 3,
 * INT4 an even `in`, BLOB ndim 1). */
uint64_t dsr1_type_payload_size(dsr1_type type, int ndim, const int64_t *dims);
/* Scale bytes; 0 for types without scales and for invalid combinations
 * (FP8: F32 scales, group = block > 0; INT8: F32, group 0 or dividing `in`;
 * INT4: F16 or BF16, group 32 or 128 dividing `in`). */
uint64_t dsr1_type_scale_size(dsr1_type type, dsr1_type scale_type, int group,
                              int ndim, const int64_t *dims);

/* Checksums: XXH64 (the public xxHash 64-bit algorithm, spelled out in
 * dsr1(5)) with seed DSR1_HASH_SEED, so `xxh64` tools with a seed option
 * can check a .dsr1 file independently. Streaming: init, update with any
 * chunking, final (the result does not depend on how the bytes were split). */
#define DSR1_HASH_SEED 0x9e3779b97f4a7c15ull
typedef struct dsr1_hash64_state {
    uint64_t v[4];     /* the four lane accumulators */
    uint64_t total;    /* bytes fed so far */
    uint64_t seed;
    uint8_t buf[32];   /* a partial 32-byte stripe */
    uint32_t nbuf;
} dsr1_hash64_state;
void dsr1_hash64_init(dsr1_hash64_state *s, uint64_t seed);
void dsr1_hash64_update(dsr1_hash64_state *s, const void *buf, size_t n);
uint64_t dsr1_hash64_final(const dsr1_hash64_state *s);
/* One shot with DSR1_HASH_SEED. */
uint64_t dsr1_hash64(const void *buf, size_t n);

#endif
