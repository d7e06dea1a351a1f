// Consumer side of the mainloop, run by each consumer warpgroup on its 64
// query rows of the tile. Key blocks are visited from the last to the first,
// so the blocks that need element masking (the diagonal, the seqlen_k tail)
// come first and the loop body after them is mask-free.
//
// Overlap inside a warpgroup (kOverlapSoftmax: 64-row tiles, one consumer
// warpgroup, and the two-warpgroup kernels that issue without turns: head
// dim 256, and head dim 128's kNoTurns_ kernels):
// while the tensor cores compute S_j = Q·K_jᵀ and O += P_{j-1}·V_{j-1} (both
// issued asynchronously), the warpgroup waits only for S_j, runs the softmax
// of block j, then waits for the P·V product. The softmax of one block thus
// hides under the P·V of the previous one. A lone warpgroup rescales O for
// block j's row maxima between the issue of S_{j+1} and that of P_j·V_j,
// under the Q·Kᵀ product (head dim 256's, right after the P·V wait): the
// same operations in the same order either way (O·r_j + P_j·V_j), so every
// tile shape gives bitwise the same rows. With two or three consumer
// warpgroups taking turns (128- and 192-row tiles below head dim 256) each
// one's softmax runs while the tensor cores work on the others' products,
// after its own products are done; three warpgroups also rescale O under
// the Q·Kᵀ (kRescaleInTurn).
#pragma once

#include <cute/tensor.hpp>

#include "sm90/chunk_fold.h"
#include "sm90/kernel_params.h"
#include "sm90/mask.h"
#include "sm90/softmax.h"
#include "sm90/wgmma_utils.h"

namespace flashcore::sm90 {

using namespace cute;

template <class Traits>
struct MainloopMma {
  using Element = typename Traits::Element;
  using Params = KernelParams<Traits>;
  using Storage = typename Traits::SharedStorage;
  using PipelineKV = typename Traits::PipelineKV;
  using PipelineState = typename Traits::PipelineState;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kNumWG = Traits::kNumMmaWarpGroups;
  // Named barriers 1..kNumWG (0 is the epilogue's, kNumWG+1.. the O stores':
  // epilogue.h): barrier 1 + w opens warpgroup w's turn to issue WGMMAs.
  // CUTLASS's NamedBarrier adds its 8 reserved ids, so the hardware ids are
  // 8..14 with three consumer warpgroups; a fourth would need id 16 of 0..15.
  static constexpr int kTurnBarrier = 1;
  // Whether the softmax of block j overlaps the P·V product of block j-1
  // (header comment): in every kernel without ping-pong turns. With turns,
  // the other warpgroups' products already fill the tensor cores during one's
  // softmax, and adding the overlap made 128-row tiles 2-11% slower on an
  // H100 (fp16/bf16, head dims 64-256, causal and not), while it made 64-row
  // tiles 6-7% faster at batch 1 (same-run A/B in
  // bench/results/2026-11-22d-h100/mainloop-variants.txt). Head dim 256's
  // two warpgroups issue freely (kernel_traits.h kPingPong); with the
  // overlap they are 4.6-13% faster from 1k tokens than when each waited for
  // its P·V before issuing its next Q·Kᵀ, level at 512 (same-run A/B, three
  // rounds: bench/results/2026-11-26f-h100/ab2-d256-overlap-table.txt).
  // Head dim 128's kernels without turns take the same form (kernel_traits.h
  // kNoTurns_; where they are faster: tuning_table.h tuned_no_turns). Both
  // products in flight then hold S_j+1 and P_j at once: all 240 registers
  // in the 80-key kernels, which hold nothing else across the key loop
  // (kernel_traits.h kLeanTileState).
  static constexpr bool kOverlapSoftmax = !Traits::kPingPong;
  // Where O is rescaled for a block's row maxima: after the P·V wait
  // (outside the turns), or between the issue of the next Q·Kᵀ and that of
  // the P·V, under the Q·Kᵀ product. The same operations in the same order
  // (O·r_j, then + P_j·V_j), so the bits do not change. The lone warpgroup
  // does it under the Q·Kᵀ. So do three warpgroups taking turns: 1.3-2.8%
  // faster than after the wait on head dim 64's 192-row tiles, without a
  // mask and causal from 2k tokens; with two, whose turns it lengthens, 1-2%
  // slower at head dim 128 (same-run A/B, three rounds:
  // bench/results/2026-11-25e-h100/ab4-rescale-in-turn-table.txt). Head dim
  // 256's two warpgroups rescale after the wait: under the Q·Kᵀ the rescale
  // keeps O, S and P live at once, the 80-key kernels spill 64-68 bytes,
  // and every cell was 1-3.3% slower (same-run A/B, three rounds:
  // bench/results/2026-11-26g-h100/ab2-d256-rit-medians.txt).
  static constexpr bool kRescaleInTurn = kNumWG != 2;

  // The key loop waits for block j-1's V only once block j's Q·Kᵀ is
  // issued (it needs only K), so a late V no longer holds that product
  // back; with kIssueAhead the next tile's Q and first K are likewise
  // waited for only once this tile's last P·V is issued. Same-run A/B on
  // the H200, three rounds, output bits identical
  // (bench/results/2026-11-29g-h200/call5/late-waits-*, `kv` against
  // `base`): head dim 64's 128-row issue-ahead kernel 1.6% faster at the
  // FA3 grid's causal 512 cell (every round), 4.3% at unmasked 512 (the
  // `m128` override), 1.1% causal 2k (`m128`), 1.2% fp16 B32 H16 S128
  // causal; the two-CTA 64-row kernel 0.5-0.9% at B8 H16 S128. The 192-row
  // kernels were level to 0.8% slower with the late V wait (unmasked 512
  // +0.6-0.8%), so they keep the early one: every kernel but those (three
  // warpgroups) has the late waits. Timed for the others with
  // FLASHCORE_LATE_WAITS=2 (bench/results/2026-11-29h-h200/): head dims
  // 128 and 256's plain 128-row kernels (call1/ab1) unmasked 512 1.2% and
  // 1.0% faster, every round, causal 512, unmasked 1k and 16k within 0.3%;
  // the one-CTA 64-row tile (call4) fp16 B1 H16 S512 1.5% faster unmasked
  // and causal, causal 1k 2.7%; the serving kernels (call4, bf16 decode, 32
  // query on 8 KV heads, head dim 128) batch 1 with 4k keys 0.8-1.0%,
  // batch 16 and 64 level (paged batch 16 +0.2%). The 96-dim tile was not
  // timed (the same loop as head dim 128's). FLASHCORE_LATE_WAITS=0 builds
  // without them (the A/B baseline), =2 with them in every kernel; the same
  // bits either way.
#ifndef FLASHCORE_LATE_WAITS
#define FLASHCORE_LATE_WAITS 1
#endif
  static constexpr bool kLateWaits =
      FLASHCORE_LATE_WAITS == 2 ||
      (FLASHCORE_LATE_WAITS == 1 && kNumWG != 3);

  // A warpgroup whose rows all end in the first half of the tile's first
  // visited key block (Traits::kHalfFirstQK): on a causal mask with
  // 128-row tiles and 128-key blocks, the warpgroup of a tile's first 64
  // rows on its diagonal block. Its Q·Kᵀ there covers only the block's
  // first half (64 keys: the first half of the accumulator's registers, a
  // 64 x 64 WGMMA on the first 64 rows of the K stage), and the second half
  // is set to -inf, which the mask would write there anyway: the same bits,
  // half of that product's work, and a shorter lone first Q·Kᵀ. The P·V
  // stays whole (its second half multiplies zeros). Each path waits for its
  // product before the join (C7515 otherwise); the -inf comes after it (set
  // inside the half path, it made ptxas serialize the WGMMAs: C7511).
  static constexpr bool kHalfFirstQK = Traits::kHalfFirstQK;
  // kernel_traits.h kSkipMaskedBlocks (three warpgroups, one CTA): a
  // warpgroup whose rows end before the tile's last row's key block passes
  // over the blocks past its own (run). Turns and stage releases stay one
  // a block for every warpgroup; no product is in flight then.
  static constexpr bool kSkipMaskedBlocks = Traits::kSkipMaskedBlocks;
  static_assert(!kSkipMaskedBlocks || (Traits::kPingPong && !Traits::kIssueAhead && !kHalfFirstQK && !Traits::kHalfO),
                "passing over blocks: turns, no product carried in, Q released by the caller");
  static_assert(!kHalfFirstQK || !Traits::kFrontPad, "the half first Q·Kᵀ takes m_block * kBlockM as its first row");

  // Rows of the tile one thread holds (2 per 64-row WGMMA atom).
  static constexpr int kRows = 2;
  using Softmax = OnlineSoftmax<kRows, Traits::kPinnedSoftmax>;  // kernel_traits.h

  // The next tile's first Q·Kᵀ, issued in this tile's last turn right after
  // its last P·V (Traits::kIssueAhead): the warpgroup writes this tile's O
  // while that product runs, and the next tile starts like any other key
  // block instead of with a lone Q·Kᵀ. Every tile then takes the same path
  // (which ptxas needs to keep the WGMMAs asynchronous: a join of paths where
  // the scores are and are not in flight makes it copy the registers and
  // serialize every WGMMA, C7515): the first tile's first Q·Kᵀ is issued
  // before the tile loop (issue_first_qk), the last tile's "next" one on
  // this tile's Q and a K stage nobody fills again (never read), and a fully
  // masked query block visits one masked key block (seq_info.h tile_work).
  struct Ahead {
    bool has_next = false;  // false: the Q·Kᵀ runs on this tile's Q and stale K, never read
    int q_iter = 0;         // the next tile's Q (kernel_traits.h q_buffer, wait_q)
  };

  // The scores' accumulator: created by the caller, as with kIssueAhead it
  // carries a Q·Kᵀ in flight from one tile to the next.
  CUTE_DEVICE static auto make_fragment_s() {
    typename Traits::TiledMmaQK tiled_mma_qk;
    return partition_fragment_C(tiled_mma_qk, select<0, 1>(typename Traits::TileShapeQK{}));
  }

  // kIssueAhead, before the first tile: its first Q·Kᵀ, in its own turn.
  template <class FragS>
  CUTE_DEVICE static void issue_first_qk(Storage& storage, PipelineKV& pipeline_k, PipelineState const& read_state,
                                         Element* q_smem, int mma_thread, FragS& tSrS) {
    typename Traits::TiledMmaQK tiled_mma_qk;
    auto thr_qk = tiled_mma_qk.get_thread_slice(mma_thread);
    Tensor sQ = make_tensor(make_smem_ptr(q_smem), typename Traits::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(storage.smem_k.data()), typename Traits::SmemLayoutK{});
    Tensor tSrQ = thr_qk.partition_fragment_A(sQ);
    Tensor tSrK = thr_qk.partition_fragment_B(sK);
    pipeline_k.consumer_wait(read_state);
    int const wg = mma_thread / cutlass::NumThreadsPerWarpGroup;
    cutlass::arch::NamedBarrier::sync(2 * cutlass::NumThreadsPerWarpGroup, kTurnBarrier + wg);
    wgmma_tile</*zero_init=*/true, /*wait=*/-1>(tiled_mma_qk, tSrQ, tSrK(_, _, _, read_state.index()), tSrS);
    cutlass::arch::NamedBarrier::arrive(2 * cutlass::NumThreadsPerWarpGroup, kTurnBarrier + (wg + 1) % kNumWG);
  }

  // Before the first tile: hands the first turn to warpgroup 0.
  CUTE_DEVICE static void prime_turns(int mma_thread) {
    if constexpr (Traits::kPingPong) {
      if (mma_thread / cutlass::NumThreadsPerWarpGroup == kNumWG - 1) {
        cutlass::arch::NamedBarrier::arrive(2 * cutlass::NumThreadsPerWarpGroup, kTurnBarrier);
      }
    }
  }

  // With one Q buffer and O staged outside it (kernel_traits.h kHalfO), the
  // buffer is released as soon as the tile's last Q·Kᵀ is done, so the next
  // tile's Q loads under the last softmax, P·V and the epilogue: 3-5% faster
  // on head dim 256's 64-key cells than releasing it after run
  // (bench/results/2026-11-25c-h100/ab4-d256-early-q-free-table.txt). With
  // two Q buffers the next Q is a whole tile ahead anyway, and the kernel
  // releases after run.
  static constexpr bool kEarlyQFree = Traits::kHalfO;

  // Releases stage `s` of a K or V ring to the producers. With K/V multicast
  // (kClusterM > 1) every CTA of the cluster writes into this stage, so each
  // warpgroup arrives once on each CTA's empty barrier: lane 0 of its warp r
  // on CTA r (the arrival count CUTLASS's pipeline sets for a cluster, one a
  // consumer warpgroup and CTA). CUTLASS's consumer_release spreads the same
  // arrivals over the warpgroup but keeps its target and predicate in
  // registers per pipeline, which spilled the 240-register consumers; these
  // are recomputed from the thread index instead.
  CUTE_DEVICE static void release(PipelineKV& pipe, typename PipelineKV::SharedStorage& ring,
                                  PipelineState const& s, int mma_thread) {
    if constexpr (Traits::kClusterM == 1) {
      pipe.consumer_release(s);
    } else if constexpr (Traits::kLeanTileState) {
      // The warpgroup's first thread arrives on every CTA's barrier: a
      // predicate and constant targets, no register held through the loop.
      bool const leader = threadIdx.x % cutlass::NumThreadsPerWarpGroup == 0;
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < Traits::kClusterM; ++c) ring.empty_barrier_[s.index()].arrive(uint32_t(c), uint32_t(leader));
    } else {
      int const t = mma_thread % cutlass::NumThreadsPerWarpGroup;
      ring.empty_barrier_[s.index()].arrive(uint32_t(t / 32), uint32_t(t % 32 == 0 && t / 32 < Traits::kClusterM));
    }
  }

  // Q's WGMMA descriptors for the key loop's Q·Kᵀ. ptxas hoists one 64-bit
  // descriptor per k-step out of the loop into vector registers (16
  // registers at head dim 128, 32 at 256) and moves each into uniform
  // registers with two R2UR before its HGMMA. With
  // Traits::kFreshQDescriptors the base descriptor is read again through a
  // shuffle (which ptxas leaves in the loop): it is moved once and each
  // k-step's is a UIADD3 on it, as K's are. The same descriptors, so the
  // same bits. The other kernels keep the hoisted form (tSrQ itself).
  template <class TQ>
  CUTE_DEVICE static auto loop_q(TQ const& tSrQ) {
    if constexpr (Traits::kFreshQDescriptors) {
      auto it = tSrQ.data();
      it.desc_.reg32_[0] = __shfl_sync(0xffffffff, it.desc_.reg32_[0], 0);
      return make_tensor(it, tSrQ.layout());
    } else {
      return tSrQ;
    }
  }

  // O·r for columns [kBegin, kEnd) of O's (row, col) view: each row times
  // its block's rescale factor.
  template <int kBegin, int kEnd, class TO>
  CUTE_DEVICE static void rescale_cols(TO& o_rc, float const (&rescale)[kRows]) {
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTLASS_PRAGMA_UNROLL
      for (int c = kBegin; c < kEnd; ++c) o_rc(r, c) *= rescale[r];
    }
  }

  // Runs the whole key loop for one tile; leaves O (unnormalized) in tOrO and
  // the row statistics in softmax. n_min < n_max is required. With
  // kEarlyQFree every consumer thread arrives on q_free after its last Q·Kᵀ.
  //
  // Split-KV in one CTA (chunk_fold.h, one-warpgroup serving kernels): when
  // the walk enters a new chunk, the softmax restarts for it (the previous
  // chunk's statistics kept aside), and once the previous chunk's last P·V
  // is done, that chunk is merged and O restarts. (Merging before the
  // softmax, behind a wait of its own, made ptxas serialize every WGMMA:
  // C7514.) The last chunk is merged by the caller.
  //
  // With Traits::kIssueAhead the tile's first Q·Kᵀ is already in flight into
  // tSrS_ahead, and run returns with the next tile's in flight (Ahead); O is
  // cleared here, after the first wait, and must not be written until then.
  // The other kernels keep their scores in run's own fragment (a caller's,
  // live across tiles, made ptxas spill 4 bytes in head dim 64's 192-row
  // multicast kernel).
  template <class FragO, class FragS, class Fold>
  CUTE_DEVICE static void run(BlockMask<kBlockM, kBlockN, Traits::kFrontPad> const& mask, Storage& storage,
                              PipelineKV& pipeline_k, PipelineKV& pipeline_v, PipelineState& read_state,
                              Element* q_smem, int mma_thread, int m_block, int n_min, int n_max, FragO& tOrO,
                              FragS& tSrS_ahead, Softmax& softmax, cutlass::arch::ClusterBarrier& q_free, Fold& fold,
                              Ahead const& ahead) {
    static_assert(!Fold::kEnabled || kOverlapSoftmax, "the chunk fold is placed in the one-warpgroup loop");
    static_assert(!Traits::kIssueAhead || (Traits::kPingPong && !kEarlyQFree && !Fold::kEnabled));
    typename Traits::TiledMmaQK tiled_mma_qk;
    typename Traits::TiledMmaPV tiled_mma_pv;
    auto thr_qk = tiled_mma_qk.get_thread_slice(mma_thread);
    auto thr_pv = tiled_mma_pv.get_thread_slice(mma_thread);

    Tensor sQ = make_tensor(make_smem_ptr(q_smem), typename Traits::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(storage.smem_k.data()), typename Traits::SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(storage.smem_v.data()), typename Traits::SmemLayoutVt{});
    Tensor tSrQ = thr_qk.partition_fragment_A(sQ);
    Tensor tSrK = thr_qk.partition_fragment_B(sK);   // (MMA, MMA_N, MMA_K, stages)
    Tensor tOrV = thr_pv.partition_fragment_B(sVt);  // (MMA, MMA_N, MMA_K, stages)

    FragS tSrS_own = make_fragment_s();
    FragS& tSrS = Traits::kIssueAhead ? tSrS_ahead : tSrS_own;
    Tensor s_rc = make_tensor(tSrS.data(), acc_layout_rowcol(tSrS.layout()));
    Tensor o_rc = make_tensor(tOrO.data(), acc_layout_rowcol(tOrO.layout()));
    Tensor cS = make_identity_tensor(select<0, 1>(typename Traits::TileShapeQK{}));
    Tensor tScS = thr_qk.partition_C(cS);
    Tensor coord_rc = make_tensor(tScS.data(), acc_layout_rowcol(tScS.layout()));

    float rescale[kRows];
    int const wg = mma_thread / cutlass::NumThreadsPerWarpGroup;
    // Every batch of WGMMAs is issued inside this warpgroup's turn.
    auto turn_begin = [&] {
      if constexpr (Traits::kPingPong) {
        cutlass::arch::NamedBarrier::sync(2 * cutlass::NumThreadsPerWarpGroup, kTurnBarrier + wg);
      }
    };
    auto turn_end = [&] {
      if constexpr (Traits::kPingPong) {
        cutlass::arch::NamedBarrier::arrive(2 * cutlass::NumThreadsPerWarpGroup, kTurnBarrier + (wg + 1) % kNumWG);
      }
    };

    // P lives in rP (the accumulator's register order); tOrP views the same
    // registers as the A operand of O += P·V.
    Tensor rP = make_tensor<Element>(tSrS.layout());
    Tensor tOrP = make_tensor(rP.data(), acc_layout_as_a_operand(tSrS.layout()));

    if constexpr (kSkipMaskedBlocks) {
      // The tile's last block is masked for all of this warpgroup's rows:
      // the warpgroup takes an empty turn for it (the others' products go on
      // in the same round), releases its stages once loaded, and starts at
      // the block before. Its rows end at most kBlockM - 64 <= kBlockN rows
      // before the tile's, so their keys at most one block before. A row's
      // result is the same (a wholly masked block leaves nothing in O and
      // the statistics), as with 64-row tiles.
      static_assert(kBlockM - 64 <= kBlockN, "at most one block to pass over");
      if (mask.warpgroup_n_end(m_block, wg, n_min, n_max) < n_max) {
        turn_begin();
        turn_end();
        pipeline_k.consumer_wait(read_state);
        release(pipeline_k, storage.pipeline_k, read_state, mma_thread);
        pipeline_v.consumer_wait(read_state);
        release(pipeline_v, storage.pipeline_v, read_state, mma_thread);
        ++read_state;
        --n_max;
      }
    }

    // First (last-in-sequence) key block: S, mask, softmax.
    int n = n_max - 1;
    bool half = false;
    if constexpr (kHalfFirstQK) {
      // Whether this warpgroup's last row sees no key of the block's second half.
      half = mask.last_key(mask.warpgroup_last_row(m_block, wg)) < n * kBlockN + kBlockN / 2;
    }
    if constexpr (!Traits::kIssueAhead) {
      pipeline_k.consumer_wait(read_state);
      turn_begin();
      if (half) {  // kHalfFirstQK kernels only
        if constexpr (kHalfFirstQK) {
          typename Traits::TiledMmaQKHalf tiled_mma_half;
          auto thr_half = tiled_mma_half.get_thread_slice(mma_thread);
          Tensor sK_half = local_tile(sK, Shape<Int<kBlockN / 2>, Int<Traits::kHeadDim>, Int<Traits::kStages>>{},
                                      make_coord(_0{}, _0{}, _0{}));
          Tensor tSrQ_half = thr_half.partition_fragment_A(sQ);
          Tensor tSrK_half = thr_half.partition_fragment_B(sK_half);
          Tensor tSrS_half = make_tensor(
              tSrS.data(), partition_fragment_C(tiled_mma_half, Shape<Int<kBlockM>, Int<kBlockN / 2>>{}).layout());
          static_assert(decltype(size(tSrS_half))::value * 2 == decltype(size(tSrS))::value,
                        "the half block's scores are the first half of the accumulator's registers");
          wgmma_tile<true, -1>(tiled_mma_half, tSrQ_half, tSrK_half(_, _, _, read_state.index()), tSrS_half);
          turn_end();
          warpgroup_wait<0>();
        }
      } else {
        wgmma_tile</*zero_init=*/true, /*wait=*/-1>(tiled_mma_qk, tSrQ, tSrK(_, _, _, read_state.index()), tSrS);
        turn_end();
        if constexpr (kHalfFirstQK) warpgroup_wait<0>();  // each path waits before the join
      }
    }
    warpgroup_wait<0>();
    if constexpr (kHalfFirstQK) {
      if (half) {  // the keys of the second half, masked for all of its rows
        float const neg_inf = -cutlass::platform::numeric_limits<float>::infinity();
        CUTLASS_PRAGMA_UNROLL
        for (int i = size(tSrS) / 2; i < size(tSrS); ++i) tSrS(i) = neg_inf;
      }
    }
    if constexpr (Traits::kIssueAhead) {
      warpgroup_fence_operand(tSrS);
      clear(tOrO);
    }
    release(pipeline_k, storage.pipeline_k, read_state, mma_thread);
    // Q·Kᵀ of key block n done: after the tile's last one, Q's buffer is free.
    auto q_read = [&](int n_done) {
      if constexpr (kEarlyQFree) {
        if (n_done == n_min) q_free.arrive();
      }
    };
    q_read(n);
    if (mask.needs_mask(m_block, n)) mask.template apply_block<Traits::kCompactMask>(s_rc, coord_rc, m_block, n);
    softmax.step(s_rc, rescale);
    convert_into(tSrS, rP);

    auto rescale_o = [&] { rescale_cols<0, decltype(size<1>(o_rc))::value>(o_rc, rescale); };

    for (--n; n >= n_min; --n) {
      PipelineState next_state = read_state;
      ++next_state;
      pipeline_k.consumer_wait(next_state);
      if constexpr (!kLateWaits) pipeline_v.consumer_wait(read_state);
      turn_begin();
      wgmma_tile<true, -1>(tiled_mma_qk, loop_q(tSrQ), tSrK(_, _, _, next_state.index()), tSrS);
      if constexpr (kLateWaits) pipeline_v.consumer_wait(read_state);
      if constexpr (kRescaleInTurn) rescale_o();  // for the previous block's maxima, before its P·V
      wgmma_tile<false, -1>(tiled_mma_pv, tOrP, tOrV(_, _, _, read_state.index()), tOrO);
      turn_end();
      warpgroup_wait<1>();  // S_j is ready; P·V of the previous block still running
      release(pipeline_k, storage.pipeline_k, next_state, mma_thread);
      q_read(n);
      if (mask.needs_mask(m_block, n)) mask.template apply_block<Traits::kCompactMask>(s_rc, coord_rc, m_block, n);
      bool const new_chunk = fold.starts_chunk(n);
      Softmax ended = softmax;  // the previous chunk's statistics, when block n starts a new one
      if (new_chunk) softmax.restart();
      softmax.step(s_rc, rescale);
      // ptxas schedules within a basic block and would hoist the wait below
      // (it has no register operands) above the softmax, which then runs only
      // after the P·V product it is meant to overlap: end the block here.
      if constexpr (kOverlapSoftmax) basic_block_boundary(n);
      warpgroup_wait<0>();  // P·V done: P and V_j-1 may be reused
      release(pipeline_v, storage.pipeline_v, read_state, mma_thread);
      if constexpr (Fold::kEnabled) {
        if (new_chunk) fold.merge(tOrO, ended);  // that chunk's last P·V is in O
      }
      if constexpr (!kRescaleInTurn) rescale_o();  // O·r_j, then + P_j·V_j
      convert_into(tSrS, rP);
      read_state = next_state;
    }

    pipeline_v.consumer_wait(read_state);
    if constexpr (Traits::kIssueAhead) {
      // This tile's last P·V and the next tile's first Q·Kᵀ, in one turn.
      PipelineState next_state = read_state;
      ++next_state;
      // The next tile's Q and first K; with kLateWaits (above) waited for
      // once this tile's last P·V is issued, so that a late K (a new head's
      // first block, from DRAM) does not hold that product back.
      auto wait_next = [&] {
        if (ahead.has_next) {
          Traits::wait_q(storage, ahead.q_iter);
          pipeline_k.consumer_wait(next_state);
        }
      };
      if constexpr (!kLateWaits) wait_next();
      Element* const q_next = ahead.has_next ? Traits::q_buffer(storage, ahead.q_iter) : q_smem;
      Tensor tSrQn = thr_qk.partition_fragment_A(make_tensor(make_smem_ptr(q_next), typename Traits::SmemLayoutQ{}));
      turn_begin();
      if constexpr (kRescaleInTurn) rescale_o();
      wgmma_tile<false, -1>(tiled_mma_pv, tOrP, tOrV(_, _, _, read_state.index()), tOrO);
      if constexpr (kLateWaits) wait_next();
      wgmma_tile<true, -1>(tiled_mma_qk, tSrQn, tSrK(_, _, _, next_state.index()), tSrS);
      turn_end();
      warpgroup_wait<1>();  // the P·V; the next Q·Kᵀ runs on under the epilogue
      warpgroup_fence_operand(tOrO);
    } else {
      turn_begin();
      if constexpr (kRescaleInTurn) rescale_o();
      wgmma_tile<false, -1>(tiled_mma_pv, tOrP, tOrV(_, _, _, read_state.index()), tOrO);
      turn_end();
      warpgroup_wait<0>();
    }
    release(pipeline_v, storage.pipeline_v, read_state, mma_thread);
    ++read_state;
  }
};

}  // namespace flashcore::sm90
