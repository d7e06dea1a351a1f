// The sm90 kernels' element mask (src/sm90/mask.h) is integer code on CuTe
// tensors; compiled for the host it is checked here without a GPU. Both of
// its forms (kCompact: bounds relative to the thread's first key, used by
// the 192-row tiles; the direct form, used by the others) must mask exactly
// the keys the int64 definition masks, for every thread's share of the
// WGMMA accumulator, at the edges of int32 (lengths up to 2^30 - 1, the
// unbounded window 2^30). The compact form is exact on a tile's padding
// rows (past seqlen_q) too; the direct form only on rows < seqlen_q, the
// rows that are stored (mask.h says why). The direct form's right-bound-only
// path (apply_right_pairs: fp16 pair compares on the GPU, the same integers
// compared here) goes through the same sweeps.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "sm90/mask.h"
#include "sm90/tail_policy.h"

namespace {

using namespace cute;

constexpr int kUnbounded = 1 << 30;  // what dispatch passes for an open window edge

// Allowed iff seqlen_k - seqlen_q + row - left <= key <= min(... + right,
// seqlen_k - 1): the library's bottom-right aligned window, in int64.
bool allowed(int64_t row, int64_t key, int64_t sq, int64_t sk, int64_t left, int64_t right) {
  int64_t const diag = sk - sq;
  return key >= row + diag - left && key <= std::min(row + diag + right, sk - 1);
}

// One thread's (row, col) coordinates in a 64 x kBlockN WGMMA accumulator
// of warpgroup `wg`, in the (row, col) view the kernels use
// (wgmma_utils.h acc_layout_rowcol): rows l/4 (+8) of its warp's 16, columns
// (l%4)*2 + e + 8k.
template <int kBlockN>
std::vector<cute::tuple<int, int>> thread_coords(int wg, int thread) {
  int const warp = thread / 32, lane = thread % 32;
  std::vector<cute::tuple<int, int>> v(2 * (kBlockN / 4));
  for (int c = 0; c < kBlockN / 4; ++c) {
    for (int r = 0; r < 2; ++r) {
      int const row = wg * 64 + warp * 16 + lane / 4 + 8 * r;
      int const col = (lane % 4) * 2 + (c % 2) + (c / 2) * 8;
      v[r + 2 * c] = cute::make_tuple(row, col);
    }
  }
  return v;
}

// One thread's share of a key block, all scores 1 until a mask sets some to
// -inf: the scores and their (row, col) coordinates in the kernels' views.
template <int kBlockN>
struct ThreadShare {
  static constexpr int kCols = kBlockN / 4;
  std::vector<cute::tuple<int, int>> coords;
  float s[2 * kCols];
  ThreadShare(int wg, int thread) : coords(thread_coords<kBlockN>(wg, thread)) { std::fill(s, s + 2 * kCols, 1.f); }
  static auto layout() { return make_layout(make_shape(_2{}, Int<kCols>{})); }
  auto s_rc() { return make_tensor(&s[0], layout()); }
  auto coord_rc() { return make_tensor(coords.data(), layout()); }
};

// Keys `mask` lets through that the definition (sq, sk, left, right) does
// not, or the reverse, in one thread's share of block (m_block, n_block);
// only rows < sq when `stored_rows_only`. Reports the first few.
template <bool kCompact, int kBlockM, int kBlockN, bool kFrontPad>
int mismatches(flashcore::sm90::BlockMask<kBlockM, kBlockN, kFrontPad> const& mask, int sq, int sk, int left, int right,
               int m_block, int n_block, int wg, int thread, bool stored_rows_only) {
  constexpr int kCols = kBlockN / 4;
  ThreadShare<kBlockN> share(wg, thread);
  auto s_rc = share.s_rc();
  auto coord_rc = share.coord_rc();
  mask.template apply_block<kCompact>(s_rc, coord_rc, m_block, n_block);
  int wrong = 0;
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < kCols; ++c) {
      int64_t const row = int64_t(m_block) * kBlockM - (kFrontPad ? mask.row_shift : 0) + get<0>(coord_rc(r, c));
      int64_t const key = int64_t(n_block) * kBlockN + get<1>(coord_rc(r, c));
      if (stored_rows_only && (row >= sq || row < 0)) continue;
      bool const want = allowed(row, key, sq, sk, left, right);
      if (want != !std::isinf(s_rc(r, c)) && ++wrong <= 3) {
        ADD_FAILURE() << (kCompact ? "compact" : "direct") << " form, sq " << sq << " sk " << sk << " left "
                      << left << " right " << right << " m_block " << m_block << " n_block " << n_block
                      << " row " << row << " key " << key << ": want " << want;
      }
    }
  }
  return wrong;
}

// Both forms against the definition: the compact one on every row, the
// direct one on the stored rows. row_shift: padding rows before row 0
// (tail_policy.h front_pad).
template <int kBlockM, int kBlockN>
int check(int sq, int sk, int left, int right, int m_block, int n_block, int wg, int thread, int row_shift) {
  if (row_shift != 0) {
    flashcore::sm90::BlockMask<kBlockM, kBlockN, true> mask{sq, sk, left, right, row_shift};
    return mismatches<false>(mask, sq, sk, left, right, m_block, n_block, wg, thread, true) +
           mismatches<true>(mask, sq, sk, left, right, m_block, n_block, wg, thread, false);
  }
  flashcore::sm90::BlockMask<kBlockM, kBlockN> mask{sq, sk, left, right};
  return mismatches<false>(mask, sq, sk, left, right, m_block, n_block, wg, thread, true) +
         mismatches<true>(mask, sq, sk, left, right, m_block, n_block, wg, thread, false);
}

template <int kBlockM, int kBlockN>
void sweep(bool front_pad = false) {
  const int lengths[] = {1, 17, 127, 129, 1000, 4097, kUnbounded - 1};
  const int windows[] = {0, 1, 37, 1000, kUnbounded};
  const int threads[] = {0, 5, 38, 127};
  int cases = 0, wrong = 0;
  for (int sq : lengths) {
    for (int sk : lengths) {
      for (int left : windows) {
        for (int right : windows) {
          int const num_m = (sq + kBlockM - 1) / kBlockM, num_n = (sk + kBlockN - 1) / kBlockN;
          int const shift = front_pad ? flashcore::sm90::front_pad_rows(sq, kBlockM) : 0;
          // First, middle and last (padded) query blocks; first, last and the
          // key blocks around each query block's diagonal.
          for (int m : {0, num_m / 2, num_m - 1}) {
            int64_t const diag_key = int64_t(m) * kBlockM - shift + (int64_t(sk) - sq);
            for (int64_t n : {int64_t(0), int64_t(num_n - 1), diag_key / kBlockN, diag_key / kBlockN + 1,
                              (diag_key - left) / kBlockN}) {
              if (n < 0 || n >= num_n) continue;
              for (int wg = 0; wg < kBlockM / 64; ++wg) {
                for (int t : threads) {
                  wrong += check<kBlockM, kBlockN>(sq, sk, left, right, m, int(n), wg, t, shift);
                  ++cases;
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << cases << " thread-blocks";
  EXPECT_GT(cases, 10000);
}

TEST(Sm90Mask, BothFormsMatchTheDefinitionFor192RowTiles) { sweep<192, 128>(); }
// With the padding rows before row 0: a first block of 64 or 128 rows < 0.
TEST(Sm90Mask, BothFormsMatchTheDefinitionWithFrontPadding) { sweep<192, 128>(true); }
TEST(Sm90Mask, BothFormsMatchTheDefinitionFor128RowTiles) { sweep<128, 128>(); }
TEST(Sm90Mask, BothFormsMatchTheDefinitionFor64KeyBlocks) { sweep<128, 64>(); }
TEST(Sm90Mask, BothFormsMatchTheDefinitionFor80KeyBlocks) { sweep<128, 80>(); }

// The test can fail: a mask that lets one key too many through is caught.
TEST(Sm90Mask, TheCheckCatchesAnOffByOne) {
  // Causal, 64 x 64: row 0 may see key 0 only. Mask as if right were 1.
  flashcore::sm90::BlockMask<64, 128> off_by_one{64, 64, kUnbounded, 1};
  // mismatches() reports what it finds as failures: capture them here.
  ::testing::TestPartResultArray reported;
  int found = 0;
  {
    ::testing::ScopedFakeTestPartResultReporter capture(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &reported);
    found = mismatches<true>(off_by_one, 64, 64, kUnbounded, 0, 0, 0, 0, 0, false);
  }
  EXPECT_GT(found, 0);
  EXPECT_GT(reported.size(), 0);
}

// The right-bound-only path compares fp16 immediates from half_bits() with
// the clamped bound (the host build compares the integers themselves): the
// bits must be the fp16 of each integer it can take, 0 .. 2047.
TEST(Sm90Mask, HalfBitsAreTheFp16OfSmallIntegers) {
  using Mask = flashcore::sm90::BlockMask<128, 128>;
  for (int v = 0; v < 2048; ++v) {
    uint32_t const b = Mask::half_bits(v);
    int const exp = int(b >> 10) & 31, mant = int(b & 0x3ff);
    double const value = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
    ASSERT_EQ(b >> 15, 0u) << v;
    ASSERT_EQ(value, double(v)) << v << " -> 0x" << std::hex << b;
  }
  EXPECT_EQ(Mask::half_bits(1), 0x3C00u);  // 1.0
  EXPECT_EQ(Mask::half_bits(9), 0x4880u);  // 9.0
}

// apply_block() leaves out the left bound where needs_left() says no key of
// the block lies left of any row's window: causal diagonals and key tails
// take the short path, a sliding window's left edge the full one. The sweeps
// above check that both paths mask exactly the definition; this checks that
// each path is taken where it should be, and that the short path alone would
// be wrong at a left edge (so the choice matters).
TEST(Sm90Mask, LeftBoundOnlyWhereABlockReachesIt) {
  using Mask = flashcore::sm90::BlockMask<128, 128>;
  Mask const causal{4096, 4096, kUnbounded, 0};
  for (int m = 0; m < 32; ++m) {
    for (int n = 0; n <= m; ++n) EXPECT_FALSE(causal.needs_left(m, n)) << m << "," << n;
  }
  Mask const window{4096, 4096, 300, 0};  // rows see keys [row - 300, row]
  // Rows 1280..1407 see keys from 980 (row 1280) to 1107 (row 1407) on.
  EXPECT_TRUE(window.needs_left(10, 7));   // keys 896..1023
  EXPECT_TRUE(window.needs_left(10, 8));   // keys 1024..1151: below 1107 for the last rows
  EXPECT_FALSE(window.needs_left(10, 9));  // keys 1152..1279
  EXPECT_FALSE(window.needs_left(10, 10));

  // At the left edge the right-only form lets keys through that the window
  // excludes: with it, the thread's share of block (10, 7) would be wrong.
  ThreadShare<128> share(0, 0);
  auto s_rc = share.s_rc();
  window.apply<false, false>(s_rc, share.coord_rc(), 10, 7);
  int let_through = 0;
  for (float x : share.s) let_through += !std::isinf(x);
  EXPECT_GT(let_through, 0);  // row 1280 allows no key below 980, and block 7 is keys 896..1023
  EXPECT_EQ(mismatches<false>(window, 4096, 4096, 300, 0, 10, 7, 0, 0, true), 0);
}

// warpgroup_n_end (mainloop_mma.h kSkipMaskedBlocks): a warpgroup of a tile
// passes over the tile's blocks from it to n_max, so none of them may hold a
// key any of its stored rows sees (the rows in [0, seqlen_q)); it walks at
// least the tile's first block; and past that one, the block before it must
// hold such a key (the pass-over is as long as it can be) when the
// warpgroup has stored rows at all. Swept over
// lengths, windows, front padding, every query block and warpgroup, against
// the int64 definition.
template <int kBlockM, int kBlockN>
void warpgroup_range_sweep(bool front_pad, int& cases, int& skipped_blocks) {
  const int lengths[] = {1, 17, 64, 65, 127, 128, 129, 191, 192, 250, 511, 512, 1000, 1024, 2049};
  const int windows[] = {0, 1, 37, 63, 64, 200, kUnbounded};
  for (int sq : lengths) {
    for (int sk : lengths) {
      for (int left : windows) {
        for (int right : windows) {
          int const shift = front_pad ? flashcore::sm90::front_pad_rows(sq, kBlockM) : 0;
          flashcore::sm90::BlockMask<kBlockM, kBlockN, true> const mask{sq, sk, left, right, shift};
          int const num_m = (sq + shift + kBlockM - 1) / kBlockM;
          for (int m = 0; m < num_m; ++m) {
            int n_min = 0, n_max = 0;
            mask.n_block_range(m, n_min, n_max);
            if (n_max <= n_min) continue;  // the tile sees no key: the kernels visit one masked block
            for (int wg = 0; wg < kBlockM / 64; ++wg) {
              int const n_own = mask.warpgroup_n_end(m, wg, n_min, n_max);
              ASSERT_GT(n_own, n_min);  // every warpgroup walks at least the tile's first block
              ASSERT_LE(n_own, n_max);
              int64_t const row0 = int64_t(m) * kBlockM - shift + wg * 64;
              auto sees = [&](int n) {  // some stored row of the warpgroup sees a key of block n
                for (int64_t row = std::max<int64_t>(row0, 0); row < std::min<int64_t>(row0 + 64, sq); ++row) {
                  for (int64_t key = int64_t(n) * kBlockN; key < std::min<int64_t>(int64_t(n + 1) * kBlockN, sk);
                       ++key) {
                    if (allowed(row, key, sq, sk, left, right)) return true;
                  }
                }
                return false;
              };
              for (int n = n_own; n < n_max; ++n) {
                ASSERT_FALSE(sees(n)) << "sq " << sq << " sk " << sk << " left " << left << " right " << right
                                      << " shift " << shift << " m " << m << " wg " << wg << " block " << n;
              }
              // The kernel passes over one block at most (kBlockM - 64 <= kBlockN).
              ASSERT_LE(n_max - n_own, 1) << "sq " << sq << " sk " << sk << " m " << m << " wg " << wg;
              bool const stored_rows = row0 + 64 > 0 && row0 < sq;  // else any end is right
              if (stored_rows && n_own > n_min + 1) {
                EXPECT_TRUE(sees(n_own - 1)) << "sq " << sq << " sk " << sk << " left " << left << " right "
                                             << right << " m " << m << " wg " << wg;
              }
              skipped_blocks += n_max - n_own;
              ++cases;
            }
          }
        }
      }
    }
  }
}

TEST(Sm90Mask, WarpgroupPassesOverOnlyBlocksItsRowsDoNotSee) {
  int cases = 0, skipped = 0;
  warpgroup_range_sweep<192, 128>(false, cases, skipped);
  warpgroup_range_sweep<192, 128>(true, cases, skipped);
  EXPECT_GT(cases, 10000);
  EXPECT_GT(skipped, 1000);  // the sweep does reach warpgroups that pass over blocks
}

// Causal calls on 192-row tiles with front padding: how many 64-row key
// blocks the three warpgroups walk a head, with the pass-over and without
// it (every warpgroup walks its tile's range). With it, 128-row tiles' count
// (20, 72, 272, 16512) plus one a padding warpgroup of the first tile.
TEST(Sm90Mask, WarpgroupPassOverOnCausalGridShapes) {
  struct Case { int len, with_skip, without_skip; };
  for (Case c : {Case{512, 21, 24}, Case{1024, 74, 81}, Case{2048, 273, 288}, Case{16384, 16514, 16641}}) {
    int const shift = flashcore::sm90::front_pad_rows(c.len, 192);
    flashcore::sm90::BlockMask<192, 128, true> const mask{c.len, c.len, kUnbounded, 0, shift};
    int with = 0, without = 0;
    for (int m = 0; m < (c.len + shift + 191) / 192; ++m) {
      int n_min = 0, n_max = 0;
      mask.n_block_range(m, n_min, n_max);
      for (int wg = 0; wg < 3; ++wg) {
        with += mask.warpgroup_n_end(m, wg, n_min, n_max) - n_min;
        without += n_max - n_min;
      }
    }
    EXPECT_EQ(with, c.with_skip) << c.len;
    EXPECT_EQ(without, c.without_skip) << c.len;
  }
}

}  // namespace
