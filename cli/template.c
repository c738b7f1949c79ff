/*
 * template.c - `dsr1 template`: read {"messages": [...], "tools": [...]?}
 * on stdin and print the prompt the model would see (or its token ids).
 *
 * Owns: finding a model's chat template and BOS text without loading
 * weights (a .dsr1 file's metadata or its tokenizer_config.json blob; a
 * checkpoint directory's or a tokenizer.json's sibling
 * tokenizer_config.json), choosing the renderer (core/template.h), output.
 * Rendering itself is core/template.c; tokenizing is core/tokenizer.c.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "common.h"
#include "core/dsr1file.h"
#include "core/template.h"
#include "core/tokenizer.h"

static const char usage_text[] =
    "usage: dsr1 template [-m MODEL] [--template v3|r1|raw] [--no-generation-prompt] [--ids]\n"
    "\n"
    "Reads {\"messages\": [...]} (OpenAI chat shape, optional \"tools\") on stdin and\n"
    "prints the rendered prompt exactly, or with --ids its token ids.\n"
    "\n"
    "  -m, --model PATH         a .dsr1 file, a checkpoint directory or a tokenizer.json\n"
    "                           (default: $DSR1_MODEL, then the default model)\n"
    "  --template v3|r1|raw     renderer; default: recognised from the model's template\n"
    "  --no-generation-prompt   do not end with the assistant turn opening\n"
    "  --ids                    print token ids (space separated) instead of text\n"
    "\n"
    "Without --ids, --template works with no model at all. See dsr1-template(1).\n";

typedef struct {
    const char *model, *tmpl;
    int no_gen, ids;
} opts;

static int parse_args(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_text, stdout);
            return -1;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            o->model = argv[++i];
        } else if (!strcmp(a, "--template") && i + 1 < argc) {
            o->tmpl = argv[++i];
            if (dsr1_template_parse_name(o->tmpl) < 0)
                return dsr1_cli_usage("template", "--template %s: expected v3, r1 or raw", o->tmpl);
        } else if (!strcmp(a, "--no-generation-prompt")) {
            o->no_gen = 1;
        } else if (!strcmp(a, "--ids")) {
            o->ids = 1;
        } else {
            return dsr1_cli_usage("template", "unexpected argument '%s'", a);
        }
    }
    return 0;
}

/* ---- the model's template and BOS ----------------------------------------- */

typedef struct {
    char *chat_template; /* NULL when the model has none */
    char *bos;           /* BOS text */
} model_text;

/* chat_template and bos_token out of tokenizer_config.json text. The
 * template may also be a list of {name, template} (newer transformers):
 * the "default" one is used. */
static void from_config(model_text *mt, const char *json, size_t len)
{
    cJSON *j = cJSON_ParseWithLength(json, len);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    if (cJSON_IsArray(t)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, t) {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(it, "name"));
            if (name && !strcmp(name, "default")) t = cJSON_GetObjectItem(it, "template");
        }
    }
    if (!mt->chat_template && cJSON_IsString(t)) mt->chat_template = strdup(t->valuestring);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "bos_token");
    if (cJSON_IsObject(b)) b = cJSON_GetObjectItemCaseSensitive(b, "content");
    if (!mt->bos && cJSON_IsString(b)) mt->bos = strdup(b->valuestring);
    cJSON_Delete(j);
}

static int from_dsr1(model_text *mt, const char *path, dsr1_error *err)
{
    dsr1_file *f;
    DSR1_TRY(dsr1_file_open(&f, path, err));
    cJSON *meta = cJSON_Parse(dsr1_file_metadata(f));
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "chat_template"));
    if (t) mt->chat_template = strdup(t);
    cJSON_Delete(meta);
    const dsr1_tensor *cfg = dsr1_file_find(f, "tokenizer_config.json");
    if (cfg && cfg->type == DSR1_T_BLOB) from_config(mt, cfg->data, cfg->size);
    dsr1_file_close(f);
    return 0;
}

/* PATH is a directory (DIR/tokenizer_config.json) or a file next to one. */
static void from_sibling(model_text *mt, const char *path, int is_dir)
{
    char cfg[4096];
    const char *slash = strrchr(path, '/');
    if (is_dir) snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", path);
    else if (slash) snprintf(cfg, sizeof cfg, "%.*s/tokenizer_config.json", (int)(slash - path), path);
    else snprintf(cfg, sizeof cfg, "tokenizer_config.json");
    char *text = NULL;
    size_t len = 0;
    dsr1_error ignored;
    if (dsr1_common_read_all(cfg, &text, &len, &ignored) == 0) from_config(mt, text, len);
    free(text);
}

static int is_dsr1_file(const char *path)
{
    char magic[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(magic, 1, sizeof magic, f);
    fclose(f);
    return n == sizeof magic && !memcmp(magic, DSR1_FILE_MAGIC, sizeof magic);
}

static int load_model_text(model_text *mt, const char *path, dsr1_error *err)
{
    struct stat st;
    if (stat(path, &st)) return dsr1_errorf(err, DSR1_ENOTFOUND, "%s: no such file or directory", path);
    if (S_ISDIR(st.st_mode)) from_sibling(mt, path, 1);
    else if (is_dsr1_file(path)) DSR1_TRY(from_dsr1(mt, path, err));
    else from_sibling(mt, path, 0);
    return 0;
}

/* ---- main ------------------------------------------------------------------- */

static int print_ids(const char *path, const char *text, size_t len, dsr1_error *err)
{
    dsr1_tokenizer *tk;
    int32_t *ids = NULL;
    size_t n = 0;
    DSR1_TRY(dsr1_tokenizer_open(&tk, path, err));
    int rc = dsr1_tokenizer_encode(tk, text, len, &ids, &n, err);
    for (size_t i = 0; !rc && i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
    if (!rc) printf("\n");
    free(ids);
    dsr1_tokenizer_free(tk);
    return rc;
}

/* Which renderer: --template wins; else the model's template decides. */
static dsr1_template_kind choose(const opts *o, const model_text *mt, const char *path)
{
    if (o->tmpl) return (dsr1_template_kind)dsr1_template_parse_name(o->tmpl);
    dsr1_detect how;
    dsr1_template_kind k = dsr1_template_detect(mt->chat_template, &how);
    if (how == DSR1_DETECT_UNKNOWN || how == DSR1_DETECT_ABSENT)
        fprintf(stderr, "dsr1 template: warning: %s: chat template %s; rendering as %s "
                        "(--template to choose)\n",
                path, how == DSR1_DETECT_ABSENT ? "missing" : "not recognised",
                dsr1_template_name(k));
    return k;
}

static int run(const opts *o, const char *path, dsr1_error *err)
{
    model_text mt = {0};
    char *in = NULL, *text = NULL;
    size_t inlen = 0, len = 0;
    dsr1_chat *chat = NULL;
    int rc = path ? load_model_text(&mt, path, err) : 0;
    if (!rc) rc = dsr1_common_read_all("-", &in, &inlen, err);
    if (!rc) rc = dsr1_chat_parse(&chat, in, inlen, err);
    if (!rc) {
        dsr1_template_kind k = choose(o, &mt, path);
        rc = dsr1_template_render(k, chat, !o->no_gen, mt.bos ? mt.bos : DSR1_TEMPLATE_BOS,
                                  &text, &len, err);
    }
    if (!rc && o->ids) rc = print_ids(path, text, len, err);
    else if (!rc && fwrite(text, 1, len, stdout) != len)
        rc = dsr1_errorf(err, DSR1_EIO, "stdout: write failed");
    free(mt.chat_template);
    free(mt.bos);
    free(in);
    free(text);
    dsr1_chat_free(chat);
    return rc;
}

int dsr1_cmd_template(int argc, char **argv)
{
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    const char *path = o.model ? o.model : getenv("DSR1_MODEL");
    if (path && !*path) path = NULL;
    char found[4096];
    dsr1_error err = {0};
    if (path) { /* a repo id: its snapshot in the Hugging Face cache */
        if (dsr1_common_resolve_path(path, found, sizeof found, &err)) return dsr1_cli_fail(&err);
        path = found;
    }
    if (!path && (o.ids || !o.tmpl)) { /* no model named: the default one, if any */
        if (dsr1_common_model_path(NULL, found, sizeof found, &err)) return dsr1_cli_fail(&err);
        path = found;
    }
    if (run(&o, path, &err)) return dsr1_cli_fail(&err);
    return fflush(stdout) ? 1 : 0;
}
