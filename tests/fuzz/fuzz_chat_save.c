/*
 * fuzz_chat_save.c - a chat save file as /load reads it
 * (dsr1_chat_save_read: zstd stream, "DSR1CHAT 1" line, JSON header, KV
 * bytes). The input is the file as it lies on disk, so most inputs fail
 * zstd; the corpus seeds are real saves and the fuzzer mutates them.
 * Each input is also tried after zstd-compressing it, so the format inside
 * the stream is reached as well.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <zstd.h>

#include "cli/chat_save.h"
#include "fuzz.h"

static void load(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0) return;
    cJSON *h = NULL;
    void *kv = NULL;
    size_t kv_len = 0;
    dsr1_error err = {0};
    /* Limits as chat passes them (the context bounds them): small here. */
    if (dsr1_chat_save_read(path, (size_t)1 << 20, (size_t)16 << 20, &h, &kv, &kv_len, &err) == 0) {
        volatile uint8_t sink = kv_len ? ((const uint8_t *)kv)[kv_len - 1] : 0;
        (void)sink;
        cJSON_Delete(h);
        free(kv);
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    load(data, size);
    size_t cap = ZSTD_compressBound(size);
    void *z = malloc(cap ? cap : 1);
    if (!z) return 0;
    size_t zn = ZSTD_compress(z, cap, data, size, 1);
    if (!ZSTD_isError(zn)) load(z, zn);
    free(z);
    return 0;
}
