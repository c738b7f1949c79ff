/*
 * test_hub.c - the parts of convert/hub*.c that need no server: digests
 * against published vectors (FIPS 180-4 examples for SHA-256; git's own
 * blob ids), repo-id parsing, the cache root from the environment, finding
 * a repo id in a cache laid out as huggingface_hub lays it out, and the
 * snapshot links' relative targets, the model info parser (sizes, dup
 * blobs, unsafe names) and the response header lines. The downloads are tested end to end
 * against tests/hub_server.py (tests/e2e/pull_*.sh).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert/hub.h"
#include "test.h"

DSR1_TEST(hub_sha256_vectors)
{
    char h[65];
    dsr1_hub_sha256_hex("abc", 3, h); /* FIPS 180-4 example, one block */
    CHECK_STR(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    dsr1_hub_sha256_hex("", 0, h);
    CHECK_STR(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* two blocks */
    dsr1_hub_sha256_hex(two, strlen(two), h);
    CHECK_STR(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* the same digest from a file, as partials are hashed */
    char path[512];
    snprintf(path, sizeof path, "%s/hub_sha.bin", dsr1_test_tmpdir());
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    for (int i = 0; i < 1000000; i++) fputc('a', f); /* FIPS: one million 'a' */
    fclose(f);
    dsr1_error err = {0};
    CHECK_OK(dsr1_hub_sha256_file(path, h, &err), &err);
    CHECK_STR(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    CHECK(dsr1_hub_sha256_file("/nonexistent/x", h, &err) == DSR1_EIO);
}

DSR1_TEST(hub_git_blob_ids)
{
    char h[41];
    dsr1_hub_gitblob_hex("", 0, h); /* `git hash-object /dev/null` */
    CHECK_STR(h, "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
    dsr1_hub_gitblob_hex("hello world\n", 12, h);
    CHECK_STR(h, "3b18e512dba79e4c8300dd08aeb37f8e728b8dad");
}

DSR1_TEST(hub_repo_ids)
{
    CHECK(dsr1_hub_is_repo_id("deepseek-ai/DeepSeek-R1"));
    CHECK(dsr1_hub_is_repo_id("deepseek-ai/DeepSeek-R1@main"));
    CHECK(dsr1_hub_is_repo_id("a/b@refs/pr/1"));
    CHECK(dsr1_hub_is_repo_id("org_x/v2.5-lite"));
    CHECK(!dsr1_hub_is_repo_id("DeepSeek-R1"));
    CHECK(!dsr1_hub_is_repo_id("/abs/path"));
    CHECK(!dsr1_hub_is_repo_id("a/b/c"));
    CHECK(!dsr1_hub_is_repo_id("./x"));
    CHECK(!dsr1_hub_is_repo_id("../x"));
    CHECK(!dsr1_hub_is_repo_id("a/"));
    CHECK(!dsr1_hub_is_repo_id("a/b@"));
    CHECK(!dsr1_hub_is_repo_id("a b/c"));
    CHECK(!dsr1_hub_is_repo_id("models/r1.dsr1 x"));
}

DSR1_TEST(hub_cache_dir_env)
{
    char *saved[3];
    const char *names[3] = {"HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(names[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(names[i]);
    }
    unsetenv("HUGGINGFACE_HUB_CACHE");
    char d[512];
    setenv("XDG_CACHE_HOME", "/x", 1);
    dsr1_hub_cache_dir(d, sizeof d);
    CHECK_STR(d, "/x/huggingface/hub");
    setenv("HF_HOME", "/h", 1);
    dsr1_hub_cache_dir(d, sizeof d);
    CHECK_STR(d, "/h/hub");
    setenv("HF_HUB_CACHE", "/c", 1);
    dsr1_hub_cache_dir(d, sizeof d);
    CHECK_STR(d, "/c");
    for (int i = 0; i < 3; i++) {
        if (saved[i]) setenv(names[i], saved[i], 1);
        else unsetenv(names[i]);
        free(saved[i]);
    }
}

/* A cache as huggingface_hub writes it: refs/main, a snapshot, a nested link. */
DSR1_TEST(hub_resolve_and_link)
{
    const char *commit = "0123456789abcdef0123456789abcdef01234567";
    char cache[512], cmd[2048], out[1024], want[1024];
    snprintf(cache, sizeof cache, "%s/hubcache", dsr1_test_tmpdir());
    dsr1_error err = {0};
    CHECK(dsr1_hub_resolve("org/m", cache, out, sizeof out, &err) == DSR1_ENOTFOUND);
    CHECK(strstr(err.msg, "dsr1 pull org/m") != NULL);
    REQUIRE(dsr1_test_sh(NULL, 0, "mkdir -p %s/models--org--m/refs %s/models--org--m/snapshots/%s "
                         "&& printf %s > %s/models--org--m/refs/main", cache, cache, commit, commit,
                         cache) == 0);
    CHECK_OK(dsr1_hub_resolve("org/m", cache, out, sizeof out, &err), &err);
    snprintf(want, sizeof want, "%s/models--org--m/snapshots/%s", cache, commit);
    CHECK_STR(out, want);
    CHECK_OK(dsr1_hub_resolve("org/m@main", cache, out, sizeof out, &err), &err);
    CHECK_STR(out, want);
    snprintf(cmd, sizeof cmd, "org/m@%s", commit);
    CHECK_OK(dsr1_hub_resolve(cmd, cache, out, sizeof out, &err), &err);
    CHECK_STR(out, want);
    CHECK(dsr1_hub_resolve("org/m@v2", cache, out, sizeof out, &err) == DSR1_ENOTFOUND);

    /* links: ../../blobs/X at the top, one more ../ per directory level */
    dsr1_hub_plan p;
    memset(&p, 0, sizeof p);
    snprintf(p.snapshot, sizeof p.snapshot, "%s", want);
    char path[] = "sub/dir/x.json";
    dsr1_hub_file f = {.path = path, .blob = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"};
    CHECK_OK(dsr1_hub_link(&p, &f, &err), &err);
    snprintf(cmd, sizeof cmd, "%s/sub/dir/x.json", want);
    ssize_t n = readlink(cmd, out, sizeof out - 1);
    REQUIRE(n > 0);
    out[n] = 0;
    CHECK_STR(out, "../../../../blobs/e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
    CHECK_OK(dsr1_hub_link(&p, &f, &err), &err); /* again: replaced, not an error */
}

/* The model info parser on one sibling of the given size text. */
static int info_with_size(const char *size, dsr1_hub_plan *p, dsr1_error *err)
{
    char json[400];
    snprintf(json, sizeof json, "{\"sha\":\"%040d\",\"siblings\":[{\"rfilename\":\"a.json\","
             "\"size\":%s,\"blobId\":\"%040d\"}]}", 1, size, 2);
    memset(p, 0, sizeof *p);
    snprintf(p->repo, sizeof p->repo, "o/n");
    dsr1_hub_opts o = {.repo = "o/n"};
    return dsr1_hub_parse_info(p, &o, json, strlen(json), err);
}

DSR1_TEST(hub_parse_info_sizes_and_dups)
{
    dsr1_hub_plan p;
    dsr1_error err = {0};
    CHECK_OK(info_with_size("9007199254740992", &p, &err), &err);
    CHECK(p.n_files == 1 && p.files[0].size == 9007199254740992ull && !p.files[0].lfs);
    dsr1_hub_plan_free(&p);
    /* 1e30 converted to uint64_t was undefined behaviour (found by fuzz_hub_info) */
    CHECK_EQ_INT(info_with_size("1e30", &p, &err), DSR1_EFORMAT);
    CHECK(strstr(err.msg, "size (0..2^53)") != NULL);
    dsr1_hub_plan_free(&p);
    CHECK_EQ_INT(info_with_size("9007199254740994", &p, &err), DSR1_EFORMAT);
    dsr1_hub_plan_free(&p);
    CHECK_EQ_INT(info_with_size("-1", &p, &err), DSR1_EFORMAT);
    dsr1_hub_plan_free(&p);

    static const char two[] =
        "{\"sha\":\"0123456789abcdef0123456789abcdef01234567\",\"siblings\":["
        "{\"rfilename\":\"a.safetensors\",\"size\":3,\"blobId\":\"0000000000000000000000000000000000000001\","
        "\"lfs\":{\"sha256\":\"ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB\"}},"
        "{\"rfilename\":\"b/a.safetensors\",\"size\":3,\"blobId\":\"0000000000000000000000000000000000000001\","
        "\"lfs\":{\"sha256\":\"abababababababababababababababababababababababababababababababab\"}},"
        "{\"rfilename\":\"../x\",\"size\":1,\"blobId\":\"0000000000000000000000000000000000000002\"}]}";
    memset(&p, 0, sizeof p);
    dsr1_hub_opts o = {.repo = "o/n", .include = (const char *const[]){"*.safetensors"}, .n_include = 1};
    CHECK_OK(dsr1_hub_parse_info(&p, &o, two, strlen(two), &err), &err);
    CHECK_STR(p.commit, "0123456789abcdef0123456789abcdef01234567");
    CHECK(p.n_files == 2 && p.files[0].lfs && p.files[1].dup == 1 && p.bytes_total == 6);
    CHECK_STR(p.files[0].blob, "abababababababababababababababababababababababababababababababab");
    dsr1_hub_plan_free(&p);
    o.n_include = 0; /* now "../x" is selected: refused */
    CHECK_EQ_INT(dsr1_hub_parse_info(&p, &o, two, strlen(two), &err), DSR1_EFORMAT);
    CHECK(strstr(err.msg, "unsafe file name '../x'") != NULL);
    dsr1_hub_plan_free(&p);
}

DSR1_TEST(hub_header_lines)
{
    dsr1_hub_resp r;
    memset(&r, 0, sizeof r);
    static const char *const lines[] = {
        "HTTP/1.1 302 Found\r\n", "Retry-After: 7\r\n", "x-error-code:  GatedRepo \r\n",
        "HTTP/1.1 206 Partial Content\r\n", "Content-Range: bytes 500-999/1000\r\n",
        "X-Error-Code: RepoNotFound\r\n"};
    int news = 0;
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
        if (i == 3) { /* what the first hop said */
            CHECK(r.status == 302 && r.retry_after == 7);
            CHECK_STR(r.error_code, "GatedRepo");
        }
        news += dsr1_hub_header_line(&r, lines[i], strlen(lines[i]));
    }
    CHECK_EQ_INT(news, 2);
    CHECK(r.status == 206 && r.retry_after == 0 && r.range_start == 500);
    CHECK_STR(r.error_code, "RepoNotFound");
    /* libcurl's lines are not NUL-terminated: only len bytes are read */
    CHECK_EQ_INT(dsr1_hub_header_line(&r, "X-Error-Code: AB-and-more", 16), 0);
    CHECK_STR(r.error_code, "AB");
    char big[700];
    memset(big, 'G', sizeof big);
    memcpy(big, "X-Error-Code: ", 14);
    dsr1_hub_header_line(&r, big, sizeof big);
    CHECK(strlen(r.error_code) == sizeof r.error_code - 1);
}
