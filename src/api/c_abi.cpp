// The C ABI (include/flashcore/flashcore.h): converts to the C++ types and
// calls attention_forward. No exception may cross this boundary.
#include "flashcore/flashcore.h"

#include <cstring>
#include <string>

#include "flashcore/attention.h"

namespace {

// The header promises these numbers; keep the two enums in lockstep.
static_assert(FC_OK == int(flashcore::StatusCode::kOk));
static_assert(FC_ERR_INVALID_ARGUMENT == int(flashcore::StatusCode::kInvalidArgument));
static_assert(FC_ERR_NOT_SUPPORTED == int(flashcore::StatusCode::kNotSupported));
static_assert(FC_ERR_CUDA == int(flashcore::StatusCode::kCudaError));
static_assert(FC_ERR_INTERNAL == int(flashcore::StatusCode::kInternal));
static_assert(FC_FLOAT32 == int(flashcore::DType::kFloat32));
static_assert(FC_FLOAT16 == int(flashcore::DType::kFloat16));
static_assert(FC_BFLOAT16 == int(flashcore::DType::kBFloat16));
static_assert(FC_DEVICE_CPU == int(flashcore::Device::kCPU));
static_assert(FC_DEVICE_CUDA == int(flashcore::Device::kCUDA));

// One message per thread, so concurrent callers never see each other's errors.
thread_local std::string t_last_error;

// Out-of-range enum values pass through unchanged: validate() reports them
// with the argument's name.
flashcore::TensorView to_view(const fc_tensor& t) {
  flashcore::TensorView v;
  v.data = t.data;
  v.dtype = static_cast<flashcore::DType>(t.dtype);
  for (int i = 0; i < 4; ++i) {
    v.shape[i] = t.shape[i];
    v.stride[i] = t.strides[i];
  }
  v.device = static_cast<flashcore::Device>(t.device);
  v.device_index = t.device_index;
  return v;
}

flashcore::AttentionArgs to_args(const fc_attention_args& a) {
  flashcore::AttentionArgs r;
  r.q = to_view(a.q);
  r.k = to_view(a.k);
  r.v = to_view(a.v);
  r.out = to_view(a.out);
  r.lse = to_view(a.lse);
  r.softmax_scale = a.softmax_scale;
  r.causal = a.causal != 0;
  r.window_left = a.window_left;
  r.window_right = a.window_right;
  r.cu_seqlens_q = a.cu_seqlens_q;
  r.cu_seqlens_k = a.cu_seqlens_k;
  r.cache_seqlens = a.cache_seqlens;
  r.block_table = a.block_table;
  r.num_seqs = a.num_seqs;
  r.max_seqlen_q = a.max_seqlen_q;
  r.max_seqlen_k = a.max_seqlen_k;
  r.block_table_stride = a.block_table_stride;
  r.max_pages_per_seq = a.max_pages_per_seq;
  r.k_new = to_view(a.k_new);
  r.v_new = to_view(a.v_new);
  r.workspace = a.workspace;
  r.workspace_bytes = a.workspace_bytes;
  r.config.block_m = a.block_m;
  r.config.block_n = a.block_n;
  r.config.num_splits = a.num_splits;
  return r;
}

int fail(int code, const char* message) {
  try {
    t_last_error = message;
  } catch (...) {
    t_last_error.clear();  // out of memory for the message: keep the code at least
  }
  return code;
}

// Reports a Status through the thread's last error.
int report(const flashcore::Status& s) {
  if (!s.ok()) return fail(static_cast<int>(s.code()), s.message().c_str());
  t_last_error.clear();
  return FC_OK;
}

// Calls f() -> Status for the C boundary: args checked, exceptions caught.
template <class F>
int call(const fc_attention_args* args, F&& f) {
  if (args == nullptr) return fail(FC_ERR_INVALID_ARGUMENT, "args is NULL");
  try {
    return report(f(to_args(*args)));
  } catch (...) {
    return fail(FC_ERR_INTERNAL, "internal error: exception at the C boundary");
  }
}

}  // namespace

extern "C" {

void fc_attention_args_init(fc_attention_args* args) {
  if (args == nullptr) return;
  std::memset(args, 0, sizeof *args);  // NULL data, zero shapes/strides, scale 0, causal 0, overrides 0
  fc_tensor* tensors[] = {&args->q, &args->k, &args->v, &args->out, &args->lse, &args->k_new, &args->v_new};
  for (fc_tensor* t : tensors) {
    t->dtype = FC_FLOAT16;
    t->device = FC_DEVICE_CPU;
  }
  args->window_left = -1;
  args->window_right = -1;
}

int fc_attention_forward(const fc_attention_args* args, void* stream) {
  return fc_attention_forward_alloc(args, stream, nullptr, nullptr);
}

int fc_attention_forward_alloc(const fc_attention_args* args, void* stream, fc_workspace_alloc_fn allocate,
                               void* context) {
  return call(args, [&](const flashcore::AttentionArgs& a) {
    return flashcore::attention_forward(a, static_cast<cudaStream_t>(stream), allocate, context);
  });
}

int fc_attention_workspace_size(const fc_attention_args* args, int64_t* bytes) {
  if (bytes == nullptr) return fail(FC_ERR_INVALID_ARGUMENT, "bytes is NULL");
  *bytes = 0;
  return call(args, [&](const flashcore::AttentionArgs& a) { return flashcore::attention_workspace_size(a, bytes); });
}

int fc_check_serving_metadata(const fc_attention_args* args, void* stream) {
  return call(args, [&](const flashcore::AttentionArgs& a) {
    return flashcore::check_serving_metadata(a, static_cast<cudaStream_t>(stream));
  });
}

const char* fc_last_error(void) { return t_last_error.c_str(); }

const char* fc_version(void) { return flashcore::version(); }

int fc_built_with_cuda(void) { return flashcore::built_with_cuda() ? 1 : 0; }

}  // extern "C"
