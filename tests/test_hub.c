/*
 * test_hub.c - the parts of convert/hub*.c that need no server: digests
 * against published vectors (FIPS 180-4 examples for SHA-256; git's own
 * blob ids), repo-id parsing, the cache root from the environment, finding
 * a repo id in a cache laid out as huggingface_hub lays it out, and the
 * snapshot links' relative targets. The downloads are tested end to end
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
