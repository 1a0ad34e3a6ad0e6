// Load a model that aitgen built and run it from C++, through the C API in aitgen/runtime.h.
//
//   aitgen_run_model MODEL_DIR [--inputs DIR] [--outputs DIR] [--iters N]
//
// MODEL_DIR is a workdir of compile_model / `aitgen compile`. Its model.json names the library
// (model_<hash>.so: the hash changes with every rebuild), so the library is opened by path with
// dlopen and the ait_* functions are looked up with dlsym: nothing here is tied to one build.
// Inputs: with --inputs DIR, input NAME is read from DIR/NAME.bin (raw, dense, little-endian) at
// the shape in DIR/NAME.shape (whitespace-separated sizes); without it every input is ones at its
// largest shape. Prints one line per output; --outputs DIR writes DIR/NAME.bin and DIR/NAME.shape.
// Exit status: 0 on success, 1 on a usage or file error, 2 when the model reports an error.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "aitgen/runtime.h"

namespace {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct ModelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Function pointers typed from the header's own declarations: a signature change there is a
// compile error here rather than a crash.
struct Api {
#define AIT_FN(name) decltype(&::name) name = nullptr;
  AIT_FN(ait_model_create)
  AIT_FN(ait_model_destroy)
  AIT_FN(ait_model_num_inputs)
  AIT_FN(ait_model_num_outputs)
  AIT_FN(ait_model_input_info)
  AIT_FN(ait_model_output_info)
  AIT_FN(ait_model_run)
  AIT_FN(ait_last_error)
#undef AIT_FN
};

template <typename F>
void resolve(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) throw UsageError(std::string("the library does not export ") + name);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UsageError("cannot open " + path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The value of "library" in model.json. aitgen writes it as a plain file name (no escapes), so a
// string search is enough and the example needs no JSON library.
std::string library_name(const std::string& model_dir) {
  std::string json = read_file(model_dir + "/model.json");
  size_t key = json.find("\"library\"");
  size_t open = key == std::string::npos ? key : json.find('"', json.find(':', key) + 1);
  size_t close = open == std::string::npos ? open : json.find('"', open + 1);
  if (close == std::string::npos) throw UsageError(model_dir + "/model.json names no library");
  std::string name = json.substr(open + 1, close - open - 1);
  // Only the form aitgen writes, model_<16 hex>.so: a name with a path would make dlopen run a
  // library outside the workdir.
  const std::string hex = "0123456789abcdef";
  bool ok = name.size() == 25 && name.compare(0, 6, "model_") == 0 && name.compare(22, 3, ".so") == 0;
  for (size_t i = 6; ok && i < 22; ++i) ok = hex.find(name[i]) != std::string::npos;
  if (!ok) throw UsageError(model_dir + "/model.json: library '" + name + "' is not of the form model_<16 hex>.so");
  return name;
}

const char* dtype_name(int dt) {
  static const char* names[] = {"float32", "float16", "bfloat16", "int8", "int32", "int64", "bool"};
  return dt >= 0 && dt <= AIT_BOOL ? names[dt] : "unknown";
}

size_t itemsize(int dt) {
  switch (dt) {
    case AIT_F32: case AIT_I32: return 4;
    case AIT_F16: case AIT_BF16: return 2;
    case AIT_I64: return 8;
    case AIT_I8: case AIT_BOOL: return 1;
    default: throw ModelError("unknown dtype code " + std::to_string(dt));
  }
}

float half_to_float(uint16_t h) {
  int exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  float v = exp == 0 ? std::ldexp(static_cast<float>(man), -24)
            : exp == 31 ? (man ? NAN : INFINITY)
                        : std::ldexp(static_cast<float>(man | 0x400), exp - 25);
  return (h & 0x8000) ? -v : v;
}

double element(const unsigned char* p, int dt, size_t i) {
  switch (dt) {
    case AIT_F32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case AIT_F16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return half_to_float(v); }
    case AIT_BF16: {
      uint16_t v; std::memcpy(&v, p + 2 * i, 2);
      uint32_t bits = static_cast<uint32_t>(v) << 16; float f; std::memcpy(&f, &bits, 4); return f;
    }
    case AIT_I8: return static_cast<int8_t>(p[i]);
    case AIT_I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case AIT_I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    default: return p[i] != 0;
  }
}

void fill_ones(std::vector<unsigned char>& buf, int dt) {
  size_t n = buf.size() / itemsize(dt);
  for (size_t i = 0; i < n; ++i) {
    unsigned char* e = buf.data() + i * itemsize(dt);
    switch (dt) {
      case AIT_F32: { float one = 1.0f; std::memcpy(e, &one, 4); break; }
      case AIT_F16: { uint16_t one = 0x3C00; std::memcpy(e, &one, 2); break; }
      case AIT_BF16: { uint16_t one = 0x3F80; std::memcpy(e, &one, 2); break; }
      case AIT_I32: { int32_t one = 1; std::memcpy(e, &one, 4); break; }
      case AIT_I64: { int64_t one = 1; std::memcpy(e, &one, 8); break; }
      default: e[0] = 1;
    }
  }
}

std::string shape_text(const int64_t* shape, int rank) {
  std::string s = "[";
  for (int d = 0; d < rank; ++d) s += (d ? "," : "") + std::to_string(shape[d]);
  return s + "]";
}

int64_t numel(const int64_t* shape, int rank) {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

struct Options {
  std::string model_dir, inputs_dir, outputs_dir;
  int iters = 1;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--inputs") o.inputs_dir = value();
    else if (a == "--outputs") o.outputs_dir = value();
    else if (a == "--iters") o.iters = std::stoi(value());
    else if (!a.empty() && a[0] != '-' && o.model_dir.empty()) o.model_dir = a;
    else throw UsageError("unexpected argument '" + a + "'");
  }
  if (o.model_dir.empty()) throw UsageError("no MODEL_DIR given");
  if (o.iters < 1) throw UsageError("--iters must be at least 1");
  return o;
}

int run(const Options& o) {
  std::string lib_path = o.model_dir + "/" + library_name(o.model_dir);
  // Never dlclose'd: OpenMP and oneDNN keep thread pools and caches inside the process until it
  // exits, and unloading their code under them is not safe.
  void* lib = dlopen(lib_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) throw UsageError(std::string("dlopen failed: ") + dlerror());
  Api api;
  resolve(lib, "ait_model_create", api.ait_model_create);
  resolve(lib, "ait_model_destroy", api.ait_model_destroy);
  resolve(lib, "ait_model_num_inputs", api.ait_model_num_inputs);
  resolve(lib, "ait_model_num_outputs", api.ait_model_num_outputs);
  resolve(lib, "ait_model_input_info", api.ait_model_input_info);
  resolve(lib, "ait_model_output_info", api.ait_model_output_info);
  resolve(lib, "ait_model_run", api.ait_model_run);
  resolve(lib, "ait_last_error", api.ait_last_error);
  auto check = [&](int status, const char* what) {
    if (status != AIT_OK)
      throw ModelError(std::string(what) + (status == AIT_BAD_INPUT ? ": bad input: " : ": error: ") +
                       api.ait_last_error());
  };

  AitModel* model = nullptr;
  check(api.ait_model_create(o.model_dir.c_str(), 1, &model), "ait_model_create");
  struct Destroy {  // the model is freed on every path out, errors included
    Api& api;
    AitModel* m;
    ~Destroy() { api.ait_model_destroy(m); }
  } destroy{api, model};

  const int n_in = api.ait_model_num_inputs(model), n_out = api.ait_model_num_outputs(model);
  std::vector<std::vector<unsigned char>> in_data(n_in);
  std::vector<std::vector<int64_t>> in_shapes(n_in, std::vector<int64_t>(AIT_MAX_RANK, 0));
  std::vector<const void*> in_ptrs(n_in);
  std::vector<const int64_t*> in_shape_ptrs(n_in);
  for (int i = 0; i < n_in; ++i) {
    const char* name = nullptr;
    int dt = 0, rank = 0;
    int64_t max_shape[AIT_MAX_RANK] = {0};
    check(api.ait_model_input_info(model, i, &name, &dt, &rank, max_shape), "ait_model_input_info");
    std::vector<int64_t>& shape = in_shapes[i];
    if (o.inputs_dir.empty()) {
      std::copy(max_shape, max_shape + rank, shape.begin());
      in_data[i].resize(static_cast<size_t>(numel(max_shape, rank)) * itemsize(dt));
      fill_ones(in_data[i], dt);
    } else {
      std::istringstream dims(read_file(o.inputs_dir + "/" + name + ".shape"));
      int r = 0;
      for (int64_t v; dims >> v; ++r) {
        if (r >= AIT_MAX_RANK) throw UsageError(std::string("input '") + name + "': rank above AIT_MAX_RANK");
        shape[r] = v;
      }
      // The C API takes no rank (the model knows it), so a file of another rank is refused here.
      if (r != rank)
        throw UsageError(std::string("input '") + name + "': " + std::to_string(r) +
                         " dims in its .shape file, the model wants " + std::to_string(rank));
      std::string bytes = read_file(o.inputs_dir + "/" + name + ".bin");
      int64_t n = numel(shape.data(), rank);
      if (n < 0 || static_cast<int64_t>(bytes.size()) != n * static_cast<int64_t>(itemsize(dt)))
        throw UsageError(std::string("input '") + name + "': " + std::to_string(bytes.size()) + " bytes for shape " +
                         shape_text(shape.data(), rank));
      in_data[i].assign(bytes.begin(), bytes.end());
      if (in_data[i].empty()) in_data[i].resize(1);  // a zero-size input still gets a valid pointer
    }
    in_ptrs[i] = in_data[i].data();
    in_shape_ptrs[i] = shape.data();
    std::printf("input %s dtype=%s shape=%s\n", name, dtype_name(dt), shape_text(shape.data(), rank).c_str());
  }

  std::vector<std::vector<unsigned char>> out_data(n_out);
  std::vector<void*> out_ptrs(n_out);
  std::vector<int> out_dtype(n_out), out_rank(n_out);
  std::vector<const char*> out_name(n_out);
  for (int j = 0; j < n_out; ++j) {
    int64_t max_shape[AIT_MAX_RANK] = {0};
    check(api.ait_model_output_info(model, j, &out_name[j], &out_dtype[j], &out_rank[j], max_shape),
          "ait_model_output_info");
    size_t bytes = static_cast<size_t>(numel(max_shape, out_rank[j])) * itemsize(out_dtype[j]);
    out_data[j].resize(std::max<size_t>(bytes, 1));
    out_ptrs[j] = out_data[j].data();
  }
  std::vector<int64_t> out_shapes(static_cast<size_t>(std::max(n_out, 1)) * AIT_MAX_RANK, 0);

  auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < o.iters; ++it)
    check(api.ait_model_run(model, in_ptrs.data(), in_shape_ptrs.data(), out_ptrs.data(), out_shapes.data()),
          "ait_model_run");
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / o.iters;

  for (int j = 0; j < n_out; ++j) {
    const int64_t* shape = out_shapes.data() + static_cast<size_t>(j) * AIT_MAX_RANK;
    size_t n = static_cast<size_t>(numel(shape, out_rank[j]));
    double sum = 0, lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; ++i) {
      double v = element(out_data[j].data(), out_dtype[j], i);
      sum += v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    std::printf("output %s dtype=%s shape=%s sum=%.9g min=%.9g max=%.9g first=%.9g\n", out_name[j],
                dtype_name(out_dtype[j]), shape_text(shape, out_rank[j]).c_str(), sum, n ? lo : 0.0, n ? hi : 0.0,
                n ? element(out_data[j].data(), out_dtype[j], 0) : 0.0);
    if (!o.outputs_dir.empty()) {
      std::string base = o.outputs_dir + "/" + out_name[j];
      std::ofstream bin(base + ".bin", std::ios::binary), txt(base + ".shape");
      bin.write(reinterpret_cast<const char*>(out_data[j].data()),
                static_cast<std::streamsize>(n * itemsize(out_dtype[j])));
      for (int d = 0; d < out_rank[j]; ++d) txt << (d ? " " : "") << shape[d];
      txt << "\n";
      if (!bin || !txt) throw UsageError("cannot write " + base + ".bin/.shape");
    }
  }
  std::printf("ran %d time(s), %.3f ms per run\n", o.iters, ms);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s\nusage: %s MODEL_DIR [--inputs DIR] [--outputs DIR] [--iters N]\n", e.what(),
                 argv[0]);
    return 1;
  } catch (const ModelError& e) {
    std::fprintf(stderr, "model error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
