/* aitgen C API: load a model built by aitgen and run it. No C++ exception crosses this boundary;
 * every call returns a status (AIT_OK, AIT_BAD_INPUT, AIT_ERROR) and ait_last_error() explains a
 * failure on the calling thread. */
#ifndef AITGEN_RUNTIME_H_
#define AITGEN_RUNTIME_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AIT_MAX_RANK 8

/* Libraries build with -fvisibility=hidden; only the C API is exported. */
#if defined(__GNUC__)
#define AIT_API __attribute__((visibility("default")))
#else
#define AIT_API
#endif

enum AitStatus { AIT_OK = 0, AIT_BAD_INPUT = 1, AIT_ERROR = 2 };
enum AitDType {
  AIT_F32 = 0, AIT_F16 = 1, AIT_BF16 = 2, AIT_I8 = 3, AIT_I32 = 4, AIT_I64 = 5, AIT_BOOL = 6,
  AIT_F64 = 7, AIT_I16 = 8, AIT_U8 = 9, AIT_U16 = 10, AIT_U32 = 11, AIT_U64 = 12,
  AIT_F8E4M3FN = 13, AIT_F8E5M2 = 14, AIT_F8E4M3FNUZ = 15, AIT_F8E5M2FNUZ = 16,
  /* one element per byte, the value in the low bits (ml_dtypes' layout) */
  AIT_I4 = 17, AIT_U4 = 18, AIT_I2 = 19, AIT_U2 = 20, AIT_F4E2M1 = 21,
  AIT_F8E8M0 = 22
};

typedef struct AitModel AitModel;

/* Create a model from its build directory (weights.safetensors is read from there) with
 * num_runtimes independent runtimes: that many calls of ait_model_run can proceed at once. */
AIT_API int ait_model_create(const char* build_dir, int num_runtimes, AitModel** out);
AIT_API void ait_model_destroy(AitModel* model);

AIT_API int ait_model_num_inputs(const AitModel* model);
AIT_API int ait_model_num_outputs(const AitModel* model);
/* name, dtype (AitDType), rank and the largest shape allowed (upper bounds of dynamic dims). */
AIT_API int ait_model_input_info(const AitModel* model, int i, const char** name, int* dtype, int* rank,
                         int64_t* max_shape);
AIT_API int ait_model_output_info(const AitModel* model, int i, const char** name, int* dtype, int* rank,
                          int64_t* max_shape);

/* Run once. inputs[i] points at input i laid out densely with shape input_shapes[i];
 * outputs[j] must hold the output's max shape; the actual output shapes are written to
 * output_shapes[j * AIT_MAX_RANK + d] (host memory). Input and output buffers are the model's
 * memory: host memory on the CPU backend, device memory of the model's GPU on CUDA (the run
 * starts after work queued on the legacy default stream and returns when it is complete).
 * Thread-safe. */
AIT_API int ait_model_run(AitModel* model, const void* const* inputs, const int64_t* const* input_shapes,
                  void* const* outputs, int64_t* output_shapes);

/* ait_model_run, ordered after the work queued so far on `stream` (CUDA: a cudaStream_t of the
 * model's device, e.g. torch's current stream, whose work may have produced the inputs or may still
 * use the output buffers; null: the legacy default stream only). The run itself executes on the
 * runtime's own stream and returns when it is complete, so work the caller queues afterwards is
 * ordered after it. The CPU backend ignores `stream`. */
AIT_API int ait_model_run_on_stream(AitModel* model, const void* const* inputs, const int64_t* const* input_shapes,
                            void* const* outputs, int64_t* output_shapes, void* stream);

/* The output shapes a run with these input shapes gives (output_shapes[j * AIT_MAX_RANK + d]), after
 * the same checks as ait_model_run (AIT_BAD_INPUT naming the input at fault); runs nothing, so a
 * caller can allocate outputs of their exact size. Thread-safe. */
AIT_API int ait_model_output_shapes(AitModel* model, const int64_t* const* input_shapes, int64_t* output_shapes);

/* Replace a constant (weights) by name; nbytes must match. Waits for runs in flight. */
AIT_API int ait_model_set_constant(AitModel* model, const char* name, const void* data, int64_t nbytes);
/* Replace n constants at once: names[k] gets nbytes[k] bytes (which must match) from data[k]. Every
 * entry is checked first (AIT_BAD_INPUT changes nothing); then all are written while no run is in
 * flight, so every run sees either all old or all new values. */
AIT_API int ait_model_set_constants(AitModel* model, int n, const char* const* names, const void* const* data,
                                    const int64_t* nbytes);
AIT_API int ait_model_num_constants(const AitModel* model);

/* A backend option for every runtime, e.g. "cuda_graph" (0/1) on CUDA: capture the run sequence as
 * a CUDA graph per set of bound dims; "num_threads" (0 = OpenMP's default, else 1..4096) on the CPU:
 * the OpenMP threads of each run, set on the calling thread for the run and given back after it.
 * Waits for runs in flight; AIT_BAD_INPUT for an unknown name or a value out of range. */
AIT_API int ait_model_set_option(AitModel* model, const char* name, int64_t value);
AIT_API int ait_model_constant_info(const AitModel* model, int i, const char** name, int* dtype, int64_t* nbytes);

AIT_API const char* ait_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* AITGEN_RUNTIME_H_ */
