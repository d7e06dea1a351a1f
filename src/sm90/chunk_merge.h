// Merging the per-chunk results of a split sequence (seq_info.h), in one
// place for the two schedules that compute them:
//  - across CTAs: each chunk is a tile of its own, writes its partial result
//    to the workspace, and the combine kernel (splitkv_combine.cu) merges
//    the partials;
//  - in one CTA (SeqParams::fold_splits): one tile walks every chunk of the
//    sequence and merges each as it completes (mainloop_mma.h ChunkFold).
// Both merge the same partials (O_c normalized by its own row sum, lse_c its
// natural-log LSE) with these functions, in the same order (the walk's:
// the last chunk first), so a sequence's bits do not depend on the schedule
// and dispatch may pick it by the batch (splitkv_plan.h fold_splits).
//
// Every operation is an explicit intrinsic: the compiler may not fuse or
// reorder them differently in the two kernels. Chunks without an allowed key
// (lse_c = −inf) leave the state bit for bit unchanged (selects, not
// branches), which is what lets the single CTA skip them: it never visits
// the chunks outside its sequence's key range. A NaN lse_c poisons the row.
#pragma once

#include <cuda_runtime.h>

namespace flashcore::sm90 {

// exp(x) as the kernels compute it: exp2 on the MUFU unit.
__device__ __forceinline__ float merge_exp(float x) {
  return exp2f(__fmul_rn(x, 1.4426950408889634f));
}

// The running merge of one row: the largest chunk LSE so far and the sum of
// exp(lse_c − m) over the merged chunks.
struct MergeRow {
  float m = -INFINITY;
  float l = 0.f;
};

// The factors of one merge step: O ← O·a + O_c·b (merge_value), applied
// only when `take`.
struct MergeStep {
  float a, b;
  bool take;
};

__device__ __forceinline__ MergeStep merge_step(MergeRow& row, float lse_c) {
  bool const take = lse_c != -INFINITY;
  float const m_new = fmaxf(row.m, lse_c);  // a NaN lse_c keeps m; b below is NaN
  float const m_safe = m_new == -INFINITY ? 0.f : m_new;
  MergeStep s{merge_exp(__fsub_rn(row.m, m_safe)), merge_exp(__fsub_rn(lse_c, m_safe)), take};
  float const l_new = __fmaf_rn(row.l, s.a, s.b);
  row.m = take ? m_new : row.m;
  row.l = take ? l_new : row.l;
  return s;
}

__device__ __forceinline__ float merge_value(float acc, float o_c, MergeStep const& s) {
  float const merged = __fmaf_rn(acc, s.a, __fmul_rn(o_c, s.b));
  return s.take ? merged : acc;
}

// The finished row: O = acc · inv, and its natural-log LSE. Without selects
// (the compiler turned them into branches on the data): once a chunk is
// merged l >= 1 (the largest chunk weighs exp(0) = 1), and a row no chunk
// reached has l = 0, m = −inf and acc = 0, so inv = 1 keeps it zero and
// m + log(0) = −inf is its LSE.
__device__ __forceinline__ void merge_finish(MergeRow const& row, float& inv, float& lse) {
  inv = __fdividef(1.f, fmaxf(row.l, 1.f));
  lse = __fadd_rn(row.m, __logf(row.l));
}

}  // namespace flashcore::sm90
