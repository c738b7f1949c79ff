/*
 * cuda_compat.h - the one name-mapping header that lets the CUDA sources of
 * backends/cuda/ compile with hipcc for AMD GPUs (gfx90a, gfx942) too.
 *
 * Every .cu file of the backend includes this instead of the CUDA headers
 * and uses only the names defined here (DSR1_GPU_*, dsr1_gpu*) for runtime
 * calls, so the HIP build is the same source with other spellings, not a
 * fork. Also owns the warp width: DSR1_WARP is 32 on NVIDIA and 64 on CDNA
 * (wave64); kernels size their lanes, shuffles and reductions from it and
 * never from a literal 32.
 *
 * Does not: choose kernels per device (that is cuda_backend.cu reading the
 * device properties), or map cuBLASLt (the block-scaled FP8 GEMM is
 * CUDA-only; the HIP build uses the backend's own kernels and says so).
 */
#ifndef DSR1_CUDA_COMPAT_H
#define DSR1_CUDA_COMPAT_H

#if defined(__HIPCC__) || defined(DSR1_HIP)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#define DSR1_GPU_HIP 1
#define DSR1_GPU_NAME "hip"
typedef hipStream_t dsr1_gpuStream;
typedef hipEvent_t dsr1_gpuEvent;
typedef hipError_t dsr1_gpuError;
typedef hipDeviceProp_t dsr1_gpuDeviceProp;
typedef hipGraph_t dsr1_gpuGraph;
typedef hipGraphExec_t dsr1_gpuGraphExec;
#define dsr1_gpuSuccess hipSuccess
#define dsr1_gpuGetErrorString hipGetErrorString
#define dsr1_gpuGetLastError hipGetLastError
#define dsr1_gpuGetDeviceCount hipGetDeviceCount
#define dsr1_gpuGetDeviceProperties hipGetDeviceProperties
#define dsr1_gpuSetDevice hipSetDevice
#define dsr1_gpuDriverGetVersion hipDriverGetVersion
#define dsr1_gpuRuntimeGetVersion hipRuntimeGetVersion
#define dsr1_gpuMalloc hipMalloc
#define dsr1_gpuFree hipFree
#define dsr1_gpuMallocHost hipHostMalloc
#define dsr1_gpuFreeHost hipHostFree
#define dsr1_gpuMemcpyAsync hipMemcpyAsync
#define dsr1_gpuMemcpy2DAsync hipMemcpy2DAsync
#define dsr1_gpuMemcpy hipMemcpy
#define dsr1_gpuMemsetAsync hipMemsetAsync
#define dsr1_gpuMemGetInfo hipMemGetInfo
#define dsr1_gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define dsr1_gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define dsr1_gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define dsr1_gpuStreamCreate hipStreamCreate
#define dsr1_gpuStreamDestroy hipStreamDestroy
#define dsr1_gpuStreamSynchronize hipStreamSynchronize
#define dsr1_gpuStreamBeginCapture(s) hipStreamBeginCapture((s), hipStreamCaptureModeThreadLocal)
#define dsr1_gpuStreamEndCapture hipStreamEndCapture
#define dsr1_gpuGraphInstantiate(e, g) hipGraphInstantiate((e), (g), NULL, NULL, 0)
#define dsr1_gpuGraphLaunch hipGraphLaunch
#define dsr1_gpuGraphDestroy hipGraphDestroy
#define dsr1_gpuGraphExecDestroy hipGraphExecDestroy
#define dsr1_gpuEventCreate hipEventCreate
#define dsr1_gpuEventDestroy hipEventDestroy
#define dsr1_gpuEventRecord hipEventRecord
#define dsr1_gpuEventSynchronize hipEventSynchronize
#define dsr1_gpuEventElapsedTime hipEventElapsedTime
#define dsr1_gpuFuncSetMaxDynSmem(f, b) \
    hipFuncSetAttribute((const void *)(f), hipFuncAttributeMaxDynamicSharedMemorySize, (b))
/* CDNA (gfx90a, gfx942) runs 64-wide wavefronts. */
#define DSR1_WARP 64
#define DSR1_SHFL_XOR(v, m) __shfl_xor((v), (m), DSR1_WARP)
#define DSR1_SHFL(v, l) __shfl((v), (l), DSR1_WARP)
/* MI300's FP8 is e4m3fnuz (bias 8, no -0, 0x80 = NaN): the upload step
 * converts OCP e4m3fn bytes (dsr1_fp8_fn_to_fnuz below); the kernels decode
 * bytes in the stored form, so they read fnuz here. */
#define DSR1_FP8_FNUZ 1
#else
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#define DSR1_GPU_HIP 0
#define DSR1_GPU_NAME "cuda"
typedef cudaStream_t dsr1_gpuStream;
typedef cudaEvent_t dsr1_gpuEvent;
typedef cudaError_t dsr1_gpuError;
typedef cudaDeviceProp dsr1_gpuDeviceProp;
typedef cudaGraph_t dsr1_gpuGraph;
typedef cudaGraphExec_t dsr1_gpuGraphExec;
#define dsr1_gpuSuccess cudaSuccess
#define dsr1_gpuGetErrorString cudaGetErrorString
#define dsr1_gpuGetLastError cudaGetLastError
#define dsr1_gpuGetDeviceCount cudaGetDeviceCount
#define dsr1_gpuGetDeviceProperties cudaGetDeviceProperties
#define dsr1_gpuSetDevice cudaSetDevice
#define dsr1_gpuDriverGetVersion cudaDriverGetVersion
#define dsr1_gpuRuntimeGetVersion cudaRuntimeGetVersion
#define dsr1_gpuMalloc cudaMalloc
#define dsr1_gpuFree cudaFree
#define dsr1_gpuMallocHost cudaMallocHost
#define dsr1_gpuFreeHost cudaFreeHost
#define dsr1_gpuMemcpyAsync cudaMemcpyAsync
#define dsr1_gpuMemcpy2DAsync cudaMemcpy2DAsync
#define dsr1_gpuMemcpy cudaMemcpy
#define dsr1_gpuMemsetAsync cudaMemsetAsync
#define dsr1_gpuMemGetInfo cudaMemGetInfo
#define dsr1_gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define dsr1_gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define dsr1_gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define dsr1_gpuStreamCreate cudaStreamCreate
#define dsr1_gpuStreamDestroy cudaStreamDestroy
#define dsr1_gpuStreamSynchronize cudaStreamSynchronize
#define dsr1_gpuStreamBeginCapture(s) cudaStreamBeginCapture((s), cudaStreamCaptureModeThreadLocal)
#define dsr1_gpuStreamEndCapture cudaStreamEndCapture
#define dsr1_gpuGraphInstantiate(e, g) cudaGraphInstantiate((e), (g), 0)
#define dsr1_gpuGraphLaunch cudaGraphLaunch
#define dsr1_gpuGraphDestroy cudaGraphDestroy
#define dsr1_gpuGraphExecDestroy cudaGraphExecDestroy
#define dsr1_gpuEventCreate cudaEventCreate
#define dsr1_gpuEventDestroy cudaEventDestroy
#define dsr1_gpuEventRecord cudaEventRecord
#define dsr1_gpuEventSynchronize cudaEventSynchronize
#define dsr1_gpuEventElapsedTime cudaEventElapsedTime
#define dsr1_gpuFuncSetMaxDynSmem(f, b) \
    cudaFuncSetAttribute((f), cudaFuncAttributeMaxDynamicSharedMemorySize, (b))
#define DSR1_WARP 32
#define DSR1_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m), DSR1_WARP)
#define DSR1_SHFL(v, l) __shfl_sync(0xffffffffu, (v), (l), DSR1_WARP)
#define DSR1_FP8_FNUZ 0
#endif

/* The warp width as the kernels see it: one constant per build. */
#define DSR1_WARP_LOG2 (DSR1_WARP == 64 ? 6 : 5)

#endif
