// Split-KV in one CTA (SeqParams::fold_splits): one tile walks every chunk
// of a split sequence and merges each chunk's result as the walk leaves it,
// with the combine kernel's arithmetic (chunk_merge.h). The bits are those
// of the same sequence split across CTAs, so dispatch may choose either by
// the batch (splitkv_plan.h): across CTAs when the grid would be small, in
// one CTA when the sequences alone fill the GPU and extra tiles, partials
// and a second kernel would only cost time.
//
// Per chunk, what the split tile would write is formed in registers: O_c =
// O·(1/l) and lse_c (OnlineSoftmax::finalize), merged into the running O
// held in shared memory (this thread's values only: no barrier), then O and
// the softmax restart as a new tile's would (O = 0, m = −inf, l = 0).
// Measured (H200, Nsight Compute, bf16 decode B16 x 4k keys, 16 chunks of
// 256 keys): before the merge's float4 groups and live rows (below) the
// fold kernel executed 12.8 M warp instructions against 8.5 M for the same
// call unsplit (2026-11-29i); with them 9.5 M (2026-11-29k).
// Only the one-warpgroup serving kernels (64-row tiles) have it: their
// consumers have no registers for a second O (the merged one lives in
// shared memory, which they have to spare), and split sequences have at
// most 64 rows.
#pragma once

#include <cute/tensor.hpp>

#include "sm90/chunk_merge.h"
#include "sm90/softmax.h"
#include "sm90/wgmma_utils.h"

namespace flashcore::sm90 {

using namespace cute;

// kEnabled = false: the kernels without the fold (every member a no-op).
template <bool kEnabled_, int kRows, int kValues, int kThreads>
struct ChunkFold {
  static constexpr bool kEnabled = kEnabled_;
  static_assert(kValues % (4 * kRows) == 0, "each row's values go in groups of four");
  static constexpr int kGroups = kValues / (4 * kRows);  // float4 groups a row
  // This thread's merged O values: group g of row r (slot(r, g)) at
  // merged[(r * kGroups + g) * kThreads], 16 bytes, so that a warp's
  // accesses are 512 contiguous bytes (one LDS.128/STS.128 for four
  // values, no bank conflict).
  float4* merged;
  MergeRow rows[kRows];
  int blocks;    // key blocks a chunk; 0: the tile does not fold
  int boundary;  // lowest key block of the chunk being walked
  // Which of this thread's rows hold rows of the sequence (live(r)): row r
  // of the thread lies at tile row warp * 16 + lane / 4 + 8 * r (a 64-row
  // WGMMA accumulator), so r holds only padding in the whole warp when
  // warp * 16 + 8 * r >= the sequence's rows. A split sequence has at most
  // 64 rows, and GQA-packed decode has only its group (often 4 or 8): those
  // warp rows are neither merged nor read back (they are never stored:
  // epilogue.h), which takes half or all of a warp's merge off the key
  // loop. A branch on the call's shape, never on data.
  // live_from = seq_rows - warp * 16, computed only where the fold is: in
  // the other kernels the dead value still moved registers in the prologue.
  int live_from;

  // blocks = 0: a tile that does not fold (every call path below is then a
  // no-op or never reached). `seq_rows`: the sequence's rows in the tile
  // (from row 0: a split sequence's tile is its only query block).
  CUTE_DEVICE ChunkFold(float* smem, int thread, int blocks_, int n_last, int seq_rows)
      : merged(reinterpret_cast<float4*>(smem) + thread),
        blocks(kEnabled ? blocks_ : 0),
        live_from(kEnabled ? seq_rows - thread % cutlass::NumThreadsPerWarpGroup / cutlass::NumThreadsPerWarp * 16 : 0) {
    boundary = blocks > 0 ? n_last / blocks * blocks : -2;  // -2: never n + 1 for a block n >= 0
    if (kEnabled && blocks > 0) {
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) {
        if (!live(r)) continue;
        CUTLASS_PRAGMA_UNROLL
        for (int g = 0; g < kGroups; ++g) slot(r, g) = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
  }

  CUTE_DEVICE bool live(int r) const { return 8 * r < live_from; }
  // This thread's merged values 4g..4g+3 of row r.
  CUTE_DEVICE float4& slot(int r, int g) const { return merged[(r * kGroups + g) * kThreads]; }

  // Whether block n is the first block (in the walk: the last) of a chunk
  // after another: the previous block, n + 1, ended a chunk.
  CUTE_DEVICE bool starts_chunk(int n) const { return kEnabled && n + 1 == boundary; }
  CUTE_DEVICE bool folds() const { return kEnabled && blocks > 0; }

  // Merges the chunk that just ended (O, all of its P·V done, and the
  // statistics it was computed with) and restarts O (its live rows: the
  // others run on unread).
  template <class FragO, class Softmax>
  CUTE_DEVICE void merge(FragO& tOrO, Softmax& ended) {
    if constexpr (!kEnabled) return;
    static_assert(decltype(size(tOrO))::value == kValues);
    float inv[kRows], lse[kRows];
    ended.finalize(inv, lse);
    Tensor o_rc = make_tensor(tOrO.data(), acc_layout_rowcol(tOrO.layout()));
    static_assert(decltype(size<1>(o_rc))::value == 4 * kGroups);
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      if (!live(r)) continue;
      MergeStep const st = merge_step(rows[r], lse[r]);
      CUTLASS_PRAGMA_UNROLL
      for (int g = 0; g < kGroups; ++g) {
        float4 const old = slot(r, g);
        float acc[4] = {old.x, old.y, old.z, old.w};
        CUTLASS_PRAGMA_UNROLL
        for (int k = 0; k < 4; ++k) {
          // The value the split tile's epilogue writes: O·(1/l).
          acc[k] = merge_value(acc[k], normalize_o</*kPinned=*/true>(o_rc(r, 4 * g + k), inv[r]), st);
          o_rc(r, 4 * g + k) = 0.f;
        }
        slot(r, g) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      }
    }
    boundary -= blocks;
  }

  // After the tile's last chunk is merged: the merged O in tOrO, and the
  // factor (inv) and LSE the epilogue finishes it with, as the combine does.
  // Rows that are not live come out 0 (inv = 1, lse = −inf: never stored).
  template <class FragO>
  CUTE_DEVICE void finish(FragO& tOrO, float (&inv)[kRows], float (&lse)[kRows]) const {
    if constexpr (!kEnabled) return;
    Tensor o_rc = make_tensor(tOrO.data(), acc_layout_rowcol(tOrO.layout()));
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      merge_finish(rows[r], inv[r], lse[r]);
      CUTLASS_PRAGMA_UNROLL
      for (int g = 0; g < kGroups; ++g) {
        float4 const v = live(r) ? slot(r, g) : make_float4(0.f, 0.f, 0.f, 0.f);
        float const acc[4] = {v.x, v.y, v.z, v.w};
        CUTLASS_PRAGMA_UNROLL
        for (int k = 0; k < 4; ++k) o_rc(r, 4 * g + k) = acc[k];
      }
    }
  }
};

}  // namespace flashcore::sm90
