/* run_util.c - see run_util.h. */
#include "run_util.h"

#include <stdlib.h>
#include <string.h>

#include "cli/common.h"
#include "test.h"

dsr1_tokenizer *dsr1_test_tokenizer(void)
{
    char *json;
    size_t len;
    if (dsr1_common_read_all(dsr1_test_fixture("tokenizer/tokenizer.json"), &json, &len, NULL))
        return NULL;
    dsr1_tokenizer *tk = NULL;
    dsr1_tokenizer_create(&tk, json, len, "tokenizer.json", NULL);
    free(json);
    return tk;
}

int dsr1_test_push_text(dsr1_gen *g, const dsr1_tokenizer *tk, const char *text)
{
    int32_t *ids;
    size_t n;
    if (dsr1_tokenizer_encode(tk, text, strlen(text), &ids, &n, NULL)) return -1;
    int stopped = 0;
    for (size_t i = 0; i < n && !stopped; i++) stopped = dsr1_gen_push(g, ids[i], NULL);
    free(ids);
    return stopped;
}
