// Compile-time shape of one sm90 forward kernel instantiation: tile sizes,
// shared-memory layouts, the two tiled WGMMAs and the TMA copy types.
//
// Roles (one CTA = 1 producer warpgroup + kBlockM/64 consumer warpgroups):
//   producer warp:       TMA loads of Q (once per tile) and a kStages-deep ring
//                        of K and V tiles, completing on mbarriers;
//   consumer warpgroups: each owns 64 query rows of the tile; S = Q·Kᵀ from
//                        shared memory (SS WGMMA), online softmax in fp32 on
//                        the accumulator registers, O += P·V with P kept in
//                        registers as the A operand (RS WGMMA).
#pragma once

#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/collective/builders/sm90_common.inl>
#include <cutlass/pipeline/pipeline.hpp>

#include "sm90/tail_policy.h"

namespace flashcore::sm90 {

using namespace cute;

// kServing_: the serving variant (varlen, KV cache, paged KV, split-KV;
// head dims up to 128, and head dim 256 with 64-key blocks). Plain calls use
// the kernel without those paths, whose producer fits in 24 registers and
// whose consumers keep 240.
//
// kClusterM_ = 2: K/V multicast. Two CTAs of a cluster take tiles 2i and
// 2i+1 and walk as many key blocks in step; when the tiles are of one
// (batch, head), each CTA loads half of every K and V block through TMA
// multicast into both CTAs' rings: half the L2-to-SM traffic a FLOP
// (mainloop_load.h; pairs from two heads: kPairsMayStraddle). Only for plain
// calls without a mask whose tiles pair up (flash_fwd_launch.h refuses the
// rest; dispatch: tuning_table.h).
//
// kFold_: a one-warpgroup serving kernel that can also run a split
// sequence's chunks in one CTA (chunk_fold.h). The same tile without it
// serves every other serving call (across-CTA chunks, unsplit varlen and
// KV-cache calls): the fold's code, even where it does not run, cost about
// 0.3 us of a 14 us batch-1 decode (bench/results/2026-11-26-h100/ab2-*).
//
// kNoTurns_: two consumer warpgroups that issue without ping-pong turns,
// each running its softmax under its own P·V (kPingPong below), below head
// dim 256 where that is not already the only form. Same arithmetic, same
// bits; dispatch picks it by the key count (tuning_table.h tuned_no_turns).
template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, bool kServing_ = false,
          int kClusterM_ = 1, bool kFold_ = false, bool kNoTurns_ = false, int kCtasPerSm_ = 1>
struct KernelTraits {
  using Element = Element_;
  static constexpr bool kServing = kServing_;
  static_assert(!kServing || kHeadDim_ <= 128 || (kHeadDim_ == 256 && kBlockN_ == 64),
                "serving kernels: head dims up to 128, and head dim 256 with 64-key blocks");
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  // kCtasPerSm_ = 2: two CTAs share an SM, each one consumer warpgroup on
  // its own tiles (head dim 64's plain 64-row tile). Alone on an SM such a
  // warpgroup's own chain (Q·Kᵀ, softmax, P·V) leaves the tensor cores and
  // MUFU idle much of the time; a second CTA fills them, and its tiles start
  // and end independently. Each CTA gets half the SM: 128 registers a thread
  // at launch (24 producer / 232 consumer after setmaxnreg) and at most 113
  // KiB of shared memory, hence two K/V stages. Same arithmetic as the
  // one-CTA tile, same bits (GPU test TwoCtaKernelsMatchTheirOneCtaTwins).
  static constexpr int kCtasPerSm = kCtasPerSm_;
  static_assert(kCtasPerSm == 1 || (kCtasPerSm == 2 && kBlockM_ == 64 && !kServing_ && kClusterM_ == 1),
                "two CTAs an SM: plain one-warpgroup tiles");
  static constexpr int kStages = kStages_;
  static constexpr int kClusterM = kClusterM_;
  static_assert(kClusterM == 1 || (kClusterM == 2 && !kServing_), "K/V multicast: plain kernels, pairs of CTAs");
  using ClusterShape = Shape<Int<kClusterM>, _1, _1>;
  // K and V: each CTA of a cluster issues 1/kClusterM of a block, multicast to all.
  using TmaLoadKV = std::conditional_t<kClusterM == 1, SM90_TMA_LOAD, SM90_TMA_LOAD_MULTICAST>;
  static constexpr uint16_t kMulticastMask = uint16_t((1u << kClusterM) - 1);

  static constexpr int kNumMmaWarpGroups = kBlockM / 64;
  static constexpr int kNumMmaThreads = kNumMmaWarpGroups * cutlass::NumThreadsPerWarpGroup;
  static constexpr int kNumThreads = kNumMmaThreads + cutlass::NumThreadsPerWarpGroup;
  // One to three consumer warpgroups: the register split below is worked out for those.
  static_assert(kBlockM == 64 || kBlockM == 128 || kBlockM == 192);
  static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0);

  // Register split between the producer and the consumers (setmaxnreg). The
  // CTA's pool is what it launched with (65536 registers when one CTA fills
  // the SM): two consumer warpgroups (384 threads x 168) run 128 x 24 +
  // 256 x 240; the serving variant's producer needs 40 for the paged-KV and
  // varlen addressing without spilling, so it runs 128 x 40 + 256 x 232
  // (the split must add up to the 168 x 384 the CTA launched with: 24 / 240
  // or 40 / 232, nothing between in steps of 8); three consumer warpgroups
  // (512 x 128) run 128 x 32 + 384 x 160. (K/V
  // multicast at head dim 128 spilled 4-12 bytes in a 24-register producer
  // while V took 32 TMA loads a block; with one load a 64-dim slice,
  // SmemLayoutVt below, it fits 24 without spilling.) An
  // increase the pool cannot satisfy would block forever. With one consumer
  // warpgroup every thread already gets 255 registers at launch: no re-split.
  // Two one-warpgroup CTAs an SM (kCtasPerSm) launch with 128 registers a
  // thread (ptxas must report exactly that: the pool setmaxnreg splits) and
  // run 128 x 24 + 128 x 232.
  static constexpr bool kRegSplit = kNumMmaWarpGroups >= 2 || kCtasPerSm == 2;
  static_assert(!kServing || kNumMmaWarpGroups <= 2, "serving kernels: 64- and 128-row tiles");
  static constexpr int kProducerRegs = kNumMmaWarpGroups == 3 ? 32 : kServing ? 40 : 24;
  static constexpr int kConsumerRegs = kCtasPerSm == 2 ? 232 : kNumMmaWarpGroups == 3 ? 160 : kServing ? 232 : 240;
  // K/V multicast: whether a cluster's two tiles may belong to two heads
  // (mainloop_load.h then loads both slices of a block into one ring). That
  // spilled 16 bytes in a 24-register producer (head dim 256), whose
  // clusters only take calls with an even number of query blocks a head.
  static constexpr bool kPairsMayStraddle = kClusterM > 1 && kProducerRegs >= 32;
  // The masking code form that fits the consumers' registers (mask.h apply).
  static constexpr bool kCompactMask = kNumMmaWarpGroups == 3;

  // Inter-warpgroup ping-pong: the consumer warpgroups take turns issuing
  // their WGMMAs (named barriers), so one warpgroup's softmax runs while the
  // tensor cores work on the other's products. Not at head dim 256, whose
  // Q·Kᵀ steps are bound by shared-memory reads (docs/kernels.md): there
  // the two warpgroups issue freely, 1.3-3.5% faster without a mask
  // (512-8k tokens) and 0-2.3% slower causal than with turns, same-run A/B
  // in bench/results/2026-11-23c-h100/ab1-narrow-atoms-table.txt
  // (d256nt). Without turns each warpgroup overlaps its own softmax with
  // its P·V product instead (mainloop_mma.h kOverlapSoftmax).
  // Head dim 128's 128-row tile is also compiled without turns (kNoTurns_),
  // which dispatch takes from 1k keys, where it measured faster
  // (tuning_table.h tuned_no_turns).
  static constexpr bool kNoTurns = kNoTurns_;
  static_assert(!kNoTurns || (kNumMmaWarpGroups == 2 && kHeadDim < 256),
                "kNoTurns_: two consumer warpgroups that would otherwise take turns");
  static constexpr bool kPingPong = kNumMmaWarpGroups > 1 && kHeadDim < 256 && !kNoTurns;

  using TileShapeQK = Shape<Int<kBlockM>, Int<kBlockN>, Int<kHeadDim>>;
  using TileShapePV = Shape<Int<kBlockM>, Int<kHeadDim>, Int<kBlockN>>;
  using AtomLayoutMma = Layout<Shape<Int<kNumMmaWarpGroups>, _1, _1>>;

  // S = Q·Kᵀ: both operands K-major in shared memory.
  using TiledMmaQK = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockN>, Int<kHeadDim>>>(),
      AtomLayoutMma{}));
  // kHalfFirstQK (mainloop_mma.h): Q·Kᵀ over the first half of a key block.
  using TiledMmaQKHalf = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockN / 2>, Int<kHeadDim>>>(),
      AtomLayoutMma{}));
  // O += P·V: P from registers (K-major), V read as Vᵀ (head_dim-contiguous = MN-major).
  using TiledMmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, Int<kBlockN>>,
                           GMMA::Major::K, GMMA::Major::MN>(),
      AtomLayoutMma{}));

  // One wgmma instruction covers the whole key block (Q·Kᵀ) and the whole
  // head dim (P·V): CuTe's selectors fall back to narrower atoms for widths
  // they are not built with, which is valid but several times slower.
  // Checked in the device pass only: the host pass of a translation unit
  // compiles without CuTe's extended widths (tools/gen_sm90_kernels.py), and
  // host code never uses these two types (the kernel body, which does, is
  // device-only: flash_fwd_kernel.h).
#if defined(__CUDA_ARCH__)
  static_assert(size<1>(typename TiledMmaQK::AtomShape_MNK{}) == kBlockN,
                "Q*K^T atom narrower than the key block: this width needs "
                "CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED (tools/gen_sm90_kernels.py)");
  static_assert(size<1>(typename TiledMmaPV::AtomShape_MNK{}) == kHeadDim,
                "P*V atom narrower than the head dim: this width needs "
                "CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED (tools/gen_sm90_kernels.py)");
#endif

  using SmemAtomQ = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                             GMMA::Major::K, Element, Int<kBlockM>, Int<kHeadDim>>());
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtomQ{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));

  using SmemAtomK = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                             GMMA::Major::K, Element, Int<kBlockN>, Int<kHeadDim>>());
  using SmemLayoutK = decltype(tile_to_shape(
      SmemAtomK{}, Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));

  using SmemAtomVt = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                              GMMA::Major::MN, Element, Int<kHeadDim>, Int<kBlockN>>());
  // V's layout: each 64-dim slice of the head dim holds the whole key block
  // as one run of swizzle atoms (keys first, then dims), so a block of V is
  // one TMA box a slice (head dim 128: 2 loads a block, K alike), and a
  // paged chunk two. Until 2026-11-26 the slices were interleaved every 8
  // keys (Step<_1, _2, _3>, CuTe's default for the MN-major atom), which
  // split V into 8-key boxes: 32 loads a block at head dim 128, 40 at 256
  // with 80 keys. Same-run A/B on an H100, bf16, three rounds, output bits
  // identical (bench/results/2026-11-26d-h100/ab2-v-runs-table.txt, runs of
  // 8/32/64/128 keys: tools/variant-ab/patches/v-run.patch): whole-block
  // runs make head dim 128 8.5% faster at 512 tokens without a mask, 7.9%
  // at 1k, 4-4.5% causal at 512-1k, 2-2.5% causal from 2k to 16k and 1% at
  // 16k without a mask; head dim 256 2.6% at 512; 32- and 64-key runs gain
  // about as much; decode level.
  using SmemLayoutVt = decltype(tile_to_shape(
      SmemAtomVt{}, Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>{}, Step<_2, _1, _3>{}));

  static constexpr uint32_t kBytesQ = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kBytesKV = kBlockN * kHeadDim * sizeof(Element);

  // Shared-memory plan, decided by what fits in a CTA's share of the SM
  // (kSmemPerCta: 227 KiB with one CTA an SM, 113 with two):
  //  - O is staged for its TMA store in a buffer of its own when it fits, so
  //    the next tile's Q can be loaded while this tile still computes.
  //  - Q is double-buffered when that fits too: tile i+1's Q is loaded while
  //    tile i runs, so a new tile never waits for its Q.
  //  - Failing a buffer of its own, O may still be staged outside Q in
  //    half-width slices (64 rows x kHeadDim/2 a warpgroup, stored in two
  //    rounds): head dim 256 with 64-key blocks. Q's buffer is then free
  //    after the tile's last Q·Kᵀ (mainloop_mma.h kEarlyQFree). Same-run A/B
  //    on an H100 (bench/results/2026-11-25c-h100/ab3-d256-half-o-table.txt):
  //    3-6% faster than O through Q on that kernel's cells.
  //  - Otherwise (head dim 256 with 80 keys) O goes through Q's buffer:
  //    after the tile's last Q·Kᵀ the whole tile is written there and stored
  //    at once; the next Q then waits for the store. (Staging it in the
  //    tile's last V stage instead, with Q released after the last Q·Kᵀ,
  //    made no difference in head dim 128's former 3-stage kernel:
  //    docs/kernels.md.)
  static constexpr int kBytesKVRing = int(2 * kStages * kBytesKV);
  // An SM's 228 KiB less 1 KiB a CTA, per CTA.
  static constexpr int kSmemPerCta = (228 / kCtasPerSm - 1) * 1024;
  static constexpr int kSmemBudget = kSmemPerCta - 2048;  // minus barriers and alignment
  static constexpr bool kSeparateO = int(2 * kBytesQ) + kBytesKVRing <= kSmemBudget;
  static constexpr bool kHalfO = !kSeparateO && int(kBytesQ + kBytesQ / 2) + kBytesKVRing <= kSmemBudget;
  // Where O is staged: nowhere but Q's buffer, whose next Q then waits for the store.
  static constexpr bool kOThroughQ = !kSeparateO && !kHalfO;
  static constexpr int kQStages = kSeparateO && int(3 * kBytesQ) + kBytesKVRing <= kSmemBudget ? 2 : 1;
  // Head dim 256's 80-key kernels fill all 240 consumer registers in their
  // key loop (S, P and O of both products in flight): they hold nothing
  // else across it but the tile count, and recompute the epilogue's inputs
  // after it (flash_fwd_kernel.h; their K/V multicast release holds no
  // vector register either: mainloop_mma.h). Otherwise ptxas spilled 28
  // (one CTA) and 36 bytes (multicast); same-run A/Bs against those
  // (bench/results/2026-11-27b-h100/ab2-*, ab3-*): -1.8% to +0.8% from 4k
  // keys, the unmasked 2k cell +3.7-5.1% in medians of a bimodal spread
  // (docs/kernels.md). Other kernels keep those values: recomputing them
  // made head dim 64 2.5-4.4% slower and head dim 128's 512-key cells 2%
  // (ab1-spill-cut-*).
  static constexpr bool kLeanTileState = kHeadDim == 256 && kBlockN == 80;
  static_assert(!kLeanTileState || !kServing, "the lean tile state takes a plain kernel's tile count for its Q count");
  // The next tile's first Q·Kᵀ issued in this tile's last turn, with its
  // last P·V (mainloop_mma.h, Ahead): the epilogue then runs under that
  // product, and a tile no longer starts with a lone Q·Kᵀ. It needs the next
  // tile's Q in a second buffer, and every tile to take the same path
  // (seq_info.h tile_work kOneBlockAtLeast), which plain kernels allow.
  // Head dim 64's 128-row kernel only. Same-run A/B on an H100, two rounds,
  // output bits identical (bench/results/2026-11-26b-h100/ab1-*): causal
  // 512 and 1k tokens (its cells) 2.3-2.8% faster; the 192-row kernels 1.4-4%
  // slower causal from 2k tokens and level to 1% slower without a mask. At
  // head dim 128 it was 1.5-7% slower, at 64 rows up to 8%
  // (bench/results/2026-11-25-h100, ahead). FLASHCORE_ISSUE_AHEAD=0 builds
  // without it (same bits: the A/B baseline).
#ifndef FLASHCORE_ISSUE_AHEAD
#define FLASHCORE_ISSUE_AHEAD 1
#endif
  static constexpr bool kIssueAhead =
      FLASHCORE_ISSUE_AHEAD && !kServing && kHeadDim == 64 && kBlockM == 128 && kQStages == 2;
  // tail_plan.h: the end of a paired (causal-like) call dealt tile by tile,
  // longest first onto the least-loaded CTA, instead of in pairs round robin;
  // which kernels, how much and up to how many keys: tail_policy.h.
  static constexpr TailPolicy kTail = tail_policy(kHeadDim, kBlockM, kBlockN, kClusterM, kServing);
  static constexpr bool kTailPlan = kTail.plan;
  // tail_policy.h front_pad: the last tile's padding before row 0.
  static constexpr bool kFrontPad = front_pad(kBlockM, kBlockN, kClusterM, kServing);
  // mainloop_mma.h kSkipMaskedBlocks: a warpgroup passes over the tile's key
  // block that is masked for all of its rows (takes its turn, releases the
  // stages) instead of computing it. The one-CTA kernels of three
  // warpgroups, whose causal tiles span 192 rows: the first warpgroup's rows
  // end 128 rows before the tile's last row, their keys up to one 128-key
  // block before its keys. Same-run A/B on the H200 (bench/results/
  // 2026-11-29d-h200/call1-ab1-*): causal 2k-16k 1.3-6.6% faster.
  // FLASHCORE_WG_SKIP=0 builds without it (same bits: the A/B baseline).
#ifndef FLASHCORE_WG_SKIP
#define FLASHCORE_WG_SKIP 1
#endif
  static constexpr bool kSkipMaskedBlocks = FLASHCORE_WG_SKIP && !kServing && kNumMmaWarpGroups == 3 && kClusterM == 1;
  // mainloop_mma.h kHalfFirstQK: the warpgroup of a causal tile's first 64
  // rows computes its diagonal block's Q·Kᵀ over 64 keys instead of 128.
  // Head dim 128's one-CTA 128-row tiles with turns only (the causal calls
  // below 1k keys); in the kNoTurns_ kernel ptxas serialized the WGMMAs with
  // it (C7511). Same-run A/Bs on an H100, bf16 B32 H16 S512 causal, output
  // bits identical: 1.1% faster in medians of three rounds
  // (bench/results/2026-11-27e-h100/ab1-*), 0.4% in four rounds, every round
  // faster (ab2-*); the unmasked and 1k controls within 0.3%.
  // FLASHCORE_HALF_FIRST_QK=0 builds without it (same bits: the A/B baseline).
#ifndef FLASHCORE_HALF_FIRST_QK
#define FLASHCORE_HALF_FIRST_QK 1
#endif
  static constexpr bool kHalfFirstQK = FLASHCORE_HALF_FIRST_QK && !kServing && kHeadDim == 128 && kBlockM == 128 &&
                                       kBlockN == 128 && kClusterM == 1 && kPingPong && !kIssueAhead;
  // mainloop_mma.h loop_q: Q's descriptors rebuilt in the key
  // loop instead of held in vector registers, in the K/V-multicast kernels
  // (the unmasked calls whose query blocks pair up). A/B:
  // FLASHCORE_FRESH_Q_DESCRIPTORS=0 builds without it (the same bits).
#ifndef FLASHCORE_FRESH_Q_DESCRIPTORS
#define FLASHCORE_FRESH_Q_DESCRIPTORS 1
#endif
  // Also head dim 256's serving kernel: with its 40-register producer its
  // consumers keep 232, and holding Q's 16 descriptors spilled 24 bytes of
  // them (reloaded in the key loop; ptxas, 2026-11-29).
  static constexpr bool kFreshQDescriptors =
      FLASHCORE_FRESH_Q_DESCRIPTORS && (kClusterM > 1 || (kServing && kHeadDim == 256));
  // Who loads Q. With one Q buffer (head dim 256), a tile's Q waits until
  // the tile before is done with the buffer: its O store where O goes through
  // Q (80 keys), its last Q·Kᵀ (64 keys, kHalfO). Loaded by the thread that
  // issues K and V, the next tile's first key blocks waited behind it, and
  // the ring drained at every tile start. In these kernels a thread of its
  // own (the producer warpgroup's second warp, mainloop_load.h run_q) loads
  // Q. Same-run A/Bs on an H100, bf16, medians of three rounds, output bits
  // identical (bench/results/2026-11-26e-h100/):
  //  - both kernels (ab-qwarp): 1.1-1.2% faster at 512 tokens (causal and
  //    not) and 1k without a mask, 0.7% causal 16k, 1.2% causal 8k; the
  //    other cells within +-0.6%, except causal 4k, whose rounds fall into
  //    two groups 10% apart in every variant.
  //  - the 80-key kernel alone, in the sliced-ring runs (ab-ring1, ab-ring3):
  //    causal 16k 2.3% and 2.1% faster, causal 8k 0.5% and 0.7%.
  // FLASHCORE_Q_WARP=0 builds without it (the A/B baseline).
#ifndef FLASHCORE_Q_WARP
#define FLASHCORE_Q_WARP 1
#endif
  static constexpr bool kQWarp = FLASHCORE_Q_WARP && !kServing && kQStages == 1;  // (kIssueAhead needs two)

  // K and V issued by two producer threads (mainloop_load.h run<kQK> and
  // run<kV>): K's ring refilled as soon as a Q·Kᵀ frees a stage, not after
  // the V stage the same thread would wait for first. Thread 64 (the producer
  // warpgroup's third warp: the second may load Q, kQWarp). Paged calls keep
  // the warp-wide loop. Head dim 256 only: same-run A/B on the H200
  // (2026-11-29, bench/results/2026-11-29-h200/call4-ab2-*, three rounds,
  // output bits identical) unmasked 512 and 1k 1.9% and 1.8% faster (every
  // round), 16k and causal 512 level (-0.3%); at head dim 128 it was slower
  // (causal 512 +2.1%, unmasked 512 and 1k +0.8%, every round), at head dim
  // 64 level. FLASHCORE_SPLIT_KV_ISSUE=0 builds without it (the A/B baseline).
#ifndef FLASHCORE_SPLIT_KV_ISSUE
#define FLASHCORE_SPLIT_KV_ISSUE 1
#endif
  static constexpr bool kSplitKVIssue = FLASHCORE_SPLIT_KV_ISSUE && kHeadDim == 256;
  static constexpr int kVIssueThread = 64;

  // O's store unit. With a buffer of its own, each consumer warpgroup stages
  // and stores its own 64 rows (one TMA store each, a named barrier over the
  // warpgroup only): a warpgroup that finishes a tile goes on to the next
  // one's Q·Kᵀ while the other still runs its last P·V, instead of both
  // meeting at a CTA-wide barrier with the tensor cores idle. In half-width
  // slices, each warpgroup stores its 64 rows in two rounds of kStoreCols
  // columns. Through Q's buffer the whole tile is stored at once, after both
  // warpgroups are done with Q.
  static constexpr int kStoreRows = kOThroughQ ? kBlockM : 64;
  static constexpr int kStoreCols = kHalfO ? kHeadDim / 2 : kHeadDim;
  static constexpr int kStoreRounds = kHeadDim / kStoreCols;
  static_assert(!kOThroughQ || kStoreRounds == 1, "through Q the tile is stored, and Q released, once");
  using SmemLayoutO = decltype(tile_to_shape(SmemAtomQ{}, Shape<Int<kStoreRows>, Int<kStoreCols>>{}));
  // Per-warpgroup slices, or (through Q) none.
  static constexpr int kOBufferElems = kOThroughQ ? 8 : kBlockM * kStoreCols;
  // The one-warpgroup slice of the P·V MMA, kStoreCols wide: how one
  // warpgroup's 64 rows of one store round are partitioned over its 128
  // threads. Its accumulator holds a round's columns in kHeadDim/kStoreCols
  // consecutive pieces of the full fragment's registers (epilogue.h).
  using TiledMmaPVStore = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kStoreCols>, Int<kBlockN>>,
                           GMMA::Major::K, GMMA::Major::MN>(),
      Layout<Shape<Int<kStoreRows / 64>, _1, _1>>{}));

  // Global tensors seen by TMA: (seq, dim, head, batch) for Q/K/O and
  // (dim, seq, head, batch) for V, strides in elements, dim contiguous.
  using ShapeT = Shape<int32_t, int32_t, int32_t, int32_t>;
  using StrideQKO = Stride<int64_t, _1, int64_t, int64_t>;
  using StrideVt = Stride<_1, int64_t, int64_t, int64_t>;

  using TMA_Q = decltype(make_tma_copy(
      SM90_TMA_LOAD{}, make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeT{}, StrideQKO{}),
      SmemLayoutQ{}, select<0, 2>(TileShapeQK{}), _1{}));
  using TMA_K = decltype(make_tma_copy(
      TmaLoadKV{}, make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeT{}, StrideQKO{}),
      take<0, 2>(SmemLayoutK{}), select<1, 2>(TileShapeQK{}), Int<kClusterM>{}));
  using TMA_V = decltype(make_tma_copy(
      TmaLoadKV{}, make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeT{}, StrideVt{}),
      take<0, 2>(SmemLayoutVt{}), select<1, 2>(TileShapePV{}), Int<kClusterM>{}));
  using TMA_O = decltype(make_tma_copy(
      SM90_TMA_STORE{}, make_tensor(make_gmem_ptr(static_cast<Element*>(nullptr)), ShapeT{}, StrideQKO{}),
      SmemLayoutO{}, Shape<Int<kStoreRows>, Int<kStoreCols>>{}, _1{}));

  // Paged KV cache: a key block is loaded as kBlockN/C loads of C keys,
  // each from the page that holds them: C = kWideChunk when the page size is
  // a multiple of it, else kChunk (page sizes are multiples of 16). A
  // chunk's shared-memory layout is that of rows [Ci, Ci+C) of the full
  // block: whole swizzle atoms, so it starts on a 1 KiB boundary. Wider
  // chunks, fewer block-table lookups and TMA loads (head dim 128: K in 4
  // loads a block instead of 16, V in 4 as well, its slices being runs of
  // whole blocks: SmemLayoutVt above): with 64-key
  // pages, 64-key chunks made paged decode 2-2.5% faster than 16-key ones
  // where it streams the cache (bf16 32/8 heads d128, batch 16 x 4k keys and
  // batch 1 x 32k; bench/results/2026-11-26c-h100/ab4-page-chunk-table.txt).
  static constexpr int kChunk = 16;
  static constexpr int kWideChunk = 64;
  // The paged, varlen and split-KV paths are compiled into the serving
  // variant only (kServing; at head dim 256 only the 64-key tile has it).
  static_assert(kBlockN % kChunk == 0 && (!kServing || kBlockN % kWideChunk == 0));
  template <int C>
  struct PageChunk {
    static constexpr int kKeys = C;
    using SmemLayoutK = decltype(composition(take<0, 2>(KernelTraits::SmemLayoutK{}),
                                             Layout<Shape<Int<C>, Int<kHeadDim>>, Stride<_1, Int<kBlockN>>>{}));
    using SmemLayoutVt = decltype(composition(take<0, 2>(KernelTraits::SmemLayoutVt{}),
                                              Layout<Shape<Int<kHeadDim>, Int<C>>, Stride<_1, Int<kHeadDim>>>{}));
    using TmaK = decltype(make_tma_copy(
        SM90_TMA_LOAD{}, make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeT{}, StrideQKO{}),
        SmemLayoutK{}, Shape<Int<C>, Int<kHeadDim>>{}, _1{}));
    using TmaV = decltype(make_tma_copy(
        SM90_TMA_LOAD{}, make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeT{}, StrideVt{}),
        SmemLayoutVt{}, Shape<Int<kHeadDim>, Int<C>>{}, _1{}));
    // The pair of descriptors a paged call reads with (kernel_params.h),
    // built on the host over the page pool's K and V (flash_fwd_launch.h).
    struct Tmas {
      TmaK k{};
      TmaV v{};
    };
    template <class PoolK, class PoolV>
    static Tmas make_tmas(PoolK const& pool_k, PoolV const& pool_v) {
      return {make_tma_copy(SM90_TMA_LOAD{}, pool_k, SmemLayoutK{}, Shape<Int<C>, Int<kHeadDim>>{}, _1{}),
              make_tma_copy(SM90_TMA_LOAD{}, pool_v, SmemLayoutVt{}, Shape<Int<kHeadDim>, Int<C>>{}, _1{})};
    }
    // Element offsets of chunk i of stage `stage` (unswizzled: a chunk starts
    // at swizzle-atom row 0, where the swizzle is the identity).
    CUTE_HOST_DEVICE static int k_offset(int i, int stage) {
      return get_nonswizzle_portion(KernelTraits::SmemLayoutK{})(make_coord(i * C, 0, stage));
    }
    CUTE_HOST_DEVICE static int v_offset(int i, int stage) {
      return get_nonswizzle_portion(KernelTraits::SmemLayoutVt{})(make_coord(0, i * C, stage));
    }
  };
  using NarrowChunk = PageChunk<kChunk>;
  // (The plain kernels never read a paged cache; their key blocks need not
  // hold whole wide chunks: head dim 256's 80 keys.)
  using WideChunk = PageChunk<kServing ? kWideChunk : kChunk>;

  // Split-KV in one CTA (chunk_fold.h): the fold variant of a one-warpgroup
  // serving kernel keeps the merged O of a split sequence's chunks in
  // shared memory.
  static constexpr bool kFoldSplits = kFold_;
  static_assert(!kFold_ || (kServing && kNumMmaWarpGroups == 1), "the fold: one-warpgroup serving kernels");
  // The softmax's arithmetic as explicit intrinsics (softmax.h kPinned): in
  // every one-warpgroup serving kernel, with the fold or not, so a chunk's
  // partial result has the same bits whichever kernel computes it (the fold,
  // or a tile of the across-CTA schedule whose partials the combine merges).
  static constexpr bool kPinnedSoftmax = kServing && kNumMmaWarpGroups == 1;
  static constexpr int kFoldElems = kFoldSplits ? kBlockM * kHeadDim : 4;

  using PipelineKV = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename PipelineKV::PipelineState;

  struct SharedStorage {
    // 1024-byte alignment: the 128-byte swizzle pattern repeats every 1 KiB and
    // both TMA and the WGMMA descriptors assume tiles start on that boundary.
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ> * kQStages> smem_q;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>> smem_k;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutVt>> smem_v;
    alignas(1024) cute::array_aligned<Element, kOBufferElems> smem_o;
    typename PipelineKV::SharedStorage pipeline_k;
    typename PipelineKV::SharedStorage pipeline_v;
    cutlass::arch::ClusterTransactionBarrier barrier_q[kQStages];  // Q tile landed
    cutlass::arch::ClusterBarrier barrier_q_free[kQStages];        // Q buffer may take another Q
    // Last: the kernels without the fold keep the layout they had before it.
    alignas(16) cute::array_aligned<float, kFoldElems> smem_fold;  // merged O (chunk_fold.h)
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);

  // Tile number `iter` of a CTA uses Q buffer iter % kQStages, for the
  // (iter / kQStages)-th time: the parity its barriers wait for.
  CUTE_DEVICE static Element* q_buffer(SharedStorage& s, int iter) {
    return s.smem_q.data() + (iter % kQStages) * cute::cosize_v<SmemLayoutQ>;
  }
  // Waits until tile number `iter`'s Q has landed in its buffer.
  CUTE_DEVICE static void wait_q(SharedStorage& s, int iter) {
    s.barrier_q[iter % kQStages].wait((iter / kQStages) & 1);
  }
  // Arrivals that free the Q buffer: every consumer thread after its last
  // Q·Kᵀ, or (when O aliases Q) the thread that waited for O's store.
  static constexpr int kQFreeArrivals = kOThroughQ ? 1 : kNumMmaThreads;
  static_assert(kSmemBytes <= kSmemPerCta, "tile does not fit in shared memory");
};

}  // namespace flashcore::sm90
