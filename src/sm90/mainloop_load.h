// Producer side of the mainloop. One thread of the producer warp (the leader)
// issues Q and the K/V blocks (Q from a thread of its own where Q has one
// buffer: kernel_traits.h kQWarp); for a paged KV cache (serving kernels) the
// whole producer warp runs this loop in lockstep, the leader waits on the
// pipelines, and lane i issues chunk i of each block (below).
// Q is loaded once per tile, as soon as the previous tile has freed the Q
// buffer; K and V go through two kStages-deep rings guarded by the sm90 TMA
// pipelines, in the order the consumers read them (last key block first).
// Q's loads ask L2 to evict their lines first, so that other tiles' K/V
// blocks stay (l2_hints.h).
//
// Varlen sequences are addressed by offsetting the packed tensors' row
// coordinate; a paged KV cache is read 64 keys at a time (16 when the page
// size is not a multiple of 64) from the page the block table names
// (kernel_traits.h PageChunk). Chunks that start past a sequence's end are
// loaded from outside the pool, which TMA fills with zeros; the keys of the
// sequence's last chunk past its end are read as the cache holds them, and
// masked (docs/numerics.md: a NaN/Inf left there still reaches the rows).
#pragma once

#include <cute/tensor.hpp>

#include "sm90/kernel_params.h"
#include "sm90/l2_hints.h"
#include "sm90/seq_info.h"
#include "sm90/tile_scheduler.h"

namespace flashcore::sm90 {

using namespace cute;

template <class Traits>
struct MainloopLoad {
  using Params = KernelParams<Traits>;
  using Storage = typename Traits::SharedStorage;
  using PipelineKV = typename Traits::PipelineKV;
  using PipelineState = typename Traits::PipelineState;
  static_assert(Traits::kBlockN / Traits::kChunk <= 32, "paged KV: one producer lane a chunk");

  // Tile number `q_iter`'s Q (tile t, query block w.m_block) into its
  // buffer, once the tile that used the buffer before is done with it
  // (kernel_traits.h).
  template <class TQ>
  CUTE_DEVICE static void load_q(Params const& params, Storage& storage, int q_iter, TQ const& mQ, TileCoord const& t,
                                 SeqInfo const& si, TileWork const& w, bool varlen_q) {
    auto tma_q = params.tma_q.get_slice(_0{});
    // Rows before row 0 (kFrontPad's padding) are out of the tensor: TMA
    // fills them with zeros, and their results are never stored.
    int q_row0 = si.q_offset;
    if constexpr (Traits::kFrontPad) q_row0 -= row_shift_of(params);
    Tensor gQ = local_tile(domain_offset(make_coord(q_row0, _0{}), mQ(_, _, t.head, varlen_q ? 0 : t.batch)),
                           select<0, 2>(typename Traits::TileShapeQK{}), make_coord(w.m_block, _0{}));
    int const qb = q_iter % Traits::kQStages, use = q_iter / Traits::kQStages;
    if (use > 0) storage.barrier_q_free[qb].wait((use - 1) & 1);
    Tensor sQ = make_tensor(make_smem_ptr(Traits::q_buffer(storage, q_iter)), typename Traits::SmemLayoutQ{});
    storage.barrier_q[qb].arrive_and_expect_tx(Traits::kBytesQ);
    copy(params.tma_q.with(reinterpret_cast<uint64_t&>(storage.barrier_q[qb]), 0, l2_hint_q()), tma_q.partition_S(gQ),
         tma_q.partition_D(sQ));
  }

  // kernel_traits.h kQWarp: one thread of the producer warpgroup's second
  // warp loads each active tile's Q, walking the same tiles as run and the
  // consumers: its q_iter must follow theirs, which skip the same inactive
  // tiles (the issue-ahead kernels, which skip none, keep Q in two buffers
  // and never take this path).
  CUTE_DEVICE static void run_q(Params const& params, Storage& storage) {
    static_assert(Traits::kQWarp);  // plain kernels only: no varlen queries
    SeqParams const& seq = params.seq;
    Tensor mQ = rows_tma_tensor(params.tma_q, params, false);
    StaticTileScheduler<Params> scheduler{params};
    int iter = 0, q_iter = 0;
    CUTLASS_PRAGMA_NO_UNROLL
    for (int tile = scheduler.tile_at(iter); scheduler.valid(tile); tile = scheduler.tile_at(++iter)) {
      auto const [t, si, w] = tile_info<Traits>(scheduler, seq, tile);
      if (!w.active) continue;
      load_q(params, storage, q_iter++, mQ, t, si, w, false);
    }
  }

  // Paged KV cache: lane i loads chunk i of key block n (Chunk::kKeys keys,
  // at most 32 chunks a block) from the page holding its keys: the
  // block-table lookups run in parallel, one round trip a block, and so do
  // the TMA issues. (One thread doing them in turn, a dependent load per page
  // and 16 issues a block, made paged decode 25-40% slower than a contiguous
  // cache.) Chunks that start past the sequence (or past its block-table
  // row) read page num_pages: out of the pool, so TMA writes zeros there.
  //
  // The order follows the contiguous path's: a block's lookups are issued
  // before the leader waits for the stage (their round trip runs under the
  // wait), K is issued as soon as K's stage is free and V only then waits
  // for V's, which frees later (after P·V). Until 2026-11-29 the leader
  // waited for both stages before the lookups, so every block's K waited for
  // the previous P·V and then a block-table round trip: on the H200 paged
  // decode took 19-21% longer that way where it streams (same-run A/B,
  // bench/results/2026-11-29-h200/call1-ab1-*, output bits identical;
  // tools/variant-ab/patches/page-order.patch). Looking the pages up one
  // block ahead on top of it gained nothing.
  CUTE_DEVICE static int page_of(Params const& params, int seqlen_k, int batch, int key) {
    int const logical = key / params.page_size;
    return key < seqlen_k && logical < params.max_pages_per_seq
               ? load_index(params.block_table + int64_t(batch) * params.block_table_stride + logical)
               : params.num_pages;
  }

  template <class Chunk>
  CUTE_DEVICE static void load_page_chunks(Params const& params, typename Chunk::Tmas const& tmas, Storage& storage,
                                           PipelineKV& pipeline_k, PipelineKV& pipeline_v,
                                           PipelineState const& write_state, int head_kv, int n, int lane,
                                           int page) {
    constexpr int kKeys = Chunk::kKeys;
    auto const& tma_k = tmas.k;
    auto const& tma_v = tmas.v;
    bool const leader = lane == 0;
    bool const active = lane < Traits::kBlockN / kKeys;
    int const stage = write_state.index();
    int const i = lane;
    int const key = n * Traits::kBlockN + i * kKeys;
    int const row = key - (key / params.page_size) * params.page_size;
    Tensor mKp = tma_k.get_tma_tensor(make_shape(params.page_size, params.head_dim, params.heads_kv, params.num_pages));
    Tensor mVp = tma_v.get_tma_tensor(make_shape(params.head_dim, params.page_size, params.heads_kv, params.num_pages));
    if (leader) pipeline_k.producer_acquire(write_state);
    __syncwarp();  // K's stage is free and armed before any lane issues into it
    if (active) {
      Tensor gk = local_tile(mKp(_, _, head_kv, page), Shape<Int<kKeys>, Int<Traits::kHeadDim>>{},
                             make_coord(row / kKeys, _0{}));
      Tensor sk = make_tensor(make_smem_ptr(storage.smem_k.data() + Chunk::k_offset(i, stage)),
                              typename Chunk::SmemLayoutK{});
      auto tma_kc = tma_k.get_slice(_0{});
      copy(tma_k.with(*pipeline_k.producer_get_barrier(write_state), 0), tma_kc.partition_S(gk),
           tma_kc.partition_D(sk));
    }
    if (leader) pipeline_v.producer_acquire(write_state);
    __syncwarp();  // and V's
    if (active) {
      Tensor gv = local_tile(mVp(_, _, head_kv, page), Shape<Int<Traits::kHeadDim>, Int<kKeys>>{},
                             make_coord(_0{}, row / kKeys));
      Tensor sv = make_tensor(make_smem_ptr(storage.smem_v.data() + Chunk::v_offset(i, stage)),
                              typename Chunk::SmemLayoutVt{});
      auto tma_vc = tma_v.get_slice(_0{});
      copy(tma_v.with(*pipeline_v.producer_get_barrier(write_state), 0), tma_vc.partition_S(gv),
           tma_vc.partition_D(sv));
    }
  }

  // kRole: which loads this thread issues. kBoth: Q, K and V (and, for a
  // paged cache, the whole warp runs it); with kernel_traits.h kSplitKVIssue one
  // thread issues Q and K (kQK) and another V (kV), each waiting for its own
  // ring only, so K's next stage (freed after a Q·Kᵀ) is refilled without
  // waiting behind V's (freed after the later P·V).
  enum Role { kBoth = 0, kQK = 1, kV = 2 };
  template <int kRole = kBoth>
  CUTE_DEVICE static void run(Params const& params, Storage& storage, PipelineKV& pipeline_k,
                              PipelineKV& pipeline_v) {
    Tensor sK = make_tensor(make_smem_ptr(storage.smem_k.data()), typename Traits::SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(storage.smem_v.data()), typename Traits::SmemLayoutVt{});
    SeqParams const& seq = params.seq;
    bool const varlen_q = Traits::kServing && seq.cu_seqlens_q != nullptr;
    bool const varlen_k = Traits::kServing && seq.cu_seqlens_k != nullptr;
    bool const paged = Traits::kServing && params.block_table != nullptr;

    Tensor mQ = rows_tma_tensor(params.tma_q, params, varlen_q);
    int32_t const k_rows = varlen_k ? seq.total_k : seq.seqlen_k;
    int32_t const k_batch = varlen_k ? 1 : params.batch;
    Tensor mK = params.tma_k.get_tma_tensor(make_shape(k_rows, params.head_dim, params.heads_kv, k_batch));
    Tensor mVt = params.tma_v.get_tma_tensor(make_shape(params.head_dim, k_rows, params.heads_kv, k_batch));

    // With K/V multicast (kernel_traits.h kClusterM) the K/V TMA box is a
    // 1/kClusterM slice of a block: a CTA issues its own slice into every
    // ring of the cluster when the CTAs' tiles are of one head, and else
    // both slices into its own ring only (kClusterM = 2).
    int const cta_rank = Traits::kClusterM > 1 ? int(cute::block_rank_in_cluster()) : 0;
    auto tma_k = params.tma_k.get_slice(cta_rank);
    auto tma_v = params.tma_v.get_slice(cta_rank);
    static_assert(Traits::kClusterM <= 2, "the other slice: one other CTA");
    auto tma_k_other = params.tma_k.get_slice(cta_rank ^ (Traits::kClusterM - 1));
    auto tma_v_other = params.tma_v.get_slice(cta_rank ^ (Traits::kClusterM - 1));
    Tensor tKsK = tma_k.partition_D(sK);
    Tensor tVsV = tma_v.partition_D(sVt);
    Tensor tKsK_other = tma_k_other.partition_D(sK);
    Tensor tVsV_other = tma_v_other.partition_D(sVt);

    StaticTileScheduler<Params> scheduler{params};
    PipelineState write_state = cutlass::make_producer_start_state<PipelineKV>();
    // Only paged calls run this on more than one thread (flash_fwd_kernel.h).
    int const lane = Traits::kServing ? int(threadIdx.x % 32) : 0;
    bool const leader = lane == 0;

    int iter = 0, q_iter = 0;
    // No unrolling here: the producer runs on few registers (setmaxnreg), and
    // unrolled copies of the loop would spill.
    CUTLASS_PRAGMA_NO_UNROLL
    for (int tile = scheduler.tile_at(iter); scheduler.valid(tile); tile = scheduler.tile_at(++iter)) {
      auto const [t, si, w] = tile_info<Traits>(scheduler, seq, tile);
      if (!w.active) continue;
      int head_kv = params.divisors.group.div(t.head);
      Tensor gK = local_tile(domain_offset(make_coord(si.k_offset, _0{}), mK(_, _, head_kv, varlen_k ? 0 : t.batch)),
                             select<1, 2>(typename Traits::TileShapeQK{}), make_coord(_, _0{}));  // (N, D, n_blocks)
      Tensor gVt = local_tile(domain_offset(make_coord(_0{}, si.k_offset), mVt(_, _, head_kv, varlen_k ? 0 : t.batch)),
                              select<1, 2>(typename Traits::TileShapePV{}), make_coord(_0{}, _));  // (D, N, n_blocks)
      Tensor tKgK = tma_k.partition_S(gK);
      Tensor tVgV = tma_v.partition_S(gVt);
      Tensor tKgK_other = tma_k_other.partition_S(gK);
      Tensor tVgV_other = tma_v_other.partition_S(gVt);
      // The other CTA of the cluster runs tile ^ 1 (tile_scheduler.h), of
      // the same (batch, head) unless the pair straddles two heads, i.e.
      // unless the pair's odd tile is a head's first query block (tiles are
      // numbered query block fastest). Then each CTA fills its own ring alone.
      bool const shared_kv =
          Traits::kClusterM > 1 && (!Traits::kPairsMayStraddle || params.divisors.units.rem(tile | 1) != 0);
      uint16_t const mask = shared_kv ? Traits::kMulticastMask : uint16_t(1u << cta_rank);

      if constexpr (!Traits::kQWarp && kRole != kV) {
        if (leader) load_q(params, storage, q_iter, mQ, t, si, w, varlen_q);
      }
      ++q_iter;

      // Paged: the page of this lane's chunk of key block n (num_pages, out
      // of the pool, for lanes past the block's chunks). Looked up here, once
      // for both chunk widths: the form the 2026-11-29 A/B timed (the lookup
      // inside load_page_chunks compiles to other SASS, not timed).
      int const chunk_keys = params.page_wide ? int(Traits::WideChunk::kKeys) : int(Traits::NarrowChunk::kKeys);
      // (The sequence's values by copy: C++17 lambdas cannot capture the
      // structured bindings above.)
      auto chunk_page = [&, seqlen_k = si.seqlen_k, batch = t.batch](int n) {
        return lane * chunk_keys < Traits::kBlockN ? page_of(params, seqlen_k, batch, n * Traits::kBlockN + lane * chunk_keys)
                                                   : params.num_pages;
      };

      CUTLASS_PRAGMA_NO_UNROLL
      for (int n = w.n_end - 1; n >= w.n_begin; --n) {
        // Only the leader waits for a stage and arms its barrier with the
        // block's bytes. (Other lanes must not wait on the pipeline's
        // barriers: a lane that falls two phases behind waits on the parity
        // of a phase that never completes again, and the CTA hangs.)
        if (!paged) {  // the leader alone runs this loop
          // K is issued as soon as its stage is free: V's frees later (after P·V).
          int const stage = write_state.index();
          if constexpr (kRole != kV) {
            pipeline_k.producer_acquire(write_state);
            // One armed copy a block serves both slices when the pair straddles two heads.
            auto const load_k = params.tma_k.with(*pipeline_k.producer_get_barrier(write_state), mask, l2_hint_kv<Traits::kFoldSplits>());
            copy(load_k, tKgK(_, _, _, n), tKsK(_, _, _, stage));
            if (Traits::kPairsMayStraddle && !shared_kv) copy(load_k, tKgK_other(_, _, _, n), tKsK_other(_, _, _, stage));
          }
          if constexpr (kRole != kQK) {
            pipeline_v.producer_acquire(write_state);
            auto const load_v = params.tma_v.with(*pipeline_v.producer_get_barrier(write_state), mask, l2_hint_kv<Traits::kFoldSplits>());
            copy(load_v, tVgV(_, _, _, n), tVsV(_, _, _, stage));
            if (Traits::kPairsMayStraddle && !shared_kv) copy(load_v, tVgV_other(_, _, _, n), tVsV_other(_, _, _, stage));
          }
        } else if constexpr (Traits::kServing && kRole == kBoth) {
          int const page = chunk_page(n);  // in flight while the leader waits for the stage
          if (params.page_wide) {
            load_page_chunks<typename Traits::WideChunk>(params, params.page_tma_wide, storage, pipeline_k,
                                                         pipeline_v, write_state, head_kv, n, lane, page);
          } else {
            load_page_chunks<typename Traits::NarrowChunk>(params, params.page_tma_narrow, storage, pipeline_k,
                                                           pipeline_v, write_state, head_kv, n, lane, page);
          }
        }
        ++write_state;
      }
    }
    // Keep the CTA alive until the consumers have released every stage.
    if (leader) {
      if constexpr (kRole != kV) pipeline_k.producer_tail(write_state);
      if constexpr (kRole != kQK) pipeline_v.producer_tail(write_state);
    }
  }
};

}  // namespace flashcore::sm90
