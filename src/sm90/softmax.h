// Online softmax over the score accumulator of one consumer warpgroup, in
// fp32 with exp2: p = exp2(s·scale·log2e − m·scale·log2e), one FFMA + one
// MUFU.EX2 per score. Each row is spread over the 4 threads of a quad, so row
// max/sum reductions are two shuffles. Sums stay per-thread until finalize().
//
// Fully masked rows keep m = −inf; the scaled max is then taken as 0 so no
// −inf − (−inf) = NaN is ever formed, p = 0, l = 0, and finalize() returns a
// zero row and LSE = −inf. These are selects, not branches.
#pragma once

#include <cute/tensor.hpp>

namespace flashcore::sm90 {

using namespace cute;

CUTE_DEVICE float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
CUTE_DEVICE float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// a·b + c and a·b, the softmax's arithmetic. kPinned: as explicit
// intrinsics, which the compiler may not fuse or split. The kernels with the
// split-KV fold need that (its restart once made ptxas split the rescale's
// product from its subtraction there, and their bits no longer matched the
// other kernels'); the others leave the contraction to the compiler, which
// gives the same FFMA and FMUL, the same bits, and a register allocation
// that measured about 1% faster on the plain kernels (bench/results/2026-11-26-h100).
template <bool kPinned>
CUTE_DEVICE float softmax_fma(float a, float b, float c) {
  if constexpr (kPinned) return __fmaf_rn(a, b, c);
  else return a * b + c;
}
template <bool kPinned>
CUTE_DEVICE float softmax_mul(float a, float b) {
  if constexpr (kPinned) return __fmul_rn(a, b);
  else return a * b;
}

// O·(1/l) for one output value of a row, given finalize's inv_sum. A fully
// masked row (inv_sum 0) is +0 whatever O holds: with a masked key block
// visited, O holds 0·V, which is -0 or NaN where the masked keys' V is
// negative or not finite, and whether a block is visited depends on the tile
// shape (the issue-ahead kernels visit one in a fully masked query block,
// kernel_traits.h kIssueAhead; a row masked whole beside unmasked rows
// always does), so the bits would too.
template <bool kPinned = false>
CUTE_DEVICE float normalize_o(float o, float inv_sum) {
  return inv_sum == 0.f ? 0.f : softmax_mul<kPinned>(o, inv_sum);
}

template <int kRows, bool kPinned = false>
struct OnlineSoftmax {
  float row_max[kRows];
  float row_sum[kRows];
  float scale_log2;

  CUTE_DEVICE explicit OnlineSoftmax(float scale_log2_) : scale_log2(scale_log2_) { restart(); }

  // No scores seen yet (a new tile, or a new chunk of a split sequence:
  // chunk_fold.h).
  CUTE_DEVICE void restart() {
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
  }

  // Folds a new block of scores (row/col view) into the running max and sum,
  // replaces the scores by their unnormalized probabilities, and returns in
  // `rescale` the factor the output accumulator must be multiplied by.
  template <class TS>
  CUTE_DEVICE void step(TS& s_rc, float (&rescale)[kRows]) {
    static_assert(decltype(size<0>(s_rc))::value == kRows);
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float m = row_max[r];
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < size<1>(s_rc); ++c) m = fmaxf(m, s_rc(r, c));
      m = quad_max(m);
      float m_scaled = m == -INFINITY ? 0.f : softmax_mul<kPinned>(m, scale_log2);
      rescale[r] = exp2f(softmax_fma<kPinned>(row_max[r], scale_log2, -m_scaled));
      row_max[r] = m;
      float sum = 0.f;
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < size<1>(s_rc); ++c) {
        float p = exp2f(softmax_fma<kPinned>(s_rc(r, c), scale_log2, -m_scaled));
        s_rc(r, c) = p;
        sum += p;
      }
      row_sum[r] = softmax_fma<kPinned>(row_sum[r], rescale[r], sum);
    }
  }

  // Completes the row sums across the quad; returns 1/l per row (0 for fully
  // masked rows) and the natural-log LSE per row (−inf for fully masked rows).
  CUTE_DEVICE void finalize(float (&inv_sum)[kRows], float (&lse)[kRows]) {
    constexpr float kLn2 = 0.69314718055994530942f;
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float l = quad_sum(row_sum[r]);
      bool empty = l == 0.f;  // a NaN sum propagates: NaN inputs poison only their own rows
      inv_sum[r] = empty ? 0.f : 1.f / l;
      // Split-KV partials are merged from these values by two kernels
      // (chunk_merge.h), which must see the same bits.
      lse[r] = empty ? -INFINITY : softmax_mul<kPinned>(softmax_fma<kPinned>(row_max[r], scale_log2, __log2f(l)), kLn2);
    }
  }
};

}  // namespace flashcore::sm90
