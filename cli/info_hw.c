/*
 * info_hw.c - `dsr1 info --hw [--json]`: what this machine offers dsr1 -
 * CPU and its vector features (and whether the OS enabled them), the kernel
 * set dsr1 will use, cores, NUMA nodes, memory, GPU runtimes, and the
 * backend `--backend auto` picks, and every backend dsr1 knows with
 * "available" or the reason it is not (the registry, backends/backend.c,
 * through core/dsr1.h). CPU detection is backends/cpu/hw.c; this file only
 * formats.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/cpu/hw.h"
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

static int print_json(const dsr1_hw *hw)
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

static void print_text(const dsr1_hw *hw)
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

int dsr1_info_hw(int json)
{
    dsr1_hw hw;
    dsr1_hw_detect(&hw);
    if (json) return print_json(&hw);
    print_text(&hw);
    return 0;
}
