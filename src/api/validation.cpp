#include "api/validation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>

#include "api/device_memory.h"

namespace flashcore {
namespace {

constexpr int64_t kMaxDim = int64_t(1) << 31;       // so seq/head indices fit in int32 on the GPU
constexpr int64_t kTmaAlignBytes = 16;              // TMA: base address and strides
constexpr int64_t kSupportedHeadDims[] = {64, 96, 128, 256};
constexpr const char* kDimNames[4] = {"batch", "heads", "seqlen", "head_dim"};

template <class... Ts>
std::string cat(const Ts&... parts) {
  return str_cat(parts...);
}

Status invalid(std::string message) { return Status(StatusCode::kInvalidArgument, std::move(message)); }
Status unsupported(std::string message) { return Status(StatusCode::kNotSupported, std::move(message)); }

#define FC_RETURN_IF_ERROR(expr)       \
  do {                                 \
    Status status_ = (expr);           \
    if (!status_.ok()) return status_; \
  } while (0)

struct Named {
  const char* name;
  const TensorView* t;
};

bool valid_dtype(DType d) { return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16; }
bool valid_device(Device d) { return d == Device::kCPU || d == Device::kCUDA; }

std::string device_str(const TensorView& t) {
  return t.device == Device::kCPU ? std::string("cpu") : cat("cuda:", t.device_index);
}

std::string tuple_str(const int64_t v[4]) { return cat("(", v[0], ", ", v[1], ", ", v[2], ", ", v[3], ")"); }

// Overflow-checked arithmetic on non-negative int64 values.
bool checked_mul(int64_t a, int64_t b, int64_t* r) {
  if (a != 0 && b > INT64_MAX / a) return false;
  *r = a * b;
  return true;
}
bool checked_add(int64_t a, int64_t b, int64_t* r) {
  if (b > INT64_MAX - a) return false;
  *r = a + b;
  return true;
}

// Overflow-checked element count. False when it does not fit in int64.
// Any zero dim makes the count 0, however large the others are.
bool checked_numel(const TensorView& t, int64_t* n) {
  for (int i = 0; i < 4; ++i) {
    if (t.shape[i] == 0) {
      *n = 0;
      return true;
    }
  }
  int64_t acc = 1;
  for (int i = 0; i < 4; ++i) {
    if (!checked_mul(acc, t.shape[i], &acc)) return false;
  }
  *n = acc;
  return true;
}

// Valid only after check_tensor_alone (shapes non-negative).
bool is_empty(const TensorView& t) {
  return t.shape[0] == 0 || t.shape[1] == 0 || t.shape[2] == 0 || t.shape[3] == 0;
}

// ------------------------------------------------------------ scalar arguments

struct NamedPointer {
  const char* name;
  const int32_t* ptr;
};

// The metadata arrays a call sets (the null ones left out).
struct MetadataPointers {
  NamedPointer items[4];
  int count = 0;
  const NamedPointer* begin() const { return items; }
  const NamedPointer* end() const { return items + count; }
};

MetadataPointers metadata_pointers(const AttentionArgs& a) {
  MetadataPointers r;
  const NamedPointer all[4] = {{"cu_seqlens_q", a.cu_seqlens_q},
                               {"cu_seqlens_k", a.cu_seqlens_k},
                               {"cache_seqlens", a.cache_seqlens},
                               {"block_table", a.block_table}};
  for (const NamedPointer& n : all) {
    if (n.ptr != nullptr) r.items[r.count++] = n;
  }
  return r;
}

// Which serving features a call uses, from its pointers alone.
struct Mode {
  bool varlen_q = false, varlen_k = false, kv_cache = false, paged = false, has_new = false;
};

Mode mode_of(const AttentionArgs& a) {
  Mode m;
  m.varlen_q = a.cu_seqlens_q != nullptr;
  m.varlen_k = a.cu_seqlens_k != nullptr;
  m.kv_cache = a.cache_seqlens != nullptr;
  m.paged = a.block_table != nullptr;
  m.has_new = a.k_new.data != nullptr;
  return m;
}

struct NamedValue {
  const char* name;
  int64_t value;
};

// The serving fields on their own: which combinations make sense, and the
// ranges of the scalar sizes. Touches no memory (metadata contents are
// check_serving_metadata's business).
Status check_serving_args(const AttentionArgs& a) {
  const Mode m = mode_of(a);
  if (m.varlen_k && !m.varlen_q) {
    return invalid("cu_seqlens_k is set but cu_seqlens_q is null (variable-length keys need a variable-length "
                   "batch: set cu_seqlens_q too)");
  }
  if (m.varlen_q && m.kv_cache) {
    return unsupported("cu_seqlens_q together with cache_seqlens (a variable-length batch against a KV cache) "
                       "is not supported yet");
  }
  if (m.varlen_q && !m.varlen_k) {
    return invalid("cu_seqlens_q is set but cu_seqlens_k is null (required unless cache_seqlens is set)");
  }
  const NamedValue varlen_sizes[] = {
      {"num_seqs", a.num_seqs}, {"max_seqlen_q", a.max_seqlen_q}, {"max_seqlen_k", a.max_seqlen_k}};
  for (const NamedValue& v : varlen_sizes) {
    if (!m.varlen_q && v.value != 0) {
      return invalid(cat(v.name, " = ", v.value,
                         " is set but cu_seqlens_q is null (num_seqs, max_seqlen_q and max_seqlen_k describe a "
                         "variable-length batch; leave them 0 otherwise)"));
    }
    if (v.value < 0 || v.value >= kMaxDim) return invalid(cat(v.name, " = ", v.value, " must be in [0, 2^31)"));
  }
  if (m.paged && !m.kv_cache) {
    return invalid("block_table is set but cache_seqlens is null (a paged KV cache needs the per-sequence cache "
                   "lengths)");
  }
  const NamedValue paging[] = {{"max_pages_per_seq", a.max_pages_per_seq},
                               {"block_table_stride", a.block_table_stride}};
  for (const NamedValue& v : paging) {
    if (!m.paged && v.value != 0) {
      return invalid(cat(v.name, " = ", v.value, " is set but block_table is null (leave it 0 without a paged KV cache)"));
    }
    if (v.value < 0 || v.value >= kMaxDim) return invalid(cat(v.name, " = ", v.value, " must be in [0, 2^31)"));
  }
  if (m.paged && a.max_pages_per_seq == 0) return invalid("max_pages_per_seq = 0 must be > 0 with block_table");
  if (m.paged && a.block_table_stride < a.max_pages_per_seq) {
    return invalid(cat("block_table_stride = ", a.block_table_stride, " must be >= max_pages_per_seq = ",
                       a.max_pages_per_seq, " (the row stride of block_table, in elements)"));
  }
  if (m.has_new != (a.v_new.data != nullptr)) {
    return invalid(m.has_new ? "k_new is set but v_new.data is null (k_new and v_new are appended together)"
                             : "v_new is set but k_new.data is null (k_new and v_new are appended together)");
  }
  if (m.has_new && !m.kv_cache) {
    return invalid("k_new/v_new are set but cache_seqlens is null (new keys and values are appended into a KV "
                   "cache)");
  }
  for (const NamedPointer& n : metadata_pointers(a)) {
    if (reinterpret_cast<uintptr_t>(n.ptr) % alignof(int32_t) != 0) {
      return invalid(cat(n.name, " is not 4-byte aligned (address ", static_cast<const void*>(n.ptr),
                         "; int32 needs natural alignment)"));
    }
  }
  return Status::Ok();
}

Status check_scalars(const AttentionArgs& a) {
  if (!std::isfinite(a.softmax_scale)) {
    return invalid(cat("softmax_scale = ", a.softmax_scale, " must be finite (0 selects 1/sqrt(head_dim))"));
  }
  // The GPU kernels take each row's maximum of the unscaled scores as the
  // softmax's reference point: with a negative scale that is the minimum of
  // the scaled ones, masked keys (-inf) would scale to +inf, and rows would
  // overflow. Rejected on every backend, so that CPU and GPU agree.
  if (a.softmax_scale < 0.f) {
    return invalid(cat("softmax_scale = ", a.softmax_scale,
                       " must not be negative (0 selects 1/sqrt(head_dim))"));
  }
  if (a.window_left < -1) {
    return invalid(cat("window_left = ", a.window_left, " must be -1 (unbounded) or >= 0"));
  }
  if (a.window_right < -1) {
    return invalid(cat("window_right = ", a.window_right, " must be -1 (unbounded) or >= 0"));
  }
  if (a.causal && a.window_right != -1 && a.window_right != 0) {
    return invalid(
        cat("causal=true conflicts with window_right=", a.window_right, " (causal means window_right=0)"));
  }
  const struct {
    const char* name;
    int value;
  } config[] = {{"config.block_m", a.config.block_m},
                {"config.block_n", a.config.block_n},
                {"config.num_splits", a.config.num_splits}};
  for (const auto& c : config) {
    if (c.value < 0) return invalid(cat(c.name, " = ", c.value, " must be >= 0 (0 lets dispatch choose)"));
  }
  return Status::Ok();
}

// ------------------------------------------------------------ one tensor alone

Status check_tensor_alone(const Named& n) {
  const TensorView& t = *n.t;
  if (!valid_dtype(t.dtype)) {
    return invalid(cat(n.name, ".dtype = ", int(t.dtype), " is not a valid dtype (float32=0, float16=1, bfloat16=2)"));
  }
  if (!valid_device(t.device)) {
    return invalid(cat(n.name, ".device = ", int(t.device), " is not a valid device (cpu=0, cuda=1)"));
  }
  if (t.device == Device::kCUDA && t.device_index < 0) {
    return invalid(cat(n.name, ".device_index = ", t.device_index, " must be >= 0"));
  }
  for (int i = 0; i < 4; ++i) {
    if (t.shape[i] < 0) return invalid(cat(n.name, ".shape[", i, "] = ", t.shape[i], " must be >= 0"));
    if (t.shape[i] >= kMaxDim) {
      return invalid(cat(n.name, ".shape[", i, "] = ", t.shape[i], " must be < 2^31"));
    }
  }
  for (int i = 0; i < 4; ++i) {
    if (t.stride[i] < 0) {
      return invalid(cat(n.name, ".stride[", i, "] = ", t.stride[i], " must be >= 0 (negative strides are not supported)"));
    }
  }
  int64_t numel = 0;
  if (!checked_numel(t, &numel)) {
    return invalid(cat(n.name, " with shape ", tuple_str(t.shape), " has more than 2^63 elements"));
  }
  if (numel == 0) return Status::Ok();  // never dereferenced, so data may be anything, null included

  // The farthest element, in elements and in bytes, must be addressable
  // without int64 overflow: backends compute offsets as sum(index * stride).
  int64_t last = 0;
  bool ok = true;
  for (int i = 0; i < 4 && ok; ++i) {
    int64_t term = 0;
    ok = checked_mul(t.shape[i] - 1, t.stride[i], &term) && checked_add(last, term, &last);
  }
  int64_t bytes = 0;
  ok = ok && checked_add(last, 1, &last) && checked_mul(last, dtype_size(t.dtype), &bytes);
  if (!ok) {
    return invalid(cat(n.name, ": shape ", tuple_str(t.shape), " with strides ", tuple_str(t.stride),
                       " reaches past 2^63 bytes (element offsets overflow int64)"));
  }
  if (t.data == nullptr) return invalid(cat(n.name, ".data is null but ", n.name, " has ", numel, " elements"));
  return Status::Ok();
}

// ------------------------------------------------------------ tensors together

Status check_same_dim(const Named& a, const Named& b, int i) {
  if (a.t->shape[i] != b.t->shape[i]) {
    return invalid(cat(a.name, ".shape[", i, "] (", kDimNames[i], ") = ", a.t->shape[i], " must equal ", b.name,
                       ".shape[", i, "] = ", b.t->shape[i]));
  }
  return Status::Ok();
}

Status check_dtypes(const Named* tensors, int count) {
  const Named& q = tensors[0];
  for (int i = 1; i < count; ++i) {
    const Named& o = tensors[i];
    if (o.t->dtype != q.t->dtype) {
      return invalid(cat(q.name, ".dtype is ", dtype_name(q.t->dtype), " but ", o.name, ".dtype is ",
                         dtype_name(o.t->dtype)));
    }
  }
  return Status::Ok();
}

// A packed variable-length tensor is given with batch 1.
Status check_packed(const Named& n, const char* cu_seqlens, const char* total) {
  if (n.t->shape[0] != 1) {
    return invalid(cat(n.name, ".shape[0] = ", n.t->shape[0], " must be 1 with ", cu_seqlens, " (packed rows: ",
                       n.name, " is (1, heads, ", total, ", head_dim))"));
  }
  return Status::Ok();
}

// Shapes of q, k, v, out (mode-dependent batch rules) and of the paged pool.
Status check_shapes(const AttentionArgs& a, const Mode& m, const Named& q, const Named& k, const Named& v,
                    const Named& out) {
  FC_RETURN_IF_ERROR(check_same_dim(k, q, 3));  // head_dim first: the likeliest mistake
  if (m.varlen_q) {
    FC_RETURN_IF_ERROR(check_packed(q, "cu_seqlens_q", "total_q"));
    FC_RETURN_IF_ERROR(check_packed(k, "cu_seqlens_k", "total_k"));
  } else if (!m.paged) {  // a page pool has its own leading dim
    FC_RETURN_IF_ERROR(check_same_dim(k, q, 0));
  }
  for (int i = 0; i < 4; ++i) FC_RETURN_IF_ERROR(check_same_dim(v, k, i));
  for (int i = 0; i < 4; ++i) FC_RETURN_IF_ERROR(check_same_dim(out, q, i));
  const int64_t hq = q.t->shape[1], hkv = k.t->shape[1];
  if (hkv == 0 && hq > 0) return invalid(cat("k heads (0) must be > 0 when q has ", hq, " heads"));
  if (hkv > 0 && hq % hkv != 0) {
    return invalid(cat("q heads (", hq, ") must be a multiple of k heads (", hkv, ")"));
  }
  if (m.paged) {
    const int64_t page_size = k.t->shape[2];
    if (page_size <= 0 || page_size % 16 != 0) {
      return invalid(cat("k.shape[2] (page_size) = ", page_size,
                         " must be a positive multiple of 16 with block_table (k and v are a page pool "
                         "(num_pages, heads, page_size, head_dim))"));
    }
    if (a.max_pages_per_seq * page_size >= kMaxDim) {  // both < 2^31: no overflow
      return invalid(cat("max_pages_per_seq * page_size = ", a.max_pages_per_seq, " * ", page_size,
                         " must be < 2^31 (the most keys one sequence can hold)"));
    }
  }
  return Status::Ok();
}

// Keys one sequence of the cache can hold.
int64_t cache_capacity(const AttentionArgs& a, const Mode& m) {
  return m.paged ? a.max_pages_per_seq * a.k.shape[2] : a.k.shape[2];
}

// k_new/v_new: (B, Hkv, S_new, D) with S_new within the cache capacity.
Status check_new_shapes(const AttentionArgs& a, const Mode& m, const Named& q, const Named& k, const Named& kn,
                        const Named& vn) {
  FC_RETURN_IF_ERROR(check_same_dim(kn, q, 3));
  FC_RETURN_IF_ERROR(check_same_dim(kn, q, 0));
  FC_RETURN_IF_ERROR(check_same_dim(kn, k, 1));
  for (int i = 0; i < 4; ++i) FC_RETURN_IF_ERROR(check_same_dim(vn, kn, i));
  const int64_t capacity = cache_capacity(a, m);
  if (kn.t->shape[2] > capacity) {
    return invalid(cat("k_new.shape[2] = ", kn.t->shape[2], " new tokens do not fit the cache capacity ",
                       capacity_str(capacity, m.paged, a.max_pages_per_seq, a.k.shape[2])));
  }
  return Status::Ok();
}

Status check_lse(const Named& lse, const TensorView& q, bool packed) {
  const TensorView& t = *lse.t;
  if (t.dtype != DType::kFloat32) {
    return invalid(cat("lse.dtype is ", dtype_name(t.dtype), " but must be float32"));
  }
  const int64_t want[4] = {q.shape[0], q.shape[1], q.shape[2], 1};
  for (int i = 0; i < 4; ++i) {
    if (t.shape[i] != want[i]) {
      return invalid(cat("lse.shape must be ", packed ? "(1, q heads, total_q, 1)" : "(batch, q heads, seqlen_q, 1)",
                         " = ", tuple_str(want), ", got ",
                         tuple_str(t.shape)));
    }
  }
  return Status::Ok();
}

Status check_devices(const Named* tensors, int count) {
  const TensorView& first = *tensors[0].t;
  for (int i = 1; i < count; ++i) {
    const TensorView& t = *tensors[i].t;
    const bool same = t.device == first.device &&
                      (t.device == Device::kCPU || t.device_index == first.device_index);
    if (!same) {
      return invalid(cat("tensors are on different devices (", tensors[0].name, ": ", device_str(first), ", ",
                         tensors[i].name, ": ", device_str(t), ")"));
    }
  }
  return Status::Ok();
}

Status check_supported(const TensorView& q) {
  const int64_t d = q.shape[3];
  if (d != 0 && !is_supported_head_dim(d)) {
    return unsupported(cat("head_dim ", d, " is not supported (supported: 64, 96, 128, 256)"));
  }
  if (q.device == Device::kCUDA && q.dtype == DType::kFloat32) {
    return unsupported(
        "q.dtype float32 is not supported on CUDA (use float16 or bfloat16; float32 runs on the CPU backend)");
  }
  return Status::Ok();
}

// The TMA rule, applied on both backends so a call that works on the CPU
// works on the GPU too: last dim contiguous, 16-byte aligned base, and the
// other strides whole multiples of 16 bytes.
Status check_tma_layout(const Named& n) {
  const TensorView& t = *n.t;
  if (t.stride[3] != 1) return invalid(cat(n.name, ".stride[3] must be 1 (got ", t.stride[3], ")"));
  const auto addr = reinterpret_cast<uintptr_t>(t.data);
  if (addr % kTmaAlignBytes != 0) {
    return invalid(cat(n.name, ".data is not 16-byte aligned (address ", t.data, ")"));
  }
  const int64_t esize = dtype_size(t.dtype);
  for (int i = 0; i < 3; ++i) {
    // (stride mod 16) * esize cannot overflow, unlike stride * esize.
    if (((t.stride[i] % kTmaAlignBytes) * esize) % kTmaAlignBytes != 0) {
      return invalid(cat(n.name, ".stride[", i, "]=", t.stride[i], " elements is not a multiple of 16 bytes (",
                         dtype_name(t.dtype), " is ", esize, " bytes per element)"));
    }
  }
  return Status::Ok();
}

// Outputs must not alias themselves: a sufficient condition is that, dims
// sorted by stride, each stride steps past everything the inner dims span.
// Dims of size 1 are never stepped along, so their stride does not matter.
Status check_no_self_overlap(const Named& n) {
  const TensorView& t = *n.t;
  int dims[4];
  int count = 0;
  for (int i = 0; i < 4; ++i) {
    if (t.shape[i] > 1) dims[count++] = i;
  }
  std::stable_sort(dims, dims + count, [&](int a, int b) { return t.stride[a] < t.stride[b]; });
  int64_t span = 1;  // elements covered by the dims handled so far; cannot overflow (checked extent)
  for (int j = 0; j < count; ++j) {
    const int d = dims[j];
    if (t.stride[d] < span) {
      return invalid(cat(n.name, " has overlapping elements: stride[", d, "] = ", t.stride[d],
                         " is smaller than the ", span,
                         " elements its inner dims span (every output element needs its own memory)"));
    }
    span += t.stride[d] * (t.shape[d] - 1);
  }
  return Status::Ok();
}

// ------------------------------------------------------------ CUDA pointers

#if FLASHCORE_WITH_CUDA
// `ptr` must be device (or managed) memory of cuda:`device_index`. what()
// names the pointer, expected() says where it should live: both are called
// only on error, so a valid call builds no strings (host time per call).
template <class What, class Expected>
Status check_device_memory(MemoryQueries& queries, const void* ptr, int device_index, What what, Expected expected) {
  MemoryRange m;
  std::string error;
  if (!queries.find(ptr, &m, &error)) {
    return Status(StatusCode::kCudaError, cat("querying the memory of ", what(), " failed: ", error));
  }
  if (m.kind != MemoryKind::kDevice && m.kind != MemoryKind::kManaged) {
    const char* kind = m.kind == MemoryKind::kPinnedHost ? "pinned host memory" : "host memory unknown to CUDA";
    return invalid(cat(what(), " is ", kind, " but ", expected(),
                       " (pass device memory, or CPU tensors for the CPU backend)"));
  }
  if (m.device != device_index) return invalid(cat(what(), " is memory of cuda:", m.device, " but ", expected()));
  return Status::Ok();
}
#endif

// Tensors (those with elements: the others are never accessed) and the
// metadata arrays must be memory of the tensors' CUDA device.
Status check_cuda_pointers(const Named* tensors, int count, const MetadataPointers& metadata) {
#if FLASHCORE_WITH_CUDA
  MemoryQueries queries;  // one CUDA query per allocation (device_memory.h)
  for (int i = 0; i < count; ++i) {
    const Named& n = tensors[i];
    const TensorView& t = *n.t;
    if (is_empty(t)) continue;
    FC_RETURN_IF_ERROR(check_device_memory(
        queries, t.data, t.device_index, [&] { return cat(n.name, ".data"); },
        [&] { return cat(n.name, ".device is ", device_str(t)); }));
  }
  const TensorView& q = *tensors[0].t;
  for (const NamedPointer& n : metadata) {
    FC_RETURN_IF_ERROR(check_device_memory(
        queries, n.ptr, q.device_index, [&] { return std::string(n.name); },
        [&] { return cat("the tensors are on ", device_str(q)); }));
  }
  return Status::Ok();
#else
  (void)count;
  (void)metadata;
  return unsupported(cat("flashcore was built without CUDA (", tensors[0].name, " is on ",
                         device_str(*tensors[0].t), "); rebuild with FLASHCORE_CUDA=ON or pass CPU tensors"));
#endif
}

// ------------------------------------------------------------ resolution

int64_t resolve_window(int64_t w) { return w < 0 ? kUnboundedWindow : std::min(w, kUnboundedWindow); }

void resolve(const AttentionArgs& a, const Mode& m, bool has_lse, Problem* p) {
  p->batch = a.q.shape[0];
  p->heads_q = a.q.shape[1];
  p->heads_kv = a.k.shape[1];
  p->seqlen_q = a.q.shape[2];
  p->seqlen_k = a.k.shape[2];
  p->head_dim = a.q.shape[3];
  p->dtype = a.q.dtype;
  p->device = a.q.device;
  p->device_index = a.q.device == Device::kCUDA ? a.q.device_index : 0;
  p->scale = a.softmax_scale != 0.f || p->head_dim == 0
                 ? a.softmax_scale
                 : static_cast<float>(1.0 / std::sqrt(static_cast<double>(p->head_dim)));
  p->causal = a.causal;
  p->window_left = resolve_window(a.window_left);
  p->window_right = a.causal ? 0 : resolve_window(a.window_right);
  p->has_lse = has_lse;
  p->config = a.config;

  p->varlen_q = m.varlen_q;
  p->varlen_k = m.varlen_k;
  p->kv_cache = m.kv_cache;
  p->paged = m.paged;
  if (m.varlen_q) {
    p->batch = a.num_seqs;
    p->seqlen_q = a.max_seqlen_q;
    p->total_q = a.q.shape[2];
  }
  if (m.varlen_k) {
    p->seqlen_k = a.max_seqlen_k;
    p->total_k = a.k.shape[2];
  }
  if (m.kv_cache) p->seqlen_k = cache_capacity(a, m);
  if (m.paged) {
    p->num_pages = a.k.shape[0];
    p->page_size = a.k.shape[2];
    p->max_pages_per_seq = a.max_pages_per_seq;
    p->block_table_stride = a.block_table_stride;
  }
  p->seqlen_new = m.has_new ? a.k_new.shape[2] : 0;
}

}  // namespace

bool is_supported_head_dim(int64_t head_dim) {
  return std::find(std::begin(kSupportedHeadDims), std::end(kSupportedHeadDims), head_dim) !=
         std::end(kSupportedHeadDims);
}

std::string capacity_str(int64_t capacity, bool paged, int64_t max_pages_per_seq, int64_t cache_dim) {
  return paged ? cat(capacity, " (max_pages_per_seq * page_size = ", max_pages_per_seq, " * ", cache_dim, ")")
               : cat(capacity, " (k.shape[2])");
}

Status validate(const AttentionArgs& args, Problem* out) {
  const Mode m = mode_of(args);
  const bool has_lse = args.lse.data != nullptr;
  const Named q{"q", &args.q}, k{"k", &args.k}, v{"v", &args.v}, o{"out", &args.out}, lse{"lse", &args.lse},
      k_new{"k_new", &args.k_new}, v_new{"v_new", &args.v_new};
  // q, k, v, out, then the optional ones that are present.
  Named all[7] = {q, k, v, o};
  int count = 4;
  if (m.has_new) {
    all[count++] = k_new;
    all[count++] = v_new;
  }
  const int count_same_dtype = count;  // all but lse share q's dtype
  if (has_lse) all[count++] = lse;

  FC_RETURN_IF_ERROR(check_scalars(args));
  FC_RETURN_IF_ERROR(check_serving_args(args));
  for (int i = 0; i < count; ++i) FC_RETURN_IF_ERROR(check_tensor_alone(all[i]));
  FC_RETURN_IF_ERROR(check_dtypes(all, count_same_dtype));
  FC_RETURN_IF_ERROR(check_shapes(args, m, q, k, v, o));
  if (m.has_new) FC_RETURN_IF_ERROR(check_new_shapes(args, m, q, k, k_new, v_new));
  if (has_lse) FC_RETURN_IF_ERROR(check_lse(lse, args.q, m.varlen_q));
  FC_RETURN_IF_ERROR(check_devices(all, count));
  FC_RETURN_IF_ERROR(check_supported(args.q));
  // Layout rules concern memory that is accessed; a tensor with no elements
  // has none, and its strides are meaningless (often all zero).
  for (int i = 0; i < count_same_dtype; ++i) {
    if (!is_empty(*all[i].t)) FC_RETURN_IF_ERROR(check_tma_layout(all[i]));
  }
  if (!is_empty(args.out)) FC_RETURN_IF_ERROR(check_no_self_overlap(o));
  if (has_lse && !is_empty(args.lse)) {
    if (reinterpret_cast<uintptr_t>(args.lse.data) % sizeof(float) != 0) {
      return invalid("lse.data is not 4-byte aligned (float32 needs natural alignment)");
    }
    FC_RETURN_IF_ERROR(check_no_self_overlap(lse));
  }
  if (m.has_new) {  // the cache is written: each of its elements needs its own memory
    for (const Named& n : {k, v}) {
      if (!is_empty(*n.t)) FC_RETURN_IF_ERROR(check_no_self_overlap(n));
    }
  }
  if (args.q.device == Device::kCUDA) FC_RETURN_IF_ERROR(check_cuda_pointers(all, count, metadata_pointers(args)));

  resolve(args, m, has_lse, out);
  return Status::Ok();
}

}  // namespace flashcore
