/*
 * engine_prefix.c - the engine's side of the prefix cache (core/prefix.c):
 * when sequences take cached pages and when they give theirs to the tree.
 *
 * Taking (attach, before each step's batch is built): a sequence that has
 * not computed any row of its own yet beyond pages it took from the tree
 * (n_done on a page boundary, every page it holds found on the tree's
 * path) takes the rest of the longest cached prefix, at most up to the
 * page before its last prompt token (that token is always fed, for the
 * logits). Checking again every step lets requests admitted together
 * share: the first computes the common prefix chunk by chunk and publishes
 * each chunk's pages at the step's end; the others, waiting behind it for
 * the prefill budget, take them as they appear.
 *
 * Waiting (wait, while a step's batch is built): a sequence at such a page
 * boundary sits out the step when an earlier-admitted sequence is computing
 * that very next page right now (same tokens up to its end), instead of
 * computing a copy: it takes the page at the next step. The earliest
 * prefilling sequence never waits, so prefill always advances.
 *
 * Giving (publish): full pages of positions whose rows are final: below
 * n_done, and below n_mtp when the engine speculates (a cached page must
 * carry the MTP layer's rows too). At the end of a step for sequences that
 * prefilled in it, and for every sequence when its slot is given back,
 * except one that failed (its rows may be what made it fail).
 *
 * cached_tokens (stats.n_cached) counts the prompt tokens taken.
 */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

int dsr1_engine_prefix_create(dsr1_engine *e, dsr1_error *err)
{
    if (!e->o.prefix_cache) return 0;
    e->pfx_pages = malloc((size_t)e->kv->max_pages * sizeof *e->pfx_pages);
    if (!e->pfx_pages) return dsr1_errorf(err, DSR1_ENOMEM, "engine: out of memory");
    return dsr1_prefix_create(&e->prefix, e->kv, err);
}

static void attach(dsr1_engine *e, eseq *s)
{
    dsr1_kvcache *kv = e->kv;
    int B = kv->block, have = s->n_done / B, max = (s->n_prompt - 1) / B;
    if (s->n_done % B || max <= have || kv->n_held[s->slot] != have) return;
    int k = dsr1_prefix_match(e->prefix, s->tokens, max, e->pfx_pages);
    const int32_t *tab = kv->table + (size_t)s->slot * (size_t)kv->max_pages;
    if (k <= have || memcmp(tab, e->pfx_pages, (size_t)have * sizeof *tab)) return;
    dsr1_kvcache_share(kv, s->slot, e->pfx_pages + have, k - have);
    s->n_done = s->n_mtp = k * B;
    s->h_lag = 0;
    s->stats.n_cached = s->n_done;
}

void dsr1_engine_prefix_attach(dsr1_engine *e)
{
    if (!e->prefix) return;
    for (int i = 0; i < e->n_seqs; i++) {
        eseq *s = &e->seqs[i];
        if (s->state == SEQ_RUNNING && s->slot >= 0 && s->n_generated == 0) attach(e, s);
    }
}

int dsr1_engine_prefix_wait(const dsr1_engine *e, const eseq *s)
{
    int B = e->kv->block, next = s->n_done + B;
    if (!e->prefix || s->n_generated || s->n_done % B || next > s->n_prompt - 1) return 0;
    for (int i = 0; i < e->n_seqs; i++) {
        const eseq *o = &e->seqs[i];
        int od = o->n_done - o->b_len; /* where o stood when this step began */
        if (o == s || o->state != SEQ_RUNNING || o->n_generated || o->order > s->order ||
            od < s->n_done || od >= next || o->n_prompt < next)
            continue;
        if (!memcmp(o->tokens, s->tokens, (size_t)next * sizeof *s->tokens)) return 1;
    }
    return 0;
}

void dsr1_engine_prefix_publish(dsr1_engine *e, const eseq *s)
{
    /* A failed sequence's rows are not trusted (e.g. non-finite). */
    if (!e->prefix || s->slot < 0 || !s->tokens || s->finish == DSR1_FINISH_ERROR) return;
    const dsr1_kvcache *kv = e->kv;
    int lim = s->n_done;
    if (e->kmax && s->n_mtp < lim) lim = s->n_mtp;
    if (lim > kv->len[s->slot]) lim = kv->len[s->slot];
    int n = lim / kv->block;
    if (n > kv->n_held[s->slot]) n = kv->n_held[s->slot];
    if (n > 0)
        dsr1_prefix_insert(e->prefix, s->tokens,
                           kv->table + (size_t)s->slot * (size_t)kv->max_pages, n);
}

void dsr1_engine_prefix_step_end(dsr1_engine *e)
{
    if (!e->prefix) return;
    for (int i = 0; i < e->n_seqs; i++) {
        const eseq *s = &e->seqs[i];
        if (s->b_len > 0 && s->n_generated <= 1) dsr1_engine_prefix_publish(e, s);
    }
}
