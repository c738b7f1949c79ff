/*
 * convert.c - `dsr1 convert`: plan the output tensors of a checkpoint
 * (names, stacking, types), then drive the writer over them.
 *
 * Order of work: open + validate the checkpoint (shapes against config.json)
 * and build the whole plan before the output file is created, so bad input
 * never costs a byte of disk; then reserve the output's space, convert
 * tensor by tensor in the shards' file order (convert_tensor.c), hash the
 * shards on the way (convert_meta.c), write metadata, finish, reopen and
 * verify. Every failure path ends in dsr1_writer_abort: nothing is left
 * under the output name, and no temp file.
 *
 * Not here: byte layouts (dsr1file*.c), rounding rules (quant.c), the
 * terminal (cli/convert.c draws progress from the callback).
 */
#include "convert.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/config.h"
#include "../core/tokenizer.h"
#include "checkpoint.h"
#include "convert_internal.h"
#include "quant.h"

static const char *const projs[3] = {"gate_proj", "up_proj", "down_proj"};

/* ---- progress and cancellation ---------------------------------------- */

int dsr1_convert_tick(cv_ctx *c, const char *tensor, int force, dsr1_error *err)
{
    const dsr1_convert_opts *o = c->o;
    if (o->cancel && *o->cancel)
        return dsr1_errorf(err, DSR1_EINTR, "%s: interrupted while writing %s; nothing was kept",
                           o->out_path, tensor ? tensor : "the output");
    if (o->progress && (force || c->done - c->last_report >= (4u << 20))) {
        dsr1_convert_progress p = {0, c->done, c->total, tensor};
        o->progress(&p, o->progress_ctx);
        c->last_report = c->done;
    }
    return 0;
}

/* ---- planning --------------------------------------------------------- */

static cv_entry *new_entry(cv_ctx *c, const char *name, int E, dsr1_error *err)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        cv_entry *ne = realloc(c->e, cap * sizeof *ne);
        if (!ne) return dsr1_errorf(err, DSR1_ENOMEM, "out of memory planning"), NULL;
        c->e = ne;
        c->cap = cap;
    }
    cv_entry *e = &c->e[c->n];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->E = E;
    e->src = calloc((size_t)E, sizeof *e->src);
    e->scale = calloc((size_t)E, sizeof *e->scale);
    if (!e->src || !e->scale) {
        free(e->src);
        free(e->scale);
        return dsr1_errorf(err, DSR1_ENOMEM, "out of memory planning"), NULL;
    }
    c->n++;
    return e;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* "model.layers.L.mlp.experts.X.<proj>.weight" -> layer, expert, proj. */
static int parse_expert(const char *name, int *layer, int *expert, int *proj)
{
    int n = 0;
    char rest[64];
    if (sscanf(name, "model.layers.%d.mlp.experts.%d.%63s%n", layer, expert, rest, &n) != 3 ||
        name[n])
        return 0;
    for (int p = 0; p < 3; p++) {
        char want[32];
        snprintf(want, sizeof want, "%s.weight", projs[p]);
        if (!strcmp(rest, want)) {
            *proj = p;
            return 1;
        }
    }
    return 0;
}

/* Put a routed expert's weight into its layer/projection stack. */
static int add_expert(cv_ctx *c, const dsr1_st_tensor *t, int *slots, int n_layers, dsr1_error *err)
{
    int L, x, p;
    if (!parse_expert(t->name, &L, &x, &p)) return 1;
    int E = c->cfg->n_routed_experts;
    if (L < 0 || L >= n_layers || x < 0 || x >= E)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s/%s: tensor %s: expert or layer index outside the "
                           "config (n_routed_experts %d)", dsr1_checkpoint_dir(c->ck),
                           dsr1_checkpoint_shard_name(c->ck, (size_t)t->shard, NULL), t->name, E);
    int *slot = &slots[L * 3 + p];
    if (*slot < 0) {
        char name[192];
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%s.weight", L, projs[p]);
        if (!new_entry(c, name, E, err)) return err->code;
        *slot = (int)(c->n - 1);
    }
    c->e[*slot].src[x] = t;
    return 0;
}

static int missing(cv_ctx *c, const char *what, const char *name, dsr1_error *err)
{
    return dsr1_errorf(err, DSR1_ENOTFOUND, "%s: tensor %s: %s", dsr1_checkpoint_dir(c->ck), name, what);
}

/* Every expert present, all alike; scales found. */
static int complete_entry(cv_ctx *c, cv_entry *e, dsr1_error *err)
{
    const dsr1_st_tensor *s0 = NULL;
    for (int x = 0; x < e->E; x++) {
        const dsr1_st_tensor *s = e->src[x];
        if (!s) {
            char nm[224];
            snprintf(nm, sizeof nm, "%.*s%d.%s", (int)(strstr(e->name, "experts.") + 8 - e->name),
                     e->name, x, strstr(e->name, "experts.") + 8);
            return missing(c, "missing from every shard (an expert stack needs all experts)", nm, err);
        }
        if (s0 && (s->dtype != s0->dtype || s->ndim != s0->ndim ||
                   memcmp(s->dims, s0->dims, sizeof s->dims)))
            return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: dtype/shape differs from %s",
                               dsr1_checkpoint_dir(c->ck), s->name, s0->name);
        s0 = s0 ? s0 : s;
        char sn[256];
        if (dsr1_checkpoint_scale_name(s->name, s->dtype, sn, sizeof sn)) {
            e->scale[x] = dsr1_checkpoint_find(c->ck, sn);
            if (!e->scale[x]) return missing(c, "not found (the scale of a quantised weight)", sn, err);
        }
    }
    e->ndim = e->E > 1 || strstr(e->name, ".mlp.experts.") ? s0->ndim + 1 : s0->ndim;
    if (e->ndim > s0->ndim) {
        e->dims[0] = e->E;
        memcpy(e->dims + 1, s0->dims, (size_t)s0->ndim * sizeof *e->dims);
    } else {
        memcpy(e->dims, s0->dims, sizeof e->dims);
    }
    return 0;
}

static dsr1_type natural_type(dsr1_st_dtype d)
{
    switch (d) {
    case DSR1_ST_F32: return DSR1_T_F32;
    case DSR1_ST_F16: return DSR1_T_F16;
    case DSR1_ST_BF16: return DSR1_T_BF16;
    case DSR1_ST_F8_E4M3: return DSR1_T_FP8_E4M3;
    default: return DSR1_T_INT8;
    }
}

static int is_quantised(dsr1_type t)
{
    return t == DSR1_T_FP8_E4M3 || t == DSR1_T_INT8 || t == DSR1_T_INT4;
}

/* The LM heads (lm_head, the MTP shared_head.head) are read whole for every
 * decoded token: in R1 they are 1.85 GB of BF16, half of what an 8-bit token
 * reads. --type int8|int4 make them INT8 (row scales; dsr1-convert(1) gives
 * the measured cost, and INT4 heads cost too much there, as GGUF's Q4_K_M
 * keeps Q6_K for them); --type fp8 and bf16, and no --type, keep them as
 * published. */
static dsr1_type head_type(const dsr1_convert_opts *o, dsr1_type src)
{
    if (o->has_type && (o->type == DSR1_T_INT8 || o->type == DSR1_T_INT4)) return DSR1_T_INT8;
    if (o->has_type && o->type == DSR1_T_BF16) return DSR1_T_BF16;
    return src;
}

/* The class rules of convert.h, then the user's globs (later wins). */
static dsr1_type wanted_type(cv_ctx *c, cv_entry *e, size_t *rule_hits)
{
    const dsr1_convert_opts *o = c->o;
    const char *n = e->name;
    dsr1_type src = natural_type(e->src[0]->dtype), t;
    int matrix = e->ndim >= 2;
    if (!matrix || ends_with(n, ".mlp.gate.weight")) t = DSR1_T_F32;
    else if (ends_with(n, "embed_tokens.weight")) t = src;
    else if (!strcmp(n, "lm_head.weight") || ends_with(n, ".shared_head.head.weight"))
        t = head_type(o, src);
    else t = o->has_type ? o->type : src;
    for (size_t i = 0; i < o->n_rules; i++)
        if (fnmatch(o->rules[i].pattern, n, 0) == 0 && (matrix || !is_quantised(o->rules[i].type))) {
            t = o->rules[i].type;
            rule_hits[i]++;
            e->matched = 1;
        }
    return t;
}

static int choose_type(cv_ctx *c, cv_entry *e, size_t *rule_hits, dsr1_error *err)
{
    dsr1_type src = natural_type(e->src[0]->dtype), t = wanted_type(c, e, rule_hits);
    int64_t in = e->dims[e->ndim - 1];
    e->out_type = t;
    e->group = 0;
    e->scale_type = DSR1_T_F32;
    if (t == DSR1_T_INT4 && !(e->group = dsr1_quant_int4_group(in))) {
        if (!c->st->n_kept++) snprintf(c->st->first_kept, sizeof c->st->first_kept, "%s", e->name);
        e->out_type = t = src;
    }
    if (t == DSR1_T_INT4) e->scale_type = DSR1_T_F16;
    if (t == DSR1_T_FP8_E4M3) {
        e->group = 128;
        if (src == DSR1_T_FP8_E4M3) {
            if (c->cfg->fp8_block_in != c->cfg->fp8_block_out || c->cfg->fp8_block_in <= 0)
                return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: tensor %s: FP8 blocks %dx%d; dsr1 "
                                   "stores square blocks", dsr1_checkpoint_dir(c->ck), e->name,
                                   c->cfg->fp8_block_out, c->cfg->fp8_block_in);
            e->group = c->cfg->fp8_block_in;
        }
    }
    if (!is_quantised(t)) e->scale_type = 0;
    return 0;
}

/* Usage errors: a rule that applies to nothing. */
static int check_rules(cv_ctx *c, const size_t *hits, dsr1_error *err)
{
    for (size_t i = 0; i < c->o->n_rules; i++)
        if (!hits[i]) {
            c->st->usage_error = 1;
            return dsr1_errorf(err, DSR1_EINVAL, "--type-for '%s=%s': matches no tensor it can "
                               "apply to (fp8/int8/int4 need 2-D weights)", c->o->rules[i].pattern,
                               dsr1_type_name(c->o->rules[i].type));
        }
    return 0;
}

/* Load tokenizer.json the way run will: a malformed one (a merge naming
 * no token, a bad id) is refused here rather than packed into a model that
 * cannot run. One dsr1 does not implement yet (DSR1_EUNSUPPORTED: V2's
 * pre-tokenizer) is still packed, as before. */
static int check_tokenizer(cv_ctx *c, const char *text, size_t len, dsr1_error *err)
{
    char what[4200];
    snprintf(what, sizeof what, "%s/tokenizer.json", dsr1_checkpoint_dir(c->ck));
    dsr1_tokenizer *tk = NULL;
    dsr1_error local = {0};
    int rc = dsr1_tokenizer_create(&tk, text, len, what, &local);
    dsr1_tokenizer_free(tk);
    if (rc && rc != DSR1_EUNSUPPORTED) {
        *err = local;
        return rc;
    }
    return 0;
}

static int plan_blobs(cv_ctx *c, dsr1_error *err)
{
    static const char *const blobs[2] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        size_t len = 0;
        const char *text = dsr1_checkpoint_file_text(c->ck, blobs[i], &len);
        if (!text || !len) continue;
        if (i == 0) DSR1_TRY(check_tokenizer(c, text, len, err));
        cv_entry *e = new_entry(c, blobs[i], 1, err);
        if (!e) return err->code;
        e->out_type = DSR1_T_BLOB;
        e->ndim = 1;
        e->dims[0] = (int64_t)len;
        e->blob = text;
        e->blob_len = len;
    }
    return 0;
}

static int plan(cv_ctx *c, dsr1_error *err)
{
    int n_layers = c->cfg->num_hidden_layers + c->cfg->num_nextn_predict_layers;
    int *slots = malloc((size_t)(n_layers * 3 + 1) * sizeof *slots);
    size_t *hits = calloc(c->o->n_rules + 1, sizeof *hits);
    if (!slots || !hits) {
        free(slots);
        free(hits);
        return dsr1_errorf(err, DSR1_ENOMEM, "out of memory planning");
    }
    for (int i = 0; i < n_layers * 3; i++) slots[i] = -1;
    int rc = 0;
    size_t nt = dsr1_checkpoint_n_tensors(c->ck);
    for (size_t i = 0; i < nt && !rc; i++) {
        const dsr1_st_tensor *t = dsr1_checkpoint_tensor(c->ck, i);
        c->total += t->size;
        if (ends_with(t->name, "_scale_inv") || ends_with(t->name, ".weight_scale")) continue;
        rc = add_expert(c, t, slots, n_layers, err);
        if (rc == 1) { /* not an expert: a tensor of its own */
            cv_entry *e = new_entry(c, t->name, 1, err);
            rc = e ? 0 : err->code;
            if (e) e->src[0] = t;
        }
    }
    for (size_t i = 0; i < c->n && !rc; i++) rc = complete_entry(c, &c->e[i], err);
    for (size_t i = 0; i < c->n && !rc; i++) rc = choose_type(c, &c->e[i], hits, err);
    if (!rc) rc = check_rules(c, hits, err);
    if (!rc) rc = plan_blobs(c, err);
    free(slots);
    free(hits);
    return rc;
}

/* ---- driving ---------------------------------------------------------- */

static int add_all(cv_ctx *c, dsr1_error *err)
{
    for (size_t i = 0; i < c->n; i++) {
        cv_entry *e = &c->e[i];
        dsr1_tensor t = {.name = e->name, .type = e->out_type, .ndim = e->ndim,
                         .scale_type = e->scale_type, .group = e->group};
        memcpy(t.dims, e->dims, sizeof t.dims);
        DSR1_TRY(dsr1_writer_add(c->w, &t, &e->widx, err));
        c->st->count[e->out_type]++;
        c->st->bytes[e->out_type] += dsr1_type_payload_size(t.type, t.ndim, t.dims) +
            dsr1_type_scale_size(t.type, t.scale_type, t.group, t.ndim, t.dims);
    }
    return dsr1_writer_reserve(c->w, err);
}

static void verify_progress(uint64_t done, uint64_t total, void *ctx)
{
    const cv_ctx *c = ctx;
    dsr1_convert_progress p = {1, done, total, NULL};
    c->o->progress(&p, c->o->progress_ctx);
}

static int verify(cv_ctx *c, dsr1_error *err)
{
    dsr1_file *f;
    DSR1_TRY(dsr1_file_open(&f, c->o->out_path, err));
    c->st->file_size = dsr1_file_header_of(f)->file_size;
    int rc = c->o->no_verify ? 0 : dsr1_file_verify(f, c->o->progress ? verify_progress : NULL, c, err);
    dsr1_file_close(f);
    return rc;
}

/* Two expert stacks of the same layer (planned next to each other). */
static int same_layer_stacks(const cv_entry *a, const cv_entry *b)
{
    const char *pa = strstr(a->name, ".mlp.experts."), *pb = strstr(b->name, ".mlp.experts.");
    return pa && pb && a->E == b->E && pa - a->name == pb - b->name &&
           !strncmp(a->name, b->name, (size_t)(pa - a->name));
}

static int write_all(cv_ctx *c, dsr1_error *err)
{
    DSR1_TRY(dsr1_writer_open(&c->w, c->o->out_path, err));
    DSR1_TRY(add_all(c, err));
    DSR1_TRY(dsr1_convert_shards_open(c, err));
    for (size_t i = 0, k; i < c->n; i += k) {
        cv_entry *group[3] = {&c->e[i]};
        for (k = 1; k < 3 && i + k < c->n && same_layer_stacks(&c->e[i], &c->e[i + k]); k++)
            group[k] = &c->e[i + k];
        DSR1_TRY(dsr1_convert_tick(c, c->e[i].name, i == 0, err));
        DSR1_TRY(dsr1_convert_group(c, group, (int)k, err));
    }
    DSR1_TRY(dsr1_convert_tick(c, NULL, 1, err));
    DSR1_TRY(dsr1_convert_shards_finish(c, err));
    char *meta = dsr1_convert_metadata(c, err);
    if (!meta) return err->code;
    int rc = dsr1_writer_set_metadata(c->w, meta, err);
    free(meta);
    if (rc) return rc;
    dsr1_writer *w = c->w;
    c->w = NULL; /* finish frees it, success or not */
    return dsr1_writer_finish(w, err);
}

int dsr1_convert(const dsr1_convert_opts *o, dsr1_convert_stats *st, dsr1_error *err)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    memset(st, 0, sizeof *st);
    cv_ctx c = {.o = o, .st = st, .page = sysconf(_SC_PAGESIZE), .avx512 = dsr1_quant_fast_avx512()};
    int rc = dsr1_checkpoint_open(&c.ck, o->src_dir, err);
    if (!rc) {
        c.cfg = dsr1_checkpoint_config(c.ck);
        rc = dsr1_checkpoint_check_shapes(c.ck, err);
    }
    const char *src = rc ? NULL : dsr1_checkpoint_source_of(c.ck, o->out_path);
    if (src)
        rc = dsr1_errorf(err, DSR1_EINVAL, "%s: is the checkpoint's own %s; refusing to "
                         "overwrite a source file (choose another output)", o->out_path, src);
    if (!rc) rc = plan(&c, err);
    if (!rc) rc = dsr1_convert_tick(&c, NULL, 0, err);
    st->src_bytes = c.total;
    if (!rc) rc = write_all(&c, err);
    dsr1_writer_abort(c.w); /* non-NULL only on failure: removes the temp file */
    if (!rc && (rc = verify(&c, err)) != 0)
        unlink(o->out_path); /* written but unreadable or corrupt: do not leave it */
    dsr1_convert_shards_free(&c);
    for (size_t i = 0; i < c.n; i++) {
        free(c.e[i].src);
        free(c.e[i].scale);
    }
    free(c.e);
    dsr1_checkpoint_close(c.ck);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    st->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    return rc;
}
