/*
 * test_model_check.c - every tensor a model uses is checked against the
 * config in one place (core/model.c check_tensor) before a backend sees
 * it: crafted files with one tensor's shape or type changed are refused at
 * open with a one-line error naming the tensor and the expected shape,
 * never read past (issue 13: the MTP layer's embedding was once taken
 * unchecked; too few rows read past the mapping, too many columns wrote
 * past a heap buffer during drafting).
 */
#include <stdlib.h>
#include <string.h>

#include "be_util.h"
#include "convert/dsr1file.h"
#include "core/dsr1.h"
#include "test.h"

const char *dsr1_test_tiny_model(void);

/* Copy src to dst with tensor `name` given dims d0 x d1 and type ty (its
 * payload zero-filled to the new size). 0 on success. */
static int craft(const char *src, const char *dst, const char *name, int64_t d0, int64_t d1,
                 dsr1_type ty, dsr1_error *err)
{
    dsr1_file *f;
    DSR1_TRY(dsr1_file_open(&f, src, err));
    dsr1_writer *w;
    int rc = dsr1_writer_open(&w, dst, err);
    size_t n = dsr1_file_n_tensors(f), *idx = calloc(n, sizeof *idx);
    for (size_t i = 0; !rc && i < n; i++) {
        dsr1_tensor t = *dsr1_file_tensor(f, i);
        if (!strcmp(t.name, name)) {
            t.ndim = 2, t.dims[0] = d0, t.dims[1] = d1, t.type = ty;
            t.scale_type = 0, t.group = 0;
        }
        rc = dsr1_writer_add(w, &t, &idx[i], err);
    }
    for (size_t i = 0; !rc && i < n; i++) {
        const dsr1_tensor *t = dsr1_file_tensor(f, i);
        if (!strcmp(t->name, name)) {
            int64_t dims[2] = {d0, d1};
            uint64_t sz = dsr1_type_payload_size(ty, 2, dims);
            void *z = calloc(1, (size_t)sz);
            rc = z ? dsr1_writer_write(w, idx[i], 0, 0, z, (size_t)sz, err) : DSR1_ENOMEM;
            free(z);
            continue;
        }
        rc = dsr1_writer_write(w, idx[i], 0, 0, t->data, (size_t)t->size, err);
        if (!rc && t->scale) rc = dsr1_writer_write(w, idx[i], 1, 0, t->scale, (size_t)t->scale_size, err);
    }
    if (!rc) rc = dsr1_writer_set_metadata(w, dsr1_file_metadata(f), err);
    if (!rc) rc = dsr1_writer_finish(w, err);
    else dsr1_writer_abort(w);
    free(idx);
    dsr1_file_close(f);
    return rc;
}

/* Open a crafted copy; expect refusal naming the tensor and `want`. */
static void refused(dsr1_test_ctx *t, const char *name, int64_t d0, int64_t d1, dsr1_type ty,
                    const char *want)
{
    const char *src = dsr1_test_tiny_model();
    if (!src) DSR1_SKIP("tiny fixture could not be converted");
    DSR1_TEST_NEED_BACKEND();
    char dst[1100];
    snprintf(dst, sizeof dst, "%s/crafted.dsr1", dsr1_test_tmpdir());
    dsr1_error err;
    CHECK_OK(craft(src, dst, name, d0, d1, ty, &err), &err);
    dsr1_model *m = NULL;
    dsr1_model_options o = {.threads = 1, .backend = dsr1_test_backend()};
    int rc = dsr1_model_open(&m, dst, &o, &err);
    CHECKF(rc != 0 && !m, "%s [%lld, %lld] %s: opened", name, (long long)d0, (long long)d1,
           dsr1_type_name(ty));
    if (rc) {
        CHECKF(strstr(err.msg, name) && strstr(err.msg, want), "message: %s", err.msg);
        CHECK(!strchr(err.msg, '\n'));
    }
    dsr1_model_close(m);
    remove(dst);
}

DSR1_TEST(model_check_mtp_embed_too_few_rows)
{
    refused(t, "model.layers.4.embed_tokens.weight", 2047, 256, DSR1_T_BF16,
            "expected shape [2048, 256], found [2047, 256]");
}

DSR1_TEST(model_check_mtp_embed_too_many_columns)
{
    refused(t, "model.layers.4.embed_tokens.weight", 2048, 257, DSR1_T_BF16,
            "expected shape [2048, 256], found [2048, 257]");
}

DSR1_TEST(model_check_mtp_head_shape)
{
    refused(t, "model.layers.4.shared_head.head.weight", 2048, 255, DSR1_T_BF16,
            "expected shape [2048, 256]");
}

DSR1_TEST(model_check_main_embed_and_norm_type)
{
    refused(t, "model.embed_tokens.weight", 2049, 256, DSR1_T_BF16, "expected shape [2048, 256]");
    refused(t, "model.norm.weight", 256, 1, DSR1_T_F32, "expected shape [256]");
}

/* A vector stored as a matrix type the loader cannot use as floats. */
DSR1_TEST(model_check_vector_type)
{
    const char *src = dsr1_test_tiny_model();
    if (!src) DSR1_SKIP("tiny fixture could not be converted");
    DSR1_TEST_NEED_BACKEND();
    char dst[1100];
    snprintf(dst, sizeof dst, "%s/crafted-vec.dsr1", dsr1_test_tmpdir());
    dsr1_error err;
    /* stored as a 2-D [1, 256] matrix: not the vector [256] the config says */
    CHECK_OK(craft(src, dst, "model.layers.0.input_layernorm.weight", 1, 256, DSR1_T_F32, &err), &err);
    dsr1_model *m = NULL;
    dsr1_model_options o = {.threads = 1, .backend = dsr1_test_backend()};
    CHECK(dsr1_model_open(&m, dst, &o, &err) == DSR1_EFORMAT);
    CHECKF(strstr(err.msg, "input_layernorm") && strstr(err.msg, "expected shape [256]"), "%s", err.msg);
    dsr1_model_close(m);
    remove(dst);
}
