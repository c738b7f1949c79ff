/*
 * tokenize.c - `dsr1 tokenize`: text to token ids with the model's own
 * tokenizer (add_special_tokens off; special tokens written in the text are
 * recognised).
 *
 *   dsr1 tokenize -m MODEL "text"     ids on one line, space separated
 *   dsr1 tokenize -m MODEL < file     the same for stdin, streamed
 *   dsr1 tokenize -m MODEL --jsonl    {"text": ...} lines in, each line out
 *                                     with an "ids" array added
 *   --count                           only the number of tokens
 *
 * Streaming: stdin is read in pieces and cut only where the tokenizer says
 * a cut cannot change the ids (dsr1_tokenizer_safe_cut: after a line break
 * before a non-space), so memory is bounded by the longest stretch without
 * such a point, not by the input. --jsonl holds one line at a time.
 *
 * The --jsonl reader is a small scanner, not a JSON library: it must keep
 * every other member of the line byte for byte, and the text may hold
 * \u0000, which NUL-terminated JSON libraries silently cut.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/unicode.h"
#include "common.h"
#include "tokenize.h"

#define CHUNK (1 << 20)

int dsr1_tokenize_open(const char *model, dsr1_tokenizer **tk, dsr1_error *err)
{
    if (!model || !model[0]) model = getenv("DSR1_MODEL");
    if (!model || !model[0])
        return dsr1_errorf(err, DSR1_ENOTFOUND, "no model: give -m MODEL (a .dsr1 file, a "
                           "checkpoint directory or a tokenizer.json) or set DSR1_MODEL");
    char path[4096]; /* a repo id: its snapshot in the Hugging Face cache */
    DSR1_TRY(dsr1_common_resolve_path(model, path, sizeof path, err));
    return dsr1_tokenizer_open(tk, path, err);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: dsr1 tokenize [-m MODEL] [--jsonl] [--count] [TEXT...]\n"
               "  -m, --model MODEL  .dsr1 file, checkpoint directory or tokenizer.json\n"
               "                     (default: $DSR1_MODEL)\n"
               "  --jsonl            read {\"text\": ...} lines on stdin, write each back\n"
               "                     with an \"ids\" array added\n"
               "  --count            print only the number of tokens\n"
               "TEXT arguments are joined with spaces; without them stdin is read.\n"
               "See dsr1-tokenize(1).\n");
}

/* ---- output ----------------------------------------------------------- */

/* Append ids as decimal text, separated by sep, to a growing buffer. */
static int put_ids(char **buf, size_t *cap, size_t *len, const int32_t *ids, size_t n, char sep)
{
    if (*len + n * 12 + 2 > *cap) {
        size_t c = *len + n * 12 + 64;
        char *b = realloc(*buf, c);
        if (!b) return -1;
        *buf = b;
        *cap = c;
    }
    for (size_t i = 0; i < n; i++) {
        if (i) (*buf)[(*len)++] = sep;
        *len += (size_t)snprintf(*buf + *len, 12, "%d", (int)ids[i]);
    }
    return 0;
}

/* ---- text from arguments or stdin ------------------------------------- */

static int write_ids(const int32_t *ids, size_t n, int first)
{
    char *buf = NULL;
    size_t cap = 0, len = 0;
    if (!first && n) {
        buf = malloc(1);
        if (!buf) return -1;
        buf[len++] = ' ';
        cap = 1;
    }
    if (put_ids(&buf, &cap, &len, ids, n, ' ')) {
        free(buf);
        return -1;
    }
    size_t w = fwrite(buf, 1, len, stdout);
    free(buf);
    return w == len ? 0 : -1;
}

/* Encode buf[0..cut), print the ids, count them. base = offset of buf in
 * the input, for error messages. */
static int encode_piece(dsr1_tokenizer_encoder *enc, const char *buf, size_t cut, size_t base,
                        int count, size_t *total, dsr1_error *err)
{
    size_t valid = dsr1_utf8_valid_prefix(buf, cut);
    if (valid != cut)
        return dsr1_errorf(err, DSR1_EINVAL, "input: invalid UTF-8 at byte offset %zu (0x%02x)",
                           base + valid, (unsigned char)buf[valid]);
    int32_t *ids;
    size_t n;
    DSR1_TRY(dsr1_tokenizer_encoder_run(enc, buf, cut, &ids, &n, err));
    int rc = count ? 0 : write_ids(ids, n, *total == 0);
    *total += n;
    free(ids);
    return rc ? dsr1_errorf(err, DSR1_EIO, "stdout: write failed") : 0;
}

static int tokenize_stream(dsr1_tokenizer_encoder *enc, const dsr1_tokenizer *tk, FILE *in,
                           int count, size_t *total, dsr1_error *err)
{
    size_t cap = CHUNK, n = 0, base = 0;
    char *buf = malloc(cap);
    if (!buf) return dsr1_errorf(err, DSR1_ENOMEM, "stdin: out of memory");
    int rc = 0;
    for (;;) {
        if (n == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                rc = dsr1_errorf(err, DSR1_ENOMEM, "stdin: out of memory (%zu bytes without "
                                 "a line break)", n);
                break;
            }
            buf = b;
        }
        size_t r = fread(buf + n, 1, cap - n, in);
        n += r;
        int eof = r == 0;
        if (eof && ferror(in)) {
            rc = dsr1_errorf(err, DSR1_EIO, "stdin: read error");
            break;
        }
        size_t cut = eof ? n : dsr1_tokenizer_safe_cut(tk, buf, n);
        if (cut) {
            rc = encode_piece(enc, buf, cut, base, count, total, err);
            if (rc) break;
            memmove(buf, buf + cut, n - cut);
            n -= cut;
            base += cut;
        }
        if (eof) break;
    }
    free(buf);
    return rc;
}

/* ---- --jsonl ---------------------------------------------------------- */

typedef struct member {
    size_t start, end;       /* the whole "key": value */
    size_t vstart, vend;     /* the value */
    int is_text, is_ids;
} member;

static size_t skip_ws(const char *s, size_t n, size_t p)
{
    while (p < n && (s[p] == ' ' || s[p] == '\t' || s[p] == '\r' || s[p] == '\n')) p++;
    return p;
}

/* p at '"': position after the closing quote, or 0 when unterminated. */
static size_t skip_string(const char *s, size_t n, size_t p)
{
    for (p++; p < n; p++) {
        if (s[p] == '\\') p++;
        else if (s[p] == '"') return p + 1;
    }
    return 0;
}

/* End of the JSON value at p (strings and nesting aware), or 0. */
static size_t skip_value(const char *s, size_t n, size_t p)
{
    if (p >= n) return 0;
    if (s[p] == '"') return skip_string(s, n, p);
    int depth = 0;
    for (; p < n; p++) {
        char c = s[p];
        if (c == '"') {
            size_t q = skip_string(s, n, p);
            if (!q) return 0;
            p = q - 1;
        } else if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') {
            if (depth == 0) return p;
            if (--depth == 0) return p + 1;
        } else if (depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\r'))
            return p;
    }
    return depth == 0 ? p : 0;
}

static int hex4(const char *s, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
        if (d > 15) return -1;
        *v = *v << 4 | d;
    }
    return 0;
}

/* Decode the JSON string body s[0..n) (between the quotes) into out (n
 * bytes are enough: escapes never expand). Returns the length or -1 with
 * *why set. */
static long json_unescape(const char *s, size_t n, char *out, const char **why)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            out[k++] = s[i];
            continue;
        }
        if (++i >= n) return *why = "truncated escape", -1;
        const char *e = s[i] ? strchr(from, s[i]) : NULL;
        if (e) {
            out[k++] = to[e - from];
            continue;
        }
        unsigned u, lo;
        if (s[i] != 'u' || i + 4 >= n || hex4(s + i + 1, &u)) return *why = "bad escape", -1;
        i += 4;
        if (u >= 0xDC00 && u <= 0xDFFF) return *why = "lone low surrogate \\u escape", -1;
        if (u >= 0xD800 && u <= 0xDBFF) {
            if (i + 6 >= n || s[i + 1] != '\\' || s[i + 2] != 'u' || hex4(s + i + 3, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF)
                return *why = "lone high surrogate \\u escape", -1;
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
        }
        k += dsr1_utf8_encode(u, out + k); /* at most 4 bytes for 6 or 12 read */
    }
    return (long)k;
}

/* Split a JSON object line into members; returns their count or -1. */
static int scan_object(const char *s, size_t n, member *m, int max)
{
    size_t p = skip_ws(s, n, 0);
    if (p >= n || s[p] != '{') return -1;
    p = skip_ws(s, n, p + 1);
    int k = 0;
    if (p < n && s[p] == '}') return skip_ws(s, n, p + 1) == n ? 0 : -1;
    while (k < max) {
        if (p >= n || s[p] != '"') return -1;
        size_t kend = skip_string(s, n, p);
        if (!kend) return -1;
        member *mm = &m[k++];
        mm->start = p;
        mm->is_text = kend - p == 6 && !memcmp(s + p, "\"text\"", 6);
        mm->is_ids = kend - p == 5 && !memcmp(s + p, "\"ids\"", 5);
        p = skip_ws(s, n, kend);
        if (p >= n || s[p] != ':') return -1;
        mm->vstart = p = skip_ws(s, n, p + 1);
        mm->vend = p = skip_value(s, n, p);
        if (!p) return -1;
        mm->end = p;
        p = skip_ws(s, n, p);
        if (p < n && s[p] == ',') {
            p = skip_ws(s, n, p + 1);
            continue;
        }
        if (p < n && s[p] == '}') return skip_ws(s, n, p + 1) == n ? k : -1;
        return -1;
    }
    return -1;
}

/* Rebuild the line: its members except "ids", then the new ids. */
static int write_record(const char *line, const member *m, int nm, const int32_t *ids, size_t n,
                        int count)
{
    size_t cap = 0, len = 0;
    char *out = NULL;
    int first = 1;
    for (int i = 0; i < nm; i++) {
        if (m[i].is_ids || (count && !strncmp(line + m[i].start, "\"n_tokens\"", 10))) continue;
        size_t l = m[i].end - m[i].start;
        char *o = realloc(out, len + l + 2);
        if (!o) return free(out), -1;
        out = o;
        cap = len + l + 2;
        out[len++] = first ? '{' : ',';
        memcpy(out + len, line + m[i].start, l);
        len += l;
        first = 0;
    }
    char head[32];
    int hl = snprintf(head, sizeof head, "%c\"%s\":%s", first ? '{' : ',',
                      count ? "n_tokens" : "ids", count ? "" : "[");
    char *o = realloc(out, len + (size_t)hl + 40);
    if (!o) return free(out), -1;
    out = o;
    cap = len + (size_t)hl + 40;
    memcpy(out + len, head, (size_t)hl);
    len += (size_t)hl;
    int rc = count ? (len += (size_t)snprintf(out + len, 24, "%zu", n), 0)
                   : put_ids(&out, &cap, &len, ids, n, ',');
    if (!rc && len + 3 > cap) rc = (o = realloc(out, cap = len + 3)) ? (out = o, 0) : -1;
    if (!rc) {
        if (!count) out[len++] = ']';
        out[len++] = '}';
        out[len++] = '\n';
        rc = fwrite(out, 1, len, stdout) == len ? 0 : -1;
    }
    free(out);
    return rc;
}

static int jsonl_line(dsr1_tokenizer_encoder *enc, const char *line, size_t n, size_t lineno,
                      int count, dsr1_error *err)
{
    member m[64];
    int nm = scan_object(line, n, m, 64);
    if (nm < 0)
        return dsr1_errorf(err, DSR1_EINVAL, "stdin:%zu: expected a JSON object (at most 64 "
                           "members)", lineno);
    const member *text = NULL;
    for (int i = 0; i < nm; i++)
        if (m[i].is_text) text = &m[i];
    if (!text || line[text->vstart] != '"')
        return dsr1_errorf(err, DSR1_EINVAL, "stdin:%zu: no \"text\" string", lineno);
    size_t body = text->vend - text->vstart - 2;
    char *buf = malloc(body + 1);
    if (!buf) return dsr1_errorf(err, DSR1_ENOMEM, "stdin:%zu: out of memory", lineno);
    const char *why = NULL;
    long tl = json_unescape(line + text->vstart + 1, body, buf, &why);
    int rc = 0;
    int32_t *ids = NULL;
    size_t nids = 0;
    if (tl < 0) rc = dsr1_errorf(err, DSR1_EINVAL, "stdin:%zu: \"text\": %s", lineno, why);
    if (!rc && (rc = dsr1_tokenizer_encoder_run(enc, buf, (size_t)tl, &ids, &nids, err)))
        dsr1_error_wrap(err, "stdin:%zu: \"text\"", lineno);
    if (!rc && write_record(line, m, nm, ids, nids, count))
        rc = dsr1_errorf(err, DSR1_EIO, "stdout: write failed");
    free(ids);
    free(buf);
    return rc;
}

static int tokenize_jsonl(dsr1_tokenizer_encoder *enc, int count, dsr1_error *err)
{
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t r;
    int rc = 0;
    while (!rc && (r = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        size_t n = (size_t)r;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        if (skip_ws(line, n, 0) == n) continue; /* blank lines are skipped */
        rc = jsonl_line(enc, line, n, lineno, count, err);
    }
    if (!rc && ferror(stdin)) rc = dsr1_errorf(err, DSR1_EIO, "stdin: read error");
    free(line);
    return rc;
}

/* ---- command ---------------------------------------------------------- */

static char *join_args(int n, char **args, size_t *len)
{
    size_t total = 1;
    for (int i = 0; i < n; i++) total += strlen(args[i]) + 1;
    char *text = malloc(total);
    if (!text) return NULL;
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        if (i) text[k++] = ' ';
        size_t l = strlen(args[i]);
        memcpy(text + k, args[i], l);
        k += l;
    }
    text[k] = 0;
    *len = k;
    return text;
}

static int run(const char *model, int jsonl, int count, int ntext, char **texts)
{
    dsr1_error err = {0};
    dsr1_tokenizer *tk = NULL;
    dsr1_tokenizer_encoder *enc = NULL;
    if (dsr1_tokenize_open(model, &tk, &err) || dsr1_tokenizer_encoder_create(&enc, tk, &err)) {
        dsr1_tokenizer_free(tk);
        return dsr1_cli_fail(&err);
    }
    int rc = 0;
    size_t total = 0, len;
    if (jsonl) {
        rc = tokenize_jsonl(enc, count, &err);
    } else if (ntext) {
        char *text = join_args(ntext, texts, &len);
        rc = text ? encode_piece(enc, text, len, 0, count, &total, &err)
                  : dsr1_errorf(&err, DSR1_ENOMEM, "out of memory");
        free(text);
    } else {
        rc = tokenize_stream(enc, tk, stdin, count, &total, &err);
    }
    if (!rc && !jsonl) {
        if (count) printf("%zu\n", total);
        else putchar('\n');
    }
    if (!rc && fflush(stdout)) rc = dsr1_errorf(&err, DSR1_EIO, "stdout: write failed");
    dsr1_tokenizer_encoder_free(enc);
    dsr1_tokenizer_free(tk);
    return rc ? dsr1_cli_fail(&err) : 0;
}

int dsr1_cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL;
    int jsonl = 0, count = 0, ntext = 0, opts = 1;
    char **texts = argv + 1; /* positional arguments are compacted in place */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!opts || a[0] != '-' || !a[1]) {
            texts[ntext++] = argv[i];
        } else if (!strcmp(a, "--")) {
            opts = 0;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (++i >= argc) return dsr1_cli_usage("tokenize", "%s needs a value", a);
            model = argv[i];
        } else if (!strcmp(a, "--jsonl")) {
            jsonl = 1;
        } else if (!strcmp(a, "--count")) {
            count = 1;
        } else {
            return dsr1_cli_usage("tokenize", "unknown option '%s'", a);
        }
    }
    if (jsonl && ntext) return dsr1_cli_usage("tokenize", "--jsonl reads stdin; no TEXT arguments");
    return run(model, jsonl, count, ntext, texts);
}
