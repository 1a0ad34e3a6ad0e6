// The static model container behind the C API: weights loaded once and shared, N runtimes (each
// with its own activation arena) handed out to concurrent callers, and errors turned into status
// codes with a thread-local message, so no exception leaves the library. Where memory lives and how
// a run executes is the backend's (aitgen/backend_hooks.h): one container serves every backend.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "aitgen/backend_hooks.h"
#include "aitgen/bad_input.hpp"
#include "aitgen/model_abi.h"

// Fault planting for the mock device's tests (tests/backends/cuda/mock/test_mock_device.py), never set
// by a build: every constant `AIT_PLANT_CONSTANT_SKEW` bytes past its aligned place, the arena
// `AIT_PLANT_ARENA_SHORTFALL` bytes short. The mock must name the launches this breaks.
#ifndef AIT_PLANT_CONSTANT_SKEW
#define AIT_PLANT_CONSTANT_SKEW 0
#endif
#ifndef AIT_PLANT_ARENA_SHORTFALL
#define AIT_PLANT_ARENA_SHORTFALL 0
#endif

namespace {

thread_local std::string g_last_error;

// Each model starts its constants version in a range of its own: a kernel cache keyed by (weight
// address, version) then cannot mistake a later model's weights, at a reused address, for packed ones.
std::atomic<int64_t> g_next_model{1};

using BadInput = ait::bad_input;

// Room for a bind error: it quotes the input's (user-given, unbounded) name, escaped; a longer
// message is cut, never overrun (snprintf).
constexpr size_t kErrBytes = 4096;

// Model memory of the backend (host or device), freed with the owner.
struct ModelMemory {
  char* ptr = nullptr;
  ModelMemory(int64_t bytes, const char* what)
      : ptr(static_cast<char*>(ait::hooks::alloc(static_cast<size_t>(bytes), what))) {}
  ~ModelMemory() { ait::hooks::release(ptr); }
  ModelMemory(const ModelMemory&) = delete;
  ModelMemory& operator=(const ModelMemory&) = delete;
};

struct BackendRuntime {
  ait::hooks::Runtime* ptr;
  BackendRuntime() : ptr(ait::hooks::runtime_create()) {}
  ~BackendRuntime() { ait::hooks::runtime_destroy(ptr); }
  BackendRuntime(const BackendRuntime&) = delete;
  BackendRuntime& operator=(const BackendRuntime&) = delete;
};

struct Runtime {
  ModelMemory arena;
  std::vector<int64_t> vars;
  BackendRuntime backend;  // declared last: destroyed first, while the arena it may use still exists
  Runtime(int64_t arena_bytes, int num_vars)
      : arena(arena_bytes - AIT_PLANT_ARENA_SHORTFALL, "the activation arena"), vars(num_vars > 0 ? num_vars : 1) {}
};

template <typename F>
int guarded(F&& f) {
  try {
    f();
    return AIT_OK;
  } catch (const BadInput& e) {
    g_last_error = e.what();
    return AIT_BAD_INPUT;
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return AIT_ERROR;
  } catch (...) {
    g_last_error = "unknown error";
    return AIT_ERROR;
  }
}

}  // namespace

struct AitModel {
  const AitModelInfo* info = nullptr;
  std::unique_ptr<ModelMemory> weights;
  std::vector<void*> constant_ptrs;
  std::vector<std::unique_ptr<Runtime>> runtimes;
  std::vector<Runtime*> idle;
  std::mutex mu;
  std::mutex hold_mu;  // serialises HoldAll
  std::condition_variable cv;
  std::atomic<int64_t> constants_version{0};

  Runtime* acquire() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return !idle.empty(); });
    Runtime* r = idle.back();
    idle.pop_back();
    return r;
  }
  void release(Runtime* r) {
    {
      std::lock_guard<std::mutex> lock(mu);
      idle.push_back(r);
    }
    cv.notify_one();
  }
};

namespace {

// Every runtime of the model, held for a scope: no run is in flight while constants or options change.
// One holder at a time (hold_mu): two holders each taking some runtimes would wait on each other forever.
struct HoldAll {
  AitModel* m;
  std::lock_guard<std::mutex> one_holder;
  std::vector<Runtime*> held;
  explicit HoldAll(AitModel* model) : m(model), one_holder(model->hold_mu) {
    for (size_t i = 0; i < m->runtimes.size(); ++i) held.push_back(m->acquire());
  }
  ~HoldAll() {
    for (Runtime* r : held) m->release(r);
  }
  HoldAll(const HoldAll&) = delete;
  HoldAll& operator=(const HoldAll&) = delete;
};

// An open file descriptor, closed with the owner.
struct Fd {
  int fd;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// Exactly n bytes at `offset`, or an error naming the file (a file cut short after the size check).
void read_at(int fd, char* dst, int64_t n, int64_t offset, const std::string& path) {
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 30));
    const ssize_t got = ::pread(fd, dst, want, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw std::runtime_error(path + " is truncated or unreadable");
    dst += got;
    offset += got;
    n -= got;
  }
}

// weights.safetensors: 8-byte little-endian header length, a JSON header, then the data section.
// The build recorded each constant's offset into the data section and the header length, so the
// container needs no JSON parser; a different header length means a file from another build.
// Python's loader checks the header in full; this checks what reading needs, for C/C++ callers
// too: a regular file (a FIFO would block the read forever) that holds every constant's bytes.
// Where each constant lives in memory: at a multiple of kConstantAlign, whatever its offset in the
// file. safetensors packs tensors with no padding, so two 2-byte scalars sorted first would leave
// every weight after them 4 bytes off the 16-byte alignment that vector loads, CUTLASS and TMA
// need; 256 is what cudaMalloc gives a buffer, so a constant is as aligned as a fresh allocation.
constexpr int64_t kConstantAlign = 256;

void load_weights(AitModel* m, const std::string& dir) {
  const AitModelInfo* info = m->info;
  int64_t file_end = 0, total = 0;
  std::vector<int64_t> placed(info->num_constants > 0 ? info->num_constants : 1, 0);
  for (int i = 0; i < info->num_constants; ++i) {
    const AitConstantInfo& c = info->constants[i];
    if (c.offset < 0 || c.nbytes < 0 || c.offset > INT64_MAX - c.nbytes ||
        c.nbytes > INT64_MAX - kConstantAlign - total)
      throw std::runtime_error(std::string("constant '") + c.name + "' has a bad offset or size");
    file_end = std::max<int64_t>(file_end, c.offset + c.nbytes);
    placed[i] = total + AIT_PLANT_CONSTANT_SKEW;
    total += (c.nbytes + AIT_PLANT_CONSTANT_SKEW + kConstantAlign - 1) / kConstantAlign * kConstantAlign;
  }
  m->weights = std::make_unique<ModelMemory>(total, "the constants");
  m->constant_ptrs.assign(info->num_constants > 0 ? info->num_constants : 1, nullptr);
  if (info->num_constants == 0) return;
  const std::string path = dir + "/weights.safetensors";
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (f.fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(f.fd, &st) != 0) throw std::runtime_error("cannot stat " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw std::runtime_error(path + " is not a regular file");
  const int64_t size = static_cast<int64_t>(st.st_size);
  uint64_t header = 0;
  if (size < 8) throw std::runtime_error(path + " is truncated (no header)");
  read_at(f.fd, reinterpret_cast<char*>(&header), 8, 0, path);
  if (static_cast<int64_t>(header) != info->weights_header_bytes || info->weights_header_bytes < 0)
    throw std::runtime_error(path + " does not belong to this build (header length differs)");
  const int64_t data = 8 + info->weights_header_bytes;
  if (data > INT64_MAX - file_end || size < data + file_end)
    throw std::runtime_error(path + " is truncated: " + std::to_string(size) + " bytes, the constants need " +
                             std::to_string(data + file_end));
  const bool host = ait::hooks::memory_is_host();
  // Device memory goes through a bounded host buffer, so a large model needs no second full copy.
  std::vector<char> staging(host ? 0 : static_cast<size_t>(std::min<int64_t>(total, int64_t{64} << 20)));
  for (int i = 0; i < info->num_constants; ++i) {
    const AitConstantInfo& c = info->constants[i];
    char* dst = m->weights->ptr + placed[i];
    m->constant_ptrs[i] = dst;
    if (host) {
      read_at(f.fd, dst, c.nbytes, data + c.offset, path);
      continue;
    }
    const int64_t chunk = static_cast<int64_t>(staging.size());
    for (int64_t done = 0; done < c.nbytes; done += chunk) {
      const int64_t n = std::min(chunk, c.nbytes - done);
      read_at(f.fd, staging.data(), n, data + c.offset + done, path);
      ait::hooks::upload(dst + done, staging.data(), static_cast<size_t>(n));
    }
  }
}

int tensor_info(const AitTensorInfo* t, int n, int i, const char** name, int* dtype, int* rank, int64_t* shape) {
  if (i < 0 || i >= n) throw BadInput("index " + std::to_string(i) + " out of range");
  if (name) *name = t[i].name;
  if (dtype) *dtype = t[i].dtype;
  if (rank) *rank = t[i].rank;
  if (shape)
    for (int d = 0; d < t[i].rank; ++d) shape[d] = t[i].max_shape[d];
  return 0;
}

}  // namespace

extern "C" {

const char* ait_last_error(void) { return g_last_error.c_str(); }

int ait_model_create(const char* build_dir, int num_runtimes, AitModel** out) {
  return guarded([&] {
    if (!out) throw BadInput("out is null");
    *out = nullptr;
    if (num_runtimes < 1) throw BadInput("num_runtimes must be at least 1");
    ait::hooks::init();
    auto m = std::make_unique<AitModel>();
    m->constants_version = g_next_model.fetch_add(1) << 32;
    m->info = ait_generated_info();
    if (m->info->abi_version != AIT_ABI_VERSION) throw std::runtime_error("model ABI version mismatch");
    load_weights(m.get(), build_dir ? build_dir : ".");
    for (int i = 0; i < num_runtimes; ++i) {
      m->runtimes.push_back(std::make_unique<Runtime>(m->info->arena_bytes, m->info->num_vars));
      m->idle.push_back(m->runtimes.back().get());
    }
    *out = m.release();
  });
}

void ait_model_destroy(AitModel* model) { delete model; }

int ait_model_num_inputs(const AitModel* m) { return m ? m->info->num_inputs : -1; }
int ait_model_num_outputs(const AitModel* m) { return m ? m->info->num_outputs : -1; }
int ait_model_num_constants(const AitModel* m) { return m ? m->info->num_constants : -1; }

int ait_model_input_info(const AitModel* m, int i, const char** name, int* dtype, int* rank, int64_t* shape) {
  return guarded([&] { tensor_info(m->info->inputs, m->info->num_inputs, i, name, dtype, rank, shape); });
}

int ait_model_output_info(const AitModel* m, int i, const char** name, int* dtype, int* rank, int64_t* shape) {
  return guarded([&] { tensor_info(m->info->outputs, m->info->num_outputs, i, name, dtype, rank, shape); });
}

int ait_model_constant_info(const AitModel* m, int i, const char** name, int* dtype, int64_t* nbytes) {
  return guarded([&] {
    if (i < 0 || i >= m->info->num_constants) throw BadInput("constant index out of range");
    if (name) *name = m->info->constants[i].name;
    if (dtype) *dtype = m->info->constants[i].dtype;
    if (nbytes) *nbytes = m->info->constants[i].nbytes;
  });
}

int ait_model_run(AitModel* m, const void* const* inputs, const int64_t* const* input_shapes,
                  void* const* outputs, int64_t* output_shapes) {
  return ait_model_run_on_stream(m, inputs, input_shapes, outputs, output_shapes, nullptr);
}

int ait_model_run_on_stream(AitModel* m, const void* const* inputs, const int64_t* const* input_shapes,
                            void* const* outputs, int64_t* output_shapes, void* stream) {
  return guarded([&] {
    if (!m) throw BadInput("model is null");
    Runtime* r = m->acquire();
    struct Release {
      AitModel* m;
      Runtime* r;
      ~Release() { m->release(r); }
    } release{m, r};
    char err[kErrBytes] = {0};
    if (ait_generated_bind(input_shapes, r->vars.data(), err, sizeof(err)) != 0) throw BadInput(err);
    for (int i = 0; i < m->info->num_inputs; ++i)
      if (!inputs[i]) throw BadInput(std::string("input '") + m->info->inputs[i].name + "' is null");
    for (int i = 0; i < m->info->num_outputs; ++i)
      if (!outputs[i]) throw BadInput(std::string("output '") + m->info->outputs[i].name + "' is null");
    AitRunContext ctx{inputs, outputs, m->constant_ptrs.data(), r->arena.ptr, r->vars.data(), output_shapes,
                      m->constants_version.load()};
    ait::hooks::execute(r->backend.ptr, ctx, m->info->num_vars, m->info->num_inputs, m->info->num_outputs, stream);
  });
}

int ait_model_output_shapes(AitModel* m, const int64_t* const* input_shapes, int64_t* output_shapes) {
  return guarded([&] {
    if (!m || !input_shapes || !output_shapes) throw BadInput("null argument");
    std::vector<int64_t> vars(m->info->num_vars > 0 ? m->info->num_vars : 1);
    char err[kErrBytes] = {0};
    if (ait_generated_bind(input_shapes, vars.data(), err, sizeof(err)) != 0) throw BadInput(err);
    ait_generated_output_shapes(vars.data(), output_shapes);
  });
}

int ait_model_set_constants(AitModel* m, int n, const char* const* names, const void* const* data,
                            const int64_t* nbytes) {
  return guarded([&] {
    if (!m || n < 0 || (n > 0 && (!names || !data || !nbytes))) throw BadInput("null argument");
    // Every entry is checked before anything changes: a bad one leaves all constants as they were.
    std::vector<int> index(static_cast<size_t>(n), -1);
    for (int k = 0; k < n; ++k) {
      if (!names[k] || !data[k]) throw BadInput("null name or data for constant " + std::to_string(k));
      for (int i = 0; i < m->info->num_constants; ++i)
        if (std::strcmp(m->info->constants[i].name, names[k]) == 0) index[k] = i;
      if (index[k] < 0) throw BadInput(std::string("no constant named '") + names[k] + "'");
      if (nbytes[k] != m->info->constants[index[k]].nbytes)
        throw BadInput(std::string("constant '") + names[k] + "' has " +
                       std::to_string(m->info->constants[index[k]].nbytes) + " bytes, got " +
                       std::to_string(nbytes[k]));
      for (int j = 0; j < k; ++j)
        if (index[j] == index[k]) throw BadInput(std::string("constant '") + names[k] + "' given twice");
    }
    if (n == 0) return;
    // One hold of every runtime for the whole set: a run sees all old or all new constants.
    HoldAll all(m);
    for (int k = 0; k < n; ++k)
      ait::hooks::upload(m->constant_ptrs[index[k]], data[k], static_cast<size_t>(nbytes[k]));
    m->constants_version.fetch_add(1);
  });
}

int ait_model_set_constant(AitModel* m, const char* name, const void* data, int64_t nbytes) {
  return ait_model_set_constants(m, 1, &name, &data, &nbytes);
}

int ait_model_set_option(AitModel* m, const char* name, int64_t value) {
  return guarded([&] {
    if (!m || !name) throw BadInput("null argument");
    HoldAll all(m);
    for (Runtime* r : all.held)
      if (!ait::hooks::set_option(r->backend.ptr, name, value))
        throw BadInput(std::string("this backend has no option '") + name + "'");
  });
}

}  // extern "C"
