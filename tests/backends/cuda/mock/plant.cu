// Planted faults for the mock device's tests: two streams with and without an event between a
// writer and a reader, a pointer past its allocation, and an allocation during graph capture.
#include <cuda_runtime.h>

__global__ void k_write(float* p, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = 1.0f;
}

__global__ void k_read(const float* p, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = p[i];
}

// mode 0: the reader waits for an event recorded after the writer; 1: no event (a race);
// 2: a launch with a pointer past its allocation; 3: cudaMalloc while the stream is captured.
extern "C" int plant(int mode) {
  const int n = 1024;
  float *a = nullptr, *b = nullptr;
  cudaStream_t s1, s2;
  cudaEvent_t e;
  if (cudaMalloc(&a, n * sizeof(float)) || cudaMalloc(&b, n * sizeof(float))) return 1;
  if (cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) || cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking))
    return 2;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming)) return 3;
  if (mode == 2) {
    k_write<<<4, 256, 0, s1>>>(a + n + 16, n);
  } else if (mode == 3) {
    cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal);
    k_write<<<4, 256, 0, s1>>>(a, n);
    void* x = nullptr;
    cudaMalloc(&x, 16);
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(s1, &g);
  } else {
    k_write<<<4, 256, 0, s1>>>(a, n);
    if (mode == 0) {
      cudaEventRecord(e, s1);
      cudaStreamWaitEvent(s2, e, 0);
    }
    k_read<<<4, 256, 0, s2>>>(a, b, n);
  }
  cudaStreamSynchronize(s1);
  cudaStreamSynchronize(s2);
  cudaGetLastError();
  cudaEventDestroy(e);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  cudaFree(a);
  cudaFree(b);
  return 0;
}
