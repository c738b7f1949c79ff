/*
 * run_util.h - helpers shared by the `run` tests (test_run.c,
 * test_run_batch.c): the real tokenizer from the fixtures, and feeding text
 * through a generation stream token by token as the engine would.
 */
#ifndef DSR1_TEST_RUN_UTIL_H
#define DSR1_TEST_RUN_UTIL_H

#include "cli/run_gen.h"
#include "core/tokenizer.h"

/* The DeepSeek-V3 tokenizer of tests/fixtures/tokenizer, or NULL. */
dsr1_tokenizer *dsr1_test_tokenizer(void);
/* Encode text and push its ids into g until it stops: 1 stopped, 0 not, -1 error. */
int dsr1_test_push_text(dsr1_gen *g, const dsr1_tokenizer *tk, const char *text);

#endif
