/*
 * prefix.c - the prefix cache's radix tree (see prefix.h).
 *
 * Nodes live in one array sized to the cache's page count (a page is in at
 * most one node: a sequence's page is inserted only where no node holds
 * those tokens yet, and pages taken from the tree are found again at their
 * own node). Children are a sibling list; a child is found by a hash of its
 * block of token ids, then compared in full. `used` is a counter bumped on
 * every match and insert along the path, so a parent is never less
 * recently used than its children and evicting leaves first is LRU.
 */
#include "prefix.h"

#include <stdlib.h>
#include <string.h>

enum { NONE = -1 };

typedef struct node {
    int32_t page;            /* KV page holding the rows of these tokens */
    int32_t parent, child, next; /* indices into nodes, NONE */
    uint64_t hash, used;
} node;

struct dsr1_prefix {
    dsr1_kvcache *kv;
    int block, cap;
    node *nodes;             /* [cap] owned */
    int32_t *tokens;         /* [cap][block] owned: each node's token ids */
    int32_t *free_nodes;     /* [cap] owned stack */
    int n_free;
    int32_t root;            /* first child of the (implicit) root, NONE */
    uint64_t clock;
    int held;
};

static uint64_t hash_block(const int32_t *t, int n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)t[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}

static int reclaim(void *ctx, int need) { return dsr1_prefix_evict(ctx, need); }

int dsr1_prefix_create(dsr1_prefix **out, dsr1_kvcache *kv, dsr1_error *err)
{
    *out = NULL;
    dsr1_prefix *p = calloc(1, sizeof *p);
    if (!p) return dsr1_errorf(err, DSR1_ENOMEM, "prefix cache: out of memory");
    p->kv = kv;
    p->block = kv->block;
    p->cap = kv->n_pages;
    p->nodes = malloc((size_t)p->cap * sizeof *p->nodes);
    p->tokens = malloc((size_t)p->cap * (size_t)p->block * sizeof *p->tokens);
    p->free_nodes = malloc((size_t)p->cap * sizeof *p->free_nodes);
    if (!p->nodes || !p->tokens || !p->free_nodes) {
        dsr1_prefix_free(p);
        return dsr1_errorf(err, DSR1_ENOMEM, "prefix cache: out of memory");
    }
    for (int i = 0; i < p->cap; i++) {
        p->free_nodes[i] = p->cap - 1 - i;
        p->nodes[i].page = NONE; /* NONE: the node is free */
    }
    p->n_free = p->cap;
    p->root = NONE;
    kv->reclaim = reclaim;
    kv->reclaim_ctx = p;
    *out = p;
    return 0;
}

void dsr1_prefix_free(dsr1_prefix *p)
{
    if (!p) return;
    for (int i = 0; p->nodes && p->free_nodes && i < p->cap; i++)
        if (p->nodes[i].page != NONE) dsr1_kvcache_page_unref(p->kv, p->nodes[i].page);
    if (p->kv && p->kv->reclaim_ctx == p) p->kv->reclaim = NULL, p->kv->reclaim_ctx = NULL;
    free(p->nodes);
    free(p->tokens);
    free(p->free_nodes);
    free(p);
}

/* The child of parent (NONE: the root) spelling tokens[0, block), or NONE. */
static int32_t find_child(const dsr1_prefix *p, int32_t parent, const int32_t *t, uint64_t h)
{
    int32_t c = parent == NONE ? p->root : p->nodes[parent].child;
    for (; c != NONE; c = p->nodes[c].next)
        if (p->nodes[c].hash == h &&
            !memcmp(p->tokens + (size_t)c * (size_t)p->block, t, (size_t)p->block * sizeof *t))
            return c;
    return NONE;
}

int dsr1_prefix_match(dsr1_prefix *p, const int32_t *tokens, int max_pages, int32_t *pages)
{
    int32_t at = NONE;
    int n = 0;
    uint64_t now = ++p->clock;
    while (n < max_pages) {
        const int32_t *t = tokens + (size_t)n * (size_t)p->block;
        int32_t c = find_child(p, at, t, hash_block(t, p->block));
        if (c == NONE) break;
        p->nodes[c].used = now;
        pages[n++] = p->nodes[c].page;
        at = c;
    }
    return n;
}

void dsr1_prefix_insert(dsr1_prefix *p, const int32_t *tokens, const int32_t *pages, int n)
{
    int32_t at = NONE;
    uint64_t now = ++p->clock;
    for (int i = 0; i < n; i++) {
        const int32_t *t = tokens + (size_t)i * (size_t)p->block;
        uint64_t h = hash_block(t, p->block);
        int32_t c = find_child(p, at, t, h);
        if (c == NONE) {
            if (!p->n_free) return; /* cannot happen: one node per page at most */
            c = p->free_nodes[--p->n_free];
            node *nd = &p->nodes[c];
            *nd = (node){.page = pages[i], .parent = at, .child = NONE, .hash = h};
            memcpy(p->tokens + (size_t)c * (size_t)p->block, t, (size_t)p->block * sizeof *t);
            int32_t *head = at == NONE ? &p->root : &p->nodes[at].child;
            nd->next = *head;
            *head = c;
            dsr1_kvcache_page_ref(p->kv, pages[i]);
            p->held++;
        }
        p->nodes[c].used = now;
        at = c;
    }
}

static void unlink_node(dsr1_prefix *p, int32_t c)
{
    int32_t par = p->nodes[c].parent;
    int32_t *link = par == NONE ? &p->root : &p->nodes[par].child;
    while (*link != c) link = &p->nodes[*link].next;
    *link = p->nodes[c].next;
    p->nodes[c].page = NONE;
    p->free_nodes[p->n_free++] = c;
}

int dsr1_prefix_evict(dsr1_prefix *p, int want)
{
    int freed = 0;
    while (freed < want) {
        /* A scan per page: eviction is rare next to the forward passes it
         * saves, and the tree holds at most one node per page. */
        int32_t best = NONE;
        for (int32_t i = 0; i < p->cap; i++) {
            const node *nd = &p->nodes[i];
            if (nd->page == NONE || nd->child != NONE || p->kv->ref[nd->page] != 1) continue;
            if (best == NONE || nd->used < p->nodes[best].used) best = i;
        }
        if (best == NONE) break; /* every cached page is in use by a slot */
        dsr1_kvcache_page_unref(p->kv, p->nodes[best].page);
        unlink_node(p, best);
        p->held--;
        freed++;
    }
    return freed;
}

int dsr1_prefix_pages(const dsr1_prefix *p) { return p ? p->held : 0; }
