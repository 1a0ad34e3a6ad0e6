// Host-emulator stand-in for HIP's <hip/hip_runtime.h>: everything it would give the kernels
// (dim3, threadIdx, __syncthreads, the shuffles, hipStream_t, ...) comes from
// tests/backends/cuda/cuda_host_emu.h in its HIP form (-DAIT_EMU_HIP), pre-included with g++ -include.
#pragma once
#ifndef AIT_EMU_HIP
#error "hip_emu/ is for the host emulator's HIP form: build with -DAIT_EMU_HIP -include cuda_host_emu.h"
#endif
