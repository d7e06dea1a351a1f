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
#include "sm90/split_calls.h"
#include "sm90/split_policy.h"
#include "sm90/tile_list_plan.h"

namespace flashcore::sm90 {

struct SplitPlan {
  int32_t split_keys = 0;    // 0: no split-KV (seq_info.h: SeqParams)
  int32_t split_max_chunks = 0;
  int32_t max_splits = 1;
  int32_t partial_rows = 0;  // rows per (batch, head, chunk) slot
  int64_t heads = 0;         // heads as the kernel sees them (KV heads when GQA-packed)
  int64_t partial_o_bytes = 0, bytes = 0;
  // Split sequences walk all their chunks in one CTA (chunk_fold.h): no
  // partials, no workspace, no combine. Set by fold_splits() below.
  bool fold = false;

  // Chunks run as tiles of their own, write partials to the workspace, and
  // the combine kernel merges them after the forward kernel.
  bool across_ctas() const { return split_keys > 0 && !fold; }
};

inline SplitPlan plan_split(const Problem& p) {
  SplitShape const shape = split_shape(p);
  if (shape.max_splits <= 1) return SplitPlan{};  // no split, no workspace, no combine
  SplitPlan plan;
  bool const packed = packs_gqa(p);
  int64_t const rows = rows_per_sequence(p);
  plan.heads = packed ? p.heads_kv : p.heads_q;
  plan.split_keys = int32_t(shape.split_keys);
  plan.split_max_chunks = int32_t(shape.max_chunks);
  plan.max_splits = int32_t(shape.max_splits);
  plan.partial_rows = int32_t(rows < kSplitMaxRows ? rows : kSplitMaxRows);
  int64_t const slots = p.batch * plan.heads * plan.max_splits * plan.partial_rows;
  plan.partial_o_bytes = (slots * p.head_dim * 4 + 255) / 256 * 256;
  plan.bytes = plan.partial_o_bytes + (slots * 4 + 255) / 256 * 256;
  return plan;
}

// Which schedule runs the chunks of a split call (chunk_merge.h: both give
// the same bits, so this may follow the batch). Across CTAs, chunks fill a
// GPU that the sequences alone would leave idle (batch 1 decode: 8 KV heads
// are 8 CTAs on 132 SMs); in one CTA, a call whose sequences give every
// other SM a tile of its own is spared the extra tiles, the partial results
// and the combine kernel. Only the one-warpgroup serving kernels (64-row
// tiles) can fold (kernel_traits.h kFoldSplits).
// Measured on an H100 before the fold existed (tools/decode-sweep; bf16 32
// query / 8 KV heads, d128, 4k keys): batch 64, 354 us unsplit against 388
// with 16 chunks a sequence; batch 16 (BENCHMARKS.md, 2026-11-25i), 90.6
// unsplit against 104.1.
inline SplitPlan folded(SplitPlan plan) {
  plan.fold = true;
  plan.partial_rows = 0;
  plan.partial_o_bytes = plan.bytes = 0;
  return plan;
}
inline SplitPlan fold_splits(SplitPlan plan, const Problem& p, int block_m, int num_sms) {
  if (plan.split_keys == 0 || !fold_split_chunks(p.batch, plan.heads, block_m, num_sms)) return plan;
  return folded(plan);
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
  seq.max_splits = split.fold ? 1 : split.max_splits;
  seq.fold_splits = split.fold ? 1 : 0;
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
  // The call's tile list in the workspace after the split partials
  // (nullptr: none), as `list` plans it: its count and entries, then its tail.
  int32_t* tile_list = nullptr;
  TileListPlan list;
};

}  // namespace flashcore::sm90
