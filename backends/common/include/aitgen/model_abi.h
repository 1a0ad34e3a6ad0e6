/* The interface between a model's generated code and the static model container. The generated
 * model.cpp defines the three ait_generated_* functions; everything else is static. */
#ifndef AITGEN_MODEL_ABI_H_
#define AITGEN_MODEL_ABI_H_

#include <stddef.h>
#include <stdint.h>

#include "aitgen/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AIT_ABI_VERSION 1

typedef struct {
  const char* name;
  int dtype;
  int rank;
  int64_t max_shape[AIT_MAX_RANK];
} AitTensorInfo;

typedef struct {
  const char* name;
  int dtype;
  int64_t nbytes;
  int64_t offset; /* into the data section of weights.safetensors */
} AitConstantInfo;

typedef struct {
  int abi_version;
  int num_inputs;
  const AitTensorInfo* inputs;
  int num_outputs;
  const AitTensorInfo* outputs;
  int num_constants;
  const AitConstantInfo* constants;
  int64_t arena_bytes;
  int num_vars;                 /* IntVars bound from the input shapes at every run */
  int64_t weights_header_bytes; /* safetensors header length this build wrote: detects a foreign file */
} AitModelInfo;

typedef struct {
  const void* const* inputs;
  void* const* outputs;
  void* const* constants;
  char* arena;
  const int64_t* vars;
  int64_t* output_shapes; /* num_outputs * AIT_MAX_RANK */
  int64_t constants_version; /* bumped once per set_constants call: kernels that prepack weights re-pack */
} AitRunContext;

const AitModelInfo* ait_generated_info(void);
/* Check input shapes against the model (static dims, bounds, one IntVar agreeing everywhere) and
 * bind the IntVars. Returns 0, or writes a message naming the input and dim and returns 1. */
int ait_generated_bind(const int64_t* const* input_shapes, int64_t* vars, char* err, size_t errlen);
/* The output shapes (num_outputs * AIT_MAX_RANK) for bound IntVars: a caller sizes its outputs
 * exactly before the run, and the run writes the same shapes. */
void ait_generated_output_shapes(const int64_t* vars, int64_t* output_shapes);
void ait_generated_run(const AitRunContext* ctx);

#ifdef __cplusplus
}
#endif
#endif /* AITGEN_MODEL_ABI_H_ */
