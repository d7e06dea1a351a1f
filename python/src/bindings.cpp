// flashcore._C: the nanobind extension behind the Python package.
//
// It is deliberately thin: it turns DLPack arrays (NumPy now; PyTorch, CuPy,
// JAX device arrays through the same protocol) into flashcore::TensorView
// descriptors and calls flashcore::attention_forward. All argument checking
// that needs the problem's semantics lives in the library; the Python layer
// (python/flashcore/__init__.py) allocates outputs and handles layouts.
//
// Error mapping (documented in README.md and flashcore.attention):
//   StatusCode::kInvalidArgument -> ValueError
//   StatusCode::kNotSupported    -> TypeError
//   anything else                -> RuntimeError
// always carrying the library's message. Problems this file detects itself
// (a dtype or device flashcore has no name for) raise TypeError.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "flashcore/attention.h"

namespace nb = nanobind;

namespace {

// Inputs are only read, so read-only arrays (np.broadcast_to, frozen
// buffers) are fine; outputs must be writable.
using InArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;

// DLPack device types (dlpack.h: kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged).
constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;
constexpr int kDLCUDAManaged = 13;

std::string describe_dtype(const nb::dlpack::dtype& dt) {
  const char* kind = "unknown";
  switch (static_cast<nb::dlpack::dtype_code>(dt.code)) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: return "bool";
  }
  std::string s = std::string(kind) + std::to_string(int(dt.bits));
  if (dt.lanes != 1) s += "x" + std::to_string(int(dt.lanes));
  return s;
}

// Maps a DLPack dtype to flashcore's. `uint16_is_bf16` is how the Python
// layer passes ml_dtypes.bfloat16 NumPy arrays, which NumPy cannot export
// through DLPack: it hands over a uint16 view and says what the bits mean.
flashcore::DType to_dtype(const char* name, const nb::dlpack::dtype& dt, bool uint16_is_bf16) {
  using code = nb::dlpack::dtype_code;
  if (dt.lanes == 1) {
    if (dt.code == uint8_t(code::Float) && dt.bits == 32) return flashcore::DType::kFloat32;
    if (dt.code == uint8_t(code::Float) && dt.bits == 16) return flashcore::DType::kFloat16;
    if (dt.code == uint8_t(code::Bfloat) && dt.bits == 16) return flashcore::DType::kBFloat16;
    if (uint16_is_bf16 && dt.code == uint8_t(code::UInt) && dt.bits == 16)
      return flashcore::DType::kBFloat16;
  }
  throw nb::type_error((std::string(name) + ": unsupported dtype " + describe_dtype(dt) +
                        "; flashcore supports float32, float16 and bfloat16")
                           .c_str());
}

void set_device(const char* name, int device_type, int device_id, flashcore::TensorView& v) {
  switch (device_type) {
    case kDLCPU:
    case kDLCUDAHost:  // pinned host memory: the CPU backend reads it directly
      v.device = flashcore::Device::kCPU;
      v.device_index = 0;
      return;
    case kDLCUDA:
    case kDLCUDAManaged:
      v.device = flashcore::Device::kCUDA;
      v.device_index = device_id;
      return;
    default:
      throw nb::type_error((std::string(name) + ": unsupported device (DLPack device type " +
                            std::to_string(device_type) + "); flashcore runs on CPU and CUDA arrays")
                               .c_str());
  }
}

// How the axes of a Python array map to the library's (B, H, S, D).
//   bhsd: (B, H, S, D) as is;  bshd: (B, S, H, D), axes 1 and 2 swapped;
//   thd: packed variable-length rows (T, H, D), seen as (1, H, T, D).
// Shape and strides only, never a copy.
enum class Layout { kBHSD, kBSHD, kTHD };

Layout parse_layout(const std::string& layout) {
  if (layout == "bhsd") return Layout::kBHSD;
  if (layout == "bshd") return Layout::kBSHD;
  if (layout == "thd") return Layout::kTHD;
  throw nb::value_error(("layout: expected 'bhsd', 'bshd' or 'thd', got '" + layout + "'").c_str());
}

// Fills v's (B, H, S, D) shape and strides from an array's axes.
template <class Shape, class Stride>
void set_axes(flashcore::TensorView& v, Layout layout, Shape shape, Stride stride) {
  // perm[i]: the array axis of library axis i; -1 is the batch of 1.
  static constexpr int kPerm[3][4] = {{0, 1, 2, 3}, {0, 2, 1, 3}, {-1, 1, 0, 2}};
  const int* perm = kPerm[static_cast<int>(layout)];
  for (int i = 0; i < 4; ++i) {
    v.shape[i] = perm[i] < 0 ? 1 : shape(perm[i]);
    v.stride[i] = perm[i] < 0 ? 0 : stride(perm[i]);
  }
}

[[noreturn]] void throw_ndim(const char* name, const char* what, size_t ndim) {
  throw nb::value_error(
      (std::string(name) + ": expected " + what + ", got " + std::to_string(ndim) + " dimensions").c_str());
}

template <typename Array>
flashcore::TensorView make_view(const char* name, const Array& a, Layout layout, bool uint16_is_bf16) {
  const bool packed = layout == Layout::kTHD;
  if (a.ndim() != (packed ? 3u : 4u)) {
    throw_ndim(name, packed ? "a 3-d (tokens, heads, head_dim) array" : "a 4-d array", a.ndim());
  }
  flashcore::TensorView v;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.dtype = to_dtype(name, a.dtype(), uint16_is_bf16);
  set_device(name, a.device_type(), a.device_id(), v);
  // nanobind reports strides in elements
  set_axes(v, layout, [&](int i) { return static_cast<int64_t>(a.shape(i)); },
           [&](int i) { return static_cast<int64_t>(a.stride(i)); });
  return v;
}

// The log-sum-exp output, float32, seen by the library as (B, H, Sq, 1):
// (B, H, Sq) or (B, H, Sq, 1) arrays, or (H, total_q) for packed rows.
flashcore::TensorView make_lse_view(const OutArray& a, Layout layout) {
  flashcore::TensorView v;
  if (layout == Layout::kTHD) {
    if (a.ndim() != 2) throw_ndim("lse", "a (heads, total_q) array", a.ndim());
    v.shape[0] = 1;
    for (int i = 0; i < 2; ++i) {
      v.shape[i + 1] = static_cast<int64_t>(a.shape(i));
      v.stride[i + 1] = a.stride(i);
    }
  } else if (a.ndim() == 3 || (a.ndim() == 4 && a.shape(3) == 1)) {
    for (int i = 0; i < 3; ++i) {
      v.shape[i] = static_cast<int64_t>(a.shape(i));
      v.stride[i] = a.stride(i);
    }
  } else {
    throw_ndim("lse", "a (batch, heads, seqlen_q) array", a.ndim());
  }
  v.shape[3] = 1;
  v.stride[3] = 1;
  v.data = a.data();
  v.dtype = to_dtype("lse", a.dtype(), false);
  set_device("lse", a.device_type(), a.device_id(), v);
  return v;
}

// A serving metadata array: int32, `ndim` dims, rows contiguous, on q's
// device (the library reads it there). Returns its data; *rows and *cols
// receive its shape (cols 1 for 1-d), *row_stride its row stride in elements.
const int32_t* index_array(const char* name, const InArray& a, size_t ndim, const flashcore::TensorView& q,
                           int64_t* rows, int64_t* cols = nullptr, int64_t* row_stride = nullptr) {
  using code = nb::dlpack::dtype_code;
  if (a.ndim() != ndim) throw_ndim(name, ndim == 1 ? "a 1-d array" : "a 2-d array", a.ndim());
  const nb::dlpack::dtype dt = a.dtype();
  if (!(dt.code == uint8_t(code::Int) && dt.bits == 32 && dt.lanes == 1)) {
    throw nb::type_error((std::string(name) + ": expected an int32 array, got " + describe_dtype(dt)).c_str());
  }
  flashcore::TensorView where;
  set_device(name, a.device_type(), a.device_id(), where);
  if (where.device != q.device || (q.device == flashcore::Device::kCUDA && where.device_index != q.device_index)) {
    auto str = [](const flashcore::TensorView& t) {
      return t.device == flashcore::Device::kCPU ? std::string("cpu") : "cuda:" + std::to_string(t.device_index);
    };
    throw nb::value_error(
        (std::string(name) + ": is on " + str(where) + " but q is on " + str(q) + " (metadata lives with the tensors)")
            .c_str());
  }
  const size_t last = ndim - 1;
  if (a.shape(last) > 1 && a.stride(last) != 1) {
    throw nb::value_error((std::string(name) + ": its last axis must be contiguous (stride 1)").c_str());
  }
  *rows = static_cast<int64_t>(a.shape(0));
  if (cols) *cols = ndim == 2 ? static_cast<int64_t>(a.shape(1)) : 1;
  if (row_stride) *row_stride = a.shape(0) > 1 ? a.stride(0) : static_cast<int64_t>(a.shape(last));  // 2-d only
  return static_cast<const int32_t*>(a.data());
}

[[noreturn]] void raise_status(const flashcore::Status& st) {
  const std::string& msg = st.message();
  switch (st.code()) {
    case flashcore::StatusCode::kInvalidArgument: throw nb::value_error(msg.c_str());
    case flashcore::StatusCode::kNotSupported: throw nb::type_error(msg.c_str());
    default: throw std::runtime_error(msg);  // nanobind turns this into RuntimeError
  }
}

// The arguments every entry point shares.
flashcore::AttentionArgs common_args(const InArray& q, const InArray& k, const InArray& v, const OutArray& out,
                                     const std::optional<OutArray>& lse, Layout layout, bool uint16_is_bf16,
                                     float softmax_scale, bool causal, int64_t window_left, int64_t window_right) {
  flashcore::AttentionArgs args;
  args.q = make_view("q", q, layout, uint16_is_bf16);
  args.k = make_view("k", k, layout, uint16_is_bf16);
  args.v = make_view("v", v, layout, uint16_is_bf16);
  args.out = make_view("out", out, layout, uint16_is_bf16);
  if (lse) args.lse = make_lse_view(*lse, layout);  // else data stays null: no LSE
  args.softmax_scale = softmax_scale;
  args.causal = causal;
  args.window_left = window_left;
  args.window_right = window_right;
  return args;
}

// The workspace of split-KV partials and tile lists (alloc_workspace None:
// none; a plain call then runs its chunks in one CTA, and a call that would
// keep a tile list deals its launch's tiles: the same bits), the optional
// metadata check, then the call itself.
//
// The workspace comes from the caller's array library (for PyTorch its
// caching allocator: no cudaMalloc on the hot path, and the graph's pool
// during CUDA-graph capture), asked for by the library only when the call
// needs one (attention_forward with an allocator: the arguments validated
// once). The allocation runs on this thread with the GIL re-acquired; this
// frame keeps the array alive until the call is enqueued, and the
// stream-ordered allocator keeps it valid for the kernels.
struct WorkspaceRequest {
  const nb::object* alloc;
  int device_index;                         // q's CUDA device: where the workspace must be
  nb::object holder;                        // the array, released with the GIL held
  std::optional<nb::python_error> error;    // raised by alloc, re-raised after the call
  std::string bad_result;                   // alloc returned something unusable (ValueError)

  static void* allocate(void* self, int64_t bytes) {
    auto* r = static_cast<WorkspaceRequest*>(self);
    nb::gil_scoped_acquire acquire;
    try {
      r->holder = (*r->alloc)(bytes);
      OutArray ws = nb::cast<OutArray>(r->holder);
      if (ws.device_type() != nb::device::cuda::value || ws.device_id() != r->device_index) {
        r->bad_result = "alloc_workspace must return an array on CUDA device " + std::to_string(r->device_index);
      } else if (int64_t(ws.nbytes()) < bytes) {
        r->bad_result = "alloc_workspace returned " + std::to_string(ws.nbytes()) + " bytes for " +
                        std::to_string(bytes);
      } else {
        return ws.data();
      }
    } catch (nb::python_error& e) {
      r->error.emplace(std::move(e));
    } catch (const std::exception& e) {
      r->bad_result = std::string("alloc_workspace did not return a device array: ") + e.what();
    }
    return nullptr;
  }
};

void run(flashcore::AttentionArgs& args, uintptr_t stream, bool check_metadata,
         const nb::object& alloc_workspace = nb::none()) {
  flashcore::Status st;
  WorkspaceRequest request{&alloc_workspace, args.q.device_index, {}, {}, {}};
  flashcore::WorkspaceAllocFn const allocate = alloc_workspace.is_none() ? nullptr : &WorkspaceRequest::allocate;
  {
    // The arrays stay referenced by the callers' arguments while the GIL is
    // released, so other Python threads cannot free them under us.
    nb::gil_scoped_release release;
    const auto s = reinterpret_cast<cudaStream_t>(stream);
    if (check_metadata) st = flashcore::check_serving_metadata(args, s);
    if (st.ok()) st = flashcore::attention_forward(args, s, allocate, &request);
  }
  if (request.error) throw std::move(*request.error);
  if (!request.bad_result.empty()) throw nb::value_error(request.bad_result.c_str());
  if (!st.ok()) raise_status(st);
}

void attention_forward(const InArray& q, const InArray& k, const InArray& v, const OutArray& out,
                       std::optional<OutArray> lse, float softmax_scale, bool causal,
                       int64_t window_left, int64_t window_right, bool bshd, bool uint16_is_bf16,
                       int block_m, int block_n, int num_splits, uintptr_t stream, const nb::object& alloc_workspace) {
  flashcore::AttentionArgs args =
      common_args(q, k, v, out, lse, bshd ? Layout::kBSHD : Layout::kBHSD, uint16_is_bf16, softmax_scale, causal,
                  window_left, window_right);
  args.config.block_m = block_m;
  args.config.block_n = block_n;
  args.config.num_splits = num_splits;
  run(args, stream, false, alloc_workspace);
}

// ---- The PyTorch eager fast path (flashcore/torch_ops.py: _fast_call).
// A DLPack capsule costs about 3 us a tensor to make and read; a strided
// torch.Tensor's pointer, shape and strides cost well under 1 us together, so
// plain eager calls hand those over directly. dtype codes: 0 float32,
// 1 float16, 2 bfloat16; device -1 is the CPU, else the CUDA device index.
// Everything else is checked by the library, as for DLPack arrays.
flashcore::TensorView raw_view(const char* name, uintptr_t data, int dtype, int device, const nb::tuple& shape,
                               const nb::tuple& stride, Layout layout) {
  if (shape.size() != 4 || stride.size() != 4) throw_ndim(name, "a 4-d array", shape.size());
  static constexpr flashcore::DType kDTypes[3] = {flashcore::DType::kFloat32, flashcore::DType::kFloat16,
                                                  flashcore::DType::kBFloat16};
  if (dtype < 0 || dtype > 2) throw nb::type_error((std::string(name) + ": unsupported dtype code").c_str());
  flashcore::TensorView v;
  v.data = reinterpret_cast<void*>(data);
  v.dtype = kDTypes[dtype];
  v.device = device < 0 ? flashcore::Device::kCPU : flashcore::Device::kCUDA;
  v.device_index = device < 0 ? 0 : device;
  // Straight through the C API: this is the per-call hot path of the eager
  // PyTorch fast path, and shape is a torch.Size (a tuple subclass).
  auto item = [name](const nb::tuple& t, int i) {
    const long long x = PyLong_AsLongLong(PyTuple_GET_ITEM(t.ptr(), i));
    if (x == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      throw nb::type_error((std::string(name) + ": shape and strides must be ints").c_str());
    }
    return int64_t(x);
  };
  set_axes(v, layout, [&](int i) { return item(shape, i); }, [&](int i) { return item(stride, i); });
  return v;
}

void attention_forward_ptrs(uintptr_t q, const nb::tuple& q_shape, const nb::tuple& q_stride, int q_device,
                            uintptr_t k, const nb::tuple& k_shape, const nb::tuple& k_stride, int k_device,
                            uintptr_t v, const nb::tuple& v_shape, const nb::tuple& v_stride, int v_device,
                            uintptr_t out, const nb::tuple& out_shape, const nb::tuple& out_stride, int out_device,
                            uintptr_t lse, int dtype, float softmax_scale, bool causal, int64_t window_left,
                            int64_t window_right, bool bshd, int block_m, int block_n, int num_splits,
                            uintptr_t stream, const nb::object& alloc_workspace) {
  const Layout layout = bshd ? Layout::kBSHD : Layout::kBHSD;
  flashcore::AttentionArgs args;
  args.q = raw_view("q", q, dtype, q_device, q_shape, q_stride, layout);
  args.k = raw_view("k", k, dtype, k_device, k_shape, k_stride, layout);
  args.v = raw_view("v", v, dtype, v_device, v_shape, v_stride, layout);
  args.out = raw_view("out", out, dtype, out_device, out_shape, out_stride, layout);
  if (lse != 0) {  // a fresh contiguous float32 (B, Hq, Sq) tensor on q's device, whatever the layout
    args.lse = args.q;
    args.lse.data = reinterpret_cast<void*>(lse);
    args.lse.dtype = flashcore::DType::kFloat32;
    const int64_t heads = args.q.shape[1], rows = args.q.shape[2];
    args.lse.shape[3] = 1;
    args.lse.stride[0] = heads * rows;
    args.lse.stride[1] = rows;
    args.lse.stride[2] = 1;
    args.lse.stride[3] = 1;
  }
  args.softmax_scale = softmax_scale;
  args.causal = causal;
  args.window_left = window_left;
  args.window_right = window_right;
  args.config.block_m = block_m;
  args.config.block_n = block_n;
  args.config.num_splits = num_splits;
  // False: no workspace. (None would do, but nanobind's fast dispatch of
  // positional arguments, which this entry point exists for, refuses None.)
  run(args, stream, false, alloc_workspace.ptr() == Py_False ? nb::none() : alloc_workspace);
}

void attention_serving(const InArray& q, const InArray& k, const InArray& v, const OutArray& out,
                       std::optional<OutArray> lse, const std::string& layout,
                       std::optional<InArray> cu_seqlens_q, std::optional<InArray> cu_seqlens_k,
                       int64_t max_seqlen_q, int64_t max_seqlen_k, std::optional<InArray> cache_seqlens,
                       std::optional<InArray> block_table, std::optional<InArray> k_new,
                       std::optional<InArray> v_new, float softmax_scale, bool causal, int64_t window_left,
                       int64_t window_right, bool uint16_is_bf16, int block_m, int block_n, int num_splits,
                       uintptr_t stream, bool check_metadata, const nb::object& alloc_workspace) {
  const Layout lay = parse_layout(layout);
  flashcore::AttentionArgs args =
      common_args(q, k, v, out, lse, lay, uint16_is_bf16, softmax_scale, causal, window_left, window_right);
  args.config.block_m = block_m;
  args.config.block_n = block_n;
  args.config.num_splits = num_splits;
  if (k_new) args.k_new = make_view("k_new", *k_new, lay, uint16_is_bf16);
  if (v_new) args.v_new = make_view("v_new", *v_new, lay, uint16_is_bf16);
  int64_t n = 0;
  if (cu_seqlens_q) {
    args.cu_seqlens_q = index_array("cu_seqlens_q", *cu_seqlens_q, 1, args.q, &n);
    if (n < 1) throw nb::value_error("cu_seqlens_q: needs num_seqs + 1 >= 1 entries, got 0");
    args.num_seqs = n - 1;
    args.max_seqlen_q = max_seqlen_q;
    args.max_seqlen_k = max_seqlen_k;
  }
  if (cu_seqlens_k) {
    args.cu_seqlens_k = index_array("cu_seqlens_k", *cu_seqlens_k, 1, args.q, &n);
    if (cu_seqlens_q && n != args.num_seqs + 1) {
      throw nb::value_error(("cu_seqlens_k: has " + std::to_string(n) + " entries but cu_seqlens_q has " +
                             std::to_string(args.num_seqs + 1) + " (num_seqs + 1 each)")
                                .c_str());
    }
  }
  const int64_t batch = args.q.shape[0];
  if (cache_seqlens) {
    args.cache_seqlens = index_array("cache_seqlens", *cache_seqlens, 1, args.q, &n);
    if (n != batch) {
      throw nb::value_error(("cache_seqlens: has " + std::to_string(n) + " entries but the batch is " +
                             std::to_string(batch))
                                .c_str());
    }
  }
  if (block_table) {
    args.block_table = index_array("block_table", *block_table, 2, args.q, &n, &args.max_pages_per_seq,
                                   &args.block_table_stride);
    if (n != batch) {
      throw nb::value_error(("block_table: has " + std::to_string(n) + " rows but the batch is " +
                             std::to_string(batch))
                                .c_str());
    }
  }
  run(args, stream, check_metadata, alloc_workspace);
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "flashcore native extension (see the flashcore package for the public API)";

  m.def("attention_forward", &attention_forward, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("lse").none(), nb::arg("softmax_scale") = 0.0f,
        nb::arg("causal") = false, nb::arg("window_left") = -1, nb::arg("window_right") = -1,
        nb::arg("bshd") = false, nb::arg("uint16_is_bf16") = false, nb::arg("block_m") = 0,
        nb::arg("block_n") = 0, nb::arg("num_splits") = 0, nb::arg("stream") = 0,
        nb::arg("alloc_workspace").none() = nb::none(),
        "Low-level call of flashcore::attention_forward on DLPack arrays.\n\n"
        "q, k, v, out are 4-d arrays read as (B, H, S, D), or as (B, S, H, D) when\n"
        "bshd is true; lse is None or a float32 (B, H, Sq) array. uint16 arrays are\n"
        "read as bfloat16 when uint16_is_bf16 is true. stream is a cudaStream_t as an\n"
        "integer (0: the default stream). The GIL is released during the call.\n"
        "alloc_workspace: None, or a callable nbytes -> a uint8 array on q's device for\n"
        "the split-KV workspace of calls with at most 64 query rows (without one they\n"
        "run their key chunks in one CTA: the same bits, less parallel at small batches).\n\n"
        "Raises ValueError (invalid argument), TypeError (unsupported dtype, device\n"
        "or configuration) or RuntimeError (CUDA or internal error).");

  m.def("attention_forward_ptrs", &attention_forward_ptrs,
        "attention_forward on raw strided tensors: (pointer, shape, strides in elements,\n"
        "device) for q, k, v and out (device -1: CPU), lse a pointer to a contiguous\n"
        "float32 (B, Hq, Sq) array (0: none), dtype 0/1/2\n"
        "for float32/float16/bfloat16. flashcore.attention's fast path for PyTorch\n"
        "tensors outside autograd and tracing; other arguments as in attention_forward,\n"
        "except alloc_workspace, the last one: False (none) or a callable, not None.");

  m.def("attention_serving", &attention_serving, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"),
        nb::arg("lse").none(), nb::arg("layout") = "bshd", nb::arg("cu_seqlens_q").none() = nb::none(),
        nb::arg("cu_seqlens_k").none() = nb::none(), nb::arg("max_seqlen_q") = 0, nb::arg("max_seqlen_k") = 0,
        nb::arg("cache_seqlens").none() = nb::none(), nb::arg("block_table").none() = nb::none(),
        nb::arg("k_new").none() = nb::none(), nb::arg("v_new").none() = nb::none(),
        nb::arg("softmax_scale") = 0.0f, nb::arg("causal") = false, nb::arg("window_left") = -1,
        nb::arg("window_right") = -1, nb::arg("uint16_is_bf16") = false, nb::arg("block_m") = 0,
        nb::arg("block_n") = 0, nb::arg("num_splits") = 0, nb::arg("stream") = 0,
        nb::arg("check_metadata") = false, nb::arg("alloc_workspace").none() = nb::none(),
        "Low-level serving call of flashcore::attention_forward on DLPack arrays.\n\n"
        "layout: 'thd' (variable length: q/out (total_q, Hq, D), k/v (total_k, Hkv, D),\n"
        "lse (Hq, total_q)), or 'bshd'/'bhsd' (KV cache: q/out/k_new/v_new 4-d, k/v the\n"
        "cache or the page pool read in the same axis order, lse (B, Hq, Sq)).\n"
        "cu_seqlens_q/k (num_seqs + 1), cache_seqlens (B) and block_table\n"
        "(B, max_pages_per_seq) are int32 arrays on q's device; num_seqs, the block\n"
        "table's sizes and row stride come from their shapes. check_metadata runs\n"
        "flashcore::check_serving_metadata first (for CUDA: a copy to the host and a\n"
        "stream synchronization). alloc_workspace: None, or a callable nbytes -> a\n"
        "uint8 array on q's device, called when the call splits its keys (split-KV)\n"
        "and needs workspace. Other arguments as in attention_forward.");

  m.def("version", [] { return std::string(flashcore::version()); },
        "The native library's version, 'MAJOR.MINOR.PATCH'.");
  m.def("built_with_cuda", &flashcore::built_with_cuda,
        "True when the native library contains the CUDA (sm_90a) backend.");
}
