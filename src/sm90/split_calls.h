// Which calls split long key ranges into chunks (split-KV: seq_info.h):
// those whose sequences have at most 64 query rows after GQA packing
// (decode, short chunks of a prefill).
//  - Serving calls (per-sequence lengths) decide per sequence, on the device;
//    at head dim 256 (128-row tiles only) their chunks always run across CTAs.
//  - Plain calls (uniform lengths) at head dims 64 and 128, whose 64-row
//    tiles can also run the chunks in one CTA (chunk_fold.h): they need no
//    workspace, and with one they spread small batches over the GPU.
// Host-only and CUDA-free: the tuning table and its CPU tests read it.
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "sm90/gqa_pack.h"
#include "sm90/split_policy.h"

namespace flashcore::sm90 {

// Query rows a tile holds per sequence: the group when GQA-packed (the
// longest sequence's for varlen).
inline int64_t rows_per_sequence(const Problem& p) { return packs_gqa(p) ? p.group() : p.seqlen_q; }

// The fewest query rows a sequence of a varlen call can have: its packed
// rows less the most the other sequences can hold (max_seqlen_q each).
inline int64_t fewest_rows_per_sequence(const Problem& p) {
  return p.varlen_q ? p.total_q - (p.batch - 1) * p.seqlen_q : rows_per_sequence(p);
}

// A varlen call plans chunks only if some sequence may have at most 64 rows
// (seq_info.h decides per sequence; a sequence of more never splits): a
// batch whose packed rows leave every sequence more (uniform prefill) runs
// without a workspace, a combine kernel or units for chunks.
inline bool may_split_keys(const Problem& p) {
  if (p.has_per_seq_lengths()) return fewest_rows_per_sequence(p) <= kSplitMaxRows;
  return (p.head_dim == 64 || p.head_dim == 128) && rows_per_sequence(p) <= kSplitMaxRows;
}

// How a call's sequences are cut (split_policy.h): chunks of split_keys
// keys, at most max_chunks a sequence (0: the num_splits override, one size
// for all), at most max_splits for any sequence of the call. max_splits = 1:
// the call does not split.
struct SplitShape {
  int64_t split_keys = 0, max_chunks = 0, max_splits = 1;
};

inline SplitShape split_shape(const Problem& p) {
  if (!may_split_keys(p) || p.config.num_splits == 1 || p.seqlen_k == 0) return {};
  // By KV heads, not by the heads the kernel sees: a sequence is cut the
  // same way in a varlen call (query heads) and a GQA-packed cache call (KV
  // heads), so both give the same bits.
  int64_t split_keys = split_min_keys(p.head_dim), max_chunks = split_max_chunks_for_heads(p.heads_kv);
  if (p.config.num_splits > 1) {  // override: this many chunks for the longest sequence, one size for all
    split_keys = (p.seqlen_k + p.config.num_splits - 1) / p.config.num_splits;
    split_keys = (split_keys + kSplitOverrideUnit - 1) / kSplitOverrideUnit * kSplitOverrideUnit;
    max_chunks = 0;
  }
  int64_t const max_splits = split_chunks_bound<int64_t>(split_keys, max_chunks, p.seqlen_k);
  // One chunk for every sequence (short keys, or 128+ KV heads in auto mode).
  if (max_splits <= 1) return {};
  return {split_keys, max_chunks, max_splits};
}

// Whether a split call runs its chunks in one CTA (chunk_fold.h) rather
// than across CTAs: only 64-row tiles can, and only when the call's
// (sequence, head) tiles alone would give at least half of the SMs a tile.
// Both schedules give the same bits (chunk_merge.h), so this may follow
// the batch. `heads` are the heads the kernel sees (KV heads when
// GQA-packed).
inline bool fold_split_chunks(int64_t batch, int64_t heads, int block_m, int num_sms) {
  return block_m == kSplitMaxRows && 2 * batch * heads >= num_sms;
}

}  // namespace flashcore::sm90
