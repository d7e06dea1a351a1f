// Producer side of the mainloop: one thread of the producer warp issues every
// TMA load of the CTA. Q is loaded once per tile, as soon as the previous tile
// has freed the Q buffer; K and V go through two kStages-deep rings guarded by the sm90
// TMA pipelines, in the order the consumers read them (last key block first).
#pragma once

#include <cute/tensor.hpp>

#include "sm90/kernel_params.h"
#include "sm90/mask.h"
#include "sm90/tile_scheduler.h"

namespace flashcore::sm90 {

using namespace cute;

template <class Traits>
struct MainloopLoad {
  using Params = KernelParams<Traits>;
  using Storage = typename Traits::SharedStorage;
  using PipelineKV = typename Traits::PipelineKV;
  using PipelineState = typename Traits::PipelineState;

  CUTE_DEVICE static void run(Params const& params, Storage& storage, PipelineKV& pipeline_k,
                              PipelineKV& pipeline_v) {
    Tensor sK = make_tensor(make_smem_ptr(storage.smem_k.data()), typename Traits::SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(storage.smem_v.data()), typename Traits::SmemLayoutVt{});

    Tensor mQ = params.tma_q.get_tma_tensor(
        make_shape(params.seqlen_q, params.head_dim, params.heads_q, params.batch));
    Tensor mK = params.tma_k.get_tma_tensor(
        make_shape(params.seqlen_k, params.head_dim, params.heads_kv, params.batch));
    Tensor mVt = params.tma_v.get_tma_tensor(
        make_shape(params.head_dim, params.seqlen_k, params.heads_kv, params.batch));

    auto tma_q = params.tma_q.get_slice(_0{});
    auto tma_k = params.tma_k.get_slice(_0{});
    auto tma_v = params.tma_v.get_slice(_0{});
    Tensor tKsK = tma_k.partition_D(sK);
    Tensor tVsV = tma_v.partition_D(sVt);

    BlockMask<Traits::kBlockM, Traits::kBlockN> mask{params.seqlen_q, params.seqlen_k,
                                                     params.window_left, params.window_right};
    StaticTileScheduler<Params> scheduler{params};
    PipelineState write_state = cutlass::make_producer_start_state<PipelineKV>();

    int iter = 0;
    // No unrolling here: the producer runs on 24 registers (setmaxnreg), and
    // unrolled copies of the loop would spill.
    CUTLASS_PRAGMA_NO_UNROLL
    for (int tile = scheduler.tile_at(iter); scheduler.valid(tile); tile = scheduler.tile_at(++iter)) {
      TileCoord t = scheduler.decode(tile);
      int head_kv = t.head / params.group;
      Tensor gQ = local_tile(mQ(_, _, t.head, t.batch), select<0, 2>(typename Traits::TileShapeQK{}),
                             make_coord(t.m_block, _0{}));
      Tensor gK = local_tile(mK(_, _, head_kv, t.batch), select<1, 2>(typename Traits::TileShapeQK{}),
                             make_coord(_, _0{}));  // (N, D, n_blocks)
      Tensor gVt = local_tile(mVt(_, _, head_kv, t.batch), select<1, 2>(typename Traits::TileShapePV{}),
                              make_coord(_0{}, _));  // (D, N, n_blocks)
      Tensor tQgQ = tma_q.partition_S(gQ);
      Tensor tKgK = tma_k.partition_S(gK);
      Tensor tVgV = tma_v.partition_S(gVt);

      // The tile that last used this Q buffer is done with it (kernel_traits.h).
      int const qb = iter % Traits::kQStages, use = iter / Traits::kQStages;
      if (use > 0) storage.barrier_q_free[qb].wait((use - 1) & 1);
      Tensor sQ = make_tensor(make_smem_ptr(Traits::q_buffer(storage, iter)), typename Traits::SmemLayoutQ{});
      storage.barrier_q[qb].arrive_and_expect_tx(Traits::kBytesQ);
      copy(params.tma_q.with(reinterpret_cast<uint64_t&>(storage.barrier_q[qb]), 0), tQgQ, tma_q.partition_D(sQ));

      int n_min, n_max;
      mask.n_block_range(t.m_block, n_min, n_max);
      CUTLASS_PRAGMA_NO_UNROLL
      for (int n = n_max - 1; n >= n_min; --n) {
        pipeline_k.producer_acquire(write_state);
        copy(params.tma_k.with(*pipeline_k.producer_get_barrier(write_state), 0),
             tKgK(_, _, _, n), tKsK(_, _, _, write_state.index()));
        pipeline_v.producer_acquire(write_state);
        copy(params.tma_v.with(*pipeline_v.producer_get_barrier(write_state), 0),
             tVgV(_, _, _, n), tVsV(_, _, _, write_state.index()));
        ++write_state;
      }
    }
    // Keep the CTA alive until the consumers have released every stage.
    pipeline_k.producer_tail(write_state);
    pipeline_v.producer_tail(write_state);
  }
};

}  // namespace flashcore::sm90
