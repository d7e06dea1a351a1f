#include "sm90/kv_append.h"

#include <string>

#include "sm90/seq_info.h"

namespace flashcore::sm90 {
namespace {

// One thread per 16 bytes of a row; rows are (batch, head, new token).
__global__ void kv_append_kernel(const AppendParams p) {
  int const vecs = p.head_dim * p.element_bytes / 16;
  int64_t const idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t const rows = int64_t(p.batch) * p.heads_kv * p.seqlen_new;
  if (idx >= rows * vecs) return;
  int const vec = int(idx % vecs);
  int64_t const r = idx / vecs;
  int const s = int(r % p.seqlen_new);
  int const h = int((r / p.seqlen_new) % p.heads_kv);
  int const b = int(r / (int64_t(p.seqlen_new) * p.heads_kv));

  int const pos = load_index(p.cache_seqlens + b) + s;
  if (pos < 0 || pos >= p.capacity) return;
  int64_t slot, row;  // batch (contiguous) or page (paged), and row within it
  if (p.block_table != nullptr) {
    int const logical = pos / p.page_size;
    if (logical >= p.max_pages_per_seq) return;
    slot = load_index(p.block_table + b * p.block_table_stride + logical);
    if (slot < 0 || slot >= p.num_pages) return;
    row = pos % p.page_size;
  } else {
    slot = b;
    row = pos;
  }
  int64_t const byte = int64_t(vec) * 16;
  auto copy = [&](const void* src, const int64_t (&ss)[3], void* dst, const int64_t (&ds)[3]) {
    const char* from = static_cast<const char*>(src) + (b * ss[0] + h * ss[1] + s * ss[2]) * p.element_bytes + byte;
    char* to = static_cast<char*>(dst) + (slot * ds[0] + h * ds[1] + row * ds[2]) * p.element_bytes + byte;
    *reinterpret_cast<uint4*>(to) = *reinterpret_cast<const uint4*>(from);
  };
  copy(p.k_new, p.new_stride, p.k_cache, p.cache_stride);
  copy(p.v_new, p.v_new_stride, p.v_cache, p.v_cache_stride);
}

}  // namespace

Status launch_kv_append(const AppendParams& p, cudaStream_t stream) {
  int64_t const threads = int64_t(p.batch) * p.heads_kv * p.seqlen_new * (p.head_dim * p.element_bytes / 16);
  if (threads == 0) return Status::Ok();
  int const block = 256;
  int64_t const grid = (threads + block - 1) / block;
  if (grid >= (int64_t(1) << 31)) return Status(StatusCode::kNotSupported, "k_new/v_new too large to append");
  kv_append_kernel<<<unsigned(grid), block, 0, stream>>>(p);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    return Status(StatusCode::kCudaError, std::string("KV append launch failed: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

}  // namespace flashcore::sm90
