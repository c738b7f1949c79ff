/*
 * hub.c - the Hugging Face cache layout, the token, the model info call and
 * the plan of a pull (see hub.h). The downloads themselves are
 * hub_fetch.c.
 *
 * Owns: cache paths (models--ORG--NAME, blobs, snapshots, refs), finding a
 * repo id in the cache, reading the token (HF_TOKEN, $HF_TOKEN_PATH,
 * $HF_HOME/token), the one GET of the model info and its JSON, and the
 * messages for HTTP failures (what the user should do). Hashes are
 * OpenSSL's libcrypto (SHA-NI/AVX2 code paths; one library libcurl already
 * pulls in).
 *
 * Does not: print, or keep state between calls.
 */
#include "hub.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* ---- cache paths -------------------------------------------------------------- */

static void hf_home(char *out, size_t cap)
{
    const char *h = getenv("HF_HOME"), *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (h && *h)
        snprintf(out, cap, "%s", h);
    else if (x && *x)
        snprintf(out, cap, "%s/huggingface", x);
    else
        snprintf(out, cap, "%s/.cache/huggingface", home && *home ? home : ".");
}

void dsr1_hub_cache_dir(char *out, size_t cap)
{
    const char *c = getenv("HF_HUB_CACHE");
    if (!c || !*c) c = getenv("HUGGINGFACE_HUB_CACHE"); /* the older name */
    if (c && *c) {
        snprintf(out, cap, "%s", c);
        return;
    }
    char h[PATH_MAX];
    hf_home(h, sizeof h);
    snprintf(out, cap, "%s/hub", h);
}

static int name_char(int c)
{
    return isalnum(c) || c == '-' || c == '_' || c == '.';
}

int dsr1_hub_is_repo_id(const char *s)
{
    const char *at = strchr(s, '@');
    size_t n = at ? (size_t)(at - s) : strlen(s);
    const char *slash = memchr(s, '/', n);
    if (!slash || slash == s || slash + 1 == s + n || memchr(slash + 1, '/', n - (size_t)(slash + 1 - s)))
        return 0;
    if (at && !at[1]) return 0;
    for (size_t i = 0; i < n; i++)
        if (s + i != slash && !name_char((unsigned char)s[i])) return 0;
    return s[0] != '.' && slash[1] != '.';
}

/* "deepseek-ai/DeepSeek-R1@rev" -> repo and rev (default "main"). */
static void split_spec(const char *spec, char *repo, size_t rcap, char *rev, size_t vcap)
{
    const char *at = strchr(spec, '@');
    snprintf(repo, rcap, "%.*s", (int)(at ? (size_t)(at - spec) : strlen(spec)), spec);
    snprintf(rev, vcap, "%s", at ? at + 1 : "main");
}

static void repo_folder(const char *cache, const char *repo, char *out, size_t cap)
{
    const char *slash = strchr(repo, '/');
    snprintf(out, cap, "%s/models--%.*s--%s", cache, (int)(slash - repo), repo, slash + 1);
}

static int is_commit(const char *s)
{
    size_t n = strlen(s);
    if (n != 40) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i])) return 0;
    return 1;
}

/* A ref file's commit into out (40 hex). 1 found, 0 not. */
static int read_ref(const char *repo_dir, const char *rev, char *out)
{
    char p[PATH_MAX + 300];
    snprintf(p, sizeof p, "%s/refs/%s", repo_dir, rev);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    char buf[64] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    while (n && isspace((unsigned char)buf[n - 1])) buf[--n] = 0;
    if (!is_commit(buf)) return 0;
    memcpy(out, buf, 41);
    return 1;
}

int dsr1_hub_resolve(const char *spec, const char *cache_dir, char *out, size_t cap,
                     dsr1_error *err)
{
    char cache[PATH_MAX], repo[256], rev[256], dir[PATH_MAX + 300], commit[41];
    if (!dsr1_hub_is_repo_id(spec))
        return dsr1_errorf(err, DSR1_EINVAL, "%s: not a repository id (ORG/NAME[@REV])", spec);
    if (cache_dir) snprintf(cache, sizeof cache, "%s", cache_dir);
    else dsr1_hub_cache_dir(cache, sizeof cache);
    split_spec(spec, repo, sizeof repo, rev, sizeof rev);
    repo_folder(cache, repo, dir, sizeof dir);
    if (is_commit(rev)) snprintf(commit, sizeof commit, "%s", rev);
    else if (!read_ref(dir, rev, commit))
        return dsr1_errorf(err, DSR1_ENOTFOUND,
                           "%s: no such file, and not in the Hugging Face cache (%s); fetch it "
                           "with: dsr1 pull %s",
                           spec, cache, spec);
    snprintf(out, cap, "%s/snapshots/%s", dir, commit);
    struct stat st;
    if (stat(out, &st) != 0 || !S_ISDIR(st.st_mode))
        return dsr1_errorf(err, DSR1_ENOTFOUND, "%s: refs/%s names %s but %s is missing; fetch "
                           "it again with: dsr1 pull %s", spec, rev, commit, out, spec);
    return 0;
}

int dsr1_hub_mkdirs(const char *path, dsr1_error *err)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/') continue;
        char was = *s;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return dsr1_errorf(err, DSR1_EIO, "%s: cannot create: %s", p, strerror(errno));
        if (!was) break;
        *s = was;
    }
    return 0;
}

/* ---- hashes ---------------------------------------------------------------------- */

static void hex(const unsigned char *d, unsigned n, char *out)
{
    for (unsigned i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

void dsr1_hub_sha256_hex(const void *data, size_t n, char out[65])
{
    unsigned char d[32];
    unsigned len = 0;
    EVP_Digest(data, n, d, &len, EVP_sha256(), NULL);
    hex(d, 32, out);
}

void dsr1_hub_gitblob_hex(const void *data, size_t n, char out[41])
{
    char head[40];
    int hl = snprintf(head, sizeof head, "blob %zu", n) + 1; /* with the NUL */
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned char d[20];
    EVP_DigestInit_ex(c, EVP_sha1(), NULL);
    EVP_DigestUpdate(c, head, (size_t)hl);
    EVP_DigestUpdate(c, data, n);
    EVP_DigestFinal_ex(c, d, NULL);
    EVP_MD_CTX_free(c);
    hex(d, 20, out);
}

int dsr1_hub_sha256_file(const char *path, char out[65], dsr1_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dsr1_errorf(err, DSR1_EIO, "%s: %s", path, strerror(errno));
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    static const size_t cap = 1 << 20;
    unsigned char *buf = malloc(cap);
    ssize_t n = buf ? 0 : -1;
    while (buf && (n = read(fd, buf, cap)) > 0) EVP_DigestUpdate(c, buf, (size_t)n);
    int e = errno;
    unsigned char d[32];
    EVP_DigestFinal_ex(c, d, NULL);
    EVP_MD_CTX_free(c);
    free(buf);
    close(fd);
    if (n < 0) return dsr1_errorf(err, DSR1_EIO, "%s: %s", path, buf ? strerror(e) : "out of memory");
    hex(d, 32, out);
    return 0;
}

/* ---- token ------------------------------------------------------------------------- */

/* HF_TOKEN, then the token file ($HF_TOKEN_PATH, else $HF_HOME/token).
 * NULL when there is none; source says where it came from. */
static char *read_token(char *source, size_t cap)
{
    const char *env = getenv("HF_TOKEN");
    if (!env || !*env) env = getenv("HUGGING_FACE_HUB_TOKEN");
    source[0] = 0;
    if (env && *env) {
        snprintf(source, cap, "%s", getenv("HF_TOKEN") && *getenv("HF_TOKEN") ? "HF_TOKEN" :
                 "HUGGING_FACE_HUB_TOKEN");
        return strdup(env);
    }
    char p[PATH_MAX];
    const char *tp = getenv("HF_TOKEN_PATH");
    if (tp && *tp) snprintf(p, sizeof p, "%s", tp);
    else {
        char h[PATH_MAX - 8];
        hf_home(h, sizeof h);
        snprintf(p, sizeof p, "%s/token", h);
    }
    FILE *f = fopen(p, "r");
    if (!f) return NULL;
    char buf[512] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    while (n && isspace((unsigned char)buf[n - 1])) buf[--n] = 0;
    if (!n) return NULL;
    snprintf(source, cap, "%s", p);
    return strdup(buf);
}

/* ---- HTTP ---------------------------------------------------------------------- */

int dsr1_hub_http_error(const dsr1_hub_plan *p, const char *what, long code,
                        const char *ec, dsr1_error *err)
{
    const char *e = ec ? ec : "";
    if (!strcmp(e, "RevisionNotFound"))
        return dsr1_errorf(err, DSR1_ENOTFOUND, "%s: revision '%s' not found (HTTP %ld); check it "
                           "on %s/%s", what, p->revision, code, p->endpoint, p->repo);
    if (!strcmp(e, "EntryNotFound"))
        return dsr1_errorf(err, DSR1_ENOTFOUND, "%s: file not found in %s at %s (HTTP %ld)",
                           what, p->repo, p->commit, code);
    if (code == 401 && !strcmp(e, "RepoNotFound") && !p->token)
        return dsr1_errorf(err, DSR1_ENOTFOUND, "%s: repository not found (HTTP 401): check the "
                           "name; if it is private, log in: set HF_TOKEN or run `huggingface-cli "
                           "login`", what);
    if (code == 401 && p->token)
        return dsr1_errorf(err, DSR1_EINVAL, "%s: the token from %s was refused (HTTP 401): check "
                           "it or make a new one at %s/settings/tokens", what, p->token_source,
                           p->endpoint);
    if (code == 401)
        return dsr1_errorf(err, DSR1_EINVAL, "%s: not authorised (HTTP 401): the model is gated or "
                           "private; log in: make a token at %s/settings/tokens and set HF_TOKEN "
                           "(or run `huggingface-cli login`), after accepting the licence on "
                           "%s/%s", what, p->endpoint, p->endpoint, p->repo);
    if (code == 403)
        return dsr1_errorf(err, DSR1_EINVAL, "%s: access denied (HTTP 403): accept the model's "
                           "licence on %s/%s with the account of your token (from %s), then run "
                           "again", what, p->endpoint, p->repo,
                           p->token ? p->token_source : "nowhere: none is set");
    if (code == 404 || !strcmp(e, "RepoNotFound"))
        return dsr1_errorf(err, DSR1_ENOTFOUND, "%s: not found (HTTP %ld): check the repository "
                           "name and revision ('%s') on %s/%s", what, code, p->revision,
                           p->endpoint, p->repo);
    return dsr1_errorf(err, DSR1_EIO, "%s: HTTP %ld from %s", what, code, p->endpoint);
}

typedef struct membuf {
    char *data;
    size_t len;
    char error_code[64]; /* X-Error-Code */
} membuf;

static size_t mem_write(char *ptr, size_t size, size_t n, void *ud)
{
    membuf *b = ud;
    size_t add = size * n;
    if (b->len + add > (64u << 20)) return 0; /* a model info is kilobytes */
    char *d = realloc(b->data, b->len + add + 1);
    if (!d) return 0;
    memcpy(d + b->len, ptr, add);
    b->data = d;
    b->len += add;
    d[b->len] = 0;
    return add;
}

static size_t mem_header(char *ptr, size_t size, size_t n, void *ud)
{
    membuf *b = ud;
    size_t len = size * n;
    static const char key[] = "x-error-code:";
    if (len > sizeof key && !strncasecmp(ptr, key, sizeof key - 1)) {
        const char *v = ptr + sizeof key - 1;
        while (*v == ' ') v++;
        size_t vl = (size_t)(ptr + len - v);
        while (vl && isspace((unsigned char)v[vl - 1])) vl--;
        snprintf(b->error_code, sizeof b->error_code, "%.*s", (int)vl, v);
    }
    return len;
}

/* GET the model info JSON into b. Transient failures are retried a few times. */
static int get_info(const dsr1_hub_plan *p, const dsr1_hub_opts *o, membuf *b, dsr1_error *err)
{
    CURL *c = curl_easy_init();
    if (!c) return dsr1_errorf(err, DSR1_ENOMEM, "libcurl: cannot create a handle");
    char *rev = curl_easy_escape(c, p->revision, 0);
    char url[2048], auth[700], what[300];
    snprintf(url, sizeof url, "%s/api/models/%s/revision/%s?blobs=true", p->endpoint, p->repo, rev);
    curl_free(rev);
    snprintf(what, sizeof what, "%s@%s", p->repo, p->revision);
    struct curl_slist *h = NULL;
    if (p->token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", p->token);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "dsr1/" DSR1_VERSION " (libcurl)");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mem_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, mem_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, b);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    /* Fewer tries than a file gets: nothing is shown while this waits, and a
     * Hub that cannot be reached at all should be said within seconds. */
    int rc = 0, tries = o->max_retries > 0 && o->max_retries < 4 ? o->max_retries : 4;
    double wait = o->retry_wait > 0 ? o->retry_wait : 1;
    for (int t = 0;; t++) {
        b->len = 0;
        b->error_code[0] = 0;
        CURLcode cc = curl_easy_perform(c);
        long code = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        int transient = cc != CURLE_OK || code == 429 || code >= 500;
        if (!transient && code == 200) break;
        if (!transient || t + 1 >= tries || (o->cancel && *o->cancel)) {
            rc = cc != CURLE_OK ? dsr1_errorf(err, DSR1_EIO, "%s: %s", url, curl_easy_strerror(cc))
                                : dsr1_hub_http_error(p, what, code, b->error_code, err);
            break;
        }
        usleep((useconds_t)(wait * 1e6));
        wait = wait * 2 > 60 ? 60 : wait * 2;
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc;
}

/* ---- plan ---------------------------------------------------------------------------- */

static int selected(const dsr1_hub_opts *o, const char *path)
{
    if (!o->n_include) return 1;
    for (size_t i = 0; i < o->n_include; i++)
        if (fnmatch(o->include[i], path, 0) == 0) return 1;
    return 0;
}

/* A sibling path we will write under snapshots/: relative, no "..". */
static int safe_path(const char *s)
{
    if (!*s || s[0] == '/' || strstr(s, "//")) return 0;
    for (const char *c = s; c; c = strchr(c, '/')) {
        if (*c == '/') c++;
        if (!strncmp(c, "..", 2) && (c[2] == '/' || !c[2])) return 0;
        if (c[0] == '.' && (c[1] == '/' || !c[1])) return 0;
    }
    return 1;
}

static int is_hex(const char *s, size_t n)
{
    if (strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return 1;
}

static int add_file(dsr1_hub_plan *p, const cJSON *s, dsr1_error *err)
{
    const cJSON *name = cJSON_GetObjectItem(s, "rfilename"), *size = cJSON_GetObjectItem(s, "size");
    const cJSON *blob = cJSON_GetObjectItem(s, "blobId"), *lfs = cJSON_GetObjectItem(s, "lfs");
    const cJSON *sha = lfs ? cJSON_GetObjectItem(lfs, "sha256") : NULL;
    if (!cJSON_IsString(name) || !cJSON_IsNumber(size) || size->valuedouble < 0 ||
        !cJSON_IsString(blob) || !is_hex(blob->valuestring, 40) ||
        (lfs && (!cJSON_IsString(sha) || !is_hex(sha->valuestring, 64))))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: model info: a sibling without rfilename, "
                           "size, blobId (40 hex) or lfs.sha256 (64 hex)", p->repo);
    if (!safe_path(name->valuestring))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: model info: unsafe file name '%s'", p->repo,
                           name->valuestring);
    dsr1_hub_file *f = &p->files[p->n_files];
    memset(f, 0, sizeof *f);
    f->path = strdup(name->valuestring);
    if (!f->path) return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    f->size = (uint64_t)size->valuedouble;
    f->lfs = lfs != NULL;
    snprintf(f->blob, sizeof f->blob, "%s", lfs ? sha->valuestring : blob->valuestring);
    for (char *c = f->blob; *c; c++) *c = (char)tolower((unsigned char)*c);
    for (size_t i = 0; i < p->n_files && !f->dup; i++) /* two workers must not write one blob */
        if (!strcmp(p->files[i].blob, f->blob)) f->dup = i + 1;
    p->n_files++;
    p->bytes_total += f->size;
    return 0;
}

static int parse_info(dsr1_hub_plan *p, const dsr1_hub_opts *o, const membuf *b, dsr1_error *err)
{
    cJSON *j = cJSON_ParseWithLength(b->data, b->len);
    const cJSON *sha = cJSON_GetObjectItem(j, "sha"), *sib = cJSON_GetObjectItem(j, "siblings");
    int rc = 0;
    if (!cJSON_IsString(sha) || !is_commit(sha->valuestring) || !cJSON_IsArray(sib))
        rc = dsr1_errorf(err, DSR1_EFORMAT, "%s: model info from %s: expected JSON with \"sha\" "
                         "(a commit) and \"siblings\"", p->repo, p->endpoint);
    if (!rc) {
        snprintf(p->commit, sizeof p->commit, "%s", sha->valuestring);
        p->files = calloc((size_t)cJSON_GetArraySize(sib) + 1, sizeof *p->files);
        if (!p->files) rc = dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    }
    const cJSON *s;
    if (!rc) cJSON_ArrayForEach(s, sib) {
        const cJSON *n = cJSON_GetObjectItem(s, "rfilename");
        if (cJSON_IsString(n) && !selected(o, n->valuestring)) continue;
        if ((rc = add_file(p, s, err))) break;
    }
    if (!rc && !p->n_files)
        rc = dsr1_errorf(err, DSR1_ENOTFOUND, "%s@%s: no file matches the --include patterns",
                         p->repo, p->revision);
    cJSON_Delete(j);
    return rc;
}

/* Complete blobs, partials and free space. */
static int look_at_cache(dsr1_hub_plan *p, dsr1_error *err)
{
    char d[PATH_MAX + 400];
    snprintf(d, sizeof d, "%s/blobs", p->repo_dir);
    DSR1_TRY(dsr1_hub_mkdirs(d, err));
    DSR1_TRY(dsr1_hub_mkdirs(p->snapshot, err));
    snprintf(d, sizeof d, "%s/refs", p->repo_dir);
    DSR1_TRY(dsr1_hub_mkdirs(d, err));
    for (size_t i = 0; i < p->n_files; i++) {
        dsr1_hub_file *f = &p->files[i];
        struct stat st;
        snprintf(d, sizeof d, "%s/blobs/%s", p->repo_dir, f->blob);
        if (stat(d, &st) == 0 && (uint64_t)st.st_size == f->size) {
            f->cached = 1;
            p->n_cached++;
            p->bytes_cached += f->size;
            continue;
        }
        if (f->dup) {
            p->bytes_dup += f->size;
            continue;
        }
        snprintf(d, sizeof d, "%s/blobs/%s.incomplete", p->repo_dir, f->blob);
        if (stat(d, &st) == 0 && (uint64_t)st.st_size <= f->size) f->partial = (uint64_t)st.st_size;
        p->bytes_partial += f->partial;
    }
    struct statvfs v;
    if (statvfs(p->repo_dir, &v) == 0) p->free_bytes = (uint64_t)v.f_bavail * v.f_frsize;
    return 0;
}

int dsr1_hub_plan_create(dsr1_hub_plan *p, const dsr1_hub_opts *o, dsr1_error *err)
{
    memset(p, 0, sizeof *p);
    if (!o->repo || !dsr1_hub_is_repo_id(o->repo) || strchr(o->repo, '@'))
        return dsr1_errorf(err, DSR1_EINVAL, "%s: expected a repository id ORG/NAME",
                           o->repo ? o->repo : "");
    snprintf(p->repo, sizeof p->repo, "%s", o->repo);
    snprintf(p->revision, sizeof p->revision, "%s", o->revision ? o->revision : "main");
    const char *ep = o->endpoint ? o->endpoint : getenv("HF_ENDPOINT");
    snprintf(p->endpoint, sizeof p->endpoint, "%s", ep && *ep ? ep : "https://huggingface.co");
    size_t n = strlen(p->endpoint);
    while (n && p->endpoint[n - 1] == '/') p->endpoint[--n] = 0;
    if (o->cache_dir) snprintf(p->cache_dir, sizeof p->cache_dir, "%s", o->cache_dir);
    else dsr1_hub_cache_dir(p->cache_dir, sizeof p->cache_dir);
    repo_folder(p->cache_dir, p->repo, p->repo_dir, sizeof p->repo_dir);
    curl_global_init(CURL_GLOBAL_DEFAULT); /* before any thread; reference counted */
    p->curl_init = 1;
    p->token = read_token(p->token_source, sizeof p->token_source);
    membuf b = {0};
    int rc = get_info(p, o, &b, err);
    if (!rc) rc = parse_info(p, o, &b, err);
    free(b.data);
    if (!rc) {
        snprintf(p->snapshot, sizeof p->snapshot, "%s/snapshots/%s", p->repo_dir, p->commit);
        rc = look_at_cache(p, err);
    }
    if (rc) dsr1_hub_plan_free(p);
    return rc;
}

void dsr1_hub_plan_free(dsr1_hub_plan *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n_files; i++) free(p->files[i].path);
    free(p->files);
    free(p->token);
    if (p->curl_init) curl_global_cleanup();
    p->curl_init = 0;
    p->files = NULL;
    p->token = NULL;
    p->n_files = 0;
}

/* ---- links and refs ---------------------------------------------------------------- */

int dsr1_hub_link(const dsr1_hub_plan *p, const dsr1_hub_file *f, dsr1_error *err)
{
    char link[PATH_MAX + 600], target[PATH_MAX], tmp[PATH_MAX + 700];
    snprintf(link, sizeof link, "%s/%s", p->snapshot, f->path);
    char *slash = strrchr(link, '/');
    *slash = 0;
    DSR1_TRY(dsr1_hub_mkdirs(link, err));
    *slash = '/';
    /* ../../blobs/X from snapshots/COMMIT/, one more ../ per directory of path */
    size_t used = 0;
    for (const char *c = f->path; (c = strchr(c, '/')); c++)
        used += (size_t)snprintf(target + used, sizeof target - used, "../");
    snprintf(target + used, sizeof target - used, "../../blobs/%s", f->blob);
    snprintf(tmp, sizeof tmp, "%s.dsr1-tmp-%ld", link, (long)getpid());
    unlink(tmp);
    if (symlink(target, tmp) != 0 || rename(tmp, link) != 0) {
        int e = errno;
        unlink(tmp);
        return dsr1_errorf(err, DSR1_EIO, "%s: cannot link to %s: %s", link, target, strerror(e));
    }
    return 0;
}

int dsr1_hub_write_ref(const dsr1_hub_plan *p, dsr1_error *err)
{
    if (!strcmp(p->revision, p->commit)) return 0;
    char ref[PATH_MAX + 300], tmp[PATH_MAX + 400];
    snprintf(ref, sizeof ref, "%s/refs/%s", p->repo_dir, p->revision);
    char *slash = strrchr(ref, '/'); /* refs/pr/1 has a directory */
    *slash = 0;
    DSR1_TRY(dsr1_hub_mkdirs(ref, err));
    *slash = '/';
    snprintf(tmp, sizeof tmp, "%s.dsr1-tmp-%ld", ref, (long)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(p->commit, f) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, ref) == 0) return 0;
    int e = errno;
    unlink(tmp);
    return dsr1_errorf(err, DSR1_EIO, "%s: cannot write: %s", ref, strerror(e));
}

uint64_t dsr1_hub_delete_fetched(dsr1_hub_plan *p, const char *glob)
{
    uint64_t freed = 0;
    char path[PATH_MAX + 600];
    for (size_t i = 0; i < p->n_files; i++) {
        dsr1_hub_file *f = &p->files[i];
        if (!f->fetched || fnmatch(glob, f->path, 0) != 0) continue;
        for (size_t j = 0; j < p->n_files; j++) /* its links, duplicates' too */
            if (j == i || p->files[j].dup == i + 1) {
                snprintf(path, sizeof path, "%s/%s", p->snapshot, p->files[j].path);
                unlink(path);
            }
        snprintf(path, sizeof path, "%s/blobs/%s", p->repo_dir, f->blob);
        if (unlink(path) == 0) freed += f->size;
        f->fetched = 0;
    }
    return freed;
}
