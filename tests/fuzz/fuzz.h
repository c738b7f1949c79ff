/*
 * fuzz.h - shared by the fuzz targets in tests/fuzz/fuzz_*.c.
 *
 * Each target defines LLVMFuzzerTestOneInput and is built two ways (see the
 * Makefile): with clang -fsanitize=fuzzer,address,undefined by `make fuzz`
 * (libFuzzer supplies main and mutates inputs), and with the normal
 * compiler plus tests/fuzz/replay.c by `make test`, which runs every file
 * of tests/fuzz/corpus/<name>/ through it once (regressions: the seeds and
 * every input that ever crashed a target are kept there).
 *
 * Parsers that take a path get the input as an in-memory file (memfd) named
 * /proc/self/fd/N, so the code under test opens, stats and mmaps it exactly
 * as it would a file on disk.
 */
#ifndef DSR1_FUZZ_H
#define DSR1_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Write data into a fresh memfd; path gets its /proc/self/fd name. Returns
 * the fd (close it when done) or -1. */
static inline int fuzz_memfile(const uint8_t *data, size_t size, char *path, size_t cap)
{
    int fd = memfd_create("fuzz", 0);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

/* Each '\n'-separated line of data (the last one may lack it) to fn(line,
 * len, no), no counting from 1, from a private copy without a terminator,
 * so that reading past len is caught. */
static inline void fuzz_lines(const uint8_t *data, size_t size,
                              void (*fn)(const char *line, size_t len, long no))
{
    char *buf = malloc(size ? size : 1);
    if (!buf) return;
    memcpy(buf, data, size);
    long no = 1;
    for (size_t a = 0; a <= size; no++) {
        const char *nl = memchr(buf + a, '\n', size - a);
        size_t b = nl ? (size_t)(nl - buf) : size;
        fn(buf + a, b - a, no);
        a = b + 1;
    }
    free(buf);
}

#endif
