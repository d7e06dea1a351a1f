// flashcore public C++ API: exact attention O = softmax(Q·Kᵀ·scale)·V.
//
// One entry point, attention_forward(), serves host tensors (CPU reference
// backend) and CUDA tensors (sm_90a kernels). Tensors are described by
// TensorView: a pointer, a dtype, a logical rank-4 shape and strides in
// elements. The logical shape is always (batch, heads, seqlen, head_dim);
// the memory layout is whatever the strides say, so BHSD, BSHD and strided
// views of bigger tensors are all the same call.
//
// Masking (causal and sliding window) is aligned to the bottom-right corner
// when seqlen_q != seqlen_k, as FlashAttention >= 2.1 and cuDNN do: query row
// i sits at key position  i + (seqlen_k - seqlen_q), and it may attend key j iff
//     j >= i + (seqlen_k - seqlen_q) - window_left    (when window_left  >= 0)
//     j <= i + (seqlen_k - seqlen_q) + window_right   (when window_right >= 0)
// causal == true is window_right = 0. A row with no allowed key (possible when
// seqlen_q > seqlen_k under a causal mask) outputs zeros and LSE = -inf.
#pragma once

#include <cstdint>
#include <string>

// Same declaration as CUDA's driver_types.h, so this header needs no CUDA.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace flashcore {

enum class DType : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };
enum class Device : int32_t { kCPU = 0, kCUDA = 1 };

const char* dtype_name(DType dtype);
int64_t dtype_size(DType dtype);

// A non-owning view of a rank-4 tensor. shape = (batch, heads, seq, dim) for
// q/k/v/out, (batch, heads, seq_q, 1) for lse. Strides are in elements.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat16;
  int64_t shape[4] = {0, 0, 0, 0};
  int64_t stride[4] = {0, 0, 0, 0};
  Device device = Device::kCPU;
  int device_index = 0;

  int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
};

// Contiguous views in the two common layouts; shape is always (B, H, S, D).
TensorView make_bhsd(void* data, DType dtype, int64_t b, int64_t h, int64_t s, int64_t d,
                     Device device = Device::kCPU, int device_index = 0);
TensorView make_bshd(void* data, DType dtype, int64_t b, int64_t h, int64_t s, int64_t d,
                     Device device = Device::kCPU, int device_index = 0);

// Overrides of the tuned kernel choice, for experiments and the autotuner.
// 0 means "let dispatch choose from the committed tuning table".
struct KernelConfig {
  int block_m = 0;
  int block_n = 0;
  int num_splits = 0;
};

struct AttentionArgs {
  TensorView q;    // (B, Hq, Sq, D)
  TensorView k;    // (B, Hkv, Sk, D), Hq % Hkv == 0 (GQA / MQA)
  TensorView v;    // (B, Hkv, Sk, D)
  TensorView out;  // (B, Hq, Sq, D), same dtype as q
  TensorView lse;  // optional: data == nullptr to skip; (B, Hq, Sq, 1) float32, natural log

  float softmax_scale = 0.0f;  // 0 means 1/sqrt(D); finite, not negative
  bool causal = false;         // bottom-right aligned, see the top of this file
  int64_t window_left = -1;    // -1: unbounded
  int64_t window_right = -1;   // -1: unbounded (0 when causal)

  // ---- Serving. Every pointer here lives on the device of the tensors
  // (host memory for the CPU backend).

  // Variable-length batch: set cu_seqlens_q (and cu_seqlens_k unless a KV
  // cache is given) to int32 prefix sums of num_seqs + 1 entries. q, out and
  // lse are then packed "THD" tensors given with batch 1: q/out
  // (1, Hq, total_q, D), lse (1, Hq, total_q, 1); sequence b owns rows
  // [cu_seqlens_q[b], cu_seqlens_q[b+1]). k/v likewise (1, Hkv, total_k, D)
  // with cu_seqlens_k. max_seqlen_q / max_seqlen_k bound every sequence's
  // length (they size the grid; metadata that breaks them gives wrong
  // numbers, never an access outside the tensors). Masks are aligned
  // bottom-right per sequence. When the packed rows fill every sequence to
  // the bounds (total_q = num_seqs * max_seqlen_q, and the same for keys:
  // with valid metadata every sequence has exactly those lengths), the CUDA
  // backend runs the call as the dense batch it is, with the same bits.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int64_t num_seqs = 0;
  int64_t max_seqlen_q = 0;
  int64_t max_seqlen_k = 0;

  // KV cache: set cache_seqlens (int32, batch entries: tokens already in the
  // cache). k/v are then the cache, q is (B, Hq, Sq, D) as usual, and
  // sequence b attends to its first cache_seqlens[b] + S_new keys (masks
  // bottom-right per sequence).
  //  - contiguous cache: k/v (B, Hkv, capacity, D);
  //  - paged cache (block_table != nullptr): k/v are a pool of pages
  //    (num_pages, Hkv, page_size, D), page_size a multiple of 16;
  //    block_table is (B, max_pages_per_seq) int32 with row stride
  //    block_table_stride (elements); key j of sequence b lives in page
  //    block_table[b * block_table_stride + j / page_size], row j % page_size.
  //  - k_new/v_new (optional, data != nullptr): (B, Hkv, S_new, D), written
  //    into the cache at positions [cache_seqlens[b], cache_seqlens[b] + S_new)
  //    before attention runs (cache_seqlens itself is not updated).
  const int32_t* cache_seqlens = nullptr;
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  int64_t max_pages_per_seq = 0;
  TensorView k_new;
  TensorView v_new;

  // Split-KV workspace (CUDA only). Calls whose sequences have at most 64
  // query rows (after GQA packing) split long key ranges into chunks of
  // 256·k keys (512·k at head dim 256) at fixed positions, sized by the
  // sequence's own length, and merge them in a fixed order, by different
  // CTAs (partials here, then a combine kernel) or, when the batch alone
  // fills the GPU, inside one CTA: the same bits. Where a sequence splits
  // depends only on its own lengths, so its result never depends on its
  // batch. Serving calls (varlen, KV cache) that split across CTAs need the
  // partials' bytes here (16-byte aligned; attention_workspace_size() gives
  // all the call can use); without them they are an error, never a silent
  // slow path. Plain calls (head dims 64 and 128) use
  // the workspace when given one and otherwise merge their chunks in one
  // CTA (the same bits, less parallel at small batches).
  // config.num_splits = 1 turns splitting off.
  // Varlen calls of mixed lengths and KV-cache prefill (more than 64 query
  // rows) also keep a list of the tiles that have work here, costliest
  // sequence first, which balances the GPU's load better: with fewer bytes
  // than attention_workspace_size() (but enough for any split) they run
  // without it, with the same bits.
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;

  KernelConfig config;
};

enum class StatusCode : int32_t {
  kOk = 0,
  kInvalidArgument = 1,
  kNotSupported = 2,
  kCudaError = 3,
  kInternal = 4,
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Runs attention. Host tensors run on the CPU reference backend (synchronous,
// stream ignored); CUDA tensors run on the sm_90a kernels, enqueued on
// `stream` (no host synchronization, no allocation: safe in graph capture).
// Every invalid argument returns a Status naming the argument; nothing is
// written in that case. Zero-sized problems are a valid no-op.
Status attention_forward(const AttentionArgs& args, cudaStream_t stream = nullptr);

// Bytes of workspace attention_forward(args) needs (0 when it needs none).
// Reads only shapes and flags, never tensor or metadata contents.
Status attention_workspace_size(const AttentionArgs& args, int64_t* bytes);

// attention_forward with the split-KV workspace allocated on demand: when
// args.workspace is null and the call needs one, allocate(context, bytes)
// is called once, on this thread, before anything is enqueued. It returns at
// least `bytes` bytes of device memory, 16-byte aligned, usable by work
// enqueued on `stream` (a stream-ordered or caching allocator's block), or
// nullptr, which makes the call fail with kInvalidArgument. The arguments
// are validated once (attention_workspace_size followed by attention_forward
// validates them twice): what bindings with an allocator of their own use.
// A null `allocate` is the plain call. What allocate returned stays the
// caller's, also when the call then fails.
using WorkspaceAllocFn = void* (*)(void* context, int64_t bytes);
Status attention_forward(const AttentionArgs& args, cudaStream_t stream, WorkspaceAllocFn allocate,
                         void* context);

// Checks the serving metadata (cu_seqlens monotonic and within the packed
// tensors, cache lengths within capacity, block-table entries inside the
// page pool, every length within max_seqlen_*). This reads the metadata, so
// for CUDA tensors it copies it to the host and synchronizes the stream: a
// debugging and API-boundary check, not for the hot path or graph capture.
// (The kernels never read or write out of bounds even with bad metadata:
// they clip every index; the check is what turns bad metadata into a clear
// error.) The CPU backend always runs it.
Status check_serving_metadata(const AttentionArgs& args, cudaStream_t stream = nullptr);

// Library version, "MAJOR.MINOR.PATCH".
const char* version();

// True when this build contains the CUDA backend.
bool built_with_cuda();

}  // namespace flashcore
