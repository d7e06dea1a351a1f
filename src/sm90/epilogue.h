// Epilogue of one tile: O is normalized by 1/l, converted to the output type,
// staged into shared memory (its own buffer, or Q's: see kernel_traits.h)
// with stmatrix, and written by one TMA store. TMA clips the rows and columns that
// fall outside the tensor, so tails need no predicates. The LSE of each row is
// written straight from registers by the first thread of the row's quad.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "sm90/kernel_params.h"
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

  // Before the CTA exits: the last TMA store must have read shared memory.
  CUTE_DEVICE static void drain(int mma_thread) {
    if (mma_thread == 0) tma_store_wait<0>();
  }

  template <class FragO, int kRows>
  CUTE_DEVICE static void store(Params const& params, Storage& storage, FragO& tOrO,
                                float const (&inv_sum)[kRows], float const (&lse)[kRows],
                                Element* q_smem, int mma_thread, TileCoord const& t) {
    Tensor o_rc = make_tensor(tOrO.data(), acc_layout_rowcol(tOrO.layout()));
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < size<1>(o_rc); ++c) o_rc(r, c) *= inv_sum[r];
    }
    Tensor rO = make_tensor<Element>(tOrO.layout());
    convert_into(tOrO, rO);

    Element* o_buffer = Traits::kSeparateO ? storage.smem_o.data() : q_smem;
    Tensor sO = make_tensor(make_smem_ptr(o_buffer), typename Traits::SmemLayoutO{});
    if constexpr (Traits::kSeparateO) {
      // The previous tile's store must have read the O buffer before it is reused.
      if (mma_thread == 0) tma_store_wait<0>();
      cutlass::arch::NamedBarrier::sync(Traits::kNumMmaThreads, kEpilogueBarrier);
    }
    auto r2s = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, typename Traits::TiledMmaPV{});
    auto thr_r2s = r2s.get_thread_slice(mma_thread);
    copy(r2s, thr_r2s.retile_S(rO), thr_r2s.partition_D(sO));
    // Generic-proxy smem writes must be visible to the TMA (async proxy).
    cutlass::arch::fence_view_async_shared();
    cutlass::arch::NamedBarrier::sync(Traits::kNumMmaThreads, kEpilogueBarrier);

    if (mma_thread == 0) {
      Tensor mO = params.tma_o.get_tma_tensor(
          make_shape(params.seqlen_q, params.head_dim, params.heads_q, params.batch));
      Tensor gO = local_tile(mO(_, _, t.head, t.batch), select<0, 1>(typename Traits::TileShapePV{}),
                             make_coord(t.m_block, _0{}));
      auto tma_o = params.tma_o.get_slice(_0{});
      copy(params.tma_o, tma_o.partition_S(sO), tma_o.partition_D(gO));
      tma_store_arrive();
      if constexpr (!Traits::kSeparateO) {
        tma_store_wait<0>();  // smem has been read: the buffer may take the next Q
        storage.barrier_q_free[0].arrive();  // one Q buffer when O aliases it
      }
    }

    if (params.lse != nullptr) {
      typename Traits::TiledMmaPV tiled_mma_pv;
      Tensor cO = make_identity_tensor(select<0, 1>(typename Traits::TileShapePV{}));
      Tensor tOcO = tiled_mma_pv.get_thread_slice(mma_thread).partition_C(cO);
      Tensor coord_rc = make_tensor(tOcO.data(), acc_layout_rowcol(tOcO.layout()));
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) {
        int row = t.m_block * Traits::kBlockM + get<0>(coord_rc(r, 0));
        if (get<1>(coord_rc(r, 0)) == 0 && row < params.seqlen_q) {
          params.lse[t.batch * params.lse_stride_b + t.head * params.lse_stride_h +
                     row * params.lse_stride_s] = lse[r];
        }
      }
    }
  }
};

}  // namespace flashcore::sm90
