// Shared contract of every GPU kernel translation unit, CUDA and HIP alike (the platform's
// spellings come from "aitgen/gpu_dialect.h", one per backend: backends/cuda/include,
// backends/rocm/include): storage types and their float32 conversions (the same names the CPU
// backend uses, so the fused-expression C++ that codegen/kernels/common/expr.py renders compiles
// unchanged on all), and the run state that the model container sets around each run (the stream
// to launch on, scratch memory).
//
// Every kernel keeps the one signature of all backends, a host function
//   AIT_KERNEL k_<hash>(void* const* ptrs, const int64_t* dims)
// that launches on ait::gpu::stream() and never synchronises.
//
// The run-state functions are defined by the backend's runtime in its own namespace
// (AIT_GPU_RUNTIME_NS: ait::cuda, ait::rocm); ait::gpu names them through a using-directive, so a
// shared kernel writes ait::gpu::stream() and a backend's own code keeps its own spelling.
#ifndef AITGEN_GPU_KERNEL_H_
#define AITGEN_GPU_KERNEL_H_

#include "aitgen/gpu_dialect.h"

#include <cmath>
#include <cstddef>
#include <cstdint>

#define AIT_KERNEL extern "C" void

#include "aitgen/e8m0.h"
#include "aitgen/fp4.h"
#include "aitgen/fp8.h"

namespace ait {

AIT_HD float to_f32(float v) { return v; }
AIT_HD double to_f32(double v) { return v; }
AIT_HD float to_f32(half v) { return half_to_f32(v); }
AIT_HD float to_f32(bf16 v) { return bf16_to_f32(v); }

template <typename T>
AIT_HD T from_f32(float v);
template <>
AIT_HD float from_f32<float>(float v) { return v; }
template <>
AIT_HD double from_f32<double>(float v) { return v; }
template <>
AIT_HD fp8_e4m3fn from_f32<fp8_e4m3fn>(float v) { return fp8_from_double<fp8_e4m3fn>(v); }
template <>
AIT_HD fp4_e2m1 from_f32<fp4_e2m1>(float v) { return fp4_from_float(v); }
template <>
AIT_HD fp8_e8m0 from_f32<fp8_e8m0>(float v) { return e8m0_from_float(v); }
template <>
AIT_HD fp8_e5m2 from_f32<fp8_e5m2>(float v) { return fp8_from_double<fp8_e5m2>(v); }
template <>
AIT_HD fp8_e4m3fnuz from_f32<fp8_e4m3fnuz>(float v) { return fp8_from_double<fp8_e4m3fnuz>(v); }
template <>
AIT_HD fp8_e5m2fnuz from_f32<fp8_e5m2fnuz>(float v) { return fp8_from_double<fp8_e5m2fnuz>(v); }
template <>
AIT_HD half from_f32<half>(float v) { return f32_to_half(v); }
template <>
AIT_HD bf16 from_f32<bf16>(float v) { return f32_to_bf16(v); }

namespace AIT_GPU_RUNTIME_NS {

// The run in progress on the calling thread; the container sets it before ait_generated_run and
// clears it after (the backend's runtime source). One runtime = one stream = one arena.
struct RunState {
  gpu::stream_t stream = nullptr;
  int device = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int stream_index = 0;  // which of the run's streams `stream` is (0: the runtime's own)
};
RunState& run_state();
inline gpu::stream_t stream() { return run_state().stream; }

// Per-runtime scratch (split-k partials and the like) of at least `bytes`, valid until the next
// call of workspace() on this thread. Throws std::runtime_error naming `who` when it cannot grow
// (it cannot while a CUDA graph is being captured: size it on the first, uncaptured run).
void* workspace(size_t bytes, const char* who);

// Multi-stream runs (compile_model(..., streams=N), aitgen/codegen/streams.py): the run sequence
// starts streams 1..count-1 after stream 0 with `events` events to order its calls, switches the
// stream kernels launch on, and joins them back into stream 0 at its end. Each stream has its own
// workspace, so kernels running at once never share scratch memory.
void streams_begin(int count, int events);
void on_stream(int index);
void wait_event(int event);
void record_event(int event);
void streams_end();

// Throws std::runtime_error("<what>: <the platform's error string>") — the container turns it into AIT_ERROR
// with that message, never a crash.
[[noreturn]] void fail(gpu::error_t err, const char* what);
inline void check(gpu::error_t err, const char* what) {
  if (err != gpu::kSuccess) fail(err, what);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The first bad input a kernel met during a run (an index out of range: only the device sees index
// data, and a host check would cost a copy and a synchronisation every run). Device memory, one
// zeroed record per runtime. The reporting kernel claims it with atomicCAS(&flag, 0, 1) and fills
// the rest; when the run ends the runtime reads it back and fails the run with AIT_BAD_INPUT:
//   "<what>: index <value> (at flat position <position>) is out of range for size <bound>".
struct BadInputRecord {
  unsigned int flag;  // 0 until a kernel reports
  int64_t value;      // the bad value (an index)
  int64_t position;   // its flat position in its tensor
  int64_t bound;      // the size it must be within: [-bound, bound)
  // A string literal of the library naming the op: a host address the device only copies (kernel
  // argument in, record out), never reads; the runtime reads it on the host.
  const char* what;
};
// The device record of the run in progress on this thread (nullptr outside a run). A kernel's
// host function calls it at launch: that is what makes the runtime read the record back after
// each run, so a model without reporting kernels pays nothing.
BadInputRecord* bad_input_record();
#define AIT_GPU_BAD_INPUT_RECORD 1

}  // namespace AIT_GPU_RUNTIME_NS

namespace gpu {
using namespace ::ait::AIT_GPU_RUNTIME_NS;
}  // namespace gpu
}  // namespace ait

// After every launch: a bad configuration is reported with the kernel's name.
#define AIT_CHECK_LAUNCH(name) ::ait::gpu::check(::ait::gpu::last_error(), name)

#endif  // AITGEN_GPU_KERNEL_H_
