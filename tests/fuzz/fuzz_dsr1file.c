/*
 * fuzz_dsr1file.c - the .dsr1 header, metadata and tensor directory
 * (dsr1_file_open), then what every reader does next: payload hashes
 * (dsr1_file_verify), lookups by name, the metadata's config
 * (dsr1_config_from_json, as model loading and `dsr1 info` read it), and
 * the packed tokenizer.json blob when there is one.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "convert/dsr1file.h"
#include "core/config.h"
#include "core/tokenizer.h"
#include "fuzz.h"

static void check_meta(const char *meta)
{
    cJSON *m = cJSON_Parse(meta);
    cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
    char *cs = cfg ? cJSON_PrintUnformatted(cfg) : NULL;
    dsr1_config c;
    dsr1_error err = {0};
    if (cs) dsr1_config_from_json(&c, cs, "metadata", &err);
    free(cs);
    cJSON_Delete(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0) return 0;
    dsr1_file *f = NULL;
    dsr1_error err = {0};
    volatile uint8_t sink = 0;
    if (dsr1_file_open(&f, path, &err) == 0) {
        dsr1_file_verify(f, NULL, NULL, &err);
        for (size_t i = 0; i < dsr1_file_n_tensors(f); i++) {
            const dsr1_tensor *t = dsr1_file_tensor(f, i);
            if (dsr1_file_find(f, t->name) == NULL) abort();
            const uint8_t *p = t->data, *s = t->scale;
            if (t->size) sink ^= p[0] ^ p[t->size - 1];
            if (t->scale_size) sink ^= s[0] ^ s[t->scale_size - 1];
        }
        check_meta(dsr1_file_metadata(f));
        const dsr1_tensor *tj = dsr1_file_find(f, "tokenizer.json");
        if (tj && tj->type == DSR1_T_BLOB) {
            dsr1_tokenizer *tk = NULL;
            dsr1_tokenizer_create(&tk, tj->data, (size_t)tj->size, "blob", &err);
            dsr1_tokenizer_free(tk);
        }
        dsr1_file_close(f);
    }
    (void)sink;
    close(fd);
    return 0;
}
