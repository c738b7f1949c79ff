/*
 * fuzz_bench_prompts.c - one line of a `dsr1 bench --spec --prompts FILE`
 * file (dsr1_bench_prompt_parse: {"prompt": string, "tag": string}); each
 * input line is parsed on its own.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/bench_spec.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy without a terminator: reading past len is caught. */
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    long no = 1;
    for (size_t a = 0; a <= size; no++) {
        const char *nl = memchr(buf + a, '\n', size - a);
        size_t b = nl ? (size_t)(nl - buf) : size;
        char *p, *t;
        dsr1_error err = {0};
        if (dsr1_bench_prompt_parse(buf + a, b - a, "fuzz", no, &p, &t, &err) == 0) {
            if (!p || !p[0]) abort(); /* a success has a non-empty prompt */
            free(p);
            free(t);
        }
        a = b + 1;
    }
    free(buf);
    return 0;
}
