// Which key blocks a query tile visits, which of them need element masking,
// and the masking itself. Every decision here is made on indices and shapes
// only, never on tensor values: the kernels stay constant-time.
#pragma once

#include <cute/tensor.hpp>

namespace flashcore::sm90 {

using namespace cute;

template <int kBlockM, int kBlockN>
struct BlockMask {
  int seqlen_q, seqlen_k, window_left, window_right;

  CUTE_DEVICE int diag() const { return seqlen_k - seqlen_q; }

  // Key blocks [n_min, n_max) that hold at least one allowed key for some
  // row of query block m_block. Empty (n_max <= n_min) when every row is
  // fully masked.
  CUTE_DEVICE void n_block_range(int m_block, int& n_min, int& n_max) const {
    int row_first = m_block * kBlockM;
    int row_last = min(row_first + kBlockM, seqlen_q) - 1;
    int lo = max(row_first + diag() - window_left, 0);
    int hi = min(row_last + diag() + window_right, seqlen_k - 1);  // inclusive
    n_min = lo / kBlockN;
    n_max = hi < lo ? n_min : hi / kBlockN + 1;
  }

  // True when some (row, key) of the block pair lies outside the mask or past
  // seqlen_k; interior blocks skip the element-wise work.
  CUTE_DEVICE bool needs_mask(int m_block, int n_block) const {
    int row_first = m_block * kBlockM, row_last = row_first + kBlockM - 1;
    int key_first = n_block * kBlockN, key_last = key_first + kBlockN - 1;
    return key_last >= seqlen_k || key_last > row_first + diag() + window_right ||
           key_first < row_last + diag() - window_left;
  }

  // Sets masked scores to -inf. s_rc / coord_rc are the (row, col) views of the
  // score accumulator and of the identity tensor partitioned the same way.
  template <class TS, class TC>
  CUTE_DEVICE void apply(TS& s_rc, TC const& coord_rc, int m_block, int n_block) const {
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < size<0>(s_rc); ++r) {
      int row = m_block * kBlockM + get<0>(coord_rc(r, 0));
      int lo = row + diag() - window_left;
      int hi = min(row + diag() + window_right, seqlen_k - 1);
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < size<1>(s_rc); ++c) {
        int key = n_block * kBlockN + get<1>(coord_rc(r, c));
        s_rc(r, c) = (key < lo || key > hi) ? -INFINITY : s_rc(r, c);
      }
    }
  }
};

}  // namespace flashcore::sm90
