// Epilogue of one tile. O is normalized by 1/l and leaves the CTA one of three ways:
//  - TMA store (plain and KV-cache calls): converted to the output type,
//    staged into shared memory (its own buffer, or Q's: see kernel_traits.h)
//    with stmatrix, and written by one TMA store. TMA clips the rows and
//    columns that fall outside the tensor, so tails need no predicates.
//  - direct stores (a varlen sequence's partial last tile): straight from
//    registers, rows past the sequence skipped; a TMA store would spill into
//    the next sequence. Its whole tiles take the TMA store.
//  - split-KV partial (seq_info.h): fp32 into the workspace, with the row's
//    LSE, for the combine kernel.
// The LSE of each row is written straight from registers by the first thread
// of the row's quad.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "sm90/kernel_params.h"
#include "sm90/seq_info.h"
#include "sm90/softmax.h"
#include "sm90/tile_scheduler.h"
#include "sm90/wgmma_utils.h"

namespace flashcore::sm90 {

using namespace cute;

template <class Traits>
struct Epilogue {
  using Element = typename Traits::Element;
  using Params = KernelParams<Traits>;
  using Storage = typename Traits::SharedStorage;
  static constexpr int kEpilogueBarrier = 0;  // named barrier over the consumer threads
  // Named barriers kStoreBarrier + w: consumer warpgroup w's own O store
  // (after the ping-pong turn barriers 1..kNumMmaWarpGroups, mainloop_mma.h;
  // CUTLASS offsets every id by its 8 reserved ones).
  static_assert(cutlass::arch::NamedBarrier::ReservedNamedBarrierCount + 1 + 2 * Traits::kNumMmaWarpGroups <=
                    cutlass::arch::NamedBarrier::HardwareMaxNumNamedBarriers,
                "named barrier ids run out");
  static constexpr int kStoreBarrier = 1 + Traits::kNumMmaWarpGroups;
  // The store unit (kernel_traits.h: kStoreRows): with a buffer of its own
  // (whole or half-width) each warpgroup stores its 64 rows; through Q's
  // buffer the whole tile goes at once. Thread 0 of a unit issues its stores.
  static constexpr bool kPerWarpGroup = !Traits::kOThroughQ;
  static constexpr int kStoreThreads = kPerWarpGroup ? cutlass::NumThreadsPerWarpGroup : Traits::kNumMmaThreads;

  // Before the CTA exits: the last TMA stores must have read shared memory
  // (each storing thread waits for its own).
  CUTE_DEVICE static void drain(int mma_thread) {
    if (mma_thread % kStoreThreads == 0) tma_store_wait<0>();
  }

  // (row, col) of each accumulator element this thread holds, row/col view.
  CUTE_DEVICE static auto coords(int mma_thread) {
    typename Traits::TiledMmaPV tiled_mma_pv;
    Tensor cO = make_identity_tensor(select<0, 1>(typename Traits::TileShapePV{}));
    Tensor tOcO = tiled_mma_pv.get_thread_slice(mma_thread).partition_C(cO);
    return make_tensor(tOcO.data(), acc_layout_rowcol(tOcO.layout()));
  }

  // With Traits::kIssueAhead the next tile's first Q·Kᵀ may be running
  // (mainloop_mma.h Ahead): O is then read, never written (ptxas serializes
  // every WGMMA of a kernel in which other instructions write accumulator
  // registers while a product is in flight), normalized as it is converted,
  // and that product is waited for just before the one branch that issues
  // the store (ptxas keeps no WGMMA in flight across a divergent branch).
  // Those kernels are plain, with O in a buffer of its own and one store
  // round a warpgroup: no split partial, no direct store, no branch before.
  template <class FragO, int kRows>
  CUTE_DEVICE static void store(Params const& params, Storage& storage, FragO& tOrO,
                                float const (&inv_sum)[kRows], float const (&lse)[kRows],
                                Element* q_smem, int mma_thread, TileCoord const& t, SeqInfo const& si,
                                TileWork const& w) {
    static_assert(!Traits::kIssueAhead || (kPerWarpGroup && Traits::kStoreRounds == 1 && !Traits::kServing));
    Tensor o_rc = make_tensor(tOrO.data(), acc_layout_rowcol(tOrO.layout()));
    if constexpr (!Traits::kIssueAhead) {
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) {
        CUTLASS_PRAGMA_UNROLL
        for (int c = 0; c < size<1>(o_rc); ++c) o_rc(r, c) = normalize_o(o_rc(r, c), inv_sum[r]);
      }
    }
    Tensor coord_rc = coords(mma_thread);
    int row0 = w.m_block * Traits::kBlockM;
    if constexpr (Traits::kFrontPad) row0 -= row_shift_of(params);  // negative: the tile starts with padding rows

    if (w.num_splits > 1) {
      // Split-KV partial: rows < seqlen_q <= kSplitMaxRows, m_block 0.
      int64_t const slot = (int64_t(t.batch) * params.heads_q + t.head) * params.seq.max_splits + w.split;
      float* po = params.partial_o + slot * params.partial_rows * params.head_dim;
      float* pl = params.partial_lse + slot * params.partial_rows;
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) {
        int const row = get<0>(coord_rc(r, 0));
        if (row < si.seqlen_q) {
          CUTLASS_PRAGMA_UNROLL
          for (int c = 0; c < size<1>(o_rc); c += 2) {
            *reinterpret_cast<float2*>(po + row * params.head_dim + get<1>(coord_rc(r, c))) =
                make_float2(o_rc(r, c), o_rc(r, c + 1));
          }
          if (get<1>(coord_rc(r, 0)) == 0) pl[row] = lse[r];
        }
      }
      release_q_without_tma(storage, mma_thread);
      return;
    }

    Tensor rO = make_tensor<Element>(tOrO.layout());
    if constexpr (Traits::kIssueAhead) {
      Tensor ro_rc = make_tensor(rO.data(), acc_layout_rowcol(rO.layout()));
      cutlass::NumericArrayConverter<Element, float, 2> convert_pair;
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) {
        CUTLASS_PRAGMA_UNROLL
        for (int c = 0; c < size<1>(o_rc); c += 2) {
          cutlass::Array<float, 2> f;
          f[0] = normalize_o(o_rc(r, c), inv_sum[r]);
          f[1] = normalize_o(o_rc(r, c + 1), inv_sum[r]);
          cutlass::Array<Element, 2> const h = convert_pair(f);
          ro_rc(r, c) = h[0];
          ro_rc(r, c + 1) = h[1];
        }
      }
    } else {
      convert_into(tOrO, rO);
    }
    // Varlen q: a tile whose rows all lie in its sequence takes the TMA
    // store below (the packed O from the sequence's first row); only the
    // partial last tile of a sequence is stored from registers.
    if (Traits::kServing && params.o_direct && row0 + Traits::kBlockM > si.seqlen_q) {
      Tensor ro_rc = make_tensor(rO.data(), acc_layout_rowcol(rO.layout()));
      Element* o = params.o_ptr + int64_t(si.q_offset) * params.o_stride_s + int64_t(t.head) * params.o_stride_h;
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) {
        int const row = row0 + get<0>(coord_rc(r, 0));
        if (row < si.seqlen_q) {
          CUTLASS_PRAGMA_UNROLL
          for (int c = 0; c < size<1>(ro_rc); c += 2) {
            Element pair[2] = {ro_rc(r, c), ro_rc(r, c + 1)};
            *reinterpret_cast<uint32_t*>(o + row * params.o_stride_s + get<1>(coord_rc(r, c))) =
                *reinterpret_cast<uint32_t*>(pair);
          }
        }
      }
      store_lse(params, lse, coord_rc, t, si, row0);
      release_q_without_tma(storage, mma_thread);
      return;
    }

    // This warpgroup's 64 rows in its own slice of the O buffer, or the
    // whole tile in Q's buffer.
    int const unit = kPerWarpGroup ? mma_thread / cutlass::NumThreadsPerWarpGroup : 0;
    int const store_thread = mma_thread % kStoreThreads;
    int const barrier = kPerWarpGroup ? kStoreBarrier + unit : kEpilogueBarrier;
    Element* o_buffer = kPerWarpGroup ? storage.smem_o.data() + unit * cute::cosize_v<typename Traits::SmemLayoutO>
                                      : q_smem;
    Tensor sO = make_tensor(make_smem_ptr(o_buffer), typename Traits::SmemLayoutO{});
    auto r2s = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, typename Traits::TiledMmaPVStore{});
    auto thr_r2s = r2s.get_thread_slice(store_thread);
    // One round a kStoreCols-wide slice of the columns. A round's accumulator
    // values are consecutive registers of the full fragment (the m64nN
    // accumulator orders its values column pair, row half, then 8-column
    // group), so each round views its part of rO in place.
    auto const round_layout = partition_fragment_C(typename Traits::TiledMmaPVStore{},
                                                   Shape<Int<Traits::kStoreRows>, Int<Traits::kStoreCols>>{})
                                  .layout();
    constexpr int kRoundRegs = cute::cosize_v<decltype(round_layout)>;
    static_assert(Traits::kStoreRounds == 1 || Traits::kStoreRows == 64, "half-width rounds: one warpgroup's rows");
    static_assert(kRoundRegs * Traits::kStoreRounds == cute::cosize_v<decltype(rO.layout())>);
    // The in-place view needs the 8-column groups to be the slowest mode of a
    // single-atom fragment: ((2, 2, N/8), 1, 1), compact.
    static_assert(Traits::kStoreRounds == 1 ||
                  (decltype(size<0, 2>(rO.layout()))::value == Traits::kHeadDim / 8 &&
                   decltype(size<1>(rO.layout()))::value == 1 && decltype(size<2>(rO.layout()))::value == 1 &&
                   decltype(stride<0, 2>(rO.layout()))::value == 4),
                  "a store round's columns are not consecutive registers of O's fragment");
    CUTLASS_PRAGMA_UNROLL
    for (int round = 0; round < Traits::kStoreRounds; ++round) {
      if constexpr (kPerWarpGroup) {
        // This warpgroup's previous store must have read its slice before it
        // is reused. Issuing ahead, every thread waits (the others have no
        // store to wait for): no branch while the Q·Kᵀ runs.
        if (Traits::kIssueAhead || store_thread == 0) tma_store_wait<0>();
        cutlass::arch::NamedBarrier::sync(kStoreThreads, barrier);
      }
      Tensor rO_part = make_tensor(rO.data() + round * kRoundRegs, round_layout);
      copy(r2s, thr_r2s.retile_S(rO_part), thr_r2s.partition_D(sO));
      // Generic-proxy smem writes must be visible to the TMA (async proxy).
      cutlass::arch::fence_view_async_shared();
      cutlass::arch::NamedBarrier::sync(kStoreThreads, barrier);
      if constexpr (Traits::kIssueAhead) warpgroup_wait<0>();  // the next tile's first Q·Kᵀ

      // A unit of kFrontPad's padding rows (all before row 0) stores nothing.
      static_assert(!Traits::kFrontPad || Traits::kStoreRows == 64, "the padding is whole store units");
      if (store_thread == 0 && (!Traits::kFrontPad || row0 + unit * Traits::kStoreRows >= 0)) {
        int const block = Traits::kFrontPad ? row0 / Traits::kStoreRows + unit
                                            : w.m_block * (Traits::kBlockM / Traits::kStoreRows) + unit;
        auto const o_tile = [&] {
          using StoreTile = Shape<Int<Traits::kStoreRows>, Int<Traits::kStoreCols>>;
          if constexpr (Traits::kServing) {  // varlen q: this sequence's rows of the packed O
            Tensor mO = rows_tma_tensor(params.tma_o, params, params.o_direct);
            Tensor mO_seq = domain_offset(make_coord(si.q_offset, _0{}), mO(_, _, t.head, params.o_direct ? 0 : t.batch));
            return local_tile(mO_seq, StoreTile{}, make_coord(block, round));
          } else {
            Tensor mO = rows_tma_tensor(params.tma_o, params, false);
            return local_tile(mO(_, _, t.head, t.batch), StoreTile{}, make_coord(block, round));
          }
        };
        Tensor gO = o_tile();
        auto tma_o = params.tma_o.get_slice(_0{});
        copy(params.tma_o, tma_o.partition_S(sO), tma_o.partition_D(gO));
        tma_store_arrive();
        if constexpr (Traits::kOThroughQ) {
          tma_store_wait<0>();  // smem has been read: the buffer may take the next Q
          storage.barrier_q_free[0].arrive();  // one Q buffer when O aliases it
        }
      }
    }
    store_lse(params, lse, coord_rc, t, si, row0);
  }

 private:
  template <int kRows, class TC>
  CUTE_DEVICE static void store_lse(Params const& params, float const (&lse)[kRows], TC const& coord_rc,
                                    TileCoord const& t, SeqInfo const& si, int row0) {
    if (params.lse == nullptr) return;
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      int row = row0 + get<0>(coord_rc(r, 0));
      if (get<1>(coord_rc(r, 0)) == 0 && row < si.seqlen_q && (!Traits::kFrontPad || row >= 0)) {
        params.lse[int64_t(t.batch) * params.lse_stride_b + int64_t(t.head) * params.lse_stride_h +
                   int64_t(si.q_offset + row) * params.lse_stride_s] = lse[r];
      }
    }
  }

  // When O aliases Q (no TMA store to wait for here), the Q buffer is free
  // once every consumer warpgroup is past its last Q·Kᵀ.
  CUTE_DEVICE static void release_q_without_tma(Storage& storage, int mma_thread) {
    if constexpr (Traits::kOThroughQ) {
      cutlass::arch::NamedBarrier::sync(Traits::kNumMmaThreads, kEpilogueBarrier);
      if (mma_thread == 0) storage.barrier_q_free[0].arrive();
    }
  }
};

}  // namespace flashcore::sm90
