// The sm90 forward kernel: a persistent, warp-specialized CTA of one producer
// warpgroup (TMA loads) and kBlockM/64 consumer warpgroups (WGMMA + softmax).
// The pieces live in their own headers: kernel_traits.h (shapes, layouts),
// tile_scheduler.h, mainloop_load.h (producer), mainloop_mma.h (consumers),
// softmax.h, mask.h, epilogue.h.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "sm90/epilogue.h"
#include "sm90/launch_attrs.h"
#include "sm90/kernel_params.h"
#include "sm90/mainloop_load.h"
#include "sm90/mainloop_mma.h"
#include "sm90/tile_scheduler.h"

namespace flashcore::sm90 {

using namespace cute;

template <class Traits>
__global__ void __launch_bounds__(Traits::kNumThreads, Traits::kCtasPerSm)
    flash_fwd_kernel(CUTE_GRID_CONSTANT KernelParams<Traits> const params) {
  // The host pass only needs the launch stub: without the body there it
  // never instantiates the mainloop, softmax and epilogue templates, which
  // took a third of each kernel translation unit's compile time (cudafe++
  // and the host compiler), on a 2-core CI that builds ~40 of them.
#if defined(__CUDA_ARCH__)
  using Storage = typename Traits::SharedStorage;
  using PipelineKV = typename Traits::PipelineKV;
  using Mma = MainloopMma<Traits>;
  using Fold = ChunkFold<Traits::kFoldSplits, Mma::kRows, Traits::kBlockM * Traits::kHeadDim / Traits::kNumMmaThreads,
                         Traits::kNumMmaThreads>;

  extern __shared__ char smem_raw[];
  Storage& storage = *reinterpret_cast<Storage*>(smem_raw);

  int const warp_group = cutlass::canonical_warp_group_idx();
  bool const is_producer_thread = threadIdx.x == 0;

  if (is_producer_thread) {
    cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_v.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_o.get_tma_descriptor());
    if (Traits::kServing && params.block_table != nullptr) {
      bool const wide = params.page_wide;
      cute::prefetch_tma_descriptor(wide ? params.page_tma_wide.k.get_tma_descriptor()
                                         : params.page_tma_narrow.k.get_tma_descriptor());
      cute::prefetch_tma_descriptor(wide ? params.page_tma_wide.v.get_tma_descriptor()
                                         : params.page_tma_narrow.v.get_tma_descriptor());
    }
    for (int i = 0; i < Traits::kQStages; ++i) {
      storage.barrier_q[i].init(1);
      storage.barrier_q_free[i].init(Traits::kQFreeArrivals);
    }
  }

  typename PipelineKV::Params pipe_params;
  pipe_params.transaction_bytes = Traits::kBytesKV;
  pipe_params.role = warp_group == 0 ? PipelineKV::ThreadCategory::Producer
                                     : PipelineKV::ThreadCategory::Consumer;
  pipe_params.is_leader = is_producer_thread;
  pipe_params.num_consumers = Traits::kNumMmaThreads;
  // A paged cache is loaded by the whole producer warp, everything else by
  // one thread, or with kSplitKVIssue by two: thread 0 Q and K, thread
  // kVIssueThread V (mainloop_load.h), which then arms V's barriers.
  bool const warp_loads = Traits::kServing && params.block_table != nullptr;
  bool const split_issue = Traits::kSplitKVIssue && !warp_loads;
  typename PipelineKV::Params pipe_params_v = pipe_params;
  if (split_issue) pipe_params_v.is_leader = threadIdx.x == Traits::kVIssueThread;
  // With K/V multicast, a consumer's release of a stage arrives on the empty
  // barriers of every CTA of the cluster (each one's producer writes into
  // all of them), and each CTA's full barrier counts the whole block's bytes.
  PipelineKV pipeline_k(storage.pipeline_k, pipe_params, typename Traits::ClusterShape{});
  PipelineKV pipeline_v(storage.pipeline_v, pipe_params_v, typename Traits::ClusterShape{});
  cutlass::arch::fence_barrier_init();
  // Every CTA's barriers are initialized before any peer arrives on them or
  // multicasts into its shared memory.
  if constexpr (Traits::kClusterM > 1) {
    cute::cluster_arrive_relaxed();
    cute::cluster_wait();
  } else {
    __syncthreads();
  }

  // Programmatic dependent launch (flash_fwd_launch.h): this grid may start
  // while the previous kernel in the stream still runs. Everything above
  // touches only shared memory and the kernel parameters; the wait below
  // holds every thread until that kernel has finished and its writes are
  // visible, before the first global read or write. The next kernel (the
  // next attention call, say) may then be scheduled as SMs free up, and
  // waits the same way; a split-KV combine only as this grid's CTAs exit
  // (launch_attrs.h).
  pdl_wait_for_previous_kernel();
  if (params.trigger_dependents_early) pdl_launch_dependents();

  if (warp_group == 0) {
    if constexpr (Traits::kRegSplit) cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    using Load = MainloopLoad<Traits>;
    if (split_issue) {
      if (is_producer_thread) Load::template run<Load::kQK>(params, storage, pipeline_k, pipeline_v);
      if (threadIdx.x == Traits::kVIssueThread) Load::template run<Load::kV>(params, storage, pipeline_k, pipeline_v);
    } else if (warp_loads ? threadIdx.x < 32 : is_producer_thread) {
      Load::run(params, storage, pipeline_k, pipeline_v);
    }
    if constexpr (Traits::kQWarp) {
      if (threadIdx.x == 32) Load::run_q(params, storage);
    }
  } else {
    if constexpr (Traits::kRegSplit) cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
    int const mma_thread = threadIdx.x - cutlass::NumThreadsPerWarpGroup;
    typename Traits::TiledMmaPV tiled_mma_pv;
    Tensor tOrO = partition_fragment_C(tiled_mma_pv, select<0, 1>(typename Traits::TileShapePV{}));
    typename Traits::PipelineState read_state;
    StaticTileScheduler<KernelParams<Traits>> scheduler{params};

    Tensor tSrS = Mma::make_fragment_s();
    typename Mma::Ahead ahead;

    Mma::prime_turns(mma_thread);
    int iter = 0, q_iter = 0;
    if constexpr (Traits::kIssueAhead) {
      // The first tile's first Q·Kᵀ (Mma::Ahead: every tile starts with its
      // own in flight). Plain kernels: every tile is active and has a key
      // block, so tile i uses Q buffer i % 2 and q_iter follows iter.
      if (scheduler.valid(scheduler.tile_at(0))) {
        Traits::wait_q(storage, 0);
        Mma::issue_first_qk(storage, pipeline_k, read_state, Traits::q_buffer(storage, 0), mma_thread, tSrS);
      }
    }
    for (int tile = scheduler.tile_at(iter); scheduler.valid(tile); tile = scheduler.tile_at(++iter)) {
      auto const [t, si, w] = tile_info<Traits>(scheduler, params.seq, tile);
      if (!Traits::kIssueAhead && !w.active) continue;  // the producer skips the same tiles
      BlockMask<Traits::kBlockM, Traits::kBlockN, Traits::kFrontPad> mask{
          si.seqlen_q, si.seqlen_k, params.seq.window_left, params.seq.window_right, row_shift_of(params)};
      typename Mma::Softmax softmax(params.scale_log2);
      if constexpr (!Traits::kIssueAhead) clear(tOrO);  // else in run, after its first wait
      // A plain kernel's tiles are all active (the host sizes num_units from
      // its one seqlen_q), so its Q count is its tile count: the lean kernels
      // hold only that across the key loop (kernel_traits.h kLeanTileState).
      if constexpr (Traits::kLeanTileState) q_iter = iter;
      int const qb = q_iter % Traits::kQStages;
      auto* q_smem = Traits::q_buffer(storage, q_iter);
      if constexpr (Traits::kIssueAhead) {
        ahead.has_next = scheduler.valid(scheduler.tile_at(iter + 1));
        ahead.q_iter = q_iter + 1;
      } else {
        Traits::wait_q(storage, q_iter);
      }
      ++q_iter;
      bool const has_blocks = Traits::kIssueAhead || w.n_begin < w.n_end;
      Fold fold(storage.smem_fold.data(), mma_thread, w.fold_blocks, w.n_end - 1, si.seqlen_q);
      if (has_blocks) {
        Mma::run(mask, storage, pipeline_k, pipeline_v, read_state, q_smem, mma_thread, w.m_block, w.n_begin,
                 w.n_end, tOrO, tSrS, softmax, storage.barrier_q_free[qb], fold, ahead);
      }
      // All Q·Kᵀ of this tile done (run released the buffer itself if kEarlyQFree).
      if constexpr (!Traits::kOThroughQ) {
        if (!Mma::kEarlyQFree || !has_blocks) storage.barrier_q_free[qb].arrive();
      }
      float inv_sum[Mma::kRows], lse[Mma::kRows];
      if (fold.folds()) {  // the last chunk, then the merged result
        fold.merge(tOrO, softmax);
        fold.finish(tOrO, inv_sum, lse);
      } else {
        softmax.finalize(inv_sum, lse);
      }
      if constexpr (Traits::kLeanTileState) {
        // The epilogue's inputs again, from the tile count, the kernel
        // parameters and a fresh read of the thread index (volatile: not
        // merged with the first read, which would stay live through the key
        // loop).
        int const mma_thread_e = fresh_thread_index() - cutlass::NumThreadsPerWarpGroup;
        auto const [te, sie, we] = tile_info<Traits>(scheduler, params.seq, scheduler.tile_at(iter));
        Epilogue<Traits>::store(params, storage, tOrO, inv_sum, lse, Traits::q_buffer(storage, iter), mma_thread_e,
                                te, sie, we);
      } else {
        Epilogue<Traits>::store(params, storage, tOrO, inv_sum, lse, q_smem, mma_thread, t, si, w);
      }
    }
    // The last tile's "next" Q·Kᵀ, on data nobody reads.
    if constexpr (Traits::kIssueAhead) warpgroup_wait<0>();
    Epilogue<Traits>::drain(mma_thread);
  }
#endif  // __CUDA_ARCH__
}

}  // namespace flashcore::sm90
