/*
 * hw.c - hardware detection (see hw.h); the bandwidth probe is membw.c.
 *
 * Does not: choose thread counts or print anything (cli/info_hw.c reports),
 * or initialise GPU contexts beyond counting devices.
 *
 * GPU runtimes are probed with dlopen so the binary never links them: a
 * machine without a driver simply reports "not present".
 */
#include "hw.h"

#include <ctype.h>
#include <dlfcn.h>
#include <numa.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "matmul_impl.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

/* ---- CPU features ------------------------------------------------------------- */

#if defined(__x86_64__)
static void brand_string(dsr1_hw *hw)
{
    unsigned r[12], a, b, c, d;
    if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x80000004) return;
    for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002 + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    char s[49];
    memcpy(s, r, 48);
    s[48] = 0;
    char *p = s;
    while (*p == ' ') p++;
    size_t n = strlen(p);
    while (n && isspace((unsigned char)p[n - 1])) p[--n] = 0;
    snprintf(hw->cpu_name, sizeof hw->cpu_name, "%s", p);
}

static void cpu_features(dsr1_hw *hw)
{
    unsigned a = 0, b = 0, c = 0, d = 0, max = 0;
    if (!__get_cpuid(0, &max, &b, &c, &d)) return;
    memcpy(hw->vendor, &b, 4);
    memcpy(hw->vendor + 4, &d, 4);
    memcpy(hw->vendor + 8, &c, 4);
    hw->vendor[12] = 0;
    brand_string(hw);
    __get_cpuid(1, &a, &b, &c, &d);
    int fam = (a >> 8) & 15, mod = (a >> 4) & 15;
    if (fam == 15) fam += (a >> 20) & 0xff;
    if (fam == 6 || fam >= 15) mod |= ((a >> 16) & 15) << 4;
    hw->family = fam;
    hw->model = mod;
    hw->fma = (c >> 12) & 1;
    hw->f16c = (c >> 29) & 1;
    int osxsave = (c >> 27) & 1;
    unsigned xlo = 0, xhi = 0;
    if (osxsave) __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    hw->os_avx512 = (xlo & 0xe6) == 0xe6;
    if (max < 7) return;
    __get_cpuid_count(7, 0, &a, &b, &c, &d);
    hw->avx2 = (b >> 5) & 1;
    hw->avx512f = (b >> 16) & 1;
    hw->avx512dq = (b >> 17) & 1;
    hw->avx512bw = (b >> 30) & 1;
    hw->avx512vl = (b >> 31) & 1;
    hw->avx512_vbmi2 = (c >> 6) & 1;
    hw->avx512_vnni = (c >> 11) & 1;
    hw->avx512_fp16 = (d >> 23) & 1;
    hw->amx_bf16 = (d >> 22) & 1;
    hw->amx_tile = (d >> 24) & 1;
    hw->amx_int8 = (d >> 25) & 1;
    __get_cpuid_count(7, 1, &a, &b, &c, &d);
    hw->avx512_bf16 = (a >> 5) & 1;
    hw->os_amx = hw->amx_tile && ((xlo >> 17) & 3) == 3 ? dsr1_mm_amx_permit() : 0;
}
#else
static void cpu_features(dsr1_hw *hw) { (void)hw; }
#endif

/* ---- topology and memory ---------------------------------------------------------- */

static long read_long(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

/* "1024K" / "32M" from sysfs cache size files. */
static uint64_t read_size(const char *path)
{
    FILE *f = fopen(path, "r");
    unsigned long v = 0;
    char unit = 0;
    if (f) {
        if (fscanf(f, "%lu%c", &v, &unit) < 1) v = 0;
        fclose(f);
    }
    return (uint64_t)v * (unit == 'K' ? 1024u : unit == 'M' ? 1048576u : 1u);
}

static void topology(dsr1_hw *hw)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) CPU_ZERO(&set);
    hw->logical_cpus = CPU_COUNT(&set);
    long seen[1024][2];
    int nseen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && nseen < 1024; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        char p[128];
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        long pkg = read_long(p);
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        long core = read_long(p);
        int dup = 0;
        for (int i = 0; i < nseen && !dup; i++) dup = seen[i][0] == pkg && seen[i][1] == core;
        if (!dup || core < 0) {
            seen[nseen][0] = pkg;
            seen[nseen][1] = core;
            nseen++;
        }
    }
    hw->physical_cores = nseen ? nseen : hw->logical_cpus;
    hw->numa_nodes = numa_available() >= 0 ? numa_num_configured_nodes() : 1;
    if (hw->numa_nodes < 1) hw->numa_nodes = 1;
    hw->l2_bytes = read_size("/sys/devices/system/cpu/cpu0/cache/index2/size");
    hw->l3_bytes = read_size("/sys/devices/system/cpu/cpu0/cache/index3/size");
}

static void memory(dsr1_hw *hw)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) hw->mem_total = kb * 1024;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) hw->mem_available = kb * 1024;
    }
    fclose(f);
}

/* ---- GPU runtimes -------------------------------------------------------------------- */

static int count_gpus(const char *lib, const char *init, const char *count, char *note,
                      size_t notesz)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(note, notesz, "%s not found", lib);
        return -1;
    }
    int (*fn_init)(unsigned) = init ? (int (*)(unsigned))dlsym(h, init) : NULL;
    int (*fn_count)(int *) = (int (*)(int *))dlsym(h, count);
    int n = 0, rc = -1;
    if (fn_count && (!init || (fn_init && fn_init(0) == 0))) rc = fn_count(&n);
    if (rc != 0) {
        snprintf(note, notesz, "%s loaded but %s failed (code %d)", lib, count, rc);
        n = 0;
    } else {
        note[0] = 0;
    }
    dlclose(h);
    return n;
}

void dsr1_hw_detect(dsr1_hw *hw)
{
    memset(hw, 0, sizeof *hw);
    cpu_features(hw);
    hw->kernels_avx512 = dsr1_mm_avx512_usable();
    topology(hw);
    memory(hw);
    hw->cuda_devices = count_gpus("libcuda.so.1", "cuInit", "cuDeviceGetCount", hw->cuda_note,
                                  sizeof hw->cuda_note);
    hw->hip_devices = count_gpus("libamdhip64.so", NULL, "hipGetDeviceCount", hw->hip_note,
                                 sizeof hw->hip_note);
}

const char *dsr1_hw_backend(const dsr1_hw *hw)
{
    (void)hw; /* GPU backends are not built yet: auto is always the CPU */
    return "cpu";
}

const char *dsr1_hw_kernels(const dsr1_hw *hw)
{
    (void)hw; /* "avx512-...", "avx2-fma" or "portable": what dsr1_matmul runs here */
    return dsr1_mm_kernels_name();
}
