/*
 * info_hw.c - `dsr1 info --hw [--json]`: what this machine offers dsr1 -
 * CPU and its vector features (and whether the OS enabled them), the kernel
 * set dsr1 will use, cores, NUMA nodes, memory, GPU runtimes, and the
 * backend `--backend auto` picks, and every backend dsr1 knows with
 * "available" or the reason it is not (the registry, backends/backend.c,
 * through core/dsr1.h). CPU detection is backends/cpu/hw.c; this file only
 * formats. The NUMA split (--numa, backends/cpu/numa.c): each node's CPUs,
 * threads, memory node and the routed experts of a 256-expert layer
 * (DeepSeek-V3/R1, all the same size) it would run.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/cpu/hw.h"
#include "backends/cpu/numa.h"
#include "cli.h"
#include "common.h"

typedef struct feature {
    const char *name;
    int on;
} feature;

/* The CPU features dsr1's kernels care about, in a fixed order. */
static int features(const dsr1_hw *hw, feature *f)
{
    int n = 0;
    f[n++] = (feature){"avx2", hw->avx2};
    f[n++] = (feature){"fma", hw->fma};
    f[n++] = (feature){"f16c", hw->f16c};
    f[n++] = (feature){"avx512f", hw->avx512f};
    f[n++] = (feature){"avx512bw", hw->avx512bw};
    f[n++] = (feature){"avx512vl", hw->avx512vl};
    f[n++] = (feature){"avx512dq", hw->avx512dq};
    f[n++] = (feature){"avx512_bf16", hw->avx512_bf16};
    f[n++] = (feature){"avx512_vnni", hw->avx512_vnni};
    f[n++] = (feature){"avx512_vbmi2", hw->avx512_vbmi2};
    f[n++] = (feature){"avx512_fp16", hw->avx512_fp16};
    f[n++] = (feature){"amx_tile", hw->amx_tile};
    f[n++] = (feature){"amx_bf16", hw->amx_bf16};
    f[n++] = (feature){"amx_int8", hw->amx_int8};
    return n;
}

static const char *gpu_state(int devices, char *buf, size_t cap)
{
    if (devices < 0) return "no driver";
    snprintf(buf, cap, "%d device%s, backend not built", devices, devices == 1 ? "" : "s");
    return buf;
}

/* The backend `auto` takes: the first available in the registry's order. */
static const char *auto_pick(const dsr1_backend_info *bi, int n)
{
    for (int i = 0; i < n; i++)
        if (bi[i].available) return bi[i].name;
    return "none";
}

/* The split the CPU backend would make: topology, threads, experts. */
typedef struct numa_view {
    dsr1_numa_topo t;
    int threads[DSR1_NUMA_MAX_NODES];
    int expert[256];
    char mode[96];
} numa_view;

#define VIEW_EXPERTS 256

static int numa_view_init(numa_view *v, int want, int threads, int cpus)
{
    dsr1_error err;
    if (dsr1_numa_topo_init(&v->t, want, &err)) {
        fprintf(stderr, "dsr1: info --hw: %s\n", err.msg);
        return 1;
    }
    dsr1_numa_threads(&v->t, threads > 0 ? threads : cpus > 0 ? cpus : 1, v->threads);
    uint64_t bytes[VIEW_EXPERTS];
    for (int e = 0; e < VIEW_EXPERTS; e++) bytes[e] = 1;
    dsr1_numa_partition(bytes, VIEW_EXPERTS, v->t.n_nodes, v->expert, NULL);
    dsr1_numa_describe(&v->t, v->mode, sizeof v->mode);
    return 0;
}

/* "0,2,4,..,254 (128)": the first few and the last of node k's experts. */
static void expert_list(const numa_view *v, int k, char *buf, size_t cap)
{
    int n = 0, last = -1;
    size_t len = 0;
    buf[0] = 0;
    for (int e = 0; e < VIEW_EXPERTS; e++) {
        if (v->expert[e] != k) continue;
        if (n < 4 && len < cap) len += (size_t)snprintf(buf + len, cap - len, "%s%d", n ? "," : "", e);
        last = e;
        n++;
    }
    if (n > 4 && len < cap) len += (size_t)snprintf(buf + len, cap - len, ",..,%d", last);
    if (len < cap) snprintf(buf + len, cap - len, " (%d of %d)", n, VIEW_EXPERTS);
}

static void cpu_list(const numa_view *v, int k, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = v->t.first[k]; i < v->t.first[k + 1] && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", i > v->t.first[k] ? "," : "", v->t.cpus[i]);
}

static void numa_json(cJSON *o, const numa_view *v)
{
    cJSON *n = cJSON_AddObjectToObject(o, "numa");
    cJSON_AddStringToObject(n, "split", v->mode);
    cJSON_AddBoolToObject(n, "virtual", v->t.is_virtual);
    cJSON *arr = cJSON_AddArrayToObject(n, "nodes");
    for (int k = 0; k < v->t.n_nodes; k++) {
        cJSON *nd = cJSON_CreateObject();
        cJSON_AddNumberToObject(nd, "node", k);
        cJSON_AddNumberToObject(nd, "memory_node", v->t.phys[k]);
        cJSON_AddNumberToObject(nd, "threads", v->threads[k]);
        cJSON *c = cJSON_AddArrayToObject(nd, "cpus");
        for (int i = v->t.first[k]; i < v->t.first[k + 1]; i++)
            cJSON_AddItemToArray(c, cJSON_CreateNumber(v->t.cpus[i]));
        cJSON *ex = cJSON_AddArrayToObject(nd, "experts_of_256");
        for (int e = 0; e < VIEW_EXPERTS; e++)
            if (v->expert[e] == k) cJSON_AddItemToArray(ex, cJSON_CreateNumber(e));
        cJSON_AddItemToArray(arr, nd);
    }
}

static void numa_text(const numa_view *v)
{
    printf("numa split: %s\n", v->mode);
    for (int k = 0; k < v->t.n_nodes; k++) {
        char c[256], e[96];
        cpu_list(v, k, c, sizeof c);
        expert_list(v, k, e, sizeof e);
        printf("  node %d:   cpus %s; %d thread%s; memory node %d; experts %s\n", k, c, v->threads[k],
               v->threads[k] == 1 ? "" : "s", v->t.phys[k], e);
    }
}

static int print_json(const dsr1_hw *hw, const numa_view *v)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *cpu = cJSON_AddObjectToObject(o, "cpu");
    cJSON_AddStringToObject(cpu, "vendor", hw->vendor);
    cJSON_AddStringToObject(cpu, "name", hw->cpu_name);
    cJSON_AddNumberToObject(cpu, "family", hw->family);
    cJSON_AddNumberToObject(cpu, "model", hw->model);
    cJSON *fl = cJSON_AddObjectToObject(cpu, "features");
    feature f[32];
    int nf = features(hw, f);
    for (int i = 0; i < nf; i++) cJSON_AddBoolToObject(fl, f[i].name, f[i].on);
    cJSON_AddBoolToObject(cpu, "os_avx512_state", hw->os_avx512);
    cJSON_AddBoolToObject(cpu, "os_amx_permission", hw->os_amx);
    cJSON_AddStringToObject(cpu, "kernels", dsr1_hw_kernels(hw));
    cJSON_AddNumberToObject(cpu, "logical_cpus", hw->logical_cpus);
    cJSON_AddNumberToObject(cpu, "physical_cores", hw->physical_cores);
    cJSON_AddNumberToObject(cpu, "l2_bytes", (double)hw->l2_bytes);
    cJSON_AddNumberToObject(cpu, "l3_bytes", (double)hw->l3_bytes);
    cJSON_AddNumberToObject(o, "numa_nodes", hw->numa_nodes);
    numa_json(o, v);
    cJSON *mem = cJSON_AddObjectToObject(o, "memory");
    cJSON_AddNumberToObject(mem, "total_bytes", (double)hw->mem_total);
    cJSON_AddNumberToObject(mem, "available_bytes", (double)hw->mem_available);
    cJSON *gpu = cJSON_AddObjectToObject(o, "gpu");
    cJSON *cu = cJSON_AddObjectToObject(gpu, "cuda");
    cJSON_AddNumberToObject(cu, "devices", hw->cuda_devices < 0 ? 0 : hw->cuda_devices);
    cJSON_AddBoolToObject(cu, "driver", hw->cuda_devices >= 0);
    cJSON_AddBoolToObject(cu, "built", 0);
    cJSON *hip = cJSON_AddObjectToObject(gpu, "hip");
    cJSON_AddNumberToObject(hip, "devices", hw->hip_devices < 0 ? 0 : hw->hip_devices);
    cJSON_AddBoolToObject(hip, "driver", hw->hip_devices >= 0);
    cJSON_AddBoolToObject(hip, "built", 0);
    dsr1_backend_info bi[8];
    int nb = dsr1_backends(bi, 8);
    cJSON_AddStringToObject(o, "backend", auto_pick(bi, nb));
    cJSON *arr = cJSON_AddArrayToObject(o, "backends");
    for (int i = 0; i < nb; i++) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "name", bi[i].name);
        cJSON_AddBoolToObject(b, "available", bi[i].available);
        cJSON_AddStringToObject(b, bi[i].available ? "note" : "reason", bi[i].why);
        cJSON_AddItemToArray(arr, b);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) {
        fprintf(stderr, "dsr1: info --hw: out of memory\n");
        return 1;
    }
    printf("%s\n", s);
    free(s);
    return 0;
}

static void print_text(const dsr1_hw *hw, const numa_view *v)
{
    char a[32], b[32], g[96];
    printf("cpu:        %s (%s family %d model %d)\n", hw->cpu_name[0] ? hw->cpu_name : "unknown",
           hw->vendor[0] ? hw->vendor : "?", hw->family, hw->model);
    printf("features:  ");
    feature f[32];
    int nf = features(hw, f), any = 0;
    for (int i = 0; i < nf; i++)
        if (f[i].on) printf(" %s", f[i].name), any = 1;
    printf("%s\n", any ? "" : " (none of interest)");
    printf("os state:   avx512 %s, amx %s\n", hw->os_avx512 ? "enabled" : "disabled",
           !hw->amx_tile ? "not present" : hw->os_amx ? "granted" : "refused by the kernel");
    printf("kernels:    %s\n", dsr1_hw_kernels(hw));
    printf("cores:      %d physical, %d logical CPUs usable\n", hw->physical_cores, hw->logical_cpus);
    printf("caches:     L2 %s per core, L3 %s\n", dsr1_common_bytes((double)hw->l2_bytes, a, sizeof a),
           dsr1_common_bytes((double)hw->l3_bytes, b, sizeof b));
    printf("numa:       %d node%s\n", hw->numa_nodes, hw->numa_nodes == 1 ? "" : "s");
    numa_text(v);
    printf("memory:     %s total, %s available\n", dsr1_common_bytes((double)hw->mem_total, a, sizeof a),
           dsr1_common_bytes((double)hw->mem_available, b, sizeof b));
    printf("cuda:       %s\n", gpu_state(hw->cuda_devices, g, sizeof g));
    printf("hip:        %s\n", gpu_state(hw->hip_devices, g, sizeof g));
    dsr1_backend_info bi[8];
    int nb = dsr1_backends(bi, 8);
    printf("backend:    %s (what --backend auto picks)\n", auto_pick(bi, nb));
    for (int i = 0; i < nb; i++)
        printf("%s %-5s %s (%s)\n", i ? "           " : "backends:  ", bi[i].name,
               bi[i].available ? "available" : "not available", bi[i].why);
}

int dsr1_info_hw(int json, int numa, int threads)
{
    dsr1_hw hw;
    dsr1_hw_detect(&hw);
    numa_view *v = malloc(sizeof *v); /* the topology holds 1024 CPUs: not on the stack */
    if (!v) {
        fprintf(stderr, "dsr1: info --hw: out of memory\n");
        return 1;
    }
    int rc = numa_view_init(v, numa, threads, hw.logical_cpus);
    if (!rc && json) rc = print_json(&hw, v);
    else if (!rc) print_text(&hw, v);
    free(v);
    return rc;
}
