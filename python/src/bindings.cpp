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

// A rank-4 array read as (B, H, S, D). With `bshd` the array's axes are
// (B, S, H, D) and axes 1 and 2 are swapped here: shape and strides only, no copy.
template <typename Array>
flashcore::TensorView make_view(const char* name, const Array& a, bool bshd, bool uint16_is_bf16) {
  if (a.ndim() != 4)
    throw nb::value_error((std::string(name) + ": expected a 4-d array, got " +
                           std::to_string(a.ndim()) + " dimensions")
                              .c_str());
  flashcore::TensorView v;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.dtype = to_dtype(name, a.dtype(), uint16_is_bf16);
  set_device(name, a.device_type(), a.device_id(), v);
  static constexpr int kBhsd[4] = {0, 1, 2, 3};
  static constexpr int kBshd[4] = {0, 2, 1, 3};
  const int* perm = bshd ? kBshd : kBhsd;
  for (int i = 0; i < 4; ++i) {
    v.shape[i] = static_cast<int64_t>(a.shape(perm[i]));
    v.stride[i] = a.stride(perm[i]);  // nanobind reports strides in elements
  }
  return v;
}

// The log-sum-exp output: (B, H, Sq) or (B, H, Sq, 1), float32. The library
// sees it as (B, H, Sq, 1).
flashcore::TensorView make_lse_view(const OutArray& a) {
  flashcore::TensorView v;
  if (a.ndim() == 3 || (a.ndim() == 4 && a.shape(3) == 1)) {
    for (int i = 0; i < 3; ++i) {
      v.shape[i] = static_cast<int64_t>(a.shape(i));
      v.stride[i] = a.stride(i);
    }
    v.shape[3] = 1;
    v.stride[3] = 1;
  } else {
    throw nb::value_error(("lse: expected a (batch, heads, seqlen_q) array, got " +
                           std::to_string(a.ndim()) + " dimensions")
                              .c_str());
  }
  v.data = a.data();
  v.dtype = to_dtype("lse", a.dtype(), false);
  set_device("lse", a.device_type(), a.device_id(), v);
  return v;
}

[[noreturn]] void raise_status(const flashcore::Status& st) {
  const std::string& msg = st.message();
  switch (st.code()) {
    case flashcore::StatusCode::kInvalidArgument: throw nb::value_error(msg.c_str());
    case flashcore::StatusCode::kNotSupported: throw nb::type_error(msg.c_str());
    default: throw std::runtime_error(msg);  // nanobind turns this into RuntimeError
  }
}

void attention_forward(const InArray& q, const InArray& k, const InArray& v, const OutArray& out,
                       std::optional<OutArray> lse, float softmax_scale, bool causal,
                       int64_t window_left, int64_t window_right, bool bshd, bool uint16_is_bf16,
                       int block_m, int block_n, int num_splits, uintptr_t stream) {
  flashcore::AttentionArgs args;
  args.q = make_view("q", q, bshd, uint16_is_bf16);
  args.k = make_view("k", k, bshd, uint16_is_bf16);
  args.v = make_view("v", v, bshd, uint16_is_bf16);
  args.out = make_view("out", out, bshd, uint16_is_bf16);
  if (lse) args.lse = make_lse_view(*lse);  // else data stays null: no LSE
  args.softmax_scale = softmax_scale;
  args.causal = causal;
  args.window_left = window_left;
  args.window_right = window_right;
  args.config.block_m = block_m;
  args.config.block_n = block_n;
  args.config.num_splits = num_splits;

  flashcore::Status st;
  {
    // The arrays stay referenced by this frame's arguments while the GIL is
    // released, so other Python threads cannot free them under us.
    nb::gil_scoped_release release;
    st = flashcore::attention_forward(args, reinterpret_cast<cudaStream_t>(stream));
  }
  if (!st.ok()) raise_status(st);
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "flashcore native extension (see the flashcore package for the public API)";

  m.def("attention_forward", &attention_forward, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("lse").none(), nb::arg("softmax_scale") = 0.0f,
        nb::arg("causal") = false, nb::arg("window_left") = -1, nb::arg("window_right") = -1,
        nb::arg("bshd") = false, nb::arg("uint16_is_bf16") = false, nb::arg("block_m") = 0,
        nb::arg("block_n") = 0, nb::arg("num_splits") = 0, nb::arg("stream") = 0,
        "Low-level call of flashcore::attention_forward on DLPack arrays.\n\n"
        "q, k, v, out are 4-d arrays read as (B, H, S, D), or as (B, S, H, D) when\n"
        "bshd is true; lse is None or a float32 (B, H, Sq) array. uint16 arrays are\n"
        "read as bfloat16 when uint16_is_bf16 is true. stream is a cudaStream_t as an\n"
        "integer (0: the default stream). The GIL is released during the call.\n\n"
        "Raises ValueError (invalid argument), TypeError (unsupported dtype, device\n"
        "or configuration) or RuntimeError (CUDA or internal error).");

  m.def("version", [] { return std::string(flashcore::version()); },
        "The native library's version, 'MAJOR.MINOR.PATCH'.");
  m.def("built_with_cuda", &flashcore::built_with_cuda,
        "True when the native library contains the CUDA (sm_90a) backend.");
}
