// kgen's native launch path: a C++ kernel for a registered kgen op's device key (kgen/native.py), for
// every op whose kernel kgen.abi describes (the writer's norm_rope_store, the reader's indexer_logits, the
// top-k's indexer_topk_logits), and chains of two (indexer_topk: the reader, then the top-k, one dispatch).
//
// Why it exists: through torch.ops a Python kernel costs the dispatcher's boxing into Python objects
// plus ~30 tensor attribute reads of the argument check in Python; this kernel does the same check
// on the TensorImpl directly and launches with cuLaunchKernelEx, so one call costs torch's own
// argument parsing plus the driver's launch (docs/ops.md, "Host cost").
//
// It is data-driven: Python (kgen/native.py) registers each variant's argument table, built from
// kgen.abi's table (dtype, rank, fixed or symbolic sizes, where each pointer goes in the Params
// struct; which tensor the op allocates and returns; which int arguments bind a size), per device the
// loaded CUfunction, and per shape (the symbolic sizes, and the device where the cubin depends on the
// shape) the grid, the shared memory, the cubin's function and a Params template whose scalar fields
// Python packed, plus the tensor maps Python encoded per source address. Nothing about a kernel is
// written here.
//
// On any doubt (an unknown variant or shape, a failed check, another device or context, tensors
// that are not plain device tensors) the call goes to the op's checked twin, the Python
// implementation, which raises the located message or launches and registers the shape. So this
// path is only ever stricter than the Python one; it can cost speed, never correctness.
//
// CUDA is reached through function pointers Python hands over (libcuda's cuLaunchKernelEx and
// cuCtxGetCurrent, torch's aoti_torch_get_current_cuda_stream), so neither the CUDA headers nor a
// CUDA build of torch are needed to compile it; the CPU tests install it on a test op's CPU key with
// stub pointers.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/DispatchKey.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace {

constexpr int kMaxSyms = 8;
constexpr int kMaxRank = 8;
constexpr int kMaxDevices = 64;
constexpr size_t kMaxParams = 4096;  // bytes of a Params struct (CUDA's limit for kernel parameters)
constexpr size_t kMaxShapes = 4096;  // per variant; cleared when exceeded (kgen.fastpath.MAX_SHAPES)

// cuda.h's CUlaunchConfig and CUlaunchAttribute (the layout kgen/launcher.py packs too)
struct LaunchAttribute {
  uint32_t id;
  uint32_t pad;
  unsigned char value[64];
};
struct LaunchConfig {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  void* stream;
  LaunchAttribute* attrs;
  uint32_t num_attrs;
};
static_assert(sizeof(LaunchAttribute) == 72, "CUlaunchAttribute");
static_assert(sizeof(LaunchConfig) == 56, "CUlaunchConfig");
constexpr uint32_t kProgrammaticStreamSerialization = 6;
constexpr uint32_t kClusterDimension = 4;  // value: clusterDim x, y, z (uint32 each)
constexpr size_t kTensorMapBytes = 128;  // a CUtensorMap (kgen.abi.TENSOR_MAP_BYTES)
constexpr size_t kMaxMapsPerShape = 64;  // source addresses kept per shape (kgen.tma.MEMO_MAX)

using LaunchFn = int (*)(const LaunchConfig*, void* function, void** params, void** extra);
using StreamFn = int32_t (*)(int32_t device, void** stream);
using ContextFn = int (*)(void** context);

struct TensorRule {
  int arg;  // index in the op's arguments
  bool present;
  c10::ScalarType dtype;
  int rank;
  int64_t dims[kMaxRank];  // >= 0: fixed; -1 - k: symbolic size k
  int64_t offset;          // of its pointer in the Params struct
  bool output = false;     // allocated here (the op's result), not an argument
};

struct TensorMapEntry {
  const void* address;
  std::array<unsigned char, kTensorMapBytes> bytes;
};

struct Key {
  std::array<int64_t, kMaxSyms> v{};
  bool operator==(const Key& o) const { return v == o.v; }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t x : k.v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct Device {
  void* function = nullptr;
  void* context = nullptr;
  uint32_t block[3] = {0, 0, 0};
  bool pdl = false;
};

struct Shape {
  uint32_t grid[3];
  uint32_t shared_bytes;
  std::vector<unsigned char> params;  // the Params struct with its scalar fields packed, pointers 0
  Device launch;                      // the cubin this shape runs (function null: the device's)
  std::vector<TensorMapEntry> maps;   // the tensor map per source address (Python encodes them)
  bool uses_map = false;              // false: this shape's cubin reads no map (the slot stays zero)
};

struct Variant {
  std::vector<TensorRule> tensors;
  std::vector<std::pair<int, int>> int_args;  // (argument index, symbol k): an int argument binds a size
  bool keyed_by_device = false;               // shapes are registered per device (their cubin differs)
  int64_t map_offset = -1;                    // of the tensor map in Params (-1: none)
  int map_source = -1;                        // the tensor (index in `tensors`) it describes
  int num_syms = 0;
  size_t params_size = 0;
  int64_t alignment_mask = 15;
  bool cluster_x = false;  // grid x > 1: the cluster dimension (grid x, 1, 1) (kgen.abi.KernelAbi.cluster_x)
  std::unordered_map<Key, Shape, KeyHash> shapes;
  std::array<Device, kMaxDevices> devices;
};

struct Op {
  std::string name;
  c10::DispatchKey key = c10::DispatchKey::CUDA;
  c10::DeviceType device_type = c10::DeviceType::CUDA;
  c10::OperatorHandle checked;  // the Python implementation (a twin op with the same schema)
  LaunchFn launch = nullptr;
  StreamFn stream = nullptr;
  ContextFn context = nullptr;
  std::mutex mu;  // variants and their shapes/devices (Python writes, calls read)
  std::map<std::string, Variant*, std::less<>> variants;
  std::atomic<int64_t> fast{0}, slow{0};
  std::vector<int> written;  // arguments the schema declares mutated: their version is bumped
  explicit Op(c10::OperatorHandle h) : checked(std::move(h)) {}
};

// Never freed, not even at exit: a call in flight may hold a variant, and the registrations must
// outlive every caller (the dispatcher is torch's; it is torch's to tear down).
auto* g_variants = new std::deque<std::unique_ptr<Variant>>();
auto* g_ops = new std::deque<std::unique_ptr<Op>>();
auto* g_libraries = new std::deque<std::unique_ptr<torch::Library>>();
std::string g_error;

class SilentWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

// The fast path: true once launched (or nothing to launch); false: take the checked twin.
bool try_fast(Op& op, c10::DispatchKeySet ks, torch::jit::Stack* stack, size_t num_args,
              std::vector<at::Tensor>* outputs) {
  // only plain device tensors: no Python/Functionalize/Fake wrappers or modes above the device key
  if (ks.highestPriorityTypeId() != op.key) return false;
  auto args = torch::jit::last(*stack, num_args);
  if (!args[0].isString()) return false;
  const std::string_view name = args[0].toStringView();
  Variant* v = nullptr;
  {
    std::lock_guard<std::mutex> g(op.mu);
    auto it = op.variants.find(name);
    if (it == op.variants.end()) return false;
    v = it->second;
  }
  Key key;
  int64_t ptrs = 0;
  int dev = -2;
  void* pointers[32];
  const size_t ntensors = v->tensors.size();
  if (ntensors > 32) return false;
  for (const auto& [arg, sym] : v->int_args) {  // sizes an int argument gives (max_seq_len)
    if (!args[arg].isInt()) return false;
    const int64_t value = args[arg].toInt();
    if (value <= 0) return false;  // nothing to compute, or refused: the checked twin says which
    key.v[sym] = value + 1;
  }
  int out_index = -1;
  for (size_t i = 0; i < ntensors; ++i) {
    const TensorRule& r = v->tensors[i];
    if (r.output) {  // allocated below, once every size it has is bound
      if (out_index >= 0) return false;
      out_index = static_cast<int>(i);
      continue;
    }
    const c10::IValue& a = args[r.arg];
    if (!r.present) {
      if (!a.isNone()) return false;
      pointers[i] = nullptr;
      continue;
    }
    if (!a.isTensor()) return false;
    const at::Tensor& t = a.toTensor();
    if (!t.defined() || t.scalar_type() != r.dtype || t.device().type() != op.device_type) return false;
    const int d = t.device().has_index() ? t.device().index() : 0;
    if (dev == -2) {
      dev = d;
    } else if (d != dev) {
      return false;
    }
    if (t.dim() != r.rank) return false;
    const auto sizes = t.sizes();
    for (int k = 0; k < r.rank; ++k) {
      const int64_t want = r.dims[k];
      if (want >= 0) {
        if (sizes[k] != want) return false;
      } else {
        int64_t& bound = key.v[-1 - want];
        if (bound == 0) {
          bound = sizes[k] + 1;  // stored + 1: 0 means not yet bound
        } else if (bound != sizes[k] + 1) {
          return false;
        }
      }
    }
    if (!t.is_contiguous()) return false;
    void* p = t.data_ptr();
    ptrs |= reinterpret_cast<int64_t>(p);
    pointers[i] = p;
  }
  if (ptrs & v->alignment_mask) return false;
  if (dev < 0 || dev >= kMaxDevices) return false;
  if (v->keyed_by_device) key.v[v->num_syms] = dev + 1;
  uint32_t grid[3];
  uint32_t shared_bytes;
  alignas(64) unsigned char params[kMaxParams];  // a copy: Python may add shapes meanwhile
  Device device;
  {
    std::lock_guard<std::mutex> g(op.mu);
    auto it = v->shapes.find(key);
    if (it == v->shapes.end()) return false;
    const Shape& s = it->second;
    device = s.launch.function != nullptr ? s.launch : v->devices[dev];
    if (device.function == nullptr) return false;
    std::memcpy(grid, s.grid, sizeof grid);
    shared_bytes = s.shared_bytes;
    std::memcpy(params, s.params.data(), v->params_size);
    if (s.uses_map && s.grid[0] != 0) {  // the source tensor's map, encoded by Python once
      const void* address = pointers[v->map_source];
      const TensorMapEntry* hit = nullptr;
      for (const auto& m : s.maps) {
        if (m.address == address) hit = &m;
      }
      if (hit == nullptr) return false;
      std::memcpy(params + v->map_offset, hit->bytes.data(), kTensorMapBytes);
    }
  }
  if (out_index >= 0) {  // the op's result: every size it has is bound by now (else the shape missed)
    const TensorRule& r = v->tensors[out_index];
    std::vector<int64_t> sizes(r.rank);
    for (int k = 0; k < r.rank; ++k) {
      sizes[k] = r.dims[k] >= 0 ? r.dims[k] : key.v[-1 - r.dims[k]] - 1;
      if (sizes[k] < 0) return false;
    }
    at::Tensor out = at::empty(sizes, at::TensorOptions().dtype(r.dtype).device(op.device_type, dev));
    pointers[out_index] = out.data_ptr();
    outputs->push_back(std::move(out));
  }
  if (grid[0] == 0) return true;  // nothing to launch (no tokens)
  if (op.context != nullptr) {  // the launch goes to the current context: it must be the device's
    void* current = nullptr;
    if (op.context(&current) != 0 || current != device.context) return false;
  }
  void* stream = nullptr;
  if (op.stream(dev, &stream) != 0) return false;
  for (size_t i = 0; i < ntensors; ++i) {
    std::memcpy(params + v->tensors[i].offset, &pointers[i], sizeof(void*));
  }
  LaunchAttribute attrs[2]{};
  LaunchConfig config{};
  std::memcpy(config.grid, grid, sizeof config.grid);
  std::memcpy(config.block, device.block, sizeof config.block);
  config.shared_bytes = shared_bytes;
  config.stream = stream;
  uint32_t num_attrs = 0;
  if (device.pdl) {
    attrs[num_attrs].id = kProgrammaticStreamSerialization;
    const int one = 1;
    std::memcpy(attrs[num_attrs++].value, &one, sizeof one);
  }
  if (v->cluster_x && grid[0] > 1) {  // grid x = 1: a plain launch (one CTA per row)
    const uint32_t dims[3] = {grid[0], 1, 1};
    attrs[num_attrs].id = kClusterDimension;
    std::memcpy(attrs[num_attrs++].value, dims, sizeof dims);
  }
  if (num_attrs) {
    config.attrs = attrs;
    config.num_attrs = num_attrs;
  }
  void* kernel_params[1] = {params};
  const int err = op.launch(&config, device.function, kernel_params, nullptr);
  // a refused launch goes to the checked twin, which launches again and raises the driver's message
  return err == 0;
}

void call(Op* op, const c10::OperatorHandle& handle, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const size_t num_args = handle.schema().arguments().size();
  std::vector<at::Tensor> outputs;
  if (try_fast(*op, ks, stack, num_args, &outputs)) {
    ++op->fast;
    auto args = torch::jit::last(*stack, num_args);
    for (int i : op->written) {
      if (args[i].isTensor()) args[i].toTensor().unsafeGetTensorImpl()->bump_version();
    }
    torch::jit::drop(*stack, num_args);
    for (auto& out : outputs) torch::jit::push(*stack, std::move(out));
    return;
  }
  ++op->slow;
  op->checked.callBoxed(stack);
}

struct NativeKernel final : c10::OperatorKernel {
  Op* op;
  explicit NativeKernel(Op* o) : op(o) {}
  void operator()(const c10::OperatorHandle& h, c10::DispatchKeySet ks, torch::jit::Stack* s) { call(op, h, ks, s); }
};

// A chain: one op whose native kernel runs two native ops' fast paths back to back (torch.ops.kgen.indexer_topk:
// the reader into a logits tensor it allocates, then the top-k over it), one dispatch for both. Each sub-op's
// arguments are chain arguments (or, -1, the first's result). A call the first declines goes whole to the
// chain's checked twin (nothing launched yet); one the second declines, to the second's checked twin (the
// first already launched into the logits it allocated).
struct Chain {
  Op* first = nullptr;
  Op* second = nullptr;
  c10::OperatorHandle checked;
  std::vector<int> first_args, second_args;
  int range_arg = -1;  // an int argument that must lie in [range_lo, range_hi] before anything launches
  int64_t range_lo = 0, range_hi = 0;
  std::atomic<int64_t> fast{0}, slow{0};
  explicit Chain(c10::OperatorHandle h) : checked(std::move(h)) {}
};
auto* g_chains = new std::deque<std::unique_ptr<Chain>>();

bool chain_fast(Chain& c, c10::DispatchKeySet ks, torch::jit::Stack* stack, size_t num_args, at::Tensor* result) {
  auto args = torch::jit::last(*stack, num_args);
  if (c.range_arg >= 0) {
    const c10::IValue& a = args[c.range_arg];
    if (!a.isInt() || a.toInt() < c.range_lo || a.toInt() > c.range_hi) return false;
  }
  torch::jit::Stack first;
  first.reserve(c.first_args.size());
  for (int i : c.first_args) first.push_back(args[i]);
  std::vector<at::Tensor> out;
  if (!try_fast(*c.first, ks, &first, first.size(), &out) || out.size() != 1) return false;
  ++c.first->fast;
  torch::jit::Stack second;
  second.reserve(c.second_args.size());
  for (int i : c.second_args) second.push_back(i < 0 ? c10::IValue(out[0]) : args[i]);
  std::vector<at::Tensor> out2;
  if (try_fast(*c.second, ks, &second, second.size(), &out2) && out2.size() == 1) {
    ++c.second->fast;
    *result = std::move(out2[0]);
    return true;
  }
  ++c.second->slow;
  c.second->checked.callBoxed(&second);
  *result = second.back().toTensor();
  return true;
}

struct ChainKernel final : c10::OperatorKernel {
  Chain* chain;
  explicit ChainKernel(Chain* c) : chain(c) {}
  void operator()(const c10::OperatorHandle& h, c10::DispatchKeySet ks, torch::jit::Stack* s) {
    const size_t num_args = h.schema().arguments().size();
    at::Tensor result;
    if (chain_fast(*chain, ks, s, num_args, &result)) {
      ++chain->fast;
      torch::jit::drop(*s, num_args);
      torch::jit::push(*s, std::move(result));
      return;
    }
    ++chain->slow;
    chain->checked.callBoxed(s);
  }
};

Key shape_key(const Variant* v, const int64_t* syms, int device) {
  Key key;
  for (int k = 0; k < v->num_syms; ++k) key.v[k] = syms[k] + 1;
  if (v->keyed_by_device) key.v[v->num_syms] = device + 1;
  return key;
}

Op* as_op(void* h) { return static_cast<Op*>(h); }
Variant* as_variant(void* h) { return static_cast<Variant*>(h); }

}  // namespace

extern "C" {

const char* kgen_native_error() { return g_error.c_str(); }

// A torch dtype name ("float32", "bfloat16", ...) as c10::ScalarType, or -1.
int kgen_native_dtype(const char* name) {
  static const std::map<std::string, c10::ScalarType> table = {
      {"float32", c10::ScalarType::Float},   {"float64", c10::ScalarType::Double},
      {"float16", c10::ScalarType::Half},    {"bfloat16", c10::ScalarType::BFloat16},
      {"uint8", c10::ScalarType::Byte},      {"int8", c10::ScalarType::Char},
      {"int16", c10::ScalarType::Short},     {"int32", c10::ScalarType::Int},
      {"int64", c10::ScalarType::Long},      {"bool", c10::ScalarType::Bool},
      {"float8_e4m3fn", c10::ScalarType::Float8_e4m3fn}, {"float8_e5m2", c10::ScalarType::Float8_e5m2},
  };
  auto it = table.find(name);
  return it == table.end() ? -1 : static_cast<int>(it->second);
}

// Register the native kernel of `ns::op` at `dispatch_key`; `checked` (same schema) is the Python
// implementation it falls back to. The pointers: cuLaunchKernelEx, torch's current-stream getter,
// cuCtxGetCurrent (may be null: no context check). Returns the op handle, or null (kgen_native_error).
void* kgen_native_install(const char* ns, const char* op, const char* checked, const char* dispatch_key,
                          void* launch, void* stream, void* context) {
  try {
    auto handle = c10::Dispatcher::singleton().findSchemaOrThrow((std::string(ns) + "::" + op).c_str(), "");
    auto twin = c10::Dispatcher::singleton().findSchemaOrThrow((std::string(ns) + "::" + checked).c_str(), "");
    auto holder = std::make_unique<Op>(twin);
    Op* o = holder.get();
    o->name = op;
    const c10::DispatchKey key = c10::parseDispatchKey(dispatch_key);
    o->key = key;
    o->device_type = c10::dispatchKeyToDeviceType(key);
    o->launch = reinterpret_cast<LaunchFn>(launch);
    o->stream = reinterpret_cast<StreamFn>(stream);
    o->context = reinterpret_cast<ContextFn>(context);
    const auto& arguments = handle.schema().arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      const auto* alias = arguments[i].alias_info();
      if (alias != nullptr && alias->isWrite()) o->written.push_back(static_cast<int>(i));
    }
    g_ops->push_back(std::move(holder));
    // this kernel shadows the Python one registered at the same key (kept, never freed: it may be
    // running right now); the dispatcher's "overriding a kernel" warning is expected, so silenced
    SilentWarnings silent;
    c10::WarningUtils::WarningHandlerGuard guard(&silent);
    auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, key, __FILE__, __LINE__);
    lib->impl(op, torch::CppFunction::makeFromBoxedFunctor(std::make_unique<NativeKernel>(o)));
    g_libraries->push_back(std::move(lib));
    return o;
  } catch (const std::exception& e) {
    g_error = e.what();
    return nullptr;
  }
}

// The chain `ns::op` at `dispatch_key` (its checked twin `checked`, same schema): the native ops `first` and
// `second` (kgen_native_install's handles, same library) with their arguments as chain argument indices (-1 in
// second_args: the first's result); `range_arg` (-1: none) an int argument checked against [lo, hi] first.
void* kgen_native_install_chain(const char* ns, const char* op, const char* checked, const char* dispatch_key,
                                void* first, void* second, int n_first, const int32_t* first_args, int n_second,
                                const int32_t* second_args, int range_arg, int64_t lo, int64_t hi) {
  try {
    auto twin = c10::Dispatcher::singleton().findSchemaOrThrow((std::string(ns) + "::" + checked).c_str(), "");
    c10::Dispatcher::singleton().findSchemaOrThrow((std::string(ns) + "::" + op).c_str(), "");
    auto holder = std::make_unique<Chain>(twin);
    Chain* c = holder.get();
    c->first = as_op(first);
    c->second = as_op(second);
    c->first_args.assign(first_args, first_args + n_first);
    c->second_args.assign(second_args, second_args + n_second);
    c->range_arg = range_arg;
    c->range_lo = lo;
    c->range_hi = hi;
    g_chains->push_back(std::move(holder));
    SilentWarnings silent;
    c10::WarningUtils::WarningHandlerGuard guard(&silent);
    const c10::DispatchKey key = c10::parseDispatchKey(dispatch_key);
    auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, key, __FILE__, __LINE__);
    lib->impl(op, torch::CppFunction::makeFromBoxedFunctor(std::make_unique<ChainKernel>(c)));
    g_libraries->push_back(std::move(lib));
    return c;
  } catch (const std::exception& e) {
    g_error = e.what();
    return nullptr;
  }
}

// Calls of a chain that ran natively (both launched from C++, or the second through its twin) and that went to
// the chain's checked twin.
void kgen_native_chain_counts(void* chain, int64_t* out) {
  out[0] = static_cast<Chain*>(chain)->fast.load();
  out[1] = static_cast<Chain*>(chain)->slow.load();
}

// A variant's argument table: per tensor argument i (in the op's order) its argument index, whether
// present, dtype (kgen_native_dtype), rank, kMaxRank dims (>= 0 fixed, -1 - k symbolic k) and the
// offset of its pointer in the Params struct of `params_size` bytes.
// `output[i]`: tensor i is allocated and returned (not an argument); `int_arg`/`int_sym`: num_int_args int
// arguments, each binding a symbolic size; `keyed_by_device`: shapes are registered per device; the
// tensor map at `map_offset` (-1: none) describes tensor `map_source`.
void* kgen_native_add_variant(void* op, const char* name, int num_tensors, const int32_t* arg, const int32_t* present,
                              const int32_t* dtype, const int32_t* rank, const int64_t* dims, const int64_t* offset,
                              const int32_t* output, int num_syms, int64_t params_size, int64_t alignment,
                              int num_int_args, const int32_t* int_arg, const int32_t* int_sym, int keyed_by_device,
                              int64_t map_offset, int map_source) {
  const int key_syms = num_syms + (keyed_by_device != 0 ? 1 : 0);
  if (key_syms > kMaxSyms || num_tensors > 32 || params_size < 0 || static_cast<size_t>(params_size) > kMaxParams ||
      (map_offset >= 0 && (map_offset + static_cast<int64_t>(kTensorMapBytes) > params_size || map_source < 0)) ||
      map_source >= num_tensors) {
    g_error = "too many symbolic sizes or tensors, or too large a Params struct, for the native path";
    return nullptr;
  }
  auto v = std::make_unique<Variant>();
  for (int i = 0; i < num_tensors; ++i) {
    TensorRule r{};
    r.arg = arg[i];
    r.present = present[i] != 0;
    r.dtype = static_cast<c10::ScalarType>(dtype[i]);
    r.rank = rank[i];
    if (r.rank > kMaxRank) {
      g_error = "rank too large for the native path";
      return nullptr;
    }
    for (int k = 0; k < kMaxRank; ++k) r.dims[k] = dims[i * kMaxRank + k];
    r.offset = offset[i];
    r.output = output[i] != 0;
    v->tensors.push_back(r);
  }
  for (int i = 0; i < num_int_args; ++i) {
    if (int_sym[i] < 0 || int_sym[i] >= num_syms) {
      g_error = "an int argument binds no symbolic size";
      return nullptr;
    }
    v->int_args.emplace_back(int_arg[i], int_sym[i]);
  }
  v->keyed_by_device = keyed_by_device != 0;
  v->map_offset = map_offset;
  v->map_source = map_source;
  v->num_syms = num_syms;
  v->params_size = static_cast<size_t>(params_size);
  v->alignment_mask = alignment - 1;
  Variant* raw = v.get();
  Op* o = as_op(op);
  std::lock_guard<std::mutex> g(o->mu);
  g_variants->push_back(std::move(v));
  o->variants[name] = raw;
  return raw;
}

// The variant's launches with grid x > 1 get the cluster dimension (grid x, 1, 1) (KernelAbi.cluster_x).
void kgen_native_set_cluster(void* op, void* variant, int cluster_x) {
  std::lock_guard<std::mutex> g(as_op(op)->mu);
  as_variant(variant)->cluster_x = cluster_x != 0;
}

void kgen_native_set_device(void* op, void* variant, int device, void* function, void* context, uint32_t bx,
                            uint32_t by, uint32_t bz, int pdl) {
  if (device < 0 || device >= kMaxDevices) return;
  std::lock_guard<std::mutex> g(as_op(op)->mu);
  Device& d = as_variant(variant)->devices[device];
  d.function = function;
  d.context = context;
  d.block[0] = bx;
  d.block[1] = by;
  d.block[2] = bz;
  d.pdl = pdl != 0;
}

// One shape: its symbolic sizes (num_syms of them) and device (where the variant is keyed by device),
// grid (0: nothing to launch), dynamic shared memory, the Params struct with the scalar fields packed
// (params_size bytes), and the cubin it runs (function null: the device's, kgen_native_set_device).
void kgen_native_add_shape(void* op, void* variant, const int64_t* syms, int device, uint32_t gx, uint32_t gy,
                           uint32_t gz, uint32_t shared_bytes, const unsigned char* params, void* function,
                           void* context, uint32_t bx, uint32_t by, uint32_t bz, int pdl, int uses_map) {
  Variant* v = as_variant(variant);
  const Key key = shape_key(v, syms, device);
  Shape s;
  s.launch.function = function;
  s.launch.context = context;
  s.launch.block[0] = bx;
  s.launch.block[1] = by;
  s.launch.block[2] = bz;
  s.launch.pdl = pdl != 0;
  s.grid[0] = gx;
  s.grid[1] = gy;
  s.grid[2] = gz;
  s.shared_bytes = shared_bytes;
  s.params.assign(params, params + v->params_size);
  s.uses_map = uses_map != 0 && v->map_offset >= 0;
  std::lock_guard<std::mutex> g(as_op(op)->mu);
  if (v->shapes.size() >= kMaxShapes) v->shapes.clear();
  v->shapes[key] = std::move(s);
}

// The tensor map (kTensorMapBytes) of a registered shape for the source tensor at `address` (Python
// encoded it with the driver); the oldest is dropped past kMaxMapsPerShape.
void kgen_native_add_map(void* op, void* variant, const int64_t* syms, int device, const void* address,
                         const unsigned char* bytes) {
  Variant* v = as_variant(variant);
  const Key key = shape_key(v, syms, device);
  std::lock_guard<std::mutex> g(as_op(op)->mu);
  auto it = v->shapes.find(key);
  if (it == v->shapes.end()) return;
  auto& maps = it->second.maps;
  for (auto& m : maps) {
    if (m.address == address) {
      std::memcpy(m.bytes.data(), bytes, kTensorMapBytes);
      return;
    }
  }
  if (maps.size() >= kMaxMapsPerShape) maps.erase(maps.begin());
  TensorMapEntry e{address, {}};
  std::memcpy(e.bytes.data(), bytes, kTensorMapBytes);
  maps.push_back(e);
}

// Drop every variant (kgen.ops.forget): later calls take the checked twin until re-registered.
void kgen_native_forget(void* op) {
  Op* o = as_op(op);
  std::lock_guard<std::mutex> g(o->mu);
  o->variants.clear();
}

// Calls that launched natively and calls that went to the checked twin (tests, the bench).
void kgen_native_counts(void* op, int64_t* out) {
  out[0] = as_op(op)->fast.load();
  out[1] = as_op(op)->slow.load();
}

}  // extern "C"
