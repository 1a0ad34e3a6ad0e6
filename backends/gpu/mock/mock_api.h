// The mock runtime's dialect: its sources spell the CUDA runtime API; built for a ROCm build
// (-DAITMOCK_HIP, aitgen/codegen/mock_build.py) that spelling maps to HIP's through the shared
// runtime's own header (rocm/include/aitgen/gpu_runtime_api.h) plus the names below, so the same
// mock serves both and its entry points are the ones a hipcc-built library calls. Where a
// signature differs (graph update, kernel registration and launch configuration) the .cpp files
// have both forms.
#ifndef AITGEN_MOCK_API_H_
#define AITGEN_MOCK_API_H_

#ifdef AITMOCK_HIP
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
// The runtime's own mapping (backends/rocm/include, on the mock's include path): the mock answers
// exactly the calls the shared runtime makes. Below: the names only the mock itself uses.
#include "aitgen/gpu_runtime_api.h"

#define AITMOCK_RUNTIME_NAME "HIP"
#define AITMOCK_WARP_SIZE 64
// types and enums
#define cudaStreamCaptureMode hipStreamCaptureMode
#define cudaFuncAttribute hipFuncAttribute
#define cudaDeviceAttr hipDeviceAttribute_t
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaErrorInvalidResourceHandle hipErrorInvalidResourceHandle
#define cudaErrorInvalidConfiguration hipErrorInvalidConfiguration
#define cudaErrorStreamCaptureUnsupported hipErrorStreamCaptureUnsupported
#define cudaErrorStreamCaptureInvalidated hipErrorStreamCaptureInvalidated
#define cudaErrorStreamCaptureImplicit hipErrorStreamCaptureImplicit
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaErrorInvalidDeviceFunction hipErrorInvalidDeviceFunction
#define cudaErrorUnknown hipErrorUnknown
#define cudaErrorIllegalAddress hipErrorIllegalAddress
#define cudaErrorInvalidDevice hipErrorInvalidDevice
#define cudaErrorIllegalState hipErrorIllegalState
#define cudaErrorGraphExecUpdateFailure hipErrorGraphExecUpdateFailure
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define cudaDevAttrWarpSize hipDeviceAttributeWarpSize
#define cudaDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeSharedMemPerBlockOptin
#define cudaDevAttrMaxSharedMemoryPerMultiprocessor hipDeviceAttributeMaxSharedMemoryPerMultiprocessor
#define cudaDevAttrMaxSharedMemoryPerBlock hipDeviceAttributeMaxSharedMemoryPerBlock
#define cudaDevAttrMaxThreadsPerBlock hipDeviceAttributeMaxThreadsPerBlock
#define cudaDevAttrMaxThreadsPerMultiProcessor hipDeviceAttributeMaxThreadsPerMultiProcessor
#define cudaDevAttrL2CacheSize hipDeviceAttributeL2CacheSize
// functions
#define cudaPeekAtLastError hipPeekAtLastError
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaHostAlloc hipHostMalloc
#define cudaLaunchKernel hipLaunchKernel
#define cudaFuncSetAttribute hipFuncSetAttribute
#define cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags hipOccupancyMaxActiveBlocksPerMultiprocessorWithFlags
#define cudaStreamCreate hipStreamCreate
#define cudaEventCreate hipEventCreate
#define cudaEventSynchronize hipEventSynchronize
#define cudaGraphExecUpdate hipGraphExecUpdate

#else
#include <cuda.h>
#include <cuda_runtime_api.h>

#define AITMOCK_RUNTIME_NAME "CUDA"
#define AITMOCK_WARP_SIZE 32
#endif

#endif  // AITGEN_MOCK_API_H_
