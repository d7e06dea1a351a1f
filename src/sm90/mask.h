// Which key blocks a query tile visits, which of them need element masking,
// and the masking itself. Every decision here is made on indices and shapes
// only, never on tensor values: the kernels stay constant-time.
#pragma once

#include <cute/tensor.hpp>

namespace flashcore::sm90 {

using namespace cute;

// kFrontPad (tail_policy.h front_pad): query block m starts at row
// m * kBlockM - row_shift, the padding rows before row 0. Without it the
// shift is never read and the code is as it was before the shift existed:
// ptxas's code for these kernels moved with the form of the same integer
// arithmetic (through a helper call, the same value made ptxas serialize the
// WGMMAs of head dim 128's kernel with turns, C7511), so the shift is
// subtracted in place.
template <int kBlockM, int kBlockN, bool kFrontPad = false>
struct BlockMask {
  int seqlen_q, seqlen_k, window_left, window_right;
  int row_shift = 0;  // kFrontPad only

  CUTE_HOST_DEVICE int diag() const { return seqlen_k - seqlen_q; }

  // The last key row `row` may see: the direct form's bound. Exact for
  // every row < seqlen_q. For a tile's padding rows (past seqlen_q, never
  // stored) with an unbounded right window and seqlen_k >= 2^30 - 191,
  // row + diag + right overflows int32. No stored value depends on it; the
  // compact form's expression (apply) made these kernels 1-3% slower in a
  // same-run A/B (docs/kernels.md, "Tried and dropped"), so this one stays.
  CUTE_HOST_DEVICE int last_key(int row) const { return min(row + diag() + window_right, seqlen_k - 1); }

  // Key blocks [n_min, n_max) that hold at least one allowed key for some
  // row of query block m_block. Empty (n_max <= n_min) when every row is
  // fully masked.
  CUTE_HOST_DEVICE void n_block_range(int m_block, int& n_min, int& n_max) const {
    int row_first = m_block * kBlockM;
    if constexpr (kFrontPad) row_first -= row_shift;
    int row_last = min(row_first + kBlockM, seqlen_q) - 1;
    int lo = max(row_first + diag() - window_left, 0);
    int hi = min(row_last + diag() + window_right, seqlen_k - 1);  // inclusive
    n_min = lo / kBlockN;
    n_max = hi < lo ? n_min : hi / kBlockN + 1;
  }

  // The end of warpgroup wg's own key blocks (its 64 rows of query block
  // m_block), within the tile's [n_min, n_max), n_min < n_max: the blocks
  // from it to n_max hold no key any of those rows may see (mainloop_mma.h
  // kSkipMaskedBlocks). At least n_min + 1: rows that see no key of the
  // tile (front padding, fully masked rows) still walk its first block,
  // masked whole, as a fully masked query block does. Padding rows past
  // seqlen_q count as the last real row, as in n_block_range. The left
  // bound is the tile's, so with a window nothing left of the tile's range
  // is passed over.
  CUTE_HOST_DEVICE int warpgroup_n_end(int m_block, int wg, int n_min, int n_max) const {
    int const hi = last_key(warpgroup_last_row(m_block, wg));  // < 0: no key
    return max(n_min + 1, min(n_max, (max(hi, 0) / kBlockN) + 1));
  }

  // The last row of warpgroup wg's 64 rows of query block m_block; a padding
  // row past seqlen_q counts as the last real one (as in n_block_range).
  CUTE_HOST_DEVICE int warpgroup_last_row(int m_block, int wg) const {
    int row_first = m_block * kBlockM;
    if constexpr (kFrontPad) row_first -= row_shift;
    return min(row_first + (wg + 1) * 64, seqlen_q) - 1;
  }

  // Whether some (row, key) of the block pair lies left of the window (keys
  // below row + diag - window_left, for any row of the tile, padding rows
  // included). Only sliding windows reach it: causal masks and key tails
  // need the right bound alone.
  CUTE_DEVICE bool needs_left(int m_block, int n_block) const {
    int row_last = m_block * kBlockM + kBlockM - 1;
    if constexpr (kFrontPad) row_last -= row_shift;
    return n_block * kBlockN < row_last + diag() - window_left;
  }

  // True when some (row, key) of the block pair lies outside the mask or past
  // seqlen_k; interior blocks skip the element-wise work.
  CUTE_DEVICE bool needs_mask(int m_block, int n_block) const {
    int row_first = m_block * kBlockM;
    if constexpr (kFrontPad) row_first -= row_shift;
    int const key_last = n_block * kBlockN + kBlockN - 1;
    return key_last >= seqlen_k || key_last > row_first + diag() + window_right || needs_left(m_block, n_block);
  }

  // What the kernels call on a block that needs_mask(): apply() with the
  // left-bound comparisons only where the block reaches the left edge. A
  // causal diagonal block then costs one compare and one select a score
  // instead of two compares and a select (about 100 of the 230 instructions
  // of a 128-key block's mask at head dim 64), and in the direct form one
  // select a score and one compare a pair (apply_right_pairs). Both
  // branches mask the same scores (needs_left false means no key of the
  // block is below any row's left bound); the branch is on indices, never
  // on data. Same-run A/B on an H100, output bits identical: causal 512-1k
  // 0.8-2.6% faster (bench/results/2026-11-25-h100/
  // ab3-mask-right-only-table.txt).
  template <bool kCompact, class TS, class TC>
  CUTE_DEVICE void apply_block(TS& s_rc, TC const& coord_rc, int m_block, int n_block) const {
    // The compact form (160-register consumers) keeps one path: with two,
    // ptxas spilled 4 bytes there.
    if (kCompact || needs_left(m_block, n_block)) {
      apply<kCompact, true>(s_rc, coord_rc, m_block, n_block);
    } else {
      apply<kCompact, false>(s_rc, coord_rc, m_block, n_block);
    }
  }

  // fp16 bits of a small non-negative integer (exact below 2048), for
  // apply_right_pairs's immediates.
  static constexpr uint32_t half_bits(int v) {
    if (v == 0) return 0;
    int e = 0;
    while ((v >> (e + 1)) != 0) ++e;  // v in [2^e, 2^(e+1))
    return uint32_t((e + 15) << 10) | uint32_t(((v << 10) >> e) & 0x3ff);
  }

  // The right bound alone (causal diagonals, key tails, right window edges)
  // in the direct form's kernels, two scores a compare. A thread's column c
  // of the m64nN accumulator's (row, col) view is key key0 + (c % 2) +
  // 8 (c / 2) (test_mask.cpp's thread_coords); a score is masked when that
  // offset exceeds t = last_key(row) - key0. With t clamped to [-1,
  // kBlockN] (offsets lie in [0, kBlockN), so the same scores pass) both
  // sides are exact in fp16, and one setp.gt.f16x2 gives the predicates of a column pair: the
  // masked path of a 128-key block goes from 164 to 108 instructions (head
  // dim 64). Same-run A/B on an H100, output bits identical
  // (bench/results/2026-11-25h-h100/ab3-mask-h2-table.txt, bits-*.txt):
  // head dim 64 causal 1.5% faster at 512-1k tokens, level elsewhere. The
  // host build (test_mask.cpp) compares the same integers directly.
  template <class TS, class TC>
  CUTE_DEVICE void apply_right_pairs(TS& s_rc, TC const& coord_rc, int m_block, int key0) const {
    static_assert(decltype(size<1>(s_rc))::value == kBlockN / 4, "one m64nN atom across the key block");
    static_assert(kBlockN < 2048, "key offsets and the clamped bound must be exact in fp16 (half_bits)");
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < size<0>(s_rc); ++r) {
      int row = m_block * kBlockM + get<0>(coord_rc(r, 0));
      if constexpr (kFrontPad) row -= row_shift;
      int const t = max(min(last_key(row) - key0, kBlockN), -1);
#if defined(__CUDA_ARCH__)
      uint32_t t2;
      asm("{ .reg .f16 h; cvt.rn.f16.s32 h, %1; mov.b32 %0, {h, h}; }" : "=r"(t2) : "r"(t));
#endif
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < size<1>(s_rc); c += 2) {
        float& even = s_rc(r, c);     // key offset 8 (c / 2)
        float& odd = s_rc(r, c + 1);  // key offset 8 (c / 2) + 1
#if defined(__CUDA_ARCH__)
        uint32_t const offs = half_bits(8 * (c / 2)) | (half_bits(8 * (c / 2) + 1) << 16);
        asm("{ .reg .pred p, q;\n"
            "  setp.gt.f16x2 p|q, %2, %3;\n"
            "  selp.f32 %0, 0fFF800000, %0, p;\n"
            "  selp.f32 %1, 0fFF800000, %1, q; }"
            : "+f"(even), "+f"(odd)
            : "r"(offs), "r"(t2));
#else
        even = 8 * (c / 2) > t ? -INFINITY : even;
        odd = 8 * (c / 2) + 1 > t ? -INFINITY : odd;
#endif
      }
    }
  }

  // Sets masked scores to -inf. s_rc / coord_rc are the (row, col) views of the
  // score accumulator and of the identity tensor partitioned the same way.
  //
  // Two forms of the same test (the same scores pass, so the same bits):
  //  - kCompact = false: each key index compared with the row's bounds.
  //  - kCompact = true: the bounds are taken relative to this thread's first
  //    key, so each column's offset is a compile-time constant and each test
  //    compares with an immediate; no per-column index stays live. The 160-
  //    register consumers of 192-row tiles spilled 152 bytes inside the key
  //    loop with the first form and none with this one. Keys are >= 0, so
  //    bounds below 0 are clamped (lo to 0, hi to -1) without changing which
  //    keys pass; that also keeps the differences (|x| < 2^30 + 256)
  //    within int32.
  // The 240/255-register kernels keep the first form: with the compact one
  // they ran 1-4% slower on an H100 (bench/results/2026-11-23-h100/
  // mask-and-tiles.txt, same-run A/B), from scheduling alone.
  // kLeft = false leaves out the left bound: right only where needs_left()
  // is false for the block (the direct form then compares in pairs,
  // apply_right_pairs).
  template <bool kCompact, bool kLeft = true, class TS, class TC>
  CUTE_DEVICE void apply(TS& s_rc, TC const& coord_rc, int m_block, int n_block) const {
    int const col0 = get<1>(coord_rc(0, 0));  // this thread's first column
    int const key0 = n_block * kBlockN + col0;
    if constexpr (!kLeft && !kCompact) {
      apply_right_pairs(s_rc, coord_rc, m_block, key0);
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < size<0>(s_rc); ++r) {
        int row = m_block * kBlockM + get<0>(coord_rc(r, 0));
        if constexpr (kFrontPad) row -= row_shift;
        int lo = row + diag() - window_left;
        int hi;
        if constexpr (kCompact) {
          // min(row + diag + right, seqlen_k - 1) with no sum leaving int32.
          hi = min(row + diag(), seqlen_k - 1 - window_right) + window_right;
          lo = max(lo, 0) - key0;
          hi = max(hi, -1) - key0;
        } else {
          hi = last_key(row);
        }
        CUTLASS_PRAGMA_UNROLL
        for (int c = 0; c < size<1>(s_rc); ++c) {
          int const key = kCompact ? get<1>(coord_rc(r, c)) - col0 : n_block * kBlockN + get<1>(coord_rc(r, c));
          bool const out = kLeft ? (key < lo || key > hi) : key > hi;
          s_rc(r, c) = out ? -INFINITY : s_rc(r, c);
        }
      }
    }
  }
};

}  // namespace flashcore::sm90
