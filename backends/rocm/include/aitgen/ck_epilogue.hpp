// What every Composable Kernel translation unit of aitgen shares: the fused epilogue as CK's CDE
// element-wise operation, and the one way an instance runs (checked, on the runtime's stream).
//
// The epilogue's math is EpilogueFn, rendered per kernel from the fused expression
// (templates/gemm_ck_functor.inc.j2, the same Expr the CPU and CUDA backends render): float in,
// float out. CK calls its CDE operation once per output element as op(e, c, d0, d1, ...), c the
// float C-shuffle value (the accumulator), d the D tensors' elements in their storage types;
// CdeOp converts them to float, calls the functor, and rounds the result to E's type once.
#ifndef AITGEN_CK_EPILOGUE_HPP_
#define AITGEN_CK_EPILOGUE_HPP_

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "aitgen/gpu_kernel.h"
#include "aitgen/gpu_math.h"
#include "ck/ck.hpp"
#include "ck/stream_config.hpp"
#include "ck/host_utility/device_prop.hpp"
#include "ck/tensor_operation/gpu/element/element_wise_operation.hpp"
#include "ck/utility/data_type.hpp"

namespace ait {
namespace ck_ext {

using PassThrough = ck::tensor_operation::element_wise::PassThrough;
template <ck::index_t... Is>
using S = ck::Sequence<Is...>;

template <typename Fn>
struct CdeOp {
  template <typename E, typename C, typename... Ds>
  __host__ __device__ void operator()(E& e, const C& c, const Ds&... ds) const {
    e = ck::type_convert<E>(Fn{}(ck::type_convert<float>(c), ck::type_convert<float>(ds)...));
  }
};

// Runs one instance on the runtime's stream. Python checked every rule IsSupportedArgument
// applies to sizes and vector widths when it chose the instance, so a refusal here means the
// device is not one CK's XDL ops run on (gfx908 / gfx90a / gfx940 at this CK pin), said by name
// as std::runtime_error, which the container turns into AIT_ERROR.
//
// IsSupportedArgument asks for the device's name (hipGetDeviceProperties, slow) on every call,
// while a model runs the same sizes run after run: each instance remembers the last (device,
// d[0..n_dims)) it accepted and checks again only when one of them changes.
template <typename DeviceOp, typename Argument>
void check_supported(Argument& arg, const char* name, const int64_t* d, int n_dims) {
  struct Accepted {
    int device = -1;
    std::vector<int64_t> dims;
  };
  static thread_local Accepted last;  // one per instance: DeviceOp is local to its translation unit
  int device = 0;
  if (hipGetDevice(&device) != hipSuccess) device = -1;
  if (device < 0 || device != last.device || !std::equal(d, d + n_dims, last.dims.begin(), last.dims.end())) {
    if (!DeviceOp::IsSupportedArgument(arg)) {
      throw std::runtime_error(std::string(name) + ": Composable Kernel refuses this problem on device '" +
                               ck::get_device_name() + "' (its XDL instances run on gfx908, gfx90a, gfx940)");
    }
    last.device = device;
    last.dims.assign(d, d + n_dims);
  }
}

template <typename DeviceOp, typename Argument>
void run(Argument& arg, const char* name, const int64_t* d, int n_dims) {
  check_supported<DeviceOp>(arg, name, d, n_dims);
  DeviceOp op;
  const size_t ws = op.GetWorkSpaceSize(&arg);
  if (ws > 0) op.SetWorkSpacePointer(&arg, ::ait::gpu::workspace(ws, name));
  auto invoker = op.MakeInvoker();
  invoker.Run(arg, StreamConfig{::ait::gpu::stream(), false});
  const hipError_t err = hipGetLastError();
  if (err != hipSuccess) throw std::runtime_error(std::string(name) + ": " + hipGetErrorString(err));
}

}  // namespace ck_ext
}  // namespace ait

#endif  // AITGEN_CK_EPILOGUE_HPP_
