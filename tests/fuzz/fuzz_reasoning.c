/*
 * fuzz_reasoning.c - the reasoning splitter (core/reasoning.c): R1's
 * <think> ... </think> block separated from the answer while streaming.
 * The first byte picks forced_open (bit 7) and the piece size (1..64); the
 * streamed split must equal the one-shot split (dsr1_reasoning_split) byte
 * for byte, wherever the pieces cut the tags (for text without NUL bytes,
 * which the one-shot strings cannot carry).
 */
#include <stdlib.h>
#include <string.h>

#include "core/reasoning.h"
#include "fuzz.h"

typedef struct grow {
    char *p;
    size_t n, cap;
} grow;

static int put(grow *g, const char *s, size_t n)
{
    if (!n) return 0;
    if (g->n + n > g->cap) {
        size_t cap = (g->n + n) * 2;
        char *q = realloc(g->p, cap);
        if (!q) return -1;
        g->p = q, g->cap = cap;
    }
    memcpy(g->p + g->n, s, n);
    g->n += n;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size) return 0;
    int forced = data[0] >> 7;
    size_t piece = (size_t)(data[0] & 63) + 1;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    dsr1_reasoning *r = NULL;
    dsr1_error err = {0};
    if (dsr1_reasoning_create(&r, forced, &err)) return 0;
    grow think = {0}, answer = {0};
    dsr1_reasoning_delta d;
    int bad = 0;
    for (size_t a = 0; a < n && !bad; a += piece) {
        size_t k = n - a < piece ? n - a : piece;
        bad = dsr1_reasoning_feed(r, text + a, k, &d, &err) ||
              put(&think, d.reasoning, d.n_reasoning) || put(&answer, d.answer, d.n_answer);
    }
    if (!bad)
        bad = dsr1_reasoning_finish(r, &d, &err) || put(&think, d.reasoning, d.n_reasoning) ||
              put(&answer, d.answer, d.n_answer);
    dsr1_think_status st_stream = dsr1_reasoning_status(r);
    char *t1 = NULL, *a1 = NULL;
    dsr1_think_status st = DSR1_THINK_NONE;
    /* The one-shot results are NUL-terminated strings without a length:
     * comparable only when the text has no NUL of its own. */
    if (!bad && dsr1_reasoning_split(text, n, forced, &t1, &a1, &st, &err) == 0 &&
        !memchr(text, 0, n)) {
        if (strlen(t1) != think.n || memcmp(t1, think.p ? think.p : "", think.n) ||
            strlen(a1) != answer.n || memcmp(a1, answer.p ? answer.p : "", answer.n) ||
            st != st_stream) {
            fprintf(stderr, "fuzz_reasoning: pieces of %zu split differently from one shot\n",
                    piece);
            abort();
        }
    }
    dsr1_reasoning_prompt_opens(text, n);
    free(t1);
    free(a1);
    free(think.p);
    free(answer.p);
    dsr1_reasoning_free(r);
    return 0;
}
