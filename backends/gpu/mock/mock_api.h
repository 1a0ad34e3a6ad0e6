// The mock runtime's dialect: its sources spell the CUDA runtime API; built for a ROCm build
// (-DAITMOCK_HIP, aitgen/codegen/mock_build.py) the names below map that spelling to HIP's, so
// the same mock serves both and its entry points are the ones a hipcc-built library calls. HIP
// mirrors CUDA name for name for everything here; where a signature differs (graph instantiate
// and update, kernel registration and launch configuration) the .cpp files have both forms.
#ifndef AITGEN_MOCK_API_H_
#define AITGEN_MOCK_API_H_

#ifdef AITMOCK_HIP
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

#define AITMOCK_RUNTIME_NAME "HIP"
#define AITMOCK_WARP_SIZE 64
// types and enums
#define cudaError_t hipError_t
#define cudaStream_t hipStream_t
#define cudaEvent_t hipEvent_t
#define cudaGraph_t hipGraph_t
#define cudaGraphExec_t hipGraphExec_t
#define cudaMemcpyKind hipMemcpyKind
#define cudaStreamCaptureMode hipStreamCaptureMode
#define cudaFuncAttribute hipFuncAttribute
#define cudaDeviceAttr hipDeviceAttribute_t
#define cudaSuccess hipSuccess
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
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define cudaDevAttrWarpSize hipDeviceAttributeWarpSize
#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define cudaDevAttrComputeCapabilityMajor hipDeviceAttributeComputeCapabilityMajor
#define cudaDevAttrComputeCapabilityMinor hipDeviceAttributeComputeCapabilityMinor
#define cudaDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeSharedMemPerBlockOptin
#define cudaDevAttrMaxSharedMemoryPerMultiprocessor hipDeviceAttributeMaxSharedMemoryPerMultiprocessor
#define cudaDevAttrMaxSharedMemoryPerBlock hipDeviceAttributeMaxSharedMemoryPerBlock
#define cudaDevAttrMaxThreadsPerBlock hipDeviceAttributeMaxThreadsPerBlock
#define cudaDevAttrMaxThreadsPerMultiProcessor hipDeviceAttributeMaxThreadsPerMultiProcessor
#define cudaDevAttrL2CacheSize hipDeviceAttributeL2CacheSize
// functions
#define cudaGetLastError hipGetLastError
#define cudaPeekAtLastError hipPeekAtLastError
#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDevice hipGetDevice
#define cudaSetDevice hipSetDevice
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaHostAlloc hipHostMalloc
#define cudaMallocHost hipMallocHost
#define cudaFreeHost hipHostFree
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemset hipMemset
#define cudaMemsetAsync hipMemsetAsync
#define cudaLaunchKernel hipLaunchKernel
#define cudaFuncSetAttribute hipFuncSetAttribute
#define cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags hipOccupancyMaxActiveBlocksPerMultiprocessorWithFlags
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamCreate hipStreamCreate
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventCreate hipEventCreate
#define cudaEventDestroy hipEventDestroy
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaGraphDestroy hipGraphDestroy
#define cudaGraphInstantiate hipGraphInstantiate
#define cudaGraphExecUpdate hipGraphExecUpdate
#define cudaGraphExecDestroy hipGraphExecDestroy
#define cudaGraphLaunch hipGraphLaunch

#else
#include <cuda.h>
#include <cuda_runtime_api.h>

#define AITMOCK_RUNTIME_NAME "CUDA"
#define AITMOCK_WARP_SIZE 32
#endif

#endif  // AITGEN_MOCK_API_H_
