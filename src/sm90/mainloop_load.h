// Producer side of the mainloop: one thread of the producer warp issues every
// TMA load of the CTA. Q is loaded once per tile, as soon as the previous tile
// has freed the Q buffer; K and V go through two kStages-deep rings guarded by the sm90
// TMA pipelines, in the order the consumers read them (last key block first).
//
// Varlen sequences are addressed by offsetting the packed tensors' row
// coordinate; a paged KV cache is read 16 keys at a time from the page the
// block table names (kernel_traits.h: kChunk). Keys past a sequence's end are
// loaded from outside the pool, which TMA fills with zeros.
#pragma once

#include <cute/tensor.hpp>

#include "sm90/kernel_params.h"
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
  static constexpr int kChunk = Traits::kChunk;
  static constexpr int kChunks = Traits::kBlockN / kChunk;

  CUTE_DEVICE static void run(Params const& params, Storage& storage, PipelineKV& pipeline_k,
                              PipelineKV& pipeline_v) {
    Tensor sK = make_tensor(make_smem_ptr(storage.smem_k.data()), typename Traits::SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(storage.smem_v.data()), typename Traits::SmemLayoutVt{});
    SeqParams const& seq = params.seq;
    bool const varlen_q = Traits::kServing && seq.cu_seqlens_q != nullptr;
    bool const varlen_k = Traits::kServing && seq.cu_seqlens_k != nullptr;
    bool const paged = Traits::kServing && params.block_table != nullptr;

    Tensor mQ = params.tma_q.get_tma_tensor(make_shape(varlen_q ? seq.total_q : seq.seqlen_q, params.head_dim,
                                                       params.heads_q, varlen_q ? 1 : params.batch));
    int32_t const k_rows = varlen_k ? seq.total_k : seq.seqlen_k;
    int32_t const k_batch = varlen_k ? 1 : params.batch;
    Tensor mK = params.tma_k.get_tma_tensor(make_shape(k_rows, params.head_dim, params.heads_kv, k_batch));
    Tensor mVt = params.tma_v.get_tma_tensor(make_shape(params.head_dim, k_rows, params.heads_kv, k_batch));
    Tensor mKp = params.tma_k_chunk.get_tma_tensor(
        make_shape(params.page_size, params.head_dim, params.heads_kv, params.num_pages));
    Tensor mVp = params.tma_v_chunk.get_tma_tensor(
        make_shape(params.head_dim, params.page_size, params.heads_kv, params.num_pages));

    auto tma_q = params.tma_q.get_slice(_0{});
    auto tma_k = params.tma_k.get_slice(_0{});
    auto tma_v = params.tma_v.get_slice(_0{});
    auto tma_kc = params.tma_k_chunk.get_slice(_0{});
    auto tma_vc = params.tma_v_chunk.get_slice(_0{});
    Tensor tKsK = tma_k.partition_D(sK);
    Tensor tVsV = tma_v.partition_D(sVt);

    StaticTileScheduler<Params> scheduler{params};
    PipelineState write_state = cutlass::make_producer_start_state<PipelineKV>();

    int iter = 0, q_iter = 0;
    // No unrolling here: the producer runs on few registers (setmaxnreg), and
    // unrolled copies of the loop would spill.
    CUTLASS_PRAGMA_NO_UNROLL
    for (int tile = scheduler.tile_at(iter); scheduler.valid(tile); tile = scheduler.tile_at(++iter)) {
      TileCoord t = scheduler.decode(tile);
      SeqInfo const si = seq_info<Traits::kServing>(seq, t.batch);
      TileWork const w = tile_work<Traits::kBlockM, Traits::kBlockN, Traits::kServing>(seq, si, t.unit);
      if (!w.active) continue;
      int head_kv = t.head / params.group;
      Tensor gQ = local_tile(domain_offset(make_coord(si.q_offset, _0{}), mQ(_, _, t.head, varlen_q ? 0 : t.batch)),
                             select<0, 2>(typename Traits::TileShapeQK{}), make_coord(w.m_block, _0{}));
      Tensor gK = local_tile(domain_offset(make_coord(si.k_offset, _0{}), mK(_, _, head_kv, varlen_k ? 0 : t.batch)),
                             select<1, 2>(typename Traits::TileShapeQK{}), make_coord(_, _0{}));  // (N, D, n_blocks)
      Tensor gVt = local_tile(domain_offset(make_coord(_0{}, si.k_offset), mVt(_, _, head_kv, varlen_k ? 0 : t.batch)),
                              select<1, 2>(typename Traits::TileShapePV{}), make_coord(_0{}, _));  // (D, N, n_blocks)
      Tensor tQgQ = tma_q.partition_S(gQ);
      Tensor tKgK = tma_k.partition_S(gK);
      Tensor tVgV = tma_v.partition_S(gVt);

      // The tile that last used this Q buffer is done with it (kernel_traits.h).
      int const qb = q_iter % Traits::kQStages, use = q_iter / Traits::kQStages;
      if (use > 0) storage.barrier_q_free[qb].wait((use - 1) & 1);
      Tensor sQ = make_tensor(make_smem_ptr(Traits::q_buffer(storage, q_iter)), typename Traits::SmemLayoutQ{});
      storage.barrier_q[qb].arrive_and_expect_tx(Traits::kBytesQ);
      copy(params.tma_q.with(reinterpret_cast<uint64_t&>(storage.barrier_q[qb]), 0), tQgQ, tma_q.partition_D(sQ));
      ++q_iter;

      CUTLASS_PRAGMA_NO_UNROLL
      for (int n = w.n_end - 1; n >= w.n_begin; --n) {
        if (!paged) {
          pipeline_k.producer_acquire(write_state);
          copy(params.tma_k.with(*pipeline_k.producer_get_barrier(write_state), 0),
               tKgK(_, _, _, n), tKsK(_, _, _, write_state.index()));
          pipeline_v.producer_acquire(write_state);
          copy(params.tma_v.with(*pipeline_v.producer_get_barrier(write_state), 0),
               tVgV(_, _, _, n), tVsV(_, _, _, write_state.index()));
        } else if constexpr (Traits::kServing) {
          // Chunk i of the block comes from the page holding its keys. Chunks
          // past the sequence (or past its block-table row) read page
          // num_pages: out of the pool, so TMA writes zeros there. K and V
          // chunks are issued together, and the block-table entry is looked
          // up once per page, not per chunk: the lookups are dependent
          // global loads on the producer's critical path (16 per 128-key
          // block before, half the block's memory time at page size 64).
          int const stage = write_state.index();
          int64_t const table_row = int64_t(t.batch) * params.block_table_stride;
          pipeline_k.producer_acquire(write_state);
          pipeline_v.producer_acquire(write_state);
          int cached_logical = -1, cached_page = params.num_pages;
          CUTLASS_PRAGMA_NO_UNROLL
          for (int i = 0; i < kChunks; ++i) {
            int const key = n * Traits::kBlockN + i * kChunk;
            int const logical = key / params.page_size;
            int const row = key - logical * params.page_size;
            if (logical != cached_logical) {
              cached_logical = logical;
              cached_page = logical < params.max_pages_per_seq ? load_index(params.block_table + table_row + logical)
                                                               : params.num_pages;
            }
            int const page = key < si.seqlen_k ? cached_page : params.num_pages;
            Tensor gk = local_tile(mKp(_, _, head_kv, page), Shape<Int<kChunk>, Int<Traits::kHeadDim>>{},
                                   make_coord(row / kChunk, _0{}));
            Tensor sk = make_tensor(make_smem_ptr(storage.smem_k.data() + Traits::k_chunk_offset(i, stage)),
                                    typename Traits::SmemLayoutKChunk{});
            copy(params.tma_k_chunk.with(*pipeline_k.producer_get_barrier(write_state), 0), tma_kc.partition_S(gk),
                 tma_kc.partition_D(sk));
            Tensor gv = local_tile(mVp(_, _, head_kv, page), Shape<Int<Traits::kHeadDim>, Int<kChunk>>{},
                                   make_coord(_0{}, row / kChunk));
            Tensor sv = make_tensor(make_smem_ptr(storage.smem_v.data() + Traits::v_chunk_offset(i, stage)),
                                    typename Traits::SmemLayoutVtChunk{});
            copy(params.tma_v_chunk.with(*pipeline_v.producer_get_barrier(write_state), 0), tma_vc.partition_S(gv),
                 tma_vc.partition_D(sv));
          }
        }
        ++write_state;
      }
    }
    // Keep the CTA alive until the consumers have released every stage.
    pipeline_k.producer_tail(write_state);
    pipeline_v.producer_tail(write_state);
  }
};

}  // namespace flashcore::sm90
