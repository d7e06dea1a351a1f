// The attention problem after validation: every size resolved, every default
// applied. Backends (the CPU reference, the sm90 kernels) read only this, so
// none of them re-derives defaults or re-checks arguments.
#pragma once

#include <cstdint>
#include <limits>

#include "flashcore/attention.h"

namespace flashcore {

// "No bound" for the window edges; large enough that i + offset ± it never
// wraps for any representable sequence length (we cap lengths at 2^31).
constexpr int64_t kUnboundedWindow = int64_t(1) << 40;

struct Problem {
  int64_t batch = 0;
  int64_t heads_q = 0;
  int64_t heads_kv = 0;
  int64_t seqlen_q = 0;
  int64_t seqlen_k = 0;
  int64_t head_dim = 0;
  DType dtype = DType::kFloat16;
  Device device = Device::kCPU;
  int device_index = 0;

  float scale = 0.f;            // resolved: never 0 unless the caller asked for it
  int64_t window_left = kUnboundedWindow;   // resolved: >= 0
  int64_t window_right = kUnboundedWindow;  // resolved: >= 0 (0 when causal)
  bool causal = false;

  bool has_lse = false;
  KernelConfig config;

  // Serving (attention.h). With varlen, batch = num_seqs and seqlen_q/k are
  // the max_seqlen_* bounds; with a KV cache, seqlen_k is the most keys a
  // sequence can hold (cache capacity, or max_pages_per_seq * page_size).
  // Per-sequence lengths are metadata the backends read themselves.
  bool varlen_q = false;      // cu_seqlens_q set: q/out/lse packed (1, H, total_q, ...)
  bool varlen_k = false;      // cu_seqlens_k set: k/v packed (1, Hkv, total_k, D)
  bool kv_cache = false;      // cache_seqlens set
  bool paged = false;         // block_table set: k/v are (num_pages, Hkv, page_size, D)
  int64_t total_q = 0;        // packed rows of q (varlen_q)
  int64_t total_k = 0;        // packed rows of k (varlen_k)
  int64_t page_size = 0, num_pages = 0, max_pages_per_seq = 0, block_table_stride = 0;
  int64_t seqlen_new = 0;     // rows of k_new/v_new appended before attention (0: none)
  bool has_per_seq_lengths() const { return varlen_q || varlen_k || kv_cache; }

  int64_t group() const { return heads_q / heads_kv; }  // query heads per KV head
  int64_t diag_offset() const { return seqlen_k - seqlen_q; }
  // A causal or sliding-window mask (causal resolves to window_right = 0).
  bool has_mask() const { return window_left < kUnboundedWindow || window_right < kUnboundedWindow; }
  bool is_empty() const {
    return batch == 0 || heads_q == 0 || seqlen_q == 0 || head_dim == 0;
  }
  // Key range [lo, hi] allowed for query row i (may be empty: lo > hi).
  int64_t key_lo(int64_t i) const {
    int64_t lo = i + diag_offset() - window_left;
    return lo < 0 ? 0 : lo;
  }
  int64_t key_hi(int64_t i) const {
    int64_t hi = i + diag_offset() + window_right;
    return hi > seqlen_k - 1 ? seqlen_k - 1 : hi;
  }
};

}  // namespace flashcore
