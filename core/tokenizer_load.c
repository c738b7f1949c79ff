/*
 * tokenizer_load.c - builds a dsr1_tokenizer from tokenizer.json, and finds
 * tokenizer.json in a .dsr1 file, a checkpoint directory or a plain path.
 *
 * What it accepts is exactly what core/tokenizer.c implements: the
 * DeepSeek-V3/R1 tokenizer.json shape (byte-level BPE, no normalizer, the
 * three Split regexes + ByteLevel pre-tokenizer, ByteLevel decoder). Any
 * other pre-tokenizer, model option or decoder is refused with
 * DSR1_EUNSUPPORTED naming the key, never approximated: a tokenizer that is
 * silently different produces plausible-looking wrong ids.
 *
 * Not here: encoding and decoding (core/tokenizer.c). The post_processor is
 * ignored on purpose: it only adds tokens when add_special_tokens is true,
 * which dsr1 never asks for (templates write the special tokens).
 *
 * Memory: the parsed JSON tree is transient; the tokenizer keeps flat
 * arrays (about 10 MB for DeepSeek-V3's 128K vocabulary).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dsr1file.h"
#include "tokenizer_internal.h"
#include "unicode.h"

/* The pre-tokenizer regexes we implement by hand in tokenizer.c, exactly as
 * DeepSeek-V3's tokenizer.json spells them (UTF-8). */
static const char *const split_patterns[3] = {
    "\\p{N}{1,3}",
    "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+",
    ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
     "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
};

/* ---- small helpers ---------------------------------------------------- */

static const char *jstr(const cJSON *o, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
}

/* A key that must be absent, null, false or "" (an option we do not implement). */
static int is_off(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return !v || cJSON_IsNull(v) || cJSON_IsFalse(v) || (cJSON_IsString(v) && !v->valuestring[0]);
}

static int flag(const cJSON *o, const char *key)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

/* GPT-2's byte-to-character map used by ByteLevel: printable Latin-1 bytes
 * stand for themselves, the other 68 bytes for U+0100.. in byte order. */
static uint32_t byte_char(int b)
{
    int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (printable) return (uint32_t)b;
    int k = 0;
    for (int i = 0; i < b; i++)
        if (!((i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE)) k++;
    return 256u + (uint32_t)k;
}

/* ---- pieces of tokenizer.json ----------------------------------------- */

static int check_pipeline(const cJSON *root, const char *what, dsr1_error *err)
{
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm)) {
        const char *t = jstr(norm, "type");
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(norm, "normalizers");
        if (!t || strcmp(t, "Sequence") || cJSON_GetArraySize(list) != 0)
            return dsr1_errorf(err, DSR1_EUNSUPPORTED,
                               "%s: normalizer: expected none (or an empty Sequence), found %s",
                               what, t ? t : "an untyped one");
    }
    if (!is_off(root, "truncation") || !is_off(root, "padding"))
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: truncation/padding: expected null", what);
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    const char *dt = jstr(dec, "type");
    if (!dt || strcmp(dt, "ByteLevel"))
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: decoder: expected ByteLevel, found %s",
                           what, dt ? dt : "none");
    return 0;
}

static int check_split(const cJSON *p, int i, const char *what, dsr1_error *err)
{
    const char *t = jstr(p, "type");
    const char *re = jstr(cJSON_GetObjectItemCaseSensitive(p, "pattern"), "Regex");
    const char *beh = jstr(p, "behavior");
    if (!t || strcmp(t, "Split") || !re || !beh || strcmp(beh, "Isolated") || flag(p, "invert"))
        return dsr1_errorf(err, DSR1_EUNSUPPORTED,
                           "%s: pre_tokenizer[%d]: expected a Split on a Regex, behavior Isolated, "
                           "not inverted, found %s", what, i, t ? t : "an untyped one");
    if (strcmp(re, split_patterns[i]))
        return dsr1_errorf(err, DSR1_EUNSUPPORTED,
                           "%s: pre_tokenizer[%d]: regex %.60s%s is not DeepSeek-V3's (only that "
                           "tokenizer's patterns are implemented)", what, i, re,
                           strlen(re) > 60 ? "..." : "");
    return 0;
}

static int check_pretokenizer(const cJSON *root, const char *what, dsr1_error *err)
{
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const char *t = jstr(pre, "type");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
    if (!t || strcmp(t, "Sequence") || cJSON_GetArraySize(list) != 4)
        return dsr1_errorf(err, DSR1_EUNSUPPORTED,
                           "%s: pre_tokenizer: expected a Sequence of 3 Splits and ByteLevel, found %s",
                           what, t ? t : "none");
    for (int i = 0; i < 3; i++) DSR1_TRY(check_split(cJSON_GetArrayItem(list, i), i, what, err));
    const cJSON *bl = cJSON_GetArrayItem(list, 3);
    const char *bt = jstr(bl, "type");
    if (!bt || strcmp(bt, "ByteLevel") || flag(bl, "add_prefix_space") || flag(bl, "use_regex"))
        return dsr1_errorf(err, DSR1_EUNSUPPORTED,
                           "%s: pre_tokenizer[3]: expected ByteLevel without prefix space or regex",
                           what);
    return 0;
}

static int check_model(const cJSON *model, const char *what, dsr1_error *err)
{
    const char *t = jstr(model, "type");
    if (t && strcmp(t, "BPE"))
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: model.type: expected BPE, found %s", what, t);
    static const char *const off[] = {"dropout", "continuing_subword_prefix",
                                      "end_of_word_suffix", "ignore_merges"};
    for (size_t i = 0; i < sizeof off / sizeof *off; i++)
        if (!is_off(model, off[i]))
            return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: model.%s: option not supported",
                               what, off[i]);
    if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(model, "vocab")))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: model.vocab: expected an object", what);
    if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(model, "merges")))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: model.merges: expected an array", what);
    return 0;
}

/* ---- building --------------------------------------------------------- */

/* Vocabulary-spelling lookup (model vocab only: what BPE merges refer to). */
static int32_t vocab_lookup(const dsr1_tokenizer *tk, const char *s, size_t n)
{
    for (size_t i = dsr1_tokenizer_hash(s, n) & tk->find_mask;; i = (i + 1) & tk->find_mask) {
        int32_t id = tk->find[i];
        if (id < 0) return -1;
        size_t l = tk->spell_off[id + 1] - tk->spell_off[id];
        if (l == n && !memcmp(tk->spell + tk->spell_off[id], s, n)) return id;
    }
}

/* Ids and vocabulary strings: fills n_ids, flags, spellings, find table. */
static int load_vocab(dsr1_tokenizer *tk, const cJSON *vocab, const cJSON *added,
                      const char *what, dsr1_error *err)
{
    double max_id = -1;
    size_t total = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0) || it->valuedouble > 1e8 ||
            it->valuedouble != (int)it->valuedouble)
            return dsr1_errorf(err, DSR1_EFORMAT, "%s: model.vocab[\"%.40s\"]: expected an id",
                               what, it->string);
        if (it->valuedouble > max_id) max_id = it->valuedouble;
        total += strlen(it->string);
    }
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (cJSON_IsNumber(id) && id->valuedouble > max_id && id->valuedouble <= 1e8)
            max_id = id->valuedouble;
    }
    if (max_id < 255)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: model.vocab: too small (%d entries)", what,
                           cJSON_GetArraySize(vocab));
    if (max_id + 1 >= (double)(1u << TK_ID_BITS))
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: token id %.0f: more than 2^%d ids",
                           what, max_id, TK_ID_BITS);
    tk->n_ids = (size_t)max_id + 1;
    size_t slots = 1;
    while (slots < 2 * tk->n_ids) slots <<= 1;
    tk->find_mask = slots - 1;
    tk->flags = calloc(tk->n_ids, 1);
    tk->spell_off = calloc(tk->n_ids + 1, sizeof *tk->spell_off);
    tk->spell = malloc(total + 1);
    tk->find = malloc(slots * sizeof *tk->find);
    if (!tk->flags || !tk->spell_off || !tk->spell || !tk->find)
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory for the vocabulary", what);
    memset(tk->find, 0xff, slots * sizeof *tk->find);
    /* Spellings are stored in id order: first the lengths, then a prefix sum. */
    const char **str = calloc(tk->n_ids, sizeof *str);
    if (!str) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", what);
    int rc = 0;
    cJSON_ArrayForEach(it, vocab) {
        int id = (int)it->valuedouble;
        if (str[id]) {
            rc = dsr1_errorf(err, DSR1_EFORMAT, "%s: model.vocab: id %d appears twice", what, id);
            break;
        }
        str[id] = it->string;
        tk->flags[id] = TK_EXISTS;
    }
    for (size_t id = 0; !rc && id < tk->n_ids; id++) {
        size_t l = str[id] ? strlen(str[id]) : 0;
        memcpy(tk->spell + tk->spell_off[id], str[id] ? str[id] : "", l);
        tk->spell_off[id + 1] = tk->spell_off[id] + (uint32_t)l;
        if (!str[id]) continue;
        size_t i = dsr1_tokenizer_hash(str[id], l) & tk->find_mask;
        while (tk->find[i] >= 0) i = (i + 1) & tk->find_mask;
        tk->find[i] = (int32_t)id;
    }
    free(str);
    return rc;
}

static int trie_add(tk_trie *t, const char *s, size_t n, int32_t token)
{
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t c = t->nodes[node].child;
        while (c >= 0 && t->nodes[c].byte != b) c = t->nodes[c].sibling;
        if (c < 0) {
            if (t->n == t->cap) {
                size_t cap = t->cap * 2;
                tk_trie_node *nn = realloc(t->nodes, cap * sizeof *nn);
                if (!nn) return DSR1_ENOMEM;
                t->nodes = nn;
                t->cap = cap;
            }
            c = (int32_t)t->n++;
            t->nodes[c] = (tk_trie_node){-1, t->nodes[node].child, -1, b};
            t->nodes[node].child = c;
        }
        node = c;
    }
    if (n) t->first[(uint8_t)s[0]] = 1;
    /* A duplicate content keeps its first id (the library maps content to
     * one id). */
    if (t->nodes[node].token < 0) t->nodes[node].token = token;
    return 0;
}

static int trie_init(tk_trie *t)
{
    t->cap = 64;
    t->n = 1;
    t->nodes = malloc(t->cap * sizeof *t->nodes);
    if (!t->nodes) return DSR1_ENOMEM;
    t->nodes[0] = (tk_trie_node){-1, -1, -1, 0};
    return 0;
}

/* Added tokens: flags, the two match tries, and their spellings override
 * the vocabulary's for decoding (as the library's id_to_token does). */
static int load_added(dsr1_tokenizer *tk, const cJSON *added, const char ***content,
                      const char *what, dsr1_error *err)
{
    int n = cJSON_GetArraySize(added);
    tk->added = calloc((size_t)n + 1, sizeof *tk->added);
    *content = calloc(tk->n_ids, sizeof **content);
    if (!tk->added || !*content || trie_init(&tk->trie_raw) || trie_init(&tk->trie_norm))
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory for added tokens", what);
    for (int i = 0; i < n; i++) {
        const cJSON *a = cJSON_GetArrayItem(added, i);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        const char *c = jstr(a, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (double)tk->n_ids ||
            id->valuedouble != (double)(int32_t)id->valuedouble || !c)
            return dsr1_errorf(err, DSR1_EFORMAT,
                               "%s: added_tokens[%d]: expected an id and a content", what, i);
        tk_added *t = &tk->added[tk->n_added];
        t->id = (int32_t)id->valuedouble;
        t->special = (uint8_t)flag(a, "special");
        /* The library's default for a missing "normalized" is !special. */
        const cJSON *nz = cJSON_GetObjectItemCaseSensitive(a, "normalized");
        t->normalized = (uint8_t)(nz ? cJSON_IsTrue(nz) : !t->special);
        t->lstrip = (uint8_t)flag(a, "lstrip");
        t->rstrip = (uint8_t)flag(a, "rstrip");
        t->single_word = (uint8_t)flag(a, "single_word");
        tk->flags[t->id] |= TK_EXISTS | TK_ADDED | (t->special ? TK_SPECIAL : 0);
        (*content)[t->id] = c;
        if (!c[0]) continue; /* the library never matches an empty token */
        if (strchr(c, '\n')) tk->added_newline = 1;
        tk_trie *trie = t->normalized ? &tk->trie_norm : &tk->trie_raw;
        if (trie_add(trie, c, strlen(c), (int32_t)tk->n_added))
            return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory for added tokens", what);
        tk->n_added++;
    }
    return 0;
}

/* Decode bytes of a token string, as the ByteLevel decoder sees it: if every
 * character is a byte-level character, the bytes they stand for; else the
 * string itself (special tokens such as <｜User｜>). Returns the length. */
static size_t decode_spelling(const char *s, size_t n, const int16_t *char_byte, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = dsr1_utf8_decode(s + i, n - i, &cp);
        if (!l || cp >= 324 || char_byte[cp] < 0) {
            memcpy(out, s, n);
            return n;
        }
        out[k++] = (char)char_byte[cp];
        i += l;
    }
    return k;
}

static int build_decode(dsr1_tokenizer *tk, const char **content, const char *what,
                        dsr1_error *err)
{
    int16_t char_byte[324];
    memset(char_byte, 0xff, sizeof char_byte);
    for (int b = 0; b < 256; b++) char_byte[byte_char(b)] = (int16_t)b;
    size_t total = tk->spell_off[tk->n_ids];
    for (size_t id = 0; id < tk->n_ids; id++)
        if (content[id]) total += strlen(content[id]);
    tk->off = malloc((tk->n_ids + 1) * sizeof *tk->off);
    tk->bytes = malloc(total + 1);
    if (!tk->off || !tk->bytes)
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory for token bytes", what);
    tk->off[0] = 0;
    for (size_t id = 0; id < tk->n_ids; id++) {
        const char *s = content[id] ? content[id] : tk->spell + tk->spell_off[id];
        size_t n = content[id] ? strlen(s) : tk->spell_off[id + 1] - tk->spell_off[id];
        size_t l = decode_spelling(s, n, char_byte, tk->bytes + tk->off[id]);
        tk->off[id + 1] = tk->off[id] + (uint32_t)l;
        if (l > tk->max_token_bytes) tk->max_token_bytes = l;
    }
    for (int b = 0; b < 256; b++) {
        char buf[4];
        size_t l = dsr1_utf8_encode(byte_char(b), buf);
        tk->byte_id[b] = vocab_lookup(tk, buf, l);
        if (tk->byte_id[b] < 0)
            return dsr1_errorf(err, DSR1_EFORMAT,
                               "%s: model.vocab: no token for byte 0x%02x (not byte-level BPE)",
                               what, b);
    }
    return 0;
}

/* Split one merge entry ("a b" or ["a", "b"]) into its two strings. */
static int merge_parts(const cJSON *m, const char **a, size_t *na, const char **b, size_t *nb)
{
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ')) return -1;
        *a = s, *na = (size_t)(sp - s), *b = sp + 1, *nb = strlen(sp + 1);
        return 0;
    }
    if (cJSON_GetArraySize(m) != 2) return -1;
    *a = cJSON_GetStringValue(cJSON_GetArrayItem(m, 0));
    *b = cJSON_GetStringValue(cJSON_GetArrayItem(m, 1));
    if (!*a || !*b) return -1;
    *na = strlen(*a), *nb = strlen(*b);
    return 0;
}

static int load_merges(dsr1_tokenizer *tk, const cJSON *merges, const char *what, dsr1_error *err)
{
    size_t n = (size_t)cJSON_GetArraySize(merges), slots = 1;
    if (n >= (1u << TK_RANK_BITS) - 1)
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: %zu merges: more than 2^%d", what, n,
                           TK_RANK_BITS);
    while (slots < 2 * n + 2) slots <<= 1;
    tk->merge_mask = slots - 1;
    tk->merges = malloc(slots * sizeof *tk->merges);
    tk->merge_id = malloc((n + 1) * sizeof *tk->merge_id);
    /* A merge's result is a vocabulary spelling, so no longer than the
     * longest one; a longer "a b" cannot name a token and is refused before
     * anything is copied (the strings come from the file, unchecked). */
    size_t longest = 0;
    for (size_t id = 0; id < tk->n_ids; id++)
        if (tk->spell_off[id + 1] - tk->spell_off[id] > longest)
            longest = tk->spell_off[id + 1] - tk->spell_off[id];
    char *cat = malloc(longest + 1);
    if (!tk->merges || !tk->merge_id || !cat) {
        free(cat);
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory for merges", what);
    }
    memset(tk->merges, 0xff, slots * sizeof *tk->merges);
    int32_t rank = 0;
    int rc = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const char *a, *b;
        size_t na, nb;
        if (merge_parts(m, &a, &na, &b, &nb)) {
            rc = dsr1_errorf(err, DSR1_EFORMAT, "%s: model.merges[%d]: expected \"a b\"", what, rank);
            break;
        }
        int32_t ia = vocab_lookup(tk, a, na), ib = vocab_lookup(tk, b, nb), ic = -1;
        if (ia >= 0 && ib >= 0 && na + nb <= longest) {
            memcpy(cat, a, na);
            memcpy(cat + na, b, nb);
            ic = vocab_lookup(tk, cat, na + nb);
        }
        if (ia < 0 || ib < 0 || ic < 0) {
            rc = dsr1_errorf(err, DSR1_EFORMAT, "%s: model.merges[%d]: \"%.*s %.*s\"%s uses a "
                             "token missing from the vocabulary", what, rank,
                             (int)(na < 40 ? na : 40), a, (int)(nb < 40 ? nb : 40), b,
                             na > 40 || nb > 40 ? " (cut)" : "");
            break;
        }
        uint64_t key = tk_merge_key(ia, ib);
        size_t s = tk_merge_slot(key, tk->merge_mask);
        while (tk->merges[s] != TK_MERGE_EMPTY && tk->merges[s] >> TK_RANK_BITS != key)
            s = (s + 1) & tk->merge_mask;
        /* A repeated pair takes its last rank, like the library's map. */
        tk->merges[s] = key << TK_RANK_BITS | (uint64_t)rank;
        tk->merge_id[rank++] = ic;
    }
    tk->n_merges = (size_t)rank;
    free(cat);
    return rc;
}

/* ---- public ----------------------------------------------------------- */

static int build(dsr1_tokenizer *tk, const cJSON *root, const char *what, dsr1_error *err)
{
    if (!cJSON_IsObject(root))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: expected a JSON object", what);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!model) return dsr1_errorf(err, DSR1_EFORMAT, "%s: missing \"model\" key", what);
    DSR1_TRY(check_model(model, what, err));
    DSR1_TRY(check_pretokenizer(root, what, err));
    DSR1_TRY(check_pipeline(root, what, err));
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsArray(added))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: added_tokens: expected an array", what);
    DSR1_TRY(load_vocab(tk, cJSON_GetObjectItemCaseSensitive(model, "vocab"), added, what, err));
    const char **content = NULL;
    int rc = load_added(tk, added, &content, what, err);
    if (!rc) rc = build_decode(tk, content, what, err);
    free(content);
    DSR1_TRY(rc);
    DSR1_TRY(load_merges(tk, cJSON_GetObjectItemCaseSensitive(model, "merges"), what, err));
    dsr1_tokenizer_init_classes(tk);
    return 0;
}

int dsr1_tokenizer_create(dsr1_tokenizer **out, const char *json, size_t len, const char *what,
                          dsr1_error *err)
{
    *out = NULL;
    if (!what) what = "tokenizer.json";
    /* cJSON returns NULL for a syntax error and for a failed allocation
     * alike; glibc's malloc sets ENOMEM, cJSON's parser sets nothing else
     * to it, so errno tells the two apart. */
    errno = 0;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root && errno == ENOMEM)
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory parsing %zu bytes of JSON",
                           what, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= json && at <= json + len ? (long)(at - json) : -1;
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: invalid JSON near byte %ld", what, off);
    }
    dsr1_tokenizer *tk = calloc(1, sizeof *tk);
    int rc = tk ? build(tk, root, what, err)
                : dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", what);
    cJSON_Delete(root);
    if (rc) {
        dsr1_tokenizer_free(tk);
        return rc;
    }
    *out = tk;
    return 0;
}

void dsr1_tokenizer_free(dsr1_tokenizer *tk)
{
    if (!tk) return;
    free(tk->flags);
    free(tk->off);
    free(tk->bytes);
    free(tk->spell_off);
    free(tk->spell);
    free(tk->find);
    free(tk->merges);
    free(tk->merge_id);
    free(tk->added);
    free(tk->trie_raw.nodes);
    free(tk->trie_norm.nodes);
    free(tk);
}

/* Open path for reading without blocking on a FIFO, and refuse anything
 * but a regular file (a FIFO or device would hang or never end). */
static FILE *open_regular(const char *path, dsr1_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0) {
        dsr1_errorf(err, errno == ENOENT ? DSR1_ENOTFOUND : DSR1_EIO, "%s: %s", path,
                    strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        dsr1_errorf(err, DSR1_EIO, "%s: not a regular file", path);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    }
    return f;
}

static int read_file(const char *path, char **buf, size_t *len, dsr1_error *err)
{
    dsr1_error local = {0};
    FILE *f = open_regular(path, &local);
    if (!f) {
        if (err) *err = local;
        return local.code;
    }
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!b) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    if (bad) {
        free(b);
        return dsr1_errorf(err, DSR1_EIO, "%s: read error", path);
    }
    *buf = b;
    *len = n;
    return 0;
}

static int open_dsr1(dsr1_tokenizer **out, const char *path, dsr1_error *err)
{
    dsr1_file *f;
    DSR1_TRY(dsr1_file_open(&f, path, err));
    const dsr1_tensor *t = dsr1_file_find(f, "tokenizer.json");
    int rc;
    if (!t || t->type != DSR1_T_BLOB) {
        rc = dsr1_errorf(err, DSR1_ENOTFOUND, "%s: no tokenizer.json blob in the file", path);
    } else {
        char what[300];
        snprintf(what, sizeof what, "%s: tokenizer.json", path);
        rc = dsr1_tokenizer_create(out, t->data, (size_t)t->size, what, err);
    }
    dsr1_file_close(f);
    return rc;
}

int dsr1_tokenizer_open(dsr1_tokenizer **out, const char *path, dsr1_error *err)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st))
        return dsr1_errorf(err, errno == ENOENT ? DSR1_ENOTFOUND : DSR1_EIO, "%s: %s", path,
                           strerror(errno));
    char file[4096];
    if (S_ISDIR(st.st_mode)) {
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
        path = file;
    }
    /* Peek at the magic first: a packed model may be hundreds of GB and is
     * mapped, never read. */
    char magic[8] = {0};
    dsr1_error local = {0};
    FILE *f = open_regular(path, &local);
    if (!f) {
        if (err) *err = local;
        return local.code;
    }
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (got == sizeof magic && !memcmp(magic, DSR1_FILE_MAGIC, 8)) return open_dsr1(out, path, err);
    char *buf = NULL;
    size_t len = 0;
    DSR1_TRY(read_file(path, &buf, &len, err));
    int rc = dsr1_tokenizer_create(out, buf, len, path, err);
    free(buf);
    return rc;
}
