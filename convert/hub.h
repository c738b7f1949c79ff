/*
 * hub.h - fetching a model repository from the Hugging Face Hub into the
 * Hugging Face cache, and finding one there (`dsr1 pull`, dsr1-pull(1)).
 *
 * The cache layout is the official client's (huggingface_hub), so either
 * tool finds what the other fetched:
 *   $HF_HUB_CACHE/models--ORG--NAME/
 *     blobs/<sha256 for LFS files, git blob sha1 for others>
 *     blobs/<same>.incomplete          a partial download (resumed by Range)
 *     snapshots/<commit>/<path>        relative symlink to ../../blobs/<name>
 *     refs/<revision>                  the commit hash (no newline)
 * $HF_HUB_CACHE defaults to $HF_HOME/hub, $HF_HOME to
 * $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface.
 *
 * The Hub API spoken: GET {endpoint}/api/models/{repo}/revision/{rev}
 * ?blobs=true (commit sha, siblings[] with rfilename, size, blobId, lfs
 * {sha256, size}); files from {endpoint}/{repo}/resolve/{commit}/{path},
 * following redirects (LFS files go to another host, which never gets the
 * token: libcurl drops Authorization on a host change). Proxies come from
 * libcurl's own reading of http_proxy/https_proxy/no_proxy.
 *
 * Nothing here prints: progress and retry notes go through a callback that
 * always runs on the thread that called dsr1_hub_fetch.
 */
#ifndef DSR1_HUB_H
#define DSR1_HUB_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"

#define DSR1_HUB_MAX_JOBS 64

/* One file of the repository at the pulled commit. */
typedef struct dsr1_hub_file {
    char *path;            /* rfilename, relative to the repo root (owned) */
    uint64_t size;         /* bytes, from the API */
    char blob[65];         /* cache blob name: lfs sha256, else git blob id */
    int lfs;               /* 1: verified by sha256; 0: by git blob sha1 + size */
    int cached;            /* the blob was already complete before this pull */
    int fetched;           /* this pull downloaded it (set by dsr1_hub_fetch) */
    uint64_t partial;      /* bytes of a .incomplete partial kept from before */
    size_t dup;            /* 1 + index of an earlier file with the same blob
                              (fetched once, linked twice); 0 if none */
    char error[256];       /* why this file failed, empty if it did not */
} dsr1_hub_file;

/* What a pull will do, from the model info and the cache (dsr1_hub_plan). */
typedef struct dsr1_hub_plan {
    char repo[200], revision[200], commit[48];
    char endpoint[512];
    char token_source[300];/* "HF_TOKEN", a file path, or "" when no token */
    char cache_dir[2048];  /* the hub cache root */
    char repo_dir[2304];   /* cache_dir/models--ORG--NAME */
    char snapshot[2400];   /* repo_dir/snapshots/COMMIT */
    dsr1_hub_file *files;  /* the selected files (owned) */
    size_t n_files, n_cached;
    uint64_t bytes_total;  /* all selected files */
    uint64_t bytes_cached; /* complete blobs already there */
    uint64_t bytes_partial;/* kept in .incomplete partials */
    uint64_t bytes_dup;    /* not cached, but the same blob as an earlier file */
    uint64_t free_bytes;   /* free space on the cache's filesystem */
    char *token;           /* Authorization bearer token or NULL (owned) */
    int curl_init;         /* curl_global_init was called (undone by free) */
} dsr1_hub_plan;

typedef struct dsr1_hub_opts {
    const char *repo;          /* ORG/NAME */
    const char *revision;      /* branch, tag or commit; NULL = "main" */
    const char *endpoint;      /* NULL = $HF_ENDPOINT, else https://huggingface.co */
    const char *cache_dir;     /* NULL = dsr1_hub_cache_dir() */
    const char *const *include;/* fnmatch globs on paths; none = every file */
    size_t n_include;
    int jobs;                  /* parallel connections, 1..DSR1_HUB_MAX_JOBS */
    int max_retries;           /* tries in a row without progress; 0 = 8 */
    double retry_wait;         /* first back-off in seconds (doubles, max 60); 0 = 1 */
    double stall_timeout;      /* seconds without a byte before retrying; 0 = 60 */
    volatile sig_atomic_t *cancel; /* polled; non-zero stops with DSR1_EINTR */
} dsr1_hub_opts;

typedef struct dsr1_hub_progress {
    uint64_t done, total;      /* bytes of this pull: fetched (+ partials) / to have */
    size_t files_done, files_total;
    const char *note;          /* a retry or failure note, else NULL */
} dsr1_hub_progress;

typedef void (*dsr1_hub_progress_fn)(const dsr1_hub_progress *p, void *ctx);

/* The hub cache root ($HF_HUB_CACHE, $HF_HOME/hub, ...) into out. */
void dsr1_hub_cache_dir(char *out, size_t cap);

/* Whether s reads as ORG/NAME[@REV] (one slash, name characters only). */
int dsr1_hub_is_repo_id(const char *s);

/*
 * The snapshot directory of spec (ORG/NAME[@REV], REV default "main": a
 * ref name looked up in refs/, or a commit hash) in the cache at cache_dir
 * (NULL = the default). Returns 0, or DSR1_ENOTFOUND with a message that
 * says how to fetch it (dsr1 pull).
 */
int dsr1_hub_resolve(const char *spec, const char *cache_dir, char *out, size_t cap,
                     dsr1_error *err);

/*
 * Ask the Hub which files the revision has (the model info call), choose
 * those matching the include globs, and look at the cache: complete blobs,
 * partials, free space. Creates the repo's cache directories. Returns 0, or
 * a DSR1_E* code with a message saying what to do (HTTP 401: log in; 403:
 * accept the licence; 404: check the name).
 */
int dsr1_hub_plan_create(dsr1_hub_plan *p, const dsr1_hub_opts *o, dsr1_error *err);
void dsr1_hub_plan_free(dsr1_hub_plan *p);

/*
 * Download every file of the plan not yet in the cache, o->jobs at a time,
 * resuming partials, retrying transient failures (timeouts, dropped
 * connections, 429, 5xx; Retry-After honoured), verifying each against its
 * sha256 (LFS) or git blob id before renaming it into blobs/, then linking
 * snapshots/COMMIT/PATH; refs/REV is written once every file is there.
 * 401/403/404 and a full disk stop the whole pull; other failures stop only
 * their file (files[i].error). progress (may be NULL) is called about ten
 * times a second and for each note. Returns 0, or the first error.
 */
int dsr1_hub_fetch(dsr1_hub_plan *p, const dsr1_hub_opts *o, dsr1_hub_progress_fn progress,
                   void *ctx, dsr1_error *err);

/*
 * Remove the blobs of files this pull fetched whose path matches glob (and
 * their snapshot links). Returns the number of bytes freed.
 */
uint64_t dsr1_hub_delete_fetched(dsr1_hub_plan *p, const char *glob);

/* ---- internal, shared by hub.c and hub_fetch.c (and tests) ---------------- */

/* Lower-case hex digests: sha256 of a whole file, or the git blob id
 * (sha1 of "blob <size>\0" + content). 0 or DSR1_EIO. */
int dsr1_hub_sha256_file(const char *path, char out[65], dsr1_error *err);
void dsr1_hub_sha256_hex(const void *data, size_t n, char out[65]);
void dsr1_hub_gitblob_hex(const void *data, size_t n, char out[41]);

/* Make the snapshot link for file f (relative, replacing what is there). */
int dsr1_hub_link(const dsr1_hub_plan *p, const dsr1_hub_file *f, dsr1_error *err);
/* Write refs/<revision> = commit atomically (skipped when revision is the
 * commit itself). */
int dsr1_hub_write_ref(const dsr1_hub_plan *p, dsr1_error *err);
/* mkdir -p. */
int dsr1_hub_mkdirs(const char *path, dsr1_error *err);
/* The message for an HTTP failure status on what (repo or file). */
int dsr1_hub_http_error(const dsr1_hub_plan *p, const char *what, long code,
                        const char *error_code, dsr1_error *err);

#endif
