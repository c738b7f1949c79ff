/*
 * test_convert.c - converting the tiny fixture checkpoint (real DeepSeek-V3
 * layout, FP8 with partial edge blocks) and checking the output against the
 * source tensor by tensor: FP8 bytes and scales bit-exact (every expert of
 * every stack), INT8/INT4 within half a scale step of the dequantised
 * source, BF16 the exact rounding of it, norms/router exact F32 upcasts,
 * metadata and shard hashes, type rules, usage errors, cancellation;
 * channel-wise INT8 sources (gen_ckpt --dtype int8) kept bit-exactly or
 * dequantised, and their scale checks.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert/checkpoint.h"
#include "convert/convert.h"
#include "convert/quant.h"
#include "core/numeric.h"
#include "test.h"

static int run_convert(const char *out, int has_type, dsr1_type type, const dsr1_convert_rule *rules,
                       size_t n_rules, dsr1_convert_stats *st, dsr1_error *e)
{
    dsr1_convert_opts o = {.src_dir = dsr1_test_fixture("tiny/ckpt"), .out_path = out,
                           .has_type = has_type, .type = type, .rules = rules,
                           .n_rules = n_rules, .threads = 2};
    return dsr1_convert(&o, st, e);
}

static const char *out_path(const char *name)
{
    static char buf[4][600];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 600, "%s/%s", dsr1_test_tmpdir(), name);
    return p;
}

/* Output name and matrix index of a source tensor (experts are stacked). */
static void output_of(const char *src, char *name, size_t cap, int *matrix)
{
    int L, x, n = 0;
    char proj[32];
    *matrix = 0;
    if (sscanf(src, "model.layers.%d.mlp.experts.%d.%31[a-z_].weight%n", &L, &x, proj, &n) == 3 &&
        !src[n]) {
        snprintf(name, cap, "model.layers.%d.mlp.experts.%s.weight", L, proj);
        *matrix = x;
    } else {
        snprintf(name, cap, "%s", src);
    }
}

/* The source tensor as something the reference dequantiser reads. */
static dsr1_tensor source_view(const dsr1_checkpoint *ck, const dsr1_st_tensor *s)
{
    dsr1_tensor v = {.name = s->name, .ndim = s->ndim, .data = s->data, .size = s->size};
    memcpy(v.dims, s->dims, sizeof v.dims);
    v.type = s->dtype == DSR1_ST_F32 ? DSR1_T_F32 : s->dtype == DSR1_ST_BF16 ? DSR1_T_BF16
                                                                           : DSR1_T_FP8_E4M3;
    if (s->dtype == DSR1_ST_F8_E4M3) {
        char sn[256];
        snprintf(sn, sizeof sn, "%s_scale_inv", s->name);
        const dsr1_st_tensor *sc = dsr1_checkpoint_find(ck, sn);
        v.scale = sc ? sc->data : NULL;
        v.scale_type = DSR1_T_F32;
        v.group = 128;
    }
    return v;
}

static int is_scale(const char *n) { return strstr(n, "_scale_inv") != NULL; }

DSR1_TEST(convert_fp8_default_bit_exact)
{
    dsr1_error e = {0};
    dsr1_convert_stats st;
    const char *out = out_path("default.dsr1");
    int crc = run_convert(out, 0, 0, NULL, 0, &st, &e);
    CHECKF(crc == 0, "convert: %s", e.msg);
    REQUIRE(crc == 0);
    dsr1_checkpoint *ck = NULL;
    dsr1_file *f = NULL;
    REQUIRE(dsr1_checkpoint_open(&ck, dsr1_test_fixture("tiny/ckpt"), &e) == 0);
    REQUIRE(dsr1_file_open(&f, out, &e) == 0);
    size_t n_src = 0;
    for (size_t i = 0; i < dsr1_checkpoint_n_tensors(ck); i++) {
        const dsr1_st_tensor *s = dsr1_checkpoint_tensor(ck, i);
        if (is_scale(s->name)) continue;
        n_src++;
        char name[256];
        int m;
        output_of(s->name, name, sizeof name, &m);
        const dsr1_tensor *o = dsr1_file_find(f, name);
        CHECKF(o != NULL, "%s -> %s missing", s->name, name);
        if (!o) continue;
        int64_t M, R, C;
        dsr1_quant_shape(o, &M, &R, &C);
        uint64_t msize = o->size / (uint64_t)M;
        if (s->dtype == DSR1_ST_F8_E4M3) {
            char sn[256];
            snprintf(sn, sizeof sn, "%s_scale_inv", s->name);
            const dsr1_st_tensor *sc = dsr1_checkpoint_find(ck, sn);
            REQUIRE(sc);
            CHECK_EQ_INT(o->type, DSR1_T_FP8_E4M3);
            CHECK_EQ_INT(o->group, 128);
            CHECKF(msize == s->size && !memcmp((const uint8_t *)o->data + m * msize, s->data, s->size),
                   "%s: FP8 bytes differ", s->name);
            uint64_t ss = o->scale_size / (uint64_t)M;
            CHECKF(ss == sc->size && !memcmp((const uint8_t *)o->scale + m * ss, sc->data, sc->size),
                   "%s: scales differ", s->name);
        } else if (s->ndim == 1 || strstr(s->name, ".mlp.gate.weight")) {
            CHECK_EQ_INT(o->type, DSR1_T_F32); /* exact upcast of BF16/F32 */
            dsr1_tensor v = source_view(ck, s);
            float *a = malloc((size_t)C * 4), *b = malloc((size_t)C * 4);
            for (int64_t r = 0; r < R; r++) {
                dsr1_quant_dequant_row(&v, 0, r, a);
                dsr1_quant_dequant_row(o, 0, r, b);
                CHECKF(!memcmp(a, b, (size_t)C * 4), "%s row %lld", s->name, (long long)r);
            }
            free(a);
            free(b);
        } else {
            CHECK_EQ_INT(o->type, DSR1_T_BF16); /* embeddings, heads, eh_proj */
            CHECKF(o->size == s->size && !memcmp(o->data, s->data, s->size), "%s bytes", s->name);
        }
    }
    /* 16 experts x 3 projections x 4 MoE layers (incl. MTP) fold into 12 stacks. */
    CHECK_EQ_INT(dsr1_file_n_tensors(f), n_src - 4 * 3 * 15);
    const char *meta = dsr1_file_metadata(f);
    CHECK(strstr(meta, "\"format\":\"dsr1\"") && strstr(meta, "\"kv_lora_rank\":64"));
    CHECK(strstr(meta, "\"type\":\"source\"") && strstr(meta, "\"chat_template\":null"));
    /* Shard hashes: XXH64 of the whole shard files, computed here directly. */
    for (size_t i = 0; i < dsr1_checkpoint_n_shards(ck); i++) {
        char path[700], want[80];
        uint64_t size;
        const char *sn = dsr1_checkpoint_shard_name(ck, i, &size);
        snprintf(path, sizeof path, "%s/%s", dsr1_test_fixture("tiny/ckpt"), sn);
        FILE *fp = fopen(path, "rb");
        REQUIRE(fp);
        uint8_t *buf = malloc(size);
        REQUIRE(fread(buf, 1, size, fp) == size);
        fclose(fp);
        snprintf(want, sizeof want, "\"file\":\"%s\",\"size\":%llu,\"hash\":\"%016llx\"", sn,
                 (unsigned long long)size, (unsigned long long)dsr1_hash64(buf, size));
        free(buf);
        CHECKF(strstr(meta, want) != NULL, "metadata lacks %s", want);
    }
    CHECK_OK(dsr1_file_verify(f, NULL, NULL, &e), &e);
    CHECK_EQ_INT(st.count[DSR1_T_FP8_E4M3], 52);
    dsr1_file_close(f);
    dsr1_checkpoint_close(ck);
}

/* The LM heads (lm_head and the MTP layer's shared_head.head): of type
 * want, every row within half an INT8 step of the source (or the source
 * itself for BF16). */
static void check_heads(dsr1_test_ctx *t, const dsr1_checkpoint *ck, const dsr1_file *f, dsr1_type want)
{
    int heads = 0;
    for (size_t i = 0; i < dsr1_checkpoint_n_tensors(ck); i++) {
        const dsr1_st_tensor *s = dsr1_checkpoint_tensor(ck, i);
        static const char mtp[] = ".shared_head.head.weight";
        size_t len = strlen(s->name), ml = sizeof mtp - 1;
        if (strcmp(s->name, "lm_head.weight") && (len < ml || strcmp(s->name + len - ml, mtp))) continue;
        const dsr1_tensor *x = dsr1_file_find(f, s->name);
        REQUIRE(x);
        heads++;
        CHECKF(x->type == want, "%s is %s, want %s", s->name, dsr1_type_name(x->type), dsr1_type_name(want));
        if (x->type != want) continue;
        dsr1_tensor v = source_view(ck, s);
        int64_t R = s->dims[0], C = s->dims[1];
        float *a = malloc((size_t)C * sizeof *a), *b = malloc((size_t)C * sizeof *b);
        REQUIRE(a && b);
        for (int64_t r = 0; r < R; r++) {
            dsr1_quant_dequant_row(&v, 0, r, a);
            REQUIRE(dsr1_quant_dequant_row(x, 0, r, b) == 0);
            double tol = want == DSR1_T_INT8 ? ((const float *)x->scale)[r] * 0.5 * (1 + 1e-5) : 0;
            for (int64_t c = 0; c < C; c++)
                CHECKF(fabs(a[c] - b[c]) <= tol, "%s[%lld,%lld]: %g vs %g", s->name, (long long)r,
                       (long long)c, a[c], b[c]);
        }
        free(a);
        free(b);
    }
    CHECK(heads == 2); /* the tiny fixture has an MTP layer */
}

/* For every linear weight: output row vs dequantised source row. */
static void check_requantised(dsr1_test_ctx *t, const char *out, dsr1_type want)
{
    dsr1_error e = {0};
    dsr1_checkpoint *ck = NULL;
    dsr1_file *f = NULL;
    REQUIRE(dsr1_checkpoint_open(&ck, dsr1_test_fixture("tiny/ckpt"), &e) == 0);
    REQUIRE(dsr1_file_open(&f, out, &e) == 0);
    float a[2048], b[2048];
    int checked = 0;
    for (size_t i = 0; i < dsr1_checkpoint_n_tensors(ck); i++) {
        const dsr1_st_tensor *s = dsr1_checkpoint_tensor(ck, i);
        if (s->dtype != DSR1_ST_F8_E4M3 && !strstr(s->name, "eh_proj")) continue;
        char name[256];
        int m;
        output_of(s->name, name, sizeof name, &m);
        const dsr1_tensor *x = dsr1_file_find(f, name);
        REQUIRE(x);
        CHECKF(x->type == want, "%s is %s", name, dsr1_type_name(x->type));
        dsr1_tensor v = source_view(ck, s);
        int64_t R = s->dims[0], C = s->dims[1];
        for (int64_t r = 0; r < R; r++) {
            dsr1_quant_dequant_row(&v, 0, r, a);
            REQUIRE(dsr1_quant_dequant_row(x, m, r, b) == 0);
            for (int64_t c = 0; c < C; c++) {
                double tol;
                int64_t row = (int64_t)m * R + r;
                if (want == DSR1_T_INT8) tol = ((const float *)x->scale)[row] * 0.5 * (1 + 1e-5);
                else if (want == DSR1_T_INT4)
                    tol = dsr1_f16_to_f32(((const uint16_t *)x->scale)[row * (C / x->group) + c / x->group]) *
                          0.5 * (1 + 1e-5);
                else tol = -1;
                if (tol >= 0) CHECKF(fabs(a[c] - b[c]) <= tol, "%s[%lld,%lld]: %g vs %g", name,
                                     (long long)r, (long long)c, a[c], b[c]);
                else CHECKF(b[c] == dsr1_bf16_to_f32(dsr1_f32_to_bf16(a[c])), "%s[%lld,%lld]", name,
                            (long long)r, (long long)c);
            }
            checked++;
        }
    }
    CHECK(checked > 1000);
    check_heads(t, ck, f, want == DSR1_T_INT4 ? DSR1_T_INT8 : want);
    CHECK(dsr1_file_find(f, "model.embed_tokens.weight")->type == DSR1_T_BF16);
    dsr1_file_close(f);
    dsr1_checkpoint_close(ck);
}

DSR1_TEST(convert_int8_within_half_step)
{
    dsr1_error e = {0};
    dsr1_convert_stats st;
    const char *out = out_path("int8.dsr1");
    CHECK_OK(run_convert(out, 1, DSR1_T_INT8, NULL, 0, &st, &e), &e);
    check_requantised(t, out, DSR1_T_INT8);
}

DSR1_TEST(convert_int4_within_half_step)
{
    dsr1_error e = {0};
    dsr1_convert_stats st;
    const char *out = out_path("int4.dsr1");
    CHECK_OK(run_convert(out, 1, DSR1_T_INT4, NULL, 0, &st, &e), &e);
    CHECK_EQ_INT(st.n_kept, 0);
    check_requantised(t, out, DSR1_T_INT4);
    dsr1_file *f = NULL;
    REQUIRE(dsr1_file_open(&f, out, &e) == 0);
    /* q_b_proj's in = q_lora_rank 96: groups of 32; o_proj's in = 128: 128. */
    CHECK_EQ_INT(dsr1_file_find(f, "model.layers.0.self_attn.q_b_proj.weight")->group, 32);
    CHECK_EQ_INT(dsr1_file_find(f, "model.layers.0.self_attn.o_proj.weight")->group, 128);
    dsr1_file_close(f);
}

DSR1_TEST(convert_bf16_exact_rounding)
{
    dsr1_error e = {0};
    dsr1_convert_stats st;
    const char *out = out_path("bf16.dsr1");
    CHECK_OK(run_convert(out, 1, DSR1_T_BF16, NULL, 0, &st, &e), &e);
    check_requantised(t, out, DSR1_T_BF16);
}

DSR1_TEST(convert_type_rules)
{
    dsr1_error e = {0};
    dsr1_convert_stats st;
    const char *out = out_path("rules.dsr1");
    dsr1_convert_rule rules[3] = {{"lm_head.weight", DSR1_T_INT4},
                                  {"model.layers.*.mlp.experts.*", DSR1_T_INT4},
                                  {"lm_head.*", DSR1_T_INT8}}; /* later wins */
    CHECK_OK(run_convert(out, 0, 0, rules, 3, &st, &e), &e);
    dsr1_file *f = NULL;
    REQUIRE(dsr1_file_open(&f, out, &e) == 0);
    CHECK_EQ_INT(dsr1_file_find(f, "lm_head.weight")->type, DSR1_T_INT8);
    CHECK_EQ_INT(dsr1_file_find(f, "model.layers.2.mlp.experts.down_proj.weight")->type, DSR1_T_INT4);
    CHECK_EQ_INT(dsr1_file_find(f, "model.layers.2.mlp.shared_experts.down_proj.weight")->type,
                 DSR1_T_FP8_E4M3);
    CHECK(strstr(dsr1_file_metadata(f), "\"type_for\":[\"lm_head.weight=int4\","));
    dsr1_file_close(f);
    /* A pattern that matches nothing, and int4 on a 1-D norm: usage errors. */
    dsr1_convert_rule bad1 = {"nothing.like.this*", DSR1_T_INT8}, bad2 = {"model.norm.weight", DSR1_T_INT4};
    const char *out2 = out_path("bad.dsr1");
    CHECK(run_convert(out2, 0, 0, &bad1, 1, &st, &e) == DSR1_EINVAL && st.usage_error);
    CHECK(strstr(e.msg, "nothing.like.this*") != NULL);
    CHECK(run_convert(out2, 0, 0, &bad2, 1, &st, &e) == DSR1_EINVAL && st.usage_error);
    CHECK(access(out2, F_OK) != 0);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *x;
    while (d && (x = readdir(d)))
        if (x->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

/* The flag is raised from the progress callback, i.e. once the temp file
 * exists and tensors are being written (as a SIGINT would). */
static void raise_flag(const dsr1_convert_progress *p, void *ctx)
{
    if (p->done > 0) *(volatile sig_atomic_t *)ctx = 1;
}

DSR1_TEST(convert_cancel_leaves_nothing)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/cancel", dsr1_test_tmpdir());
    mkdir(dir, 0755);
    char out[700];
    snprintf(out, sizeof out, "%s/x.dsr1", dir);
    volatile sig_atomic_t flag = 0;
    dsr1_convert_opts o = {.src_dir = dsr1_test_fixture("tiny/ckpt"), .out_path = out,
                           .cancel = &flag, .progress = raise_flag, .progress_ctx = (void *)&flag};
    dsr1_convert_stats st;
    dsr1_error e = {0};
    CHECK(dsr1_convert(&o, &st, &e) == DSR1_EINTR);
    CHECK(flag == 1);
    CHECKF(strstr(e.msg, out) != NULL, "message '%s'", e.msg);
    CHECK_EQ_INT(count_entries(dir), 0);
}

/* Every tensor's bytes and scales of two .dsr1 files are equal. */
static int same_tensors(dsr1_test_ctx *t, const char *pa, const char *pb)
{
    dsr1_error e = {0};
    dsr1_file *a = NULL, *b = NULL;
    int same = dsr1_file_open(&a, pa, &e) == 0 && dsr1_file_open(&b, pb, &e) == 0;
    CHECKF(same, "%s", e.msg);
    for (size_t i = 0; same && i < dsr1_file_n_tensors(a); i++) {
        const dsr1_tensor *x = dsr1_file_tensor(a, i), *y = dsr1_file_find(b, x->name);
        same = y && x->type == y->type && x->size == y->size && x->scale_size == y->scale_size &&
               !memcmp(x->data, y->data, x->size) &&
               (!x->scale_size || !memcmp(x->scale, y->scale, x->scale_size));
        CHECKF(same, "%s differs", x->name);
    }
    dsr1_file_close(a);
    dsr1_file_close(b);
    return same;
}

/* Threads split the rows of a matrix into bands: the bytes must not
 * depend on how many. */
DSR1_TEST(convert_threads_same_bytes)
{
    static const dsr1_type types[2] = {DSR1_T_INT4, DSR1_T_INT8};
    for (int k = 0; k < 2; k++) {
        dsr1_error e = {0};
        dsr1_convert_stats st;
        const char *a = out_path("t1.dsr1"), *b = out_path("t3.dsr1");
        dsr1_convert_opts o = {.src_dir = dsr1_test_fixture("tiny/ckpt"), .out_path = a,
                               .has_type = 1, .type = types[k], .threads = 1, .no_verify = 1};
        CHECK_OK(dsr1_convert(&o, &st, &e), &e);
        o.out_path = b;
        o.threads = 3;
        CHECK_OK(dsr1_convert(&o, &st, &e), &e);
        CHECK(same_tensors(t, a, b));
    }
}

/* ---- channel-wise INT8 sources (gen_ckpt --dtype int8) ----------------- */

/* gen_ckpt ARGS into tmpdir/name; NULL (and a failure) if it fails. */
static const char *gen_ckpt(dsr1_test_ctx *t, const char *name, const char *args)
{
    static char dir[4][700];
    static int k;
    char *d = dir[k++ % 4], out[1024];
    const char *b = getenv("BUILD");
    snprintf(d, sizeof dir[0], "%s/%s", dsr1_test_tmpdir(), name);
    int rc = dsr1_test_sh(out, sizeof out, "rm -rf '%s' && '%s/gen_ckpt' --out '%s' %s", d,
                          b ? b : "build", d, args);
    CHECKF(rc == 0, "gen_ckpt %s -> %d: %s", args, rc, out);
    return rc == 0 ? d : NULL;
}

static int convert_dir(const char *src, const char *out, int has_type, dsr1_type type,
                       dsr1_convert_stats *st, dsr1_error *e)
{
    dsr1_convert_opts o = {.src_dir = src, .out_path = out, .has_type = has_type, .type = type,
                           .threads = 2};
    return dsr1_convert(&o, st, e);
}

/* Row r's scale of I8 source s, widened here (not by quant.c). */
static float i8_scale(const dsr1_checkpoint *ck, const dsr1_st_tensor *s, int64_t r)
{
    char sn[256];
    snprintf(sn, sizeof sn, "%s_scale", s->name);
    const dsr1_st_tensor *sc = dsr1_checkpoint_find(ck, sn);
    return sc->dtype == DSR1_ST_BF16 ? dsr1_bf16_to_f32(((const uint16_t *)sc->data)[r])
                                     : ((const float *)sc->data)[r];
}

/* Source I8 value times its row scale. */
static float i8_weight(const dsr1_checkpoint *ck, const dsr1_st_tensor *s, int64_t r, int64_t c)
{
    return (float)((const int8_t *)s->data)[r * s->dims[1] + c] * i8_scale(ck, s, r);
}

/* Default conversion keeps I8 + per-channel scales as INT8 group 0: the
 * bytes of every matrix (experts stacked) equal, scales as F32 (BF16
 * scales widened exactly). --type bf16 gives bf16(q * scale) per weight. */
static void check_int8_source(dsr1_test_ctx *t, const char *src, const char *out, dsr1_type want)
{
    dsr1_error e = {0};
    dsr1_checkpoint *ck = NULL;
    dsr1_file *f = NULL;
    REQUIRE(dsr1_checkpoint_open(&ck, src, &e) == 0);
    REQUIRE(dsr1_file_open(&f, out, &e) == 0);
    int checked = 0;
    for (size_t i = 0; i < dsr1_checkpoint_n_tensors(ck); i++) {
        const dsr1_st_tensor *s = dsr1_checkpoint_tensor(ck, i);
        if (s->dtype != DSR1_ST_I8) continue;
        char name[256];
        int m;
        output_of(s->name, name, sizeof name, &m);
        const dsr1_tensor *o = dsr1_file_find(f, name);
        REQUIRE(o);
        CHECKF(o->type == want, "%s is %s", name, dsr1_type_name(o->type));
        int64_t R = s->dims[0], C = s->dims[1];
        if (want == DSR1_T_INT8) {
            CHECK(o->group == 0 && o->scale_type == DSR1_T_F32);
            CHECKF(!memcmp((const int8_t *)o->data + (int64_t)m * R * C, s->data, s->size), "%s bytes", name);
            int bad = 0;
            for (int64_t r = 0; r < R && !bad; r++)
                bad = ((const float *)o->scale)[(int64_t)m * R + r] != i8_scale(ck, s, r);
            CHECKF(!bad, "%s: scales differ", name);
        } else {
            const uint16_t *h = (const uint16_t *)o->data + (int64_t)m * R * C;
            int64_t bad = -1;
            for (int64_t x = 0; x < R * C && bad < 0; x++)
                if (h[x] != dsr1_f32_to_bf16(i8_weight(ck, s, x / C, x % C))) bad = x;
            CHECKF(bad < 0, "%s: element %lld is not bf16(q * scale)", name, (long long)bad);
        }
        checked++;
    }
    CHECKF(checked > 100, "%d I8 tensors checked", checked);
    dsr1_file_close(f);
    dsr1_checkpoint_close(ck);
}

DSR1_TEST(convert_int8_source)
{
    static const char *const args[2] = {"--dtype int8", "--dtype int8 --int8-scale bf16 --seed 3"};
    for (int k = 0; k < 2; k++) {
        const char *src = gen_ckpt(t, k ? "i8b" : "i8", args[k]);
        REQUIRE(src);
        dsr1_error e = {0};
        dsr1_convert_stats st;
        const char *out = out_path("i8.dsr1"), *bf = out_path("i8-bf16.dsr1");
        CHECK_OK(convert_dir(src, out, 0, 0, &st, &e), &e);
        CHECK_EQ_INT(st.count[DSR1_T_INT8], 52); /* 40 linear weights + 12 expert stacks */
        check_int8_source(t, src, out, DSR1_T_INT8);
        CHECK_OK(convert_dir(src, bf, 1, DSR1_T_BF16, &st, &e), &e);
        check_int8_source(t, src, bf, DSR1_T_BF16);
    }
}

/* Replace the first `from` in the file by `to` (same length). */
static int patch_file(const char *path, const char *from, const char *to)
{
    FILE *f = fopen(path, "r+b");
    if (!f) return -1;
    static char buf[1 << 20]; /* the JSON header is at the front */
    size_t n = fread(buf, 1, sizeof buf, f);
    char *p = memmem(buf, n, from, strlen(from));
    int rc = p && strlen(from) == strlen(to) && fseek(f, p - buf, SEEK_SET) == 0 &&
             fwrite(to, 1, strlen(to), f) == strlen(to) ? 0 : -1;
    return fclose(f) || rc ? -1 : 0;
}

/* Shape checks apply to I8 scales: a scale that is not [out, 1], or none. */
DSR1_TEST(convert_int8_source_bad_scales)
{
    static const struct { const char *from, *to, *msg; int code; } cases[2] = {
        {"o_proj.weight_scale\":{\"dtype\":\"F32\",\"shape\":[256,1]",
         "o_proj.weight_scale\":{\"dtype\":\"F32\",\"shape\":[128,2]",
         "one scale per output channel", DSR1_EFORMAT},
        {"layers.1.self_attn.o_proj.weight_scale\"", "layers.1.self_attn.o_proj.weight_scalf\"",
         "model.layers.1.self_attn.o_proj.weight_scale: missing", DSR1_ENOTFOUND},
    };
    for (int k = 0; k < 2; k++) {
        const char *src = gen_ckpt(t, "i8bad", "--dtype int8");
        REQUIRE(src);
        char shard[800];
        snprintf(shard, sizeof shard, "%s/model.safetensors", src);
        REQUIRE(patch_file(shard, cases[k].from, cases[k].to) == 0);
        dsr1_error e = {0};
        dsr1_convert_stats st;
        const char *out = out_path("i8bad.dsr1");
        CHECK_EQ_INT(convert_dir(src, out, 0, 0, &st, &e), cases[k].code);
        CHECKF(strstr(e.msg, cases[k].msg) != NULL, "message '%s'", e.msg);
        CHECK(access(out, F_OK) != 0);
    }
}

/* ---- the MTP eh_proj: a projection like the others -------------------- */

/* One rule for eh_proj in the checkpoint reader (a LINEAR role) and in
 * convert (--type changes it): a BF16 one is requantised, an FP8 or I8 one
 * (with its scale) is accepted and kept bit-exactly by default. */
DSR1_TEST(convert_eh_proj_one_rule)
{
    static const struct { const char *args; dsr1_type keep; } cases[2] = {
        {"--quantised-eh-proj", DSR1_T_FP8_E4M3},
        {"--quantised-eh-proj --dtype int8", DSR1_T_INT8},
    };
    const char *eh = "model.layers.4.eh_proj.weight";
    for (int k = 0; k < 2; k++) {
        const char *src = gen_ckpt(t, "ehq", cases[k].args);
        REQUIRE(src);
        dsr1_error e = {0};
        dsr1_checkpoint *ck = NULL;
        REQUIRE(dsr1_checkpoint_open(&ck, src, &e) == 0);
        CHECK_OK(dsr1_checkpoint_check_shapes(ck, &e), &e);
        const dsr1_st_tensor *s = dsr1_checkpoint_find(ck, eh);
        REQUIRE(s && s->dtype != DSR1_ST_BF16);
        dsr1_convert_stats st;
        const char *out = out_path("ehq.dsr1"), *i4 = out_path("ehq-int4.dsr1");
        CHECK_OK(convert_dir(src, out, 0, 0, &st, &e), &e);
        CHECK_OK(convert_dir(src, i4, 1, DSR1_T_INT4, &st, &e), &e);
        dsr1_file *f = NULL, *g = NULL;
        REQUIRE(dsr1_file_open(&f, out, &e) == 0 && dsr1_file_open(&g, i4, &e) == 0);
        const dsr1_tensor *x = dsr1_file_find(f, eh);
        REQUIRE(x);
        CHECK_EQ_INT(x->type, cases[k].keep);
        CHECK(x->size == s->size && !memcmp(x->data, s->data, s->size));
        CHECK_EQ_INT(dsr1_file_find(g, eh)->type, DSR1_T_INT4);
        dsr1_file_close(f);
        dsr1_file_close(g);
        dsr1_checkpoint_close(ck);
    }
    /* The released layout (BF16 eh_proj, the fixture): --type applies too. */
    dsr1_error e = {0};
    dsr1_convert_stats st;
    const char *out = out_path("eh-int8.dsr1");
    CHECK_OK(run_convert(out, 1, DSR1_T_INT8, NULL, 0, &st, &e), &e);
    dsr1_file *f = NULL;
    REQUIRE(dsr1_file_open(&f, out, &e) == 0);
    CHECK_EQ_INT(dsr1_file_find(f, eh)->type, DSR1_T_INT8);
    CHECK_EQ_INT(dsr1_file_find(f, "model.layers.4.embed_tokens.weight")->type, DSR1_T_BF16);
    dsr1_file_close(f);
}

/* ---- INT4 needs `in` % 32 == 0 ----------------------------------------- */

/* q_lora_rank 40: every q_b_proj has in = 40, so --type int4 leaves them at
 * their source type (FP8, bytes unchanged), counts them, and the summary
 * of `dsr1 convert` says so; everything else becomes INT4. */
DSR1_TEST(convert_int4_fallback_kept)
{
    const char *src = gen_ckpt(t, "qr40", "--q-lora-rank 40");
    REQUIRE(src);
    dsr1_error e = {0};
    dsr1_convert_stats st;
    const char *out = out_path("qr40.dsr1");
    CHECK_OK(convert_dir(src, out, 1, DSR1_T_INT4, &st, &e), &e);
    CHECK_EQ_INT(st.n_kept, 5); /* 4 layers + MTP */
    CHECK_STR(st.first_kept, "model.layers.0.self_attn.q_b_proj.weight");
    dsr1_checkpoint *ck = NULL;
    dsr1_file *f = NULL;
    REQUIRE(dsr1_checkpoint_open(&ck, src, &e) == 0 && dsr1_file_open(&f, out, &e) == 0);
    for (int L = 0; L < 5; L++) {
        char n[128];
        snprintf(n, sizeof n, "model.layers.%d.self_attn.q_b_proj.weight", L);
        const dsr1_tensor *x = dsr1_file_find(f, n);
        const dsr1_st_tensor *s = dsr1_checkpoint_find(ck, n);
        REQUIRE(x && s);
        CHECKF(x->type == DSR1_T_FP8_E4M3 && x->size == s->size && !memcmp(x->data, s->data, s->size),
               "%s not kept", n);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.q_a_proj.weight", L);
        CHECK_EQ_INT(dsr1_file_find(f, n)->type, DSR1_T_INT4);
    }
    CHECK_EQ_INT(st.count[DSR1_T_FP8_E4M3], 5);
    dsr1_file_close(f);
    dsr1_checkpoint_close(ck);
    char log[2048];
    int rc = dsr1_test_sh(log, sizeof log, "'%s' convert '%s' -o '%s/qr40-cli.dsr1' --type int4 "
                          "--no-verify 2>&1 >/dev/null", dsr1_test_binary(), src, dsr1_test_tmpdir());
    CHECK_EQ_INT(rc, 0);
    CHECKF(strstr(log, "5 tensor(s) kept their source type: `in` is not a multiple of 32 (INT4 "
                  "groups), e.g. model.layers.0.self_attn.q_b_proj.weight"), "summary: %s", log);
}
