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
  float* merged;  // this thread's kValues merged O values, kThreads apart
  MergeRow rows[kRows];
  int blocks;    // key blocks a chunk; 0: the tile does not fold
  int boundary;  // lowest key block of the chunk being walked

  // blocks = 0: a tile that does not fold (every call path below is then a
  // no-op or never reached).
  CUTE_DEVICE ChunkFold(float* smem, int thread, int blocks_, int n_last)
      : merged(smem + thread), blocks(kEnabled ? blocks_ : 0) {
    boundary = blocks > 0 ? n_last / blocks * blocks : -2;  // -2: never n + 1 for a block n >= 0
    if (kEnabled && blocks > 0) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kValues; ++i) merged[i * kThreads] = 0.f;
    }
  }

  // Whether block n is the first block (in the walk: the last) of a chunk
  // after another: the previous block, n + 1, ended a chunk.
  CUTE_DEVICE bool starts_chunk(int n) const { return kEnabled && n + 1 == boundary; }
  CUTE_DEVICE bool folds() const { return kEnabled && blocks > 0; }

  // Merges the chunk that just ended (O, all of its P·V done, and the
  // statistics it was computed with) and restarts O.
  template <class FragO, class Softmax>
  CUTE_DEVICE void merge(FragO& tOrO, Softmax& ended) {
    if constexpr (!kEnabled) return;
    static_assert(decltype(size(tOrO))::value == kValues);
    float inv[kRows], lse[kRows];
    ended.finalize(inv, lse);
    Tensor o_rc = make_tensor(tOrO.data(), acc_layout_rowcol(tOrO.layout()));
    constexpr int kCols = decltype(size<1>(o_rc))::value;
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      MergeStep const st = merge_step(rows[r], lse[r]);
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < kCols; ++c) {
        // The value the split tile's epilogue writes: O·(1/l).
        float const o_c = normalize_o</*kPinned=*/true>(o_rc(r, c), inv[r]);
        float* m = merged + (r * kCols + c) * kThreads;
        *m = merge_value(*m, o_c, st);
        o_rc(r, c) = 0.f;
      }
    }
    boundary -= blocks;
  }

  // After the tile's last chunk is merged: the merged O in tOrO, and the
  // factor (inv) and LSE the epilogue finishes it with, as the combine does.
  template <class FragO>
  CUTE_DEVICE void finish(FragO& tOrO, float (&inv)[kRows], float (&lse)[kRows]) const {
    if constexpr (!kEnabled) return;
    Tensor o_rc = make_tensor(tOrO.data(), acc_layout_rowcol(tOrO.layout()));
    constexpr int kCols = decltype(size<1>(o_rc))::value;
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      merge_finish(rows[r], inv[r], lse[r]);
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < kCols; ++c) o_rc(r, c) = merged[(r * kCols + c) * kThreads];
    }
  }
};

}  // namespace flashcore::sm90
