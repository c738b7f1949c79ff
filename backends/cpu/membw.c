/*
 * membw.c - the memory bandwidth probe (hw.h): what this machine can
 * really stream, found by trying the things that change it (thread count,
 * how threads split the buffer, how many streams a thread reads at once,
 * software prefetch, page size) rather than one loop, so that decode's
 * "% of bound" divides by the best the machine does and not by one loop's
 * luck. Streams matter: on an Emerald Rapids Xeon VM (2 cores, a /tmp
 * harness, configurations interleaved, means of 5 passes) one sequential
 * stream a thread read 26.8 GB/s with 2 threads where eight streams a
 * thread read 32.9, so a probe of one stream a thread let decode show
 * 105-112% of its bound. In this probe's first run there the rows split's
 * medians were 2-27% above the blocks split's at the same page size and
 * prefetch (2 threads).
 *
 * Does not: print (cli/bench.c shows the table), or pick the kernels'
 * settings (it reports; matmul_avx512.c's PREFETCH was chosen from it).
 *
 * Passes are interleaved across configurations (pass r of every
 * configuration, then pass r + 1): on a shared machine other processes'
 * load comes in bursts, and a configuration measured only during one would
 * look worse than it is. The buffers are written before the first pass so
 * no pass pays for page faults.
 */
#include "hw.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "matmul_impl.h"

#define STRIPE ((size_t)64 << 10)
/* A row of the "rows" split: R1's hidden size in BF16 (7168 x 2 bytes), the
 * row of most of the large decode GEMVs; not a multiple of 4 KiB, which
 * would put the eight streams in the same L1 sets. */
#define ROW ((size_t)14336)

typedef struct bw_ctx {
    const uint8_t *buf;
    size_t bytes;
    int split, prefetch, avx512;
    uint64_t sink[1024]; /* per task, so the reads are not optimised away */
} bw_ctx;

/* The portable loops: eight independent chains so the loads overlap; the
 * compiler vectorises them with whatever the baseline ISA offers. */
static uint64_t read_words(const uint8_t *p, size_t n)
{
    const uint64_t *w = (const uint64_t *)p;
    size_t words = n / 8, i = 0;
    uint64_t s[8] = {0};
    for (; i + 8 <= words; i += 8)
        for (int k = 0; k < 8; k++) s[k] ^= w[i + k];
    for (; i < words; i++) s[0] ^= w[i];
    return s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7];
}

static uint64_t read_rows(const uint8_t *p, size_t n)
{
    uint64_t s[8] = {0};
    size_t g = 0;
    for (; g + 8 * ROW <= n; g += 8 * ROW)
        for (size_t k = 0; k < ROW; k += 64)
            for (int r = 0; r < 8; r++) {
                const uint64_t *w = (const uint64_t *)(p + g + (size_t)r * ROW + k);
                for (int i = 0; i < 8; i++) s[i] ^= w[i];
            }
    return s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7] ^ read_words(p + g, n - g);
}

uint64_t dsr1_hw_membw_read(const void *buf, size_t bytes, int split, int prefetch, int avx512)
{
    if (avx512)
        return split == DSR1_MEMBW_ROWS ? dsr1_membw_read_rows_avx512(buf, bytes, ROW, prefetch)
                                        : dsr1_membw_read_avx512(buf, bytes, prefetch);
    return split == DSR1_MEMBW_ROWS ? read_rows(buf, bytes) : read_words(buf, bytes);
}

static void bw_task(void *ctx, int task, int ntasks)
{
    bw_ctx *b = ctx;
    uint64_t s = 0;
    if (b->split == DSR1_MEMBW_STRIPES) {
        for (size_t o = (size_t)task * STRIPE; o < b->bytes; o += STRIPE * (size_t)ntasks)
            s ^= dsr1_hw_membw_read(b->buf + o, b->bytes - o < STRIPE ? b->bytes - o : STRIPE,
                                    DSR1_MEMBW_BLOCKS, b->prefetch, b->avx512);
    } else {
        size_t lo = b->bytes / STRIPE * (size_t)task / (size_t)ntasks * STRIPE;
        size_t hi = task + 1 == ntasks ? b->bytes : b->bytes / STRIPE * (size_t)(task + 1) / (size_t)ntasks * STRIPE;
        s = dsr1_hw_membw_read(b->buf + lo, hi - lo, b->split, b->prefetch, b->avx512);
    }
    b->sink[task % 1024] ^= s;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A buffer of `bytes` on 2 MiB pages (huge) or 4 KiB pages, written once. */
static uint8_t *map_buffer(size_t bytes, int huge)
{
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    (void)madvise(m, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE); /* advice: best effort */
    uint64_t *w = m;
    for (size_t i = 0; i < bytes / 8; i++) w[i] = i * 0x9e3779b97f4a7c15ull;
    return m;
}

int dsr1_hw_membw_probe(dsr1_pool *p, size_t bytes, int reps, int max_threads, dsr1_membw_cfg *cfg,
                        int *n, double *bound, dsr1_error *err)
{
    static const int pf_avx512[3] = {0, 2048, 8192};
    *n = 0;
    *bound = 0;
    bytes = bytes / STRIPE * STRIPE;
    if (bytes < STRIPE) bytes = STRIPE;
    if (reps < 1) reps = 1;
    int avx512 = dsr1_mm_avx512_usable(), npf = avx512 ? 3 : 1;
    int tmax = max_threads > 0 && max_threads < dsr1_pool_size(p) ? max_threads : dsr1_pool_size(p);
    int per_t = 2 * 3 * npf, nc = 0;
    while (nc + per_t <= DSR1_MEMBW_MAX_CFG && nc / per_t < tmax) nc += per_t;
    int t0 = tmax - nc / per_t + 1; /* the largest thread counts when not all fit */
    uint8_t *buf[2] = {map_buffer(bytes, 0), map_buffer(bytes, 1)};
    double *pass = malloc((size_t)nc * (size_t)reps * sizeof *pass);
    bw_ctx *b = calloc(1, sizeof *b);
    if (!buf[0] || !buf[1] || !pass || !b) {
        for (int h = 0; h < 2; h++)
            if (buf[h]) munmap(buf[h], bytes);
        free(pass);
        free(b);
        return dsr1_errorf(err, DSR1_ENOMEM, "membw: cannot allocate 2 x %zu bytes", bytes);
    }
    for (int c = 0; c < nc; c++) {
        int k = c;
        cfg[c] = (dsr1_membw_cfg){.huge = k % 2, .split = k / 2 % 3,
                                  .prefetch = avx512 ? pf_avx512[k / 6 % npf] : 0,
                                  .threads = t0 + k / per_t};
    }
    b->bytes = bytes;
    b->avx512 = avx512;
    for (int r = 0; r < reps; r++)
        for (int c = 0; c < nc; c++) {
            b->buf = buf[cfg[c].huge];
            b->split = cfg[c].split;
            b->prefetch = cfg[c].prefetch;
            double t = now();
            dsr1_pool_run(p, bw_task, b, cfg[c].threads);
            t = now() - t;
            pass[(size_t)c * (size_t)reps + (size_t)r] = t > 0 ? (double)bytes / t : 0;
        }
    for (int c = 0; c < nc; c++) {
        double *x = pass + (size_t)c * (size_t)reps;
        qsort(x, (size_t)reps, sizeof *x, cmp_double);
        cfg[c].median = reps % 2 ? x[reps / 2] : 0.5 * (x[reps / 2 - 1] + x[reps / 2]);
        cfg[c].best = x[reps - 1];
        if (cfg[c].best > *bound) *bound = cfg[c].best;
    }
    *n = nc;
    munmap(buf[0], bytes);
    munmap(buf[1], bytes);
    free(pass);
    free(b);
    return 0;
}

int dsr1_hw_membw(dsr1_pool *p, size_t bytes, int reps, double *bytes_per_s, dsr1_error *err)
{
    dsr1_membw_cfg *cfg = malloc(DSR1_MEMBW_MAX_CFG * sizeof *cfg);
    if (!cfg) return dsr1_errorf(err, DSR1_ENOMEM, "membw: out of memory");
    int n = 0;
    int rc = dsr1_hw_membw_probe(p, bytes, reps, 0, cfg, &n, bytes_per_s, err);
    free(cfg);
    return rc;
}
