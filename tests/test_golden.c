/*
 * test_golden.c - the acceptance test: the float32 compute path against
 * what DeepSeek-V3's own inference/model.py computed on the tiny fixture
 * checkpoint (tests/fixtures/tiny/golden, cases listed in manifest.json).
 * The fixture is converted with `$DSR1 convert` into the test tmpdir once
 * per run (dsr1_test_tiny_model, shared with test_forward.c and
 * test_engine.c). Tolerance: manifest.json's fp32_max_abs (0.002); we also
 * report, and require, 1e-3.
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dsr1.h"
#include "be_util.h"
#include "test.h"

const char *dsr1_test_tiny_model(void);
int dsr1_test_argmax(const float *v, int n);

#define TOL 1e-3

/* Path of the converted tiny fixture, or NULL when conversion failed. */
const char *dsr1_test_tiny_model(void)
{
    static char path[1024];
    static int tried;
    if (tried) return path[0] ? path : NULL;
    tried = 1;
    char out[4096];
    snprintf(path, sizeof path, "%s/tiny.dsr1", dsr1_test_tmpdir());
    int rc = dsr1_test_sh(out, sizeof out, "'%s' convert '%s' -o '%s'", dsr1_test_binary(),
                          dsr1_test_fixture("tiny/ckpt"), path);
    if (rc != 0) {
        fprintf(stderr, "  (tiny fixture conversion failed: %.300s)\n", out);
        path[0] = 0;
        return NULL;
    }
    return path;
}

int dsr1_test_argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}


typedef struct golden {
    cJSON *manifest;
    dsr1_model *m;
    dsr1_error err;
} golden;

static const cJSON *find_case(const golden *g, const char *name)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g->manifest, "cases"))
        if (!strcmp(cJSON_GetObjectItem(c, "name")->valuestring, name)) return c;
    return NULL;
}

static size_t ids_of(const cJSON *arr, int32_t *ids, size_t cap)
{
    size_t n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) if (n < cap) ids[n++] = (int32_t)v->valueint;
    return n;
}

/* Expected floats of a case's member ("logits"/"hidden"); *rows, *cols. */
static float *expected(const cJSON *cs, const char *member, int *rows, int *cols)
{
    const cJSON *o = cJSON_GetObjectItem(cs, member);
    char rel[256];
    snprintf(rel, sizeof rel, "tiny/golden/%s", cJSON_GetObjectItem(o, "file")->valuestring);
    const cJSON *shape = cJSON_GetObjectItem(o, "shape");
    *rows = cJSON_GetArrayItem(shape, 0)->valueint;
    *cols = cJSON_GetArrayItem(shape, 1)->valueint;
    size_t len;
    float *v = (float *)dsr1_test_slurp(dsr1_test_fixture(rel), &len);
    if (v && len != (size_t)*rows * (size_t)*cols * 4) {
        free(v);
        return NULL;
    }
    return v;
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN sticks */
    }
    return m;
}

static int golden_open(dsr1_test_ctx *t, golden *g)
{
    memset(g, 0, sizeof *g);
    const char *path = dsr1_test_tiny_model();
    if (!path) {
        dsr1_test_skip(t, "tiny fixture could not be converted (dsr1 convert not built?)");
        return -1;
    }
    char *mf = dsr1_test_slurp(dsr1_test_fixture("tiny/golden/manifest.json"), NULL);
    g->manifest = mf ? cJSON_Parse(mf) : NULL;
    free(mf);
    if (!g->manifest) {
        dsr1_test_fail(t, __FILE__, __LINE__, "manifest.json unreadable");
        return -1;
    }
    char why[256];
    if (!dsr1_test_backend_usable(dsr1_test_backend(), why, sizeof why)) {
        cJSON_Delete(g->manifest);
        dsr1_test_skip(t, "backend %s: %s", dsr1_test_backend(), why);
        return -1;
    }
    dsr1_model_options o = {.compute = DSR1_COMPUTE_F32, .threads = 2,
                            .backend = dsr1_test_backend()};
    int rc = dsr1_model_open(&g->m, path, &o, &g->err);
    if (rc) {
        dsr1_test_fail(t, __FILE__, __LINE__, "model open: %s", g->err.msg);
        cJSON_Delete(g->manifest);
        return -1;
    }
    return 0;
}

static void golden_close(golden *g)
{
    dsr1_model_close(g->m);
    cJSON_Delete(g->manifest);
}

/* Run `what` over ids with chunks and compare `rows` rows starting at row
 * `skip` of our output against the expected file of member. */
static void compare(dsr1_test_ctx *t, golden *g, const char *name, const char *member,
                    const size_t *chunks, size_t n_chunks, dsr1_output what, size_t n_ids,
                    int skip)
{
    const cJSON *cs = find_case(g, name);
    REQUIRE(cs);
    int32_t ids[64];
    size_t n = ids_of(cJSON_GetObjectItem(cs, "tokens"), ids, 64);
    if (n_ids) n = n_ids;
    int rows, cols;
    float *want = expected(cs, member, &rows, &cols);
    REQUIRE(want);
    size_t out_rows = what == DSR1_OUT_MTP ? n - 1 : n;
    float *got = calloc(out_rows * (size_t)cols, sizeof *got);
    CHECK_OK(dsr1_model_forward(g->m, ids, n, chunks, n_chunks, what, got, &g->err), &g->err);
    CHECK_EQ_INT(out_rows - (size_t)skip, rows);
    double d = max_abs_diff(got + (size_t)skip * (size_t)cols, want, (size_t)rows * (size_t)cols);
    printf("     %s %s: max |diff| %.3g over [%d, %d]\n", name, member, d, rows, cols);
    CHECKF(d <= TOL, "%s %s: max |diff| %g > %g", name, member, d, TOL);
    free(got);
    free(want);
}

DSR1_TEST(golden_prefill)
{
    golden g;
    if (golden_open(t, &g)) return;
    compare(t, &g, "prefill", "logits", NULL, 0, DSR1_OUT_LOGITS, 0, 0);
    compare(t, &g, "prefill", "hidden", NULL, 0, DSR1_OUT_HIDDEN, 0, 0);
    golden_close(&g);
}

/* prefill tokens[0:11], then tokens[11..21] one at a time: 22 ids; the
 * expected rows are our rows 10..21. */
DSR1_TEST(golden_decode)
{
    golden g;
    if (golden_open(t, &g)) return;
    size_t chunks[12] = {11};
    for (int i = 1; i < 12; i++) chunks[i] = 1;
    compare(t, &g, "decode", "logits", chunks, 12, DSR1_OUT_LOGITS, 22, 10);
    golden_close(&g);
}

DSR1_TEST(golden_chunked)
{
    golden g;
    if (golden_open(t, &g)) return;
    size_t chunks[3] = {7, 9, 7};
    compare(t, &g, "chunked", "logits", chunks, 3, DSR1_OUT_LOGITS, 0, 0);
    golden_close(&g);
}

DSR1_TEST(golden_mtp)
{
    golden g;
    if (golden_open(t, &g)) return;
    compare(t, &g, "mtp", "logits", NULL, 0, DSR1_OUT_MTP, 0, 0);
    golden_close(&g);
}

/* Greedy continuation through the engine (temperature 0): every token must
 * match (the smallest reference margin, 0.034, is far above our error). */
DSR1_TEST(golden_greedy)
{
    golden g;
    if (golden_open(t, &g)) return;
    const cJSON *cs = find_case(&g, "greedy");
    int32_t prompt[16], want[64];
    size_t np = ids_of(cJSON_GetObjectItem(cs, "prompt"), prompt, 16);
    size_t nw = ids_of(cJSON_GetObjectItem(cs, "generated"), want, 64);
    dsr1_engine_options eo;
    dsr1_engine_options_default(&eo);
    eo.max_seqs = 2;
    eo.ctx = 64;
    dsr1_engine *e = NULL;
    CHECK_OK(dsr1_engine_create(&e, g.m, &eo, &g.err), &g.err);
    if (e) {
        dsr1_request r = {.prompt = prompt, .n_prompt = np, .max_tokens = (int)nw,
                          .reuse_seq = -1};
        int seq = -1;
        CHECK_OK(dsr1_engine_submit(e, &r, &seq, &g.err), &g.err);
        dsr1_event ev[64];
        int32_t got[64];
        size_t ng = 0, nev;
        while (dsr1_engine_pending(e) > 0) {
            if (dsr1_engine_step(e, ev, &nev, &g.err)) break;
            for (size_t i = 0; i < nev; i++)
                if (ev[i].token >= 0 && ng < 64) got[ng++] = ev[i].token;
        }
        CHECK_EQ_INT(ng, nw);
        size_t same = 0;
        while (same < ng && same < nw && got[same] == want[same]) same++;
        printf("     greedy: %zu of %zu tokens match\n", same, nw);
        CHECK_EQ_INT(same, nw);
        dsr1_engine_free(e);
    }
    golden_close(&g);
}
