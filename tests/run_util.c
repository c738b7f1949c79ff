/* run_util.c - see run_util.h. */
#include "run_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

int dsr1_test_parse_req(dsr1_run_req *r, const char *line, long no, dsr1_error *e)
{
    dsr1_run_defaults d;
    dsr1_run_defaults_init(&d);
    d.sampling.seed = 100;
    return dsr1_run_req_parse(r, line, strlen(line), no, &d, e);
}

void dsr1_test_count_line(void *ctx, const char *line, size_t len)
{
    (void)line;
    (void)len;
    (*(int *)ctx)++;
}

long dsr1_test_file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

void dsr1_test_write_file(const char *p, const char *data, size_t n)
{
    FILE *f = fopen(p, "wb");
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

int dsr1_test_write_records(const char *p, int from, int to, int append, dsr1_error *e)
{
    dsr1_recwriter *w;
    DSR1_TRY(dsr1_common_writer_open(&w, p, append, e));
    char rec[64];
    for (int i = from; i < to; i++) {
        int n = snprintf(rec, sizeof rec, "{\"id\":%d,\"text\":\"r%d\"}", i, i);
        DSR1_TRY(dsr1_common_writer_put(w, rec, (size_t)n, e));
    }
    dsr1_common_writer_close(w);
    return 0;
}
