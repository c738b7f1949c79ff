/*
 * prefix.h - the prefix cache: a radix tree over token ids at page
 * granularity (as SGLang's RadixAttention), whose nodes hold KV cache pages
 * by reference, so sequences with a common prompt prefix share its KV rows
 * instead of computing them again.
 *
 * Each node is one full page: `block` token ids and the page holding their
 * rows, under the node of the page before. A path from the root spells a
 * prefix; a sequence whose prompt starts with it takes the pages (the KV
 * cache's refcounts keep them alive) and computes only the rest. Rows of a
 * position depend only on the tokens up to it, so shared rows are the rows
 * the sequence would have computed (tested bit for bit through the engine).
 *
 * Eviction: least recently used leaves that no slot holds any more, when
 * the KV cache is short of pages (its reclaim hook). The tree is sized at
 * create (one node per page at most) and never allocates afterwards.
 */
#ifndef DSR1_PREFIX_H
#define DSR1_PREFIX_H

#include <stdint.h>

#include "error.h"
#include "kvcache.h"

typedef struct dsr1_prefix dsr1_prefix;

/* A tree over kv's pages; installs itself as kv's reclaim hook. */
int dsr1_prefix_create(dsr1_prefix **out, dsr1_kvcache *kv, dsr1_error *err);
/* Lets go of every page it holds; NULL is a no-op. */
void dsr1_prefix_free(dsr1_prefix *p);

/* The longest cached prefix of tokens, in whole pages, at most max_pages:
 * writes the page ids to pages and returns how many. Marks them used. */
int dsr1_prefix_match(dsr1_prefix *p, const int32_t *tokens, int max_pages, int32_t *pages);
/* Add the n full pages of a sequence (tokens[0, n * block) and the pages
 * holding their rows). Pages already in the tree for the same tokens are
 * kept; the others are taken by reference. */
void dsr1_prefix_insert(dsr1_prefix *p, const int32_t *tokens, const int32_t *pages, int n);
/* Let go of up to want pages no slot holds, least recently used first;
 * returns how many went back to the cache's free stack. */
int dsr1_prefix_evict(dsr1_prefix *p, int want);
/* Pages the tree holds (tests, stats). */
int dsr1_prefix_pages(const dsr1_prefix *p);

#endif
