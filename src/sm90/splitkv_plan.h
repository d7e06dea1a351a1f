// Host side of split-KV: which calls split, into how many chunks, and how
// much workspace the partial results need. Whether and where a sequence
// splits depends only on its own lengths (seq_info.h decides per sequence on
// the device, split_keys_for); the host only sizes the grid and the
// workspace for the most chunks any sequence of the batch can have.
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "sm90/gqa_pack.h"
#include "sm90/seq_info.h"
#include "sm90/split_policy.h"

namespace flashcore::sm90 {

struct SplitPlan {
  int32_t split_keys = 0;    // 0: no split-KV (seq_info.h: SeqParams)
  int32_t split_max_chunks = 0;
  int32_t max_splits = 1;
  int32_t partial_rows = 0;  // rows per (batch, head, chunk) slot
  int64_t heads = 0;         // heads as the kernel sees them (KV heads when GQA-packed)
  int64_t partial_o_bytes = 0, bytes = 0;
};

inline SplitPlan plan_split(const Problem& p) {
  SplitPlan plan;
  bool const packed = packs_gqa(p);
  int64_t const rows = packed ? p.group() : p.seqlen_q;
  // Varlen batches may hold short sequences whatever their longest is.
  bool const may_split = p.varlen_q || rows <= kSplitMaxRows;
  // Head dim 256 has no serving kernel (kernel_traits.h: kServing).
  // Only serving calls split (plain calls run the kernels without split-KV).
  if (!p.has_per_seq_lengths() || !may_split || p.config.num_splits == 1 || p.seqlen_k == 0 ||
      p.head_dim > 128) {
    return plan;
  }
  plan.heads = packed ? p.heads_kv : p.heads_q;
  // By KV heads, not by the heads the kernel sees: a sequence is cut the
  // same way in a varlen call (query heads) and a GQA-packed cache call (KV
  // heads), so both give the same bits.
  int64_t split_keys = kSplitMinKeys, max_chunks = split_max_chunks_for_heads(p.heads_kv);
  if (p.config.num_splits > 1) {  // override: this many chunks for the longest sequence, one size for all
    split_keys = (p.seqlen_k + p.config.num_splits - 1) / p.config.num_splits;
    split_keys = (split_keys + kSplitOverrideUnit - 1) / kSplitOverrideUnit * kSplitOverrideUnit;
    max_chunks = 0;
  }
  int64_t const max_splits = split_chunks_bound<int64_t>(split_keys, max_chunks, p.seqlen_k);
  // One chunk for every sequence (short keys, or 128+ KV heads in auto
  // mode): no split, no workspace, no combine.
  if (max_splits <= 1) return SplitPlan{};
  plan.split_keys = int32_t(split_keys);
  plan.split_max_chunks = int32_t(max_chunks);
  plan.max_splits = int32_t(max_splits);
  plan.partial_rows = int32_t(rows < kSplitMaxRows ? rows : kSplitMaxRows);
  int64_t const slots = p.batch * plan.heads * plan.max_splits * plan.partial_rows;
  plan.partial_o_bytes = (slots * p.head_dim * 4 + 255) / 256 * 256;
  plan.bytes = plan.partial_o_bytes + (slots * 4 + 255) / 256 * 256;
  return plan;
}

// The lengths, masks and split plan both kernels read (seq_info.h).
inline SeqParams seq_params(const AttentionArgs& args, const Problem& p, const SplitPlan& split) {
  constexpr int64_t kWindowClamp = int64_t(1) << 30;
  bool const packed = packs_gqa(p);
  SeqParams seq;
  seq.seqlen_q = int32_t(packed ? p.group() : p.seqlen_q);
  seq.seqlen_k = int32_t(p.seqlen_k);
  // Packed rows all see every key (that is when packing applies).
  seq.window_left = int32_t(!packed && p.window_left < kWindowClamp ? p.window_left : kWindowClamp);
  seq.window_right = int32_t(!packed && p.window_right < kWindowClamp ? p.window_right : kWindowClamp);
  seq.cu_seqlens_q = p.varlen_q ? args.cu_seqlens_q : nullptr;
  seq.cu_seqlens_k = p.varlen_k ? args.cu_seqlens_k : nullptr;
  seq.cache_seqlens = p.kv_cache ? args.cache_seqlens : nullptr;
  seq.seqlen_new = int32_t(p.seqlen_new);
  seq.total_q = int32_t(p.total_q);
  seq.total_k = int32_t(p.total_k);
  seq.split_keys = split.split_keys;
  seq.split_max_chunks = split.split_max_chunks;
  seq.max_splits = split.max_splits;
  return seq;
}

// (batch, head, row) strides of an output (out or lse) as the kernels index
// it: rows are query heads when GQA-packed, and varlen outputs are one
// packed sequence (batch stride 0, rows offset by the sequence start).
inline void row_strides(const TensorView& t, const Problem& p, int64_t (&s)[3]) {
  bool const packed = packs_gqa(p);
  s[0] = p.varlen_q ? 0 : t.stride[0];
  s[1] = packed ? t.stride[1] * p.group() : t.stride[1];
  s[2] = packed ? t.stride[1] : t.stride[2];
}

// What dispatch hands a kernel launch besides the arguments.
struct LaunchPlan {
  SplitPlan split;
  void* workspace = nullptr;  // split.bytes of it when split.split_keys > 0
};

}  // namespace flashcore::sm90
