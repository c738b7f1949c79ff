/*
 * fuzz_read_back.c - an output file as `dsr1 run --resume` reads it back
 * (dsr1_common_read_back: JSONL or zstd frames, torn last record cut) and
 * as the JSONL input reader sees it (dsr1_common_reader_*: plain or zstd
 * input, lines of any length). The ids of the records are extracted as
 * --resume does. Every zstd-looking input is also tried as plain text and
 * every input after zstd-compressing it, so both paths are reached.
 */
#include <stdlib.h>
#include <zstd.h>

#include "cli/common.h"
#include "cli/run_req.h"
#include "fuzz.h"

static void on_record(void *ctx, const char *line, size_t len)
{
    (void)ctx;
    free(dsr1_run_record_id(line, len));
}

static void one(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0) return;
    dsr1_error err = {0};
    dsr1_linereader *r = NULL;
    if (dsr1_common_reader_open(&r, path, &err) == 0) {
        char *line;
        size_t len;
        while (dsr1_common_reader_next(r, &line, &len, &err) == 0 && line) {
            volatile char sink = len ? line[len - 1] : 0;
            (void)sink;
        }
        dsr1_common_reader_close(r);
    }
    char note[512];
    dsr1_common_read_back(path, on_record, NULL, note, sizeof note, &err);
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size);
    size_t cap = ZSTD_compressBound(size);
    void *z = malloc(cap ? cap : 1);
    if (!z) return 0;
    size_t zn = ZSTD_compress(z, cap, data, size, 1);
    if (!ZSTD_isError(zn)) one(z, zn);
    free(z);
    return 0;
}
