/*
 * hw.h - what this machine offers dsr1: CPU vector features (cpuid, and
 * whether the OS enabled the state they need), cores, NUMA nodes, memory,
 * GPU runtimes present, and which backend `auto` would pick. Plus the
 * streaming-read bandwidth measurement `dsr1 bench membw` reports.
 *
 * Detection only reads (cpuid, xgetbv, /sys, /proc, dlopen of GPU driver
 * libraries); the one side effect is asking Linux for AMX tile state
 * (arch_prctl ARCH_REQ_XCOMP_PERM), which a process must do before its first
 * AMX instruction anyway.
 */
#ifndef DSR1_CPU_HW_H
#define DSR1_CPU_HW_H

#include <stdint.h>

#include "../../core/error.h"
#include "kernels.h"

typedef struct dsr1_hw {
    char vendor[16];          /* "GenuineIntel", "AuthenticAMD" */
    char cpu_name[64];        /* brand string, trimmed */
    int family, model;        /* display family / model */
    /* cpuid feature bits, each 0/1 */
    int avx2, fma, f16c;
    int avx512f, avx512bw, avx512vl, avx512dq, avx512_bf16, avx512_vnni, avx512_vbmi2;
    int avx512_fp16;
    int amx_tile, amx_bf16, amx_int8;
    int os_avx512;            /* XCR0 enables opmask/zmm state */
    int os_amx;               /* Linux granted AMX tile data (ARCH_REQ_XCOMP_PERM) */
    int kernels_avx512;       /* dsr1's AVX-512 kernels will run */
    int logical_cpus;         /* CPUs this process may run on */
    int physical_cores;       /* distinct (package, core) among them */
    int numa_nodes;           /* configured nodes (1 without libnuma support) */
    uint64_t mem_total, mem_available; /* bytes, from /proc/meminfo */
    uint64_t l2_bytes, l3_bytes;       /* per core / shared, 0 if unknown */
    int cuda_devices;         /* -1: libcuda not loadable; else device count */
    int hip_devices;          /* -1: libamdhip64 not loadable */
    char cuda_note[96], hip_note[96]; /* why -1 / driver error, or "" */
} dsr1_hw;

/* Fill hw. Never fails hard: what cannot be found is 0 / -1 / "". */
void dsr1_hw_detect(dsr1_hw *hw);

/* The backend `--backend auto` chooses ("cpu": no GPU backend is built). */
const char *dsr1_hw_backend(const dsr1_hw *hw);

/* Short description of the CPU kernel set: "avx512-bf16-vnni-vbmi" (the
 * FP8 byte-table decode runs), "avx512-bf16-vnni" or "portable". */
const char *dsr1_hw_kernels(const dsr1_hw *hw);

/* The bandwidth probe (membw.c). A buffer of `bytes` is read in every
 * configuration below, the configurations interleaved pass by pass (so a
 * burst of load from other processes hits them all alike), `reps` passes
 * each:
 *   threads  1 .. pool size (tasks run on that many pool threads);
 *   split    "blocks": each thread one contiguous share read straight
 *            through; "stripes": 64 KiB stripes dealt round-robin
 *            (threads close together in memory); "rows": each thread
 *            one contiguous share read as rows of 14336 bytes, eight side
 *            by side (what a large GEMV's row split reads: eight
 *            streams a thread);
 *   prefetch software prefetch distance in bytes, 0 = none (AVX-512 only:
 *            0, 2048, 8192; the portable loop has none);
 *   pages    2 MiB (madvise MADV_HUGEPAGE) or 4 KiB (MADV_NOHUGEPAGE,
 *            what a file mapping such as a model's weights gets).
 * For each: the median and best pass in bytes/s. */
enum { DSR1_MEMBW_BLOCKS, DSR1_MEMBW_STRIPES, DSR1_MEMBW_ROWS };

typedef struct dsr1_membw_cfg {
    int threads, split, prefetch, huge; /* split: DSR1_MEMBW_* */
    double median, best; /* bytes/s */
} dsr1_membw_cfg;

#define DSR1_MEMBW_MAX_CFG 256

/* Fills cfg[0..*n) (at most DSR1_MEMBW_MAX_CFG; thread counts beyond what
 * fits are skipped) and returns in *bound the best pass of all: what this
 * machine can stream, the honest denominator of "% of bound". max_threads
 * 0: the pool's size. DSR1_ENOMEM when the buffers cannot be allocated. */
int dsr1_hw_membw_probe(dsr1_pool *p, size_t bytes, int reps, int max_threads, dsr1_membw_cfg *cfg,
                        int *n, double *bound, dsr1_error *err);

/* One task's read in the probe: `bytes` read once in a split's pattern
 * (DSR1_MEMBW_BLOCKS or _ROWS; _STRIPES reads each stripe as a block),
 * with the AVX-512 loops (avx512 = 1, only where dsr1_mm_avx512_usable())
 * and `prefetch` as above, or the portable ones (avx512 = 0, no
 * prefetch). Returns the XOR of every 64-bit word read when bytes is a
 * multiple of 256, whichever the pattern or loops. */
uint64_t dsr1_hw_membw_read(const void *buf, size_t bytes, int split, int prefetch, int avx512);

/* The bound alone (the probe above with every thread count of the pool). */
int dsr1_hw_membw(dsr1_pool *p, size_t bytes, int reps, double *bytes_per_s,
                  dsr1_error *err);

#endif
