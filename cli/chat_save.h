/*
 * chat_save.h - /save and /load of `dsr1 chat`: the conversation and the
 * KV cache of its last turn in one zstd-compressed file, so a long
 * conversation resumes without recomputing its prompt.
 *
 * File: one zstd stream of
 *   "DSR1CHAT 1\n" <JSON header line> "\n" <kv_bytes bytes of KV export>
 * where the header is {"messages": [...], "system": ..., "kv_bytes": N}
 * and the KV bytes are exactly dsr1_engine_seq_export's buffer (N may be 0:
 * conversation only).
 */
#ifndef DSR1_CLI_CHAT_SAVE_H
#define DSR1_CLI_CHAT_SAVE_H

#include <stddef.h>

#include "core/error.h"

struct cJSON;

/* header: a cJSON object (messages, system...) serialised as given, with
 * kv_bytes added. kv may be NULL (kv_len 0). */
int dsr1_chat_save_write(const char *path, const struct cJSON *header, const void *kv,
                         size_t kv_len, dsr1_error *err);
/* *header: the parsed header (cJSON_Delete it); *kv malloc'd (NULL when
 * none). Nothing larger than the limits is allocated: the header line may
 * take at most max_json bytes and the KV bytes at most max_kv (DSR1_ERANGE
 * past it). DSR1_EFORMAT naming the file for anything not written by save
 * (bad magic, torn or extra data, a declared size that does not match). */
int dsr1_chat_save_read(const char *path, size_t max_json, size_t max_kv,
                        struct cJSON **header, void **kv, size_t *kv_len, dsr1_error *err);

#endif
