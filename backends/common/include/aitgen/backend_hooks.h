// What the model container (common/src/model_container.cpp) asks of a backend: where model memory
// lives, how constants reach it, and how one run executes. Each backend's static runtime source
// defines these once (cpu/src/cpu_runtime.cpp, gpu/src/gpu_runtime.cu), so one container serves
// every backend. Every function may throw std::exception; the container turns that into a status.
#ifndef AITGEN_BACKEND_HOOKS_H_
#define AITGEN_BACKEND_HOOKS_H_

#include <cstddef>
#include <cstdint>

#include "aitgen/model_abi.h"

namespace ait {
namespace hooks {

// Called first by ait_model_create: fails with a clear message when the backend cannot run here
// (no driver, no device).
void init();

// True when model memory is host memory: constants are then read from the file straight into it.
bool memory_is_host();

// Model memory (constants, arenas) of at least `bytes`, aligned to 64 bytes or more; `what` names
// the use in the error message. release(nullptr) is a no-op.
void* alloc(size_t bytes, const char* what);
void release(void* p) noexcept;

// Host bytes into model memory; complete when it returns.
void upload(void* dst, const void* src, size_t bytes);

// A runtime's backend state (the CUDA backend: device, stream, workspace, captured graphs).
struct Runtime;
Runtime* runtime_create();
void runtime_destroy(Runtime* r) noexcept;

// Run ait_generated_run(ctx) on this runtime; outputs and ctx->output_shapes are complete when it
// returns. `num_outputs` sizes ctx->output_shapes (num_outputs * AIT_MAX_RANK). `caller_stream`: a
// device stream the run must start after (null: none), as ait_model_run_on_stream documents.
void execute(Runtime* r, const AitRunContext& ctx, int num_vars, int num_inputs, int num_outputs,
             void* caller_stream);

// A backend option (e.g. "cuda_graph" = 0/1). False: this backend has no option of that name.
bool set_option(Runtime* r, const char* name, int64_t value);

}  // namespace hooks
}  // namespace ait

#endif  // AITGEN_BACKEND_HOOKS_H_
