/*
 * run_util.h - helpers shared by the `run` tests (test_run.c,
 * test_run_batch.c): the real tokenizer from the fixtures, feeding text
 * through a generation stream token by token as the engine would, request
 * parsing with fixed defaults, and small file helpers.
 */
#ifndef DSR1_TEST_RUN_UTIL_H
#define DSR1_TEST_RUN_UTIL_H

#include "cli/run_gen.h"
#include "cli/run_req.h"
#include "core/error.h"
#include "core/tokenizer.h"

/* The DeepSeek-V3 tokenizer of tests/fixtures/tokenizer, or NULL. */
dsr1_tokenizer *dsr1_test_tokenizer(void);
/* Encode text and push its ids into g until it stops: 1 stopped, 0 not, -1 error. */
int dsr1_test_push_text(dsr1_gen *g, const dsr1_tokenizer *tk, const char *text);
/* Parse one request line with run's defaults (sampling seed 100). */
int dsr1_test_parse_req(dsr1_run_req *r, const char *line, long no, dsr1_error *e);
/* A line callback that counts lines into *(int *)ctx. */
void dsr1_test_count_line(void *ctx, const char *line, size_t len);
/* File size in bytes, -1 if it does not exist. */
long dsr1_test_file_size(const char *p);
void dsr1_test_write_file(const char *p, const char *data, size_t n);
/* Records {"id":i,"text":"ri"} for i in [from, to) through run's writer. */
int dsr1_test_write_records(const char *p, int from, int to, int append, dsr1_error *e);

#endif
