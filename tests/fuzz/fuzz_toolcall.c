/*
 * fuzz_toolcall.c - the tool-call stream parser (core/toolcall.c): the
 * model's output markup for function calls, fed in pieces as decoding
 * delivers them. The first input byte sets the piece size (1..32) so cuts
 * fall everywhere, including inside markers and UTF-8 characters; the
 * stream is then finished and the calls turned into JSON. The same bytes
 * fed in one piece must give the same number of calls.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "core/toolcall.h"
#include "fuzz.h"

static size_t parse(dsr1_toolcall_parser *p, const uint8_t *s, size_t n, size_t piece)
{
    dsr1_toolcall_reset(p);
    dsr1_toolcall_delta d;
    dsr1_error err = {0};
    volatile size_t sink = 0;
    for (size_t a = 0; a < n; a += piece) {
        size_t k = n - a < piece ? n - a : piece;
        if (dsr1_toolcall_feed(p, (const char *)s + a, k, &d, &err)) return (size_t)-1;
        if (d.n_content) sink += (size_t)d.content[0] + (size_t)d.content[d.n_content - 1];
    }
    if (dsr1_toolcall_finish(p, &d, &err)) return (size_t)-1;
    (void)sink;
    for (size_t i = 0; i < dsr1_toolcall_count(p); i++) {
        const dsr1_toolcall *c = dsr1_toolcall_get(p, i);
        if (!c || !c->name || !c->arguments) abort();
    }
    cJSON_Delete(dsr1_toolcall_to_json(p));
    return dsr1_toolcall_count(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size) return 0;
    size_t piece = (size_t)(data[0] % 32) + 1;
    dsr1_toolcall_parser *p = NULL;
    dsr1_error err = {0};
    if (dsr1_toolcall_create(&p, &err)) return 0;
    size_t a = parse(p, data + 1, size - 1, piece);
    size_t b = parse(p, data + 1, size - 1, size);
    if (a != (size_t)-1 && b != (size_t)-1 && a != b) {
        fprintf(stderr, "fuzz_toolcall: %zu calls fed in pieces of %zu, %zu in one piece\n", a,
                piece, b);
        abort();
    }
    dsr1_toolcall_free(p);
    return 0;
}
