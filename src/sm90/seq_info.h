// Per-sequence lengths and the work of one tile, shared by the producer, the
// consumers and the split-KV combine kernel so that all of them agree on it.
//
// Serving calls (varlen, KV cache) carry per-sequence lengths in device
// memory. They are read through load_index() only: the one way flashcore's
// kernels read metadata, which the SASS audit (tools/sass-audit) recognizes
// by its instruction (LDG.E.LTC256B.CONSTANT) and does not treat as
// secret. Branches on lengths are fine; branches on tensor values are not.
//
// Every length is clipped to what the host validated (max_seqlen_*, the
// packed totals, the cache capacity), so bad metadata can make results
// wrong but never makes a kernel read or write out of bounds.
//
// Split-KV (decode-like sequences): a sequence whose query rows fit in 64
// rows has its key blocks cut into chunks at key positions fixed by its own
// length (split_keys_for); chunk s is computed by its own tile and the
// combine kernel merges the chunks in order, or one tile walks them all and
// merges them as it goes (fold_splits, chunk_fold.h): the same bits.
// Whether a sequence splits and where depends only on its own lengths, the
// head count and the head dim: never on the batch it is in (which of the two
// schedules runs may, since they agree bit for bit).
#pragma once

#include <cute/config.hpp>
#include <cstdint>

#include "sm90/mask.h"
#include "sm90/split_policy.h"
#include "sm90/tile_decode.h"

namespace flashcore::sm90 {

// Loads one int32 of metadata (lengths, offsets, page numbers). Read-only
// for the kernel's lifetime, so through the non-coherent (L1-cached) path.
CUTE_DEVICE int32_t load_index(const int32_t* p) {
  int32_t v;
  asm volatile("ld.global.nc.L2::256B.s32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

struct SeqParams {
  // Uniform sizes (plain calls) or upper bounds (serving calls).
  int32_t seqlen_q = 0;   // rows per sequence (after GQA packing: the group)
  int32_t seqlen_k = 0;   // keys per sequence, or the cache capacity
  int32_t window_left = 0, window_right = 0;  // clamped to 2^30

  const int32_t* cu_seqlens_q = nullptr;  // varlen q: tokens [cu[b], cu[b+1]) of a packed q
  const int32_t* cu_seqlens_k = nullptr;  // varlen k
  const int32_t* cache_seqlens = nullptr;  // KV cache: keys = cache_seqlens[b] + seqlen_new
  int32_t seqlen_new = 0;
  int32_t total_q = 0, total_k = 0;  // packed tokens (varlen)

  int32_t num_m_blocks = 0;  // query blocks of the longest sequence
  // Split-KV (split_policy.h): split_keys = 0: off. split_max_chunks = 0:
  // chunks of exactly split_keys keys (the num_splits override); otherwise
  // chunks sized by each sequence's own length, multiples of split_keys.
  int32_t split_keys = 0;        // a multiple of block_n
  int32_t split_max_chunks = 0;
  int32_t max_splits = 1;        // chunks of the longest sequence (grid size)
  // Split-KV in one CTA (chunk_fold.h): a split sequence is one tile that
  // walks all of its chunks and merges them itself; same bits, no partials.
  int32_t fold_splits = 0;
};

struct SeqInfo {
  int32_t q_offset = 0, seqlen_q = 0;  // query rows (GQA-packed decode: the group)
  int32_t k_offset = 0, seqlen_k = 0;
};

CUTE_DEVICE int32_t clip(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// kServing = false compiles every per-sequence path out (the plain kernels:
// kernel_traits.h): uniform lengths, no metadata loads.
template <bool kServing = true>
CUTE_DEVICE SeqInfo seq_info(SeqParams const& p, int batch) {
  SeqInfo s;
  if (!kServing) {
    s.seqlen_q = p.seqlen_q;
    s.seqlen_k = p.seqlen_k;
    return s;
  }
  if (p.cu_seqlens_q != nullptr) {
    s.q_offset = clip(load_index(p.cu_seqlens_q + batch), 0, p.total_q);
    int32_t end = clip(load_index(p.cu_seqlens_q + batch + 1), s.q_offset, p.total_q);
    s.seqlen_q = min(end - s.q_offset, p.seqlen_q);
  } else {
    s.seqlen_q = p.seqlen_q;
  }
  if (p.cu_seqlens_k != nullptr) {
    s.k_offset = clip(load_index(p.cu_seqlens_k + batch), 0, p.total_k);
    int32_t end = clip(load_index(p.cu_seqlens_k + batch + 1), s.k_offset, p.total_k);
    s.seqlen_k = min(end - s.k_offset, p.seqlen_k);
  } else if (p.cache_seqlens != nullptr) {
    int32_t cached = clip(load_index(p.cache_seqlens + batch), 0, p.seqlen_k);
    s.seqlen_k = min(cached + p.seqlen_new, p.seqlen_k);
  } else {
    s.seqlen_k = p.seqlen_k;
  }
  return s;
}

// The work of tile unit `u` of one (head, batch): a query block and a range
// of key blocks, and where its result goes.
struct TileWork {
  bool active = false;  // false: nothing to do for this unit
  int m_block = 0;
  int n_begin = 0, n_end = 0;  // key blocks [n_begin, n_end), may be empty
  int split = 0, num_splits = 1;  // num_splits > 1: write a partial result
  int fold_blocks = 0;  // > 0: merge chunks of this many key blocks in the tile (chunk_fold.h)
};

CUTE_DEVICE bool splits(SeqParams const& p, SeqInfo const& s) {
  return p.split_keys > 0 && s.seqlen_q <= kSplitMaxRows;
}

// Chunks of a split sequence: those up to the one holding its last allowed
// key (at least 1). Written in keys, not blocks, so the combine kernel (which
// knows no block_n) gets the same count.
CUTE_DEVICE int32_t split_keys_of(SeqParams const& p, SeqInfo const& s) {
  return split_keys_for<int32_t>(p.split_keys, p.split_max_chunks, s.seqlen_k);
}
CUTE_DEVICE int num_splits_of(SeqParams const& p, SeqInfo const& s) {
  int64_t hi = min(int64_t(s.seqlen_q) - 1 + (s.seqlen_k - s.seqlen_q) + p.window_right,
                   int64_t(s.seqlen_k) - 1);  // last allowed key of the last row (< 2^30)
  return hi < 0 ? 1 : split_chunks_for<int32_t>(p.split_keys, p.split_max_chunks, s.seqlen_k, int32_t(hi));
}

// The units of a sequence that have work (tile_work below: every unit from
// this count on is empty): its chunks when it splits (one when they are
// folded into one tile), else its query blocks. A tile list (tile_list.cu)
// holds exactly these.
template <int kBlockM>
CUTE_DEVICE int active_units(SeqParams const& p, SeqInfo const& s) {
  if (splits(p, s)) return s.seqlen_q == 0 ? 0 : p.fold_splits ? 1 : num_splits_of(p, s);
  return (s.seqlen_q + kBlockM - 1) / kBlockM;
}

// kOneBlockAtLeast: a query block whose rows are all fully masked still
// visits one key block (every score of it masked: the rows come out as
// without one, O = 0 and LSE = -inf), so that every tile takes the same path
// (kernel_traits.h kIssueAhead). The producer and the consumers pass the same.
// kFrontPad: the call's padding rows before row 0 (tail_policy.h
// front_pad, kernel_params.h row_shift_of); otherwise it is not read.
// pair_blocks (serving calls with a causal-like mask, tile_scheduler.h):
// unit u of a sequence of n query blocks is its block paired_block(u, n)
// (tile_decode.h: n-1, 0, n-2, 1, ...); units from n on are empty. n is the
// sequence's own, so the order depends on nothing else in the batch, and a
// tile's arithmetic never on its unit's place in it.
template <int kBlockM, int kBlockN, bool kServing = true, bool kOneBlockAtLeast = false, bool kFrontPad = false>
CUTE_DEVICE TileWork tile_work(SeqParams const& p, SeqInfo const& s, int u, int row_shift = 0,
                               bool pair_blocks = false) {
  TileWork w;
  int const rows = s.seqlen_q;
  BlockMask<kBlockM, kBlockN, kFrontPad> mask{rows, s.seqlen_k, p.window_left, p.window_right, row_shift};
  if (kServing && splits(p, s)) {
    if (rows == 0) return w;
    int n_min, n_max;
    mask.n_block_range(0, n_min, n_max);
    int const num_splits = num_splits_of(p, s);
    int const split_blocks = split_keys_of(p, s) / kBlockN;
    if (p.fold_splits) {  // every chunk in this one tile
      if (u > 0) return w;
      w.active = true;
      w.n_begin = n_min;
      w.n_end = max(n_min, n_max);
      w.fold_blocks = num_splits > 1 ? split_blocks : 0;
      return w;
    }
    w.num_splits = num_splits;
    if (u >= w.num_splits) return w;
    w.active = true;
    w.split = u;
    w.n_begin = max(n_min, u * split_blocks);
    w.n_end = min(n_max, (u + 1) * split_blocks);
    if (w.n_end < w.n_begin) w.n_end = w.n_begin;
    return w;
  }
  if (kServing && pair_blocks) {
    int const n = (rows + kBlockM - 1) / kBlockM;
    if (u >= n) return w;
    u = paired_block(u, n);
  }
  int row_first = u * kBlockM;  // (in place, as in mask.h)
  if constexpr (kFrontPad) row_first -= row_shift;
  if (row_first >= rows) return w;
  w.active = true;
  w.m_block = u;
  mask.n_block_range(u, w.n_begin, w.n_end);
  if (kOneBlockAtLeast && w.n_end <= w.n_begin) w.n_end = w.n_begin + 1;
  return w;
}

}  // namespace flashcore::sm90
