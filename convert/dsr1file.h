/*
 * dsr1file.h (convert/) - writing .dsr1 files. The format, the reader, the
 * type size rules and the hash are the runtime's (core/dsr1file.h); a
 * converter writes what core reads.
 */
#ifndef DSR1_FILE_WRITE_H
#define DSR1_FILE_WRITE_H

#include "../core/dsr1file.h"

/* ---- writing ---------------------------------------------------------- */

typedef struct dsr1_writer dsr1_writer;

/* Create "<path>.tmp-<pid>" next to path; nothing appears under `path` until
 * dsr1_writer_finish succeeds. */
int dsr1_writer_open(dsr1_writer **out, const char *path, dsr1_error *err);

/* Reserve space for a tensor described by t (name, type, ndim, dims,
 * scale_type, group; data/size/scale/hash ignored) and return its index.
 * Sizes come from dsr1_type_payload_size/scale_size. Payloads are then
 * written with dsr1_writer_write (any order, any chunking: memory stays
 * bounded by the caller's chunks). */
int dsr1_writer_add(dsr1_writer *w, const dsr1_tensor *t, size_t *index,
                    dsr1_error *err);
/* which = 0 payload, 1 scale; off = byte offset within that region. */
int dsr1_writer_write(dsr1_writer *w, size_t index, int which, uint64_t off,
                      const void *buf, size_t n, dsr1_error *err);
/* Metadata JSON (copied). */
int dsr1_writer_set_metadata(dsr1_writer *w, const char *json, dsr1_error *err);
/* Optional, after the last add: preallocate the data area (posix_fallocate)
 * so a full disk fails before hours of work rather than at the end. */
int dsr1_writer_reserve(dsr1_writer *w, dsr1_error *err);
/* Check every tensor was written completely, finish the payload hashes
 * (computed while in-order writes arrived; out-of-order tensors are read
 * back), write metadata and directory, rewrite the header, fsync, rename to
 * the final path. Frees w whether it succeeds or not; on failure the temp
 * file is removed. */
int dsr1_writer_finish(dsr1_writer *w, dsr1_error *err);
/* "<path>.tmp-<pid>" (for messages), NULL after finish. */
const char *dsr1_writer_temp_path(const dsr1_writer *w);
/* Remove the temporary file and free w (NULL is a no-op). Always safe. */
void dsr1_writer_abort(dsr1_writer *w);

#endif
