/*
 * fuzz_tokenizer.c - tokenizer.json (dsr1_tokenizer_create). When the
 * input is accepted, a fixed text and the input's own first bytes are
 * encoded and decoded again with the tokenizer it built (the merge table,
 * tries and byte maps a crafted file shaped).
 */
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer.h"
#include "fuzz.h"

static void round_trip(const dsr1_tokenizer *tk, const char *text, size_t len)
{
    int32_t *ids = NULL;
    size_t n = 0;
    dsr1_error err = {0};
    if (dsr1_tokenizer_encode(tk, text, len, &ids, &n, &err) != 0) return;
    char *back = NULL;
    size_t blen = 0;
    if (dsr1_tokenizer_decode(tk, ids, n, &back, &blen, &err) == 0) free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsr1_tokenizer *tk = NULL;
    dsr1_error err = {0};
    if (dsr1_tokenizer_create(&tk, (const char *)data, size, "tokenizer.json", &err) != 0)
        return 0;
    static const char sample[] = "Hello, world! 123 \xe4\xb8\xad\xe6\x96\x87 <think>\n\t x";
    round_trip(tk, sample, sizeof sample - 1);
    round_trip(tk, (const char *)data, size < 256 ? size : 256);
    dsr1_tokenizer_free(tk);
    return 0;
}
