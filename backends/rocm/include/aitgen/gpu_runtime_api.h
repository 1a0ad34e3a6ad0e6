// The GPU runtime API of the shared sources (backends/gpu/) on ROCm: the CUDA runtime names they are
// written in, mapped to HIP. The CUDA spelling is the shared dialect (backends/cuda/include/aitgen/
// gpu_runtime_api.h is the identity), so the runtime is one file, not a hipify'd copy that drifts.
// Only names the shared sources use are here; each was checked against HIP 5.2's
// hip/hip_runtime_api.h. Where HIP's function has another signature, the shared source has an
// `#if AITGEN_GPU_HIP` instead of a macro here that would change the meaning of a call.
#ifndef AITGEN_GPU_RUNTIME_API_H_
#define AITGEN_GPU_RUNTIME_API_H_

#include <hip/hip_runtime.h>

#define AITGEN_GPU_HIP 1

// Types.
#define cudaError_t hipError_t
#define cudaStream_t hipStream_t
#define cudaEvent_t hipEvent_t
#define cudaGraph_t hipGraph_t
#define cudaGraphExec_t hipGraphExec_t
#define cudaMemcpyKind hipMemcpyKind

// Constants.
#define cudaSuccess hipSuccess
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define cudaDevAttrComputeCapabilityMajor hipDeviceAttributeComputeCapabilityMajor
#define cudaDevAttrComputeCapabilityMinor hipDeviceAttributeComputeCapabilityMinor
// HIP 5.2 has no hipStreamLegacy: its null stream is the legacy default stream (it synchronises
// with every blocking stream), which is what the runtime orders a run after.
#define cudaStreamLegacy (static_cast<hipStream_t>(nullptr))

// Errors and devices.
#define cudaGetLastError hipGetLastError
#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDevice hipGetDevice
#define cudaSetDevice hipSetDevice
#define cudaDeviceGetAttribute hipDeviceGetAttribute

// Memory. Pinned host memory: hipMallocHost is deprecated in favour of hipHostMalloc.
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMallocHost hipHostMalloc
#define cudaFreeHost hipHostFree
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemset hipMemset
#define cudaMemsetAsync hipMemsetAsync

// Streams and events.
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDestroy hipEventDestroy
#define cudaEventRecord hipEventRecord

// Graphs. CUDA 12's cudaGraphInstantiate(exec, graph, flags) is HIP's ...WithFlags (HIP's own
// hipGraphInstantiate has CUDA 11's five arguments). cudaGraphExecUpdate differs: see the #if in
// gpu_runtime.cu.
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaGraphDestroy hipGraphDestroy
#define cudaGraphExecDestroy hipGraphExecDestroy
#define cudaGraphInstantiate hipGraphInstantiateWithFlags
#define cudaGraphLaunch hipGraphLaunch

#endif  // AITGEN_GPU_RUNTIME_API_H_
