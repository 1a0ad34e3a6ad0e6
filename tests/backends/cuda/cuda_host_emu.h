// Runs the GPU kernels (backends/gpu/templates, backends/cuda/templates) on the host, for tests on
// machines without a GPU (tests/backends/cuda/test_cuda_own_kernels.py,
// tests/backends/rocm/test_rocm_own_kernels.py). Pre-included (g++ -include) before the rendered
// kernel sources, whose launches `k<<<grid, block, smem, stream>>>(args)` the test rewrites into
// `::ait_emu::launch(::ait_emu::Cfg(grid, block, smem, stream), [&] { k(args); })`.
//
// Each block runs its threads as cooperative fibers (ucontext) on one OS thread: a thread runs until
// it reaches __syncthreads (all live threads of the block meet) or a warp shuffle (all live lanes of
// its warp meet, twice: after writing its value and after reading its partner's), then the next
// thread runs. Blocks run one after another, so __shared__ variables are function statics. A
// barrier nobody can pass (a divergent __syncthreads, lanes missing from a shuffle) throws.
// What it does not model: memory ordering between threads outside barriers (nothing of ours relies
// on it), warp-synchronous code without shuffles, and timing.
//
// Two forms, one engine. The warp size is AIT_EMU_WARP (32 by default; 64 for a CDNA wavefront):
// lanes, warps and the shuffles' lane rules follow it.
//   - CUDA (default): CUDA's own headers give the types (dim3, __half, ...); the shuffles are
//     __shfl_xor_sync / __shfl_up_sync / __shfl_sync / __shfl_down_sync.
//   - HIP (AIT_EMU_HIP, with AIT_EMU_WARP=64): there are no host-compilable HIP headers, so this
//     file gives the HIP names the kernels and backends/rocm/include/aitgen/gpu_dialect.h use
//     (dim3, hipStream_t, hipGetLastError, warpSize, the mask-less __shfl_xor / __shfl_up /
//     __shfl / __shfl_down) and hip_emu/hip/*.h stand in for the platform headers (__half over
//     _Float16, hip_bfloat16 rounding as HIP's own).
#ifndef AITGEN_TESTS_CUDA_HOST_EMU_H_
#define AITGEN_TESTS_CUDA_HOST_EMU_H_

#ifndef AIT_EMU_WARP
#define AIT_EMU_WARP 32
#endif

#define __shared__ static
#define __launch_bounds__(...)

#include <ucontext.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef AIT_EMU_HIP
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline __attribute__((always_inline))
struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }
typedef struct ihipStream_t* hipStream_t;
enum hipError_t { hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorInvalidConfiguration = 9 };
inline hipError_t hipGetLastError() { return hipSuccess; }
typedef hipStream_t ait_emu_stream_t;
#else
#include <cuda_runtime.h>
typedef cudaStream_t ait_emu_stream_t;
#endif

namespace ait_emu {

enum State { kRun, kWaitBlock, kWaitWarp, kDone };

struct Fiber {
  ucontext_t ctx;
  uint3 tid;
  int lane = 0, warp = 0;
  State state = kRun;
};

struct Block {
  uint3 bid;
  dim3 bdim, gdim;
  std::vector<Fiber> fibers;
  std::vector<uint64_t> slots;  // one shuffle value per thread
  const std::function<void()>* body = nullptr;
  ucontext_t sched;
  size_t cur = 0;
};

inline Block*& current_block() {
  static Block* b = nullptr;
  return b;
}
inline Fiber& me() { return current_block()->fibers[current_block()->cur]; }

inline void wait(State s) {
  Fiber& f = me();
  f.state = s;
  swapcontext(&f.ctx, &current_block()->sched);
}

inline void entry() {
  Block* b = current_block();
  (*b->body)();
  Fiber& f = b->fibers[b->cur];
  f.state = kDone;
  swapcontext(&f.ctx, &b->sched);  // never resumed
}

struct Cfg {
  dim3 grid, block;
  Cfg(dim3 g, dim3 b, size_t = 0, ait_emu_stream_t = nullptr) : grid(g), block(b) {}
};

inline void run_block(Block& b, std::vector<std::vector<char>>& stacks) {
  const size_t n = b.fibers.size();
  current_block() = &b;
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stacks[i].data();
    f.ctx.uc_stack.ss_size = stacks[i].size();
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, entry, 0);
    f.state = kRun;
  }
  constexpr size_t W = AIT_EMU_WARP;
  const size_t warps = (n + W - 1) / W;
  for (;;) {
    for (size_t i = 0; i < n; ++i) {
      if (b.fibers[i].state != kRun) continue;
      b.cur = i;
      swapcontext(&b.sched, &b.fibers[i].ctx);
    }
    size_t done = 0, at_block = 0;
    for (const Fiber& f : b.fibers) {
      done += f.state == kDone;
      at_block += f.state == kWaitBlock;
    }
    if (done == n) return;
    bool released = false;
    for (size_t w = 0; w < warps; ++w) {  // a warp whose live lanes all wait at a shuffle
      size_t live = 0, waiting = 0;
      for (size_t i = w * W; i < n && i < w * W + W; ++i) {
        live += b.fibers[i].state != kDone;
        waiting += b.fibers[i].state == kWaitWarp;
      }
      if (live > 0 && waiting == live) {
        for (size_t i = w * W; i < n && i < w * W + W; ++i)
          if (b.fibers[i].state == kWaitWarp) b.fibers[i].state = kRun;
        released = true;
      }
    }
    if (!released && at_block + done == n) {  // every live thread at __syncthreads
      for (Fiber& f : b.fibers)
        if (f.state == kWaitBlock) f.state = kRun;
      released = true;
    }
    if (!released)
      throw std::runtime_error("emulated kernel deadlock: threads wait at barriers nobody else reaches");
  }
}

inline void launch(const Cfg& cfg, const std::function<void()>& body) {
  const size_t n = size_t{cfg.block.x} * cfg.block.y * cfg.block.z;
  if (n == 0 || n > 1024 || cfg.grid.x == 0 || cfg.grid.y == 0 || cfg.grid.z == 0 || cfg.grid.y > 65535)
    throw std::runtime_error("emulated launch: invalid configuration");
  static std::vector<std::vector<char>> stacks;
  while (stacks.size() < n) stacks.emplace_back(size_t{128} << 10);
  Block b;
  b.bdim = cfg.block;
  b.gdim = cfg.grid;
  b.fibers.resize(n);
  b.slots.assign(n, 0);
  b.body = &body;
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    f.tid = make_uint3(static_cast<unsigned>(i % cfg.block.x), static_cast<unsigned>(i / cfg.block.x % cfg.block.y),
                       static_cast<unsigned>(i / (size_t{cfg.block.x} * cfg.block.y)));
    f.lane = static_cast<int>(i % AIT_EMU_WARP);
    f.warp = static_cast<int>(i / AIT_EMU_WARP);
  }
  for (unsigned z = 0; z < cfg.grid.z; ++z)
    for (unsigned y = 0; y < cfg.grid.y; ++y)
      for (unsigned x = 0; x < cfg.grid.x; ++x) {
        b.bid = make_uint3(x, y, z);
        run_block(b, stacks);
      }
  current_block() = nullptr;
}

// Every lane publishes v, then reads the value of lane `src_lane` (of its own warp).
template <typename T>
T shuffle(T v, int src_lane) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a value wider than 8 bytes");
  Block* b = current_block();
  const size_t self = b->cur;
  const int lane = me().lane;
  std::memcpy(&b->slots[self], &v, sizeof(T));
  wait(kWaitWarp);
  const size_t src = self - lane + src_lane;
  if (src_lane < 0 || src_lane >= AIT_EMU_WARP || src >= b->fibers.size() || b->fibers[src].state == kDone)
    throw std::runtime_error("emulated shuffle: the source lane does not exist or has exited");
  T r;
  std::memcpy(&r, &b->slots[src], sizeof(T));
  wait(kWaitWarp);
  return r;
}

// The lane-index rules of __shfl_xor_sync, __shfl_up_sync, __shfl_down_sync and __shfl_sync (HIP:
// __shfl_xor, __shfl_up, __shfl_down, __shfl) for a width (a power of two) that splits the warp into
// segments.
template <typename T>
T shfl_xor(T v, int mask, int width) {
  if (width > AIT_EMU_WARP || (width & (width - 1))) throw std::runtime_error("emulated shuffle: bad width");
  if (mask >= width) throw std::runtime_error("emulated shuffle: lane mask beyond the width");
  return shuffle(v, me().lane ^ mask);
}
template <typename T>
T shfl_down(T v, unsigned delta, int width) {
  const int lane = me().lane;
  return shuffle(v, lane % width + static_cast<int>(delta) < width ? lane + static_cast<int>(delta) : lane);
}
template <typename T>
T shfl_up(T v, unsigned delta, int width) {
  const int lane = me().lane;
  return shuffle(v, lane % width >= static_cast<int>(delta) ? lane - static_cast<int>(delta) : lane);
}
template <typename T>
T shfl_idx(T v, int src, int width) {
  const int lane = me().lane;
  return shuffle(v, lane - lane % width + src % width);
}

}  // namespace ait_emu

#define threadIdx (::ait_emu::me().tid)
#define blockIdx (::ait_emu::current_block()->bid)
#define blockDim (::ait_emu::current_block()->bdim)
#define gridDim (::ait_emu::current_block()->gdim)

inline void __syncthreads() { ::ait_emu::wait(::ait_emu::kWaitBlock); }
#ifdef AIT_EMU_HIP
static constexpr int warpSize = AIT_EMU_WARP;
template <typename T>
T __shfl_xor(T v, int mask, int width = warpSize) { return ::ait_emu::shfl_xor(v, mask, width); }
template <typename T>
T __shfl_up(T v, unsigned delta, int width = warpSize) { return ::ait_emu::shfl_up(v, delta, width); }
template <typename T>
T __shfl_down(T v, unsigned delta, int width = warpSize) { return ::ait_emu::shfl_down(v, delta, width); }
template <typename T>
T __shfl(T v, int src, int width = warpSize) { return ::ait_emu::shfl_idx(v, src, width); }
// The wavefront barrier of the HIP dialect's warp_sync(): every lane meets.
#define __builtin_amdgcn_wave_barrier() ((void)::ait_emu::shfl_xor(0, 0, AIT_EMU_WARP))
#else
template <typename T>
T __shfl_xor_sync(unsigned, T v, int mask, int width = AIT_EMU_WARP) { return ::ait_emu::shfl_xor(v, mask, width); }
template <typename T>
T __shfl_up_sync(unsigned, T v, unsigned delta, int width = AIT_EMU_WARP) { return ::ait_emu::shfl_up(v, delta, width); }
template <typename T>
T __shfl_down_sync(unsigned, T v, unsigned delta, int width = AIT_EMU_WARP) { return ::ait_emu::shfl_down(v, delta, width); }
template <typename T>
T __shfl_sync(unsigned, T v, int src, int width = AIT_EMU_WARP) { return ::ait_emu::shfl_idx(v, src, width); }
inline void __syncwarp(unsigned = 0xffffffffu) { (void)::ait_emu::shfl_xor(0, 0, AIT_EMU_WARP); }  // every lane meets
#endif
inline unsigned atomicCAS(unsigned* p, unsigned compare, unsigned value) {
  const unsigned old = *p;
  if (old == compare) *p = value;
  return old;
}

#endif  // AITGEN_TESTS_CUDA_HOST_EMU_H_
