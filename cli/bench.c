/*
 * bench.c - `dsr1 bench`: how fast this machine runs dsr1.
 *
 *   dsr1 bench -m MODEL [--prompt N,.. --gen N --batch N,.. --threads N --f32]
 *       prefill and decode through the engine (cli/bench_model.c): time to
 *       first token, tokens/s, and at batch 1 the bandwidth decode reaches
 *       as a percentage of the bound the machine's bandwidth sets.
 *   dsr1 bench membw [--size MiB] [--threads N] [--reps N]   bandwidth probe
 *   dsr1 bench kernels [--shape RxC] [--threads N] [--quick] [--type T] [--n N,..]
 *       matmul GB/s and GFLOP/s per weight type on DeepSeek-R1 shapes, and
 *       the measured compute peak the GFLOP/s are a percentage of
 *   dsr1 bench tokenize FILE   the tokenizer's speed (engineer H3's code)
 *   dsr1 bench --spec ...      speculative decoding table (cli/bench_spec.c)
 *
 * Only timing and printing live here; kernels, pool and engine are used
 * through their public headers. Results go to stdout as an aligned table.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/hw.h"
#include "backends/cpu/kernels.h"
#include "bench_model.h"
#include "cli.h"
#include "common.h"
#include "core/dsr1.h"
#include "core/numeric.h"

static int usage(FILE *f)
{
    fprintf(f,
            "usage: dsr1 bench [-m MODEL] [--prompt N,..] [--gen N] [--batch N,..] [--threads N] [--f32]\n"
            "                  [--no-warmup] [--numa auto|off|virtual:N] [--deterministic]\n"
            "                  [--prefill-chunk N]\n"
            "                  [--fp8-prefill w8a8|bf16]\n"
            "       dsr1 bench membw [--size MIB] [--threads N] [--reps N]\n"
            "       dsr1 bench kernels [--shape ROWSxCOLS] [--threads N] [--quick] [--type T] [--n N,..]\n"
            "       dsr1 bench tokenize FILE\n"
            "       dsr1 bench --spec -m MODEL [--k N] ...   (speculative decoding)\n"
            "See dsr1-bench(1).\n");
    return f == stdout ? 0 : 2;
}

/* Parse "--flag VALUE" integer options; returns 0, 2 (usage printed) or -1
 * (not this flag). */
static int int_opt(int argc, char **argv, int *i, const char *flag, double lo, double hi,
                   int *out)
{
    if (strcmp(argv[*i], flag)) return -1;
    if (*i + 1 >= argc) return dsr1_cli_usage("bench", "%s needs a value", flag);
    double v;
    int rc = dsr1_common_opt_num("bench", flag, argv[++*i], lo, hi, 1, &v);
    if (rc == 0) *out = (int)v;
    return rc;
}

/* ---- membw ------------------------------------------------------------------ */

static int measure_membw(dsr1_pool *pool, int mib, double *gbs, dsr1_error *err)
{
    double bps = 0;
    DSR1_TRY(dsr1_hw_membw(pool, (size_t)mib << 20, 3, &bps, err));
    *gbs = bps / 1e9;
    return 0;
}

static int bench_membw(int argc, char **argv)
{
    int mib = 512, threads = 0, reps = 5, rc;
    for (int i = 1; i < argc; i++) {
        if ((rc = int_opt(argc, argv, &i, "--size", 64, 1 << 20, &mib)) >= 0) {
            if (rc) return rc;
        } else if ((rc = int_opt(argc, argv, &i, "--threads", 1, 1024, &threads)) >= 0) {
            if (rc) return rc;
        } else if ((rc = int_opt(argc, argv, &i, "--reps", 1, 1000, &reps)) >= 0) {
            if (rc) return rc;
        } else {
            return dsr1_cli_usage("bench", "unknown option '%s' for membw", argv[i]);
        }
    }
    dsr1_error err = {0};
    dsr1_pool *pool = NULL;
    static dsr1_membw_cfg cfg[DSR1_MEMBW_MAX_CFG];
    int n = 0, best = 0;
    double bound = 0;
    if (dsr1_pool_create(&pool, threads, &err) ||
        dsr1_hw_membw_probe(pool, (size_t)mib << 20, reps, 0, cfg, &n, &bound, &err)) {
        dsr1_pool_free(pool);
        return dsr1_cli_fail(&err);
    }
    static const char *split[] = {"blocks", "stripes", "rows"};
    printf("%7s %-8s %8s %-5s %10s %10s\n", "threads", "split", "prefetch", "pages", "median_GB/s",
           "best_GB/s");
    for (int c = 0; c < n; c++) {
        printf("%7d %-8s %8d %-5s %10.1f %10.1f\n", cfg[c].threads, split[cfg[c].split],
               cfg[c].prefetch, cfg[c].huge ? "2M" : "4K", cfg[c].median / 1e9, cfg[c].best / 1e9);
        if (cfg[c].median > cfg[best].median) best = c;
    }
    printf("membw: %.1f GB/s streaming read (best pass of any configuration; %d MiB, up to %d threads, "
           "%d interleaved passes each)\n", bound / 1e9, mib, dsr1_pool_size(pool), reps);
    printf("membw: best median %.1f GB/s: %d threads, %s, prefetch %d, %s pages\n", cfg[best].median / 1e9,
           cfg[best].threads, split[cfg[best].split], cfg[best].prefetch,
           cfg[best].huge ? "2M" : "4K");
    dsr1_pool_free(pool);
    return 0;
}

/* ---- kernels ------------------------------------------------------------------ */

typedef struct bench_mat {
    dsr1_wmat w;
    void *data, *scale;
    size_t bytes; /* payload + scales: what one pass over W reads */
} bench_mat;

static void fill_random(void *p, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        memcpy((char *)p + i, &s, 8);
    }
    for (; i < n; i++) ((unsigned char *)p)[i] = (unsigned char)(i * 131);
}

/* A random matrix of `type` in the layout convert writes (fp8 128x128
 * blocks, int8 per row, int4 group 128 with f16 scales). */
static int make_mat(bench_mat *m, dsr1_type type, int64_t rows, int64_t cols)
{
    memset(m, 0, sizeof *m);
    m->w = (dsr1_wmat){.type = type, .rows = rows, .cols = cols, .scale_type = DSR1_T_F32};
    size_t n = (size_t)(rows * cols), dbytes = 0, sbytes = 0, nscale = 0;
    switch (type) {
    case DSR1_T_BF16: dbytes = n * 2; break;
    case DSR1_T_FP8_E4M3:
        dbytes = n;
        m->w.group = 128;
        nscale = (size_t)(((rows + 127) / 128) * ((cols + 127) / 128));
        sbytes = nscale * 4;
        break;
    case DSR1_T_INT8: dbytes = n; nscale = (size_t)rows; sbytes = nscale * 4; break;
    case DSR1_T_INT4:
        dbytes = n / 2;
        m->w.group = 128;
        m->w.scale_type = DSR1_T_F16;
        nscale = n / 128;
        sbytes = nscale * 2;
        break;
    default: return -1;
    }
    m->data = aligned_alloc(64, (dbytes + 63) & ~(size_t)63);
    m->scale = sbytes ? malloc(sbytes) : NULL;
    if (!m->data || (sbytes && !m->scale)) return -1;
    fill_random(m->data, dbytes, (uint64_t)type);
    /* Random bits make NaNs, and exponents spread down to the denormals
     * (half the values below 2^-64, where products underflow and the AVX2
     * kernels hand the task to the portable one): magnitudes in [2^-15, 1)
     * instead, any sign and mantissa, as trained weights have. */
    if (type == DSR1_T_BF16)
        for (size_t i = 0; i < n; i++) {
            uint16_t *v = (uint16_t *)m->data + i;
            *v = (uint16_t)((*v & 0x807f) | ((112u + ((*v >> 7) & 15u)) << 7));
        }
    if (type == DSR1_T_FP8_E4M3)
        for (size_t i = 0; i < n; i++)
            if ((((uint8_t *)m->data)[i] & 0x7f) == 0x7f) ((uint8_t *)m->data)[i] = 0x7e;
    if (type == DSR1_T_INT8)
        for (size_t i = 0; i < n; i++)
            if (((int8_t *)m->data)[i] == -128) ((int8_t *)m->data)[i] = -127;
    for (size_t i = 0; i < nscale; i++) {
        if (m->w.scale_type == DSR1_T_F16)
            ((uint16_t *)m->scale)[i] = dsr1_f32_to_f16(0.01f);
        else
            ((float *)m->scale)[i] = 0.01f;
    }
    m->w.data = m->data;
    m->w.scale = m->scale;
    m->bytes = dbytes + sbytes;
    return 0;
}

/* One call: dsr1_matmul, or with dn the oneDNN path (-1 if it refused). */
static int one_call(dsr1_pool *pool, dsr1_dnnl *dn, const bench_mat *m, const float *x, float *y,
                    int n, dsr1_act act, int noamx)
{
    if (dn) return dsr1_dnnl_matmul(dn, pool, &m->w, x, m->w.cols, y, m->w.rows, n);
    if (noamx) dsr1_matmul_noamx(pool, &m->w, x, m->w.cols, y, m->w.rows, n, act);
    else dsr1_matmul(pool, &m->w, x, m->w.cols, y, m->w.rows, n, act);
    return 0;
}

/* Seconds per call: repeat until `budget` seconds have passed (at least
 * twice, after one warm-up call), report the fastest; -1 if the oneDNN
 * path refused the shape. */
static double time_matmul(dsr1_pool *pool, dsr1_dnnl *dn, const bench_mat *m, const float *x,
                          float *y, int n, dsr1_act act, int noamx, double budget)
{
    if (one_call(pool, dn, m, x, y, n, act, noamx)) return -1;
    double best = 1e30, start = dsr1_common_now();
    for (int k = 0; k < 2 || dsr1_common_now() - start < budget; k++) {
        double t0 = dsr1_common_now();
        one_call(pool, dn, m, x, y, n, act, noamx);
        double t = dsr1_common_now() - t0;
        if (t < best) best = t;
        if (k > 200) break;
    }
    return best;
}

/* act columns: dsr1_act values 0-2, then DSR1_ACT_INT8_FAST (FP8 as W8A8,
 * the fast mode's prefill), then the oneDNN path; with AMX the W8A8 rows
 * run on its tiles and "i8vnni" / "w8vnni" are the same without them */
static const char *act_names[] = {"f32", "bf16", "int8", "w8a8", "onednn"};

typedef struct kernel_opts {
    int threads, quick;
    int64_t rows, cols;
    int ns[16], n_ns;         /* token counts to time in the fast mode */
    dsr1_type types[4];
    int n_types;
} kernel_opts;

/* "--n 1,4,16" into o->ns; 0 or 2 (usage printed). */
static int parse_ns(const char *arg, kernel_opts *o)
{
    o->n_ns = 0;
    for (const char *p = arg; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096 || o->n_ns == 16 || (*end && *end != ','))
            return dsr1_cli_usage("bench", "--n wants up to 16 counts 1..4096 like 1,4,16, got '%s'", arg);
        o->ns[o->n_ns++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return 0;
}

static int parse_type(const char *arg, kernel_opts *o)
{
    static const struct { const char *name; dsr1_type t; } known[] = {
        {"fp8", DSR1_T_FP8_E4M3}, {"int8", DSR1_T_INT8}, {"int4", DSR1_T_INT4}, {"bf16", DSR1_T_BF16}};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (!strcmp(arg, known[i].name) && o->n_types < 4) {
            o->types[o->n_types++] = known[i].t;
            return 0;
        }
    return dsr1_cli_usage("bench", "--type wants fp8, int8, int4 or bf16, got '%s'", arg);
}

static int parse_kernel_opts(int argc, char **argv, kernel_opts *o)
{
    *o = (kernel_opts){.rows = 18432, .cols = 7168};
    int rc, given_n = 0;
    for (int i = 1; i < argc; i++) {
        if ((rc = int_opt(argc, argv, &i, "--threads", 1, 1024, &o->threads)) >= 0) {
            if (rc) return rc;
        } else if (!strcmp(argv[i], "--quick")) {
            o->quick = 1;
        } else if (!strcmp(argv[i], "--type") && i + 1 < argc) {
            if ((rc = parse_type(argv[++i], o))) return rc;
        } else if (!strcmp(argv[i], "--n") && i + 1 < argc) {
            if ((rc = parse_ns(argv[++i], o))) return rc;
            given_n = 1;
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            long long r, c;
            if (sscanf(argv[++i], "%lldx%lld", &r, &c) != 2 || r < 1 || c < 128 || c % 128 ||
                r > 1 << 20 || c > 1 << 20)
                return dsr1_cli_usage("bench", "--shape wants ROWSxCOLS with COLS a multiple of 128, got '%s'", argv[i]);
            o->rows = r;
            o->cols = c;
        } else {
            return dsr1_cli_usage("bench", "unknown option '%s' for kernels", argv[i]);
        }
    }
    if (o->quick) o->rows = 1024, o->cols = 1024;
    if (!given_n) {
        static const int def[] = {1, 4, 16, 256};
        o->n_ns = o->quick ? 3 : 4;
        memcpy(o->ns, def, sizeof def);
    }
    if (!o->n_types) {
        static const dsr1_type all[] = {DSR1_T_FP8_E4M3, DSR1_T_INT8, DSR1_T_INT4, DSR1_T_BF16};
        memcpy(o->types, all, sizeof all);
        o->n_types = 4;
    }
    return 0;
}

/* Time one (n, act) of matrix m and print its line; with dn, the oneDNN
 * path (act column "onednn", %peak against the bf16 peak). */
static void kernel_line(dsr1_pool *pool, dsr1_dnnl *dn, const bench_mat *m, const float *x,
                        float *y, int n, dsr1_act act, const kernel_opts *o, double membw,
                        const double peak[3], int noamx)
{
    double s = time_matmul(pool, dn, m, x, y, n, act, noamx, o->quick ? 0.05 : 0.4);
    /* FP8 in the fast mode: the GEMV on AMX tiles where the CPU has them
     * (DSR1_MM_FP8_AMX_MIN_N to _MAX_N tokens, "bf16t"), else below W8A8's
     * DSR1_MM_RQ_MIN_N the bf16 line's kernel */
    const int fp8_fast = act == DSR1_ACT_INT8_FAST && m->w.type == DSR1_T_FP8_E4M3;
    const int fp8_tiles = fp8_fast && dsr1_pool_amx(pool) && n >= DSR1_MM_FP8_AMX_MIN_N && n <= DSR1_MM_FP8_AMX_MAX_N;
    const int fp8_gemv = fp8_fast && (fp8_tiles || n < DSR1_MM_RQ_MIN_N);
    const char *name = noamx ? (act == DSR1_ACT_INT8 ? "i8vnni" : "w8vnni")
                       : act == DSR1_ACT_INT8_FAST && m->w.type == DSR1_T_BF16
                           ? (n < DSR1_MM_B16L_MIN_N ? "bf16t" : "bf16l")
                       : fp8_gemv ? (fp8_tiles ? "bf16t" : "bf16")
                                  : act_names[dn ? 4 : act];
    if (s < 0) {
        printf("%-5s %-6s %4d  (oneDNN has no fast kernel for this shape)\n",
               dsr1_type_name(m->w.type), name, n);
        return;
    }
    double gbs = (double)m->bytes / s / 1e9;
    double gflops = 2.0 * (double)m->w.rows * (double)m->w.cols * n / s / 1e9;
    double pk = peak[dn || fp8_gemv || (act == DSR1_ACT_INT8_FAST && m->w.type == DSR1_T_BF16) ? DSR1_ACT_BF16
                     : act == DSR1_ACT_INT8_FAST ? DSR1_ACT_INT8 : act];
    printf("%-5s %-6s %4d %10.3f %9.1f %9.1f %7.0f%% %6.0f%%\n", dsr1_type_name(m->w.type), name, n,
           s * 1e3, gbs, gflops, 100.0 * gbs / membw, pk > 0 ? 100.0 * gflops / pk : 0.0);
    fflush(stdout);
}

static int bench_kernels(int argc, char **argv)
{
    kernel_opts o;
    int rc = parse_kernel_opts(argc, argv, &o);
    if (rc) return rc;
    dsr1_error err = {0};
    dsr1_pool *pool = NULL;
    if (dsr1_pool_create(&pool, o.threads, &err)) return dsr1_cli_fail(&err);
    dsr1_hw hw;
    dsr1_hw_detect(&hw);
    double membw = 0;
    if (measure_membw(pool, o.quick ? 64 : 1024, &membw, &err)) {
        dsr1_pool_free(pool);
        return dsr1_cli_fail(&err);
    }
    int nmax = 1;
    for (int i = 0; i < o.n_ns; i++) nmax = o.ns[i] > nmax ? o.ns[i] : nmax;
    float *x = malloc((size_t)nmax * (size_t)o.cols * sizeof *x);
    float *y = malloc((size_t)nmax * (size_t)o.rows * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        dsr1_pool_free(pool);
        return dsr1_cli_fail(&(dsr1_error){DSR1_ENOMEM, "bench kernels: out of memory"});
    }
    for (size_t i = 0; i < (size_t)nmax * (size_t)o.cols; i++) x[i] = sinf((float)i * 0.37f);
    double peak[3];
    for (int a = 0; a < 3; a++) peak[a] = dsr1_matmul_peak_gflops(pool, (dsr1_act)a);
    printf("kernels: %s, %d threads, W %lldx%lld, membw %.1f GB/s, peak GFLOP/s f32 %.0f bf16 %.0f int8 %.0f\n",
           dsr1_hw_kernels(&hw), dsr1_pool_size(pool), (long long)o.rows, (long long)o.cols, membw,
           peak[0], peak[1], peak[2]);
    dsr1_dnnl *dn = NULL;
    if (dsr1_dnnl_usable() && dsr1_dnnl_create(&dn, &err)) dn = NULL; /* rows skipped */
    printf("%-5s %-6s %4s %10s %9s %9s %8s %7s\n", "type", "act", "n", "ms", "GB/s", "GFLOP/s",
           "%membw", "%peak");
    int status = 0;
    for (int ti = 0; ti < o.n_types && !status; ti++) {
        bench_mat m;
        if (make_mat(&m, o.types[ti], o.rows, o.cols)) {
            status = dsr1_cli_fail(&(dsr1_error){DSR1_ENOMEM, "bench kernels: out of memory"});
        } else {
            /* The fast mode's activations for this type (W8A8, W4A8, else BF16). */
            int a8 = o.types[ti] == DSR1_T_INT8 || o.types[ti] == DSR1_T_INT4;
            dsr1_act fast = a8 ? DSR1_ACT_INT8 : DSR1_ACT_BF16;
            const int au = 0, vnni = 1;
            /* with AMX, W8A8 lines again without the tiles (INT4 stays VNNI) */
            const int amx = dsr1_pool_amx(pool);
            kernel_line(pool, NULL, &m, x, y, 1, DSR1_ACT_F32, &o, membw, peak, au);
            for (int i = 0; i < o.n_ns; i++) kernel_line(pool, NULL, &m, x, y, o.ns[i], fast, &o, membw, peak, au);
            for (int i = 0; i < o.n_ns && amx && o.types[ti] == DSR1_T_INT8; i++)
                if (o.ns[i] >= 32) kernel_line(pool, NULL, &m, x, y, o.ns[i], fast, &o, membw, peak, vnni);
            /* FP8 in the fast mode: the GEMV on AMX tiles where the CPU has
             * them (DSR1_MM_FP8_AMX_MIN_N to _MAX_N tokens, "bf16t"), W8A8 from
             * DSR1_MM_RQ_MIN_N tokens past those, else the bf16 line's kernels
             * (shown from 5 tokens; with AMX from DSR1_MM_FP8_AMX_MIN_N) */
            for (int i = 0; i < o.n_ns && o.types[ti] == DSR1_T_FP8_E4M3; i++)
                if (o.ns[i] > 4 || (amx && o.ns[i] >= DSR1_MM_FP8_AMX_MIN_N))
                    kernel_line(pool, NULL, &m, x, y, o.ns[i], DSR1_ACT_INT8_FAST, &o, membw, peak, au);
            for (int i = 0; i < o.n_ns && amx && o.types[ti] == DSR1_T_FP8_E4M3; i++)
                if (o.ns[i] >= 32)
                    kernel_line(pool, NULL, &m, x, y, o.ns[i], DSR1_ACT_INT8_FAST, &o, membw, peak, vnni);
            /* BF16 in the fast mode: rows in lanes from DSR1_MM_B16L_MIN_N tokens
             * on AVX-512 ("bf16l"; the bf16 line is the canonical order), and
             * with AMX the GEMV of 2 to 16 tokens on the tiles ("bf16t") */
            for (int i = 0; i < o.n_ns && o.types[ti] == DSR1_T_BF16 && hw.kernels_avx512; i++)
                if (o.ns[i] >= DSR1_MM_B16L_MIN_N ||
                    (amx && o.ns[i] >= DSR1_MM_B16_AMX_MIN_N && o.ns[i] <= 16))
                    kernel_line(pool, NULL, &m, x, y, o.ns[i], DSR1_ACT_INT8_FAST, &o, membw, peak, au);
            /* the fast mode's prefill GEMM, at the sizes it may take */
            for (int i = 0; i < o.n_ns && dn; i++)
                if (o.ns[i] >= 16) kernel_line(pool, dn, &m, x, y, o.ns[i], fast, &o, membw, peak, au);
        }
        free(m.data);
        free(m.scale);
    }
    dsr1_dnnl_free(dn);
    free(x);
    free(y);
    dsr1_pool_free(pool);
    return status;
}

int dsr1_cmd_bench(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) return usage(stdout);
    if (argc >= 2 && !strcmp(argv[1], "membw")) return bench_membw(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "kernels")) return bench_kernels(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "tokenize")) return dsr1_bench_tokenize(argc - 1, argv + 1);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--spec")) return dsr1_bench_spec(argc, argv); /* cli/bench_spec.c */
    return dsr1_bench_model(argc, argv); /* cli/bench_model.c */
}
