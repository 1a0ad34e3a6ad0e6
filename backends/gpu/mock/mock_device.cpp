// The mock device's memory, ordering and launch checks (mock_device.hpp).
#include "mock_device.hpp"

#include <cxxabi.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace aitmock {

thread_local cudaError_t t_last_error = cudaSuccess;

void merge(Clock& into, const Clock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

static uint64_t at(const Clock& c, int agent) { return agent < (int)c.size() ? c[agent] : 0; }

Device::Device() {
  // Device addresses come from one reserved range, so a word of a kernel's arguments that falls
  // in it is a device pointer and is checked; nothing else is. Pages are committed per allocation.
  // The range sits far from where Linux puts heaps, stacks and mappings (0x55..., 0x7f...): an
  // uninitialised field of a parameter struct holds stale stack bytes, and two int32 fields whose
  // high one is a stack address's upper half (0x7ffe) read as 0x7ffe00000001, which a range among
  // the mappings would take for a pointer. Here its upper half is 0x2a00..0x2a10.
  for (size_t gib : {size_t{64}, size_t{16}}) {
    void* p = mmap(reinterpret_cast<void*>(uintptr_t{0x2a0000000000}), gib << 30, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) p = mmap(nullptr, gib << 30, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      range_lo = reinterpret_cast<uintptr_t>(p);
      next = range_lo + 0x10000;  // see cudaMalloc: no address whose low 32 bits are below 64 Ki
      range_hi = range_lo + (gib << 30);
      break;
    }
  }
  for (int i = 0; i < 2; ++i) {
    auto* s = new Stream;
    s->agent = i;
    streams.push_back(s);
  }
}

Device& dev() {
  static Device* d = new Device;  // never destroyed: library destructors may still call in
  return *d;
}

bool inject(Device& d) {
  const bool now = d.fail_at >= 0 && d.api_calls == d.fail_at;
  ++d.api_calls;
  return now;
}

const Allocation* Device::find(uintptr_t p) const {
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  return p < a.base + std::max<size_t>(a.bytes, 1) ? &a : nullptr;
}

std::string Device::describe(uintptr_t p) const {
  char buf[160];
  const Allocation* a = find(p);
  if (!a) {
    std::snprintf(buf, sizeof buf, "0x%llx, which lies in no allocation", (unsigned long long)p);
  } else {
    std::snprintf(buf, sizeof buf, "0x%llx, at byte %llu of allocation #%lld (%zu bytes%s)", (unsigned long long)p,
                  (unsigned long long)(p - a->base), (long long)a->serial, a->bytes, a->live ? "" : ", freed");
  }
  return buf;
}

Stream* Device::stream(cudaStream_t s) {
  const uintptr_t h = reinterpret_cast<uintptr_t>(s);
  if (h == 0 || h == 1 || h == 2) return streams[1];  // legacy / per-thread default: one stream here
  for (size_t i = 2; i < streams.size(); ++i)
    if (streams[i] == reinterpret_cast<Stream*>(s)) return streams[i];
  return nullptr;
}

void Device::fail(const std::string& what) {
  if (failures.size() < 1000) failures.push_back(what);
}

void copy_access(Device& d, Stream* s, std::vector<Access> acc, const char* kind, const char* what) {
  if (s->capture >= 0) {  // recorded into the graph; runs at each replay
    Op op;
    op.kind = kind;
    op.accesses = std::move(acc);
    d.graphs[s->capture].ops.push_back(std::move(op));
    return;
  }
  d.submit(s);
  const std::string race = d.check_accesses(acc, s);
  if (!race.empty()) d.fail(std::string(what) + ": " + race);
}

void Device::host_sync(const Clock& c) {
  merge(streams[0]->clock, c);
  // Accesses the host has seen complete are ordered before everything submitted from now on.
  const Clock& h = streams[0]->clock;
  history.erase(std::remove_if(history.begin(), history.end(),
                               [&](const Access& a) { return at(h, a.agent) >= a.tick; }),
                history.end());
}

void Device::submit(Stream* s) {
  merge(s->clock, streams[0]->clock);
  Stream* legacy = streams[1];
  if (s == legacy) {  // the legacy stream waits for every blocking stream's earlier work
    for (size_t i = 2; i < streams.size(); ++i)
      if (streams[i] && streams[i]->blocking) merge(legacy->clock, streams[i]->clock);
  } else if (s->blocking) {
    merge(s->clock, legacy->clock);
  }
  if (s->clock.size() <= (size_t)s->agent) s->clock.resize(s->agent + 1, 0);
  ++s->clock[s->agent];
}

std::string Device::check_accesses(const std::vector<Access>& now, Stream* s) {
  for (const Access& a : now) {
    for (const Access& b : history) {
      if (b.hi <= a.lo || a.hi <= b.lo || !(a.write || b.write)) continue;
      if (at(s->clock, b.agent) >= b.tick) continue;  // b happened before this operation
      char buf[96];
      std::snprintf(buf, sizeof buf, " bytes [0x%llx, 0x%llx)", (unsigned long long)std::max(a.lo, b.lo),
                    (unsigned long long)std::min(a.hi, b.hi));
      return std::string("it") + (a.write ? " writes" : " reads") + buf + " that " + b.what +
             (b.write ? " writes" : " reads") + " on stream " + std::to_string(b.agent) +
             ", with no event or synchronisation ordering them";
    }
  }
  for (Access a : now) {
    a.agent = s->agent;
    a.tick = s->clock[s->agent];
    history.push_back(a);
  }
  return std::string();
}

}  // namespace aitmock

namespace aitmock {

std::string demangle(const std::string& name) {
  int status = 0;
  char* out = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  std::string s = (status == 0 && out) ? out : name;
  std::free(out);
  if (s.size() > 160) s = s.substr(0, 157) + "...";
  return s;
}

// Runs every check of one launch and appends its record to the log (mock_cudart.cpp submits).
cudaError_t launch(Device& d, Op& op, Stream* s, bool from_graph) {
  LaunchRecord r;
  r.index = (int64_t)d.log.size();
  r.grid = op.grid, r.block = op.block, r.cluster = op.cluster, r.smem = op.smem;
  r.stream = s->agent, r.from_graph = from_graph, r.node = op.node;
  auto fit = d.functions.find(op.func);
  const std::string mangled = fit == d.functions.end() ? std::string() : fit->second;
  r.kernel = mangled.empty() ? std::string("<unregistered function>") : demangle(mangled);
  std::string who = "launch #" + std::to_string(r.index) + " (" + r.kernel +
                    (op.node >= 0 ? ", node " + std::to_string(op.node) : std::string()) + ")";
  std::vector<std::string> faults;
  cudaError_t err = cudaSuccess;
  auto bad = [&](const std::string& f, cudaError_t e) {
    faults.push_back(f);
    if (err == cudaSuccess) err = e;
  };
  if (mangled.empty()) bad("the function was never registered with the runtime", cudaErrorInvalidDeviceFunction);
  const auto kit = d.kernels.find(mangled);
  const KernelInfo* info = kit == d.kernels.end() ? nullptr : &kit->second;
  // Launch configuration against the arch's limits.
  const uint64_t threads = (uint64_t)op.block.x * op.block.y * op.block.z;
  if (op.grid.x == 0 || op.grid.y == 0 || op.grid.z == 0 || threads == 0)
    bad("an empty grid or block (" + std::to_string(op.grid.x) + "x" + std::to_string(op.grid.y) + "x" +
        std::to_string(op.grid.z) + " blocks of " + std::to_string(threads) + " threads)", cudaErrorInvalidConfiguration);
  if (op.grid.y > 65535 || op.grid.z > 65535 || op.grid.x > 2147483647u)
    bad("grid " + std::to_string(op.grid.x) + "x" + std::to_string(op.grid.y) + "x" + std::to_string(op.grid.z) +
        " exceeds the limits (2^31-1, 65535, 65535)", cudaErrorInvalidConfiguration);
  if (threads > 1024 || op.block.z > 64)
    bad(std::to_string(threads) + " threads per block exceed 1024", cudaErrorInvalidConfiguration);
  if (info && info->max_threads > 0 && threads > (uint64_t)info->max_threads)
    bad(std::to_string(threads) + " threads per block exceed the kernel's __launch_bounds__ of " +
        std::to_string(info->max_threads), cudaErrorInvalidConfiguration);
  const int64_t stat = info ? info->static_smem : 0;
  auto attr = d.max_dynamic_smem.find(op.func);
  const int64_t allowed = attr == d.max_dynamic_smem.end() ? 48 * 1024 : attr->second;
  if ((int64_t)op.smem > allowed)
    bad(std::to_string(op.smem) + " bytes of dynamic shared memory, above the " + std::to_string(allowed) +
        " the kernel allows (cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) raises it)",
        cudaErrorInvalidValue);
  if (stat + (int64_t)op.smem > d.smem_optin)
    bad(std::to_string(stat + op.smem) + " bytes of shared memory per block, above this arch's " +
        std::to_string(d.smem_optin), cudaErrorInvalidValue);
  const uint64_t csize = (uint64_t)op.cluster.x * op.cluster.y * op.cluster.z;
  if (csize > 1) {
    if (d.cc_major < 9) bad("a thread block cluster on an arch before sm_90", cudaErrorInvalidConfiguration);
    if (csize > 16) bad("a cluster of " + std::to_string(csize) + " blocks (at most 16)", cudaErrorInvalidConfiguration);
    if (op.grid.x % op.cluster.x || op.grid.y % op.cluster.y || op.grid.z % op.cluster.z)
      bad("a grid that is not a multiple of its cluster shape", cudaErrorInvalidConfiguration);
  }
  // Arguments: every word that is a device address must lie in a live allocation.
  if (!info || !info->known) {
    if (!mangled.empty()) bad("its parameters are unknown (the device code was not read)", cudaErrorInvalidDeviceFunction);
  } else if (op.args.size() != info->param_sizes.size()) {
    bad("argument count differs from the kernel's", cudaErrorInvalidValue);
  } else {
    for (size_t i = 0; i < op.args.size(); ++i) {
      const auto& a = op.args[i];
      for (size_t off = 0; off + 8 <= a.size(); off += 8) {
        uint64_t w;
        std::memcpy(&w, a.data() + off, 8);
        if (!d.is_device_address(w)) continue;
        const Allocation* al = d.find(w);
        // Two shapes of word are taken for fields, not pointers, where they hit no live allocation:
        // a narrow field (a float16 default) stored with 8-byte moves from a register that held a
        // pointer keeps its upper bytes (low 16 bits zero); two int32 fields, the high one a
        // pointer's upper half (low 32 bits below 64 Ki). No allocation holds an address of either
        // shape (cudaMalloc places them so), so a real pointer into one is still checked.
        if ((!al || !al->live) && ((w & 0xFFFF) == 0 || (w & 0xFFFF0000) == 0)) continue;
        // A word pointing into memory freed before the latest model was loaded is an earlier
        // model's pointer left in an unwritten field (CUTLASS leaves the TMA descriptor of an
        // unused epilogue source as it found it): counted, not a failure. Memory freed since is.
        if (al && !al->live && al->serial <= d.load_serial) {
          ++d.stale_words;
          continue;
        }
        r.pointers.push_back(w);
        if (!al || !al->live)
          bad("parameter " + std::to_string(i) + " (byte " + std::to_string(off) + ") points to " + d.describe(w),
              cudaErrorIllegalAddress);
      }
    }
  }
  std::vector<Access> acc = op.accesses;  // the node's operands, as the node hook saw them
  if (op.node < 0 && acc.empty())         // no node: each device pointer argument, read and written
    for (uintptr_t w : r.pointers) acc.push_back({w, w + 1, true, 0, 0, -1, ""});
  for (Access& a : acc) a.launch = r.index, a.what = who;
  const std::string race = d.check_accesses(acc, s);
  if (!race.empty()) bad(race, cudaSuccess);
  for (const std::string& f : faults) d.fail(who + ": " + f);
  r.failure = faults.empty() ? std::string() : faults.front();
  d.log.push_back(std::move(r));
  return err;
}

}  // namespace aitmock
