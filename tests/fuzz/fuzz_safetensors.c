/*
 * fuzz_safetensors.c - a safetensors shard: 8-byte header length, JSON
 * header (dtype, shape, data_offsets per tensor), payloads. Opens the input
 * as a shard file, then reads the first and last byte of every tensor the
 * parser accepted (a record pointing outside the mapping faults here).
 */
#include <stdlib.h>

#include "convert/safetensors.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0) return 0;
    dsr1_safetensors *st = NULL;
    dsr1_error err = {0};
    volatile uint8_t sink = 0;
    if (dsr1_safetensors_open(&st, path, &err) == 0) {
        for (size_t i = 0; i < dsr1_safetensors_n_tensors(st); i++) {
            const dsr1_st_tensor *t = dsr1_safetensors_tensor(st, i);
            const uint8_t *p = t->data;
            if (t->size) sink ^= p[0] ^ p[t->size - 1];
            if (t->ndim < 0 || t->ndim > 4) abort();
        }
        dsr1_safetensors_close(st);
    }
    (void)sink;
    close(fd);
    return 0;
}
