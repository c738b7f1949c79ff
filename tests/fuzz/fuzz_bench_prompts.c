/*
 * fuzz_bench_prompts.c - one line of a `dsr1 bench --spec --prompts FILE`
 * file (dsr1_bench_prompt_parse: {"prompt": string, "tag": string}); each
 * input line is parsed on its own.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/bench_spec.h"
#include "fuzz.h"

static void one_line(const char *line, size_t len, long no)
{
    char *p, *t;
    dsr1_error err = {0};
    if (dsr1_bench_prompt_parse(line, len, "fuzz", no, &p, &t, &err) == 0) {
        if (!p || !p[0]) abort(); /* a success has a non-empty prompt */
        free(p);
        free(t);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_lines(data, size, one_line);
    return 0;
}
