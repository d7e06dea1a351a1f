// Host side of one kernel instantiation: builds the TMA descriptors from the
// tensor views (any strides with a contiguous head dim: BHSD, BSHD, views),
// fills KernelParams and launches the persistent grid. Included only by the
// generated files in instantiations/, one translation unit per config.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <mutex>

#include "common/problem.h"
#include "flashcore/attention.h"
#include "sm90/device_info.h"
#include "sm90/flash_fwd_kernel.h"
#include "sm90/gqa_pack.h"
#include "sm90/kernel_registry.h"
#include "sm90/kernel_traits.h"
#include "sm90/launch_attrs.h"
#include "sm90/recent_cache.h"
#include "sm90/splitkv_plan.h"
#include "sm90/tail_plan.h"
#include "sm90/tile_list.h"
#include "sm90/tuning_table.h"

namespace flashcore::sm90 {

// What one TMA descriptor encodes besides the tile's compile-time box: the
// address, the (rows, dim, heads, batch) extents and their element strides
// (dim's is 1).
struct GmemView {
  const void* ptr;
  int64_t shape[4];
  int64_t stride[4];
};
struct TmaKey {
  GmemView q, k, v, o;
};
constexpr int kTmaCacheSlots = 16;  // per instantiation (recent_cache.h)

template <class Element>
auto tma_rows_tensor(const GmemView& g) {  // (rows, dim, heads, batch), dim contiguous
  using namespace cute;
  return make_tensor(make_gmem_ptr(static_cast<Element*>(const_cast<void*>(g.ptr))),
                     make_shape(int32_t(g.shape[0]), int32_t(g.shape[1]), int32_t(g.shape[2]), int32_t(g.shape[3])),
                     make_stride(g.stride[0], _1{}, g.stride[2], g.stride[3]));
}
template <class Element>
auto tma_dim_major_tensor(const GmemView& g) {  // V read as (dim, rows, heads, batch): the PV operand
  using namespace cute;
  return make_tensor(make_gmem_ptr(static_cast<Element*>(const_cast<void*>(g.ptr))),
                     make_shape(int32_t(g.shape[1]), int32_t(g.shape[0]), int32_t(g.shape[2]), int32_t(g.shape[3])),
                     make_stride(_1{}, g.stride[0], g.stride[2], g.stride[3]));
}

// The four TMA copies of a call (the paged-cache chunk ones are built apart).
template <class Traits>
struct TmaSet {
  typename Traits::TMA_Q q;
  typename Traits::TMA_K k;
  typename Traits::TMA_V v;
  typename Traits::TMA_O o;
};

template <class Traits>
TmaSet<Traits> make_tma_set(const TmaKey& key) {
  using namespace cute;
  using Element = typename Traits::Element;
  return {make_tma_copy(SM90_TMA_LOAD{}, tma_rows_tensor<Element const>(key.q), typename Traits::SmemLayoutQ{},
                        select<0, 2>(typename Traits::TileShapeQK{}), _1{}),
          make_tma_copy(typename Traits::TmaLoadKV{}, tma_rows_tensor<Element const>(key.k),
                        take<0, 2>(typename Traits::SmemLayoutK{}), select<1, 2>(typename Traits::TileShapeQK{}),
                        Int<Traits::kClusterM>{}),
          make_tma_copy(typename Traits::TmaLoadKV{}, tma_dim_major_tensor<Element const>(key.v),
                        take<0, 2>(typename Traits::SmemLayoutVt{}), select<1, 2>(typename Traits::TileShapePV{}),
                        Int<Traits::kClusterM>{}),
          make_tma_copy(SM90_TMA_STORE{}, tma_rows_tensor<Element>(key.o), typename Traits::SmemLayoutO{},
                        Shape<Int<Traits::kStoreRows>, Int<Traits::kStoreCols>>{}, _1{})};
}

// tail_plan.h: a paired call's plan, built once per shape.
struct TailKey {
  int32_t tiles, grid, units, heads, batch, seqlen_q, seqlen_k, window_left, window_right, row_shift;
};

template <class Traits>
TailPlan tail_plan_for(KernelParams<Traits> const& params, int grid) {
  static RecentCache<TailKey, TailPlan, 8> cache;
  TailKey const key{params.num_tiles, grid, params.num_units, params.heads_q, params.batch,
                    params.seq.seqlen_q, params.seq.seqlen_k, params.seq.window_left, params.seq.window_right,
                    row_shift_of(params)};
  return cache.get(key, [&] {
    return make_paired_tail_plan<Traits::kBlockM, Traits::kBlockN>(
        Traits::kTail.full_rounds, Traits::kTail.max_keys, params.num_tiles, grid, params.num_units, params.heads_q,
        params.batch, params.divisors, params.seq.seqlen_q, params.seq.seqlen_k, params.seq.window_left,
        params.seq.window_right, Traits::kIssueAhead, row_shift_of(params));
  });
}

template <class Traits>
Status launch_flash_fwd(const AttentionArgs& args, const Problem& p, const LaunchPlan& plan, cudaStream_t stream) {
  // Split chunks are whole key blocks (seq_info.h: tile_work divides by kBlockN).
  static_assert(!Traits::kServing ||
                    (split_min_keys(Traits::kHeadDim) % Traits::kBlockN == 0 &&
                     kSplitOverrideUnit % Traits::kBlockN == 0),
                "split-KV chunk sizes must be multiples of the serving tile's block_n");
  using Element = typename Traits::Element;
  using namespace cute;

  // With no keys at all a TMA descriptor still needs a non-empty box and a
  // valid address: describe one row of Q instead. Only the kernels that visit
  // one masked key block in a fully masked query block (kernel_traits.h
  // kIssueAhead) load from it: that row, the rest of the box zero-filled by
  // TMA, every score masked.
  bool const no_keys = args.k.shape[2] == 0 || args.k.shape[0] == 0;
  const TensorView& k = no_keys ? args.q : args.k;
  const TensorView& v = no_keys ? args.q : args.v;
  int64_t const k_extent = no_keys ? 1 : k.shape[2];

  // Decode-time GQA packing (gqa_pack.h): the kernel sees `group` rows per
  // KV head instead of one row per query head.
  bool const packed = packs_gqa(p);
  int64_t const rows = packed ? p.group() : p.seqlen_q;             // per sequence (max for varlen)
  int64_t const q_extent = p.varlen_q ? p.total_q : rows;            // rows of the TMA view
  int64_t const heads = packed ? p.heads_kv : p.heads_q;
  // (rows, dim, heads, batch) views for TMA. Varlen tensors are packed
  // (batch 1, all tokens as rows); a paged cache is (page rows, dim, heads, pages).
  auto rows_view = [&](const TensorView& t) {
    int64_t const row_stride = packed ? t.stride[1] : t.stride[2];
    int64_t const head_stride = packed ? t.stride[1] * p.group() : t.stride[1];
    return GmemView{t.data, {q_extent, p.head_dim, heads, t.shape[0]}, {row_stride, 1, head_stride, t.stride[0]}};
  };
  auto kv_view = [](const TensorView& t, int64_t seq_extent) {
    return GmemView{t.data, {seq_extent, t.shape[3], t.shape[1], t.shape[0]}, {t.stride[2], 1, t.stride[1], t.stride[0]}};
  };
  TmaKey const key{rows_view(args.q), kv_view(k, k_extent), kv_view(v, k_extent), rows_view(args.out)};
  static RecentCache<TmaKey, TmaSet<Traits>, kTmaCacheSlots> cache;
  TmaSet<Traits> const tma = cache.get(key, [&] { return make_tma_set<Traits>(key); });

  KernelParams<Traits> params{tma.q, tma.k, tma.v, tma.o};
  // The paged-cache chunk descriptors stay empty (never read) unless the
  // call is paged (below).
  params.batch = int32_t(p.batch);
  params.heads_q = int32_t(heads);
  params.heads_kv = int32_t(p.heads_kv);
  params.group = packed ? 1 : int32_t(p.group());
  params.head_dim = int32_t(p.head_dim);

  params.seq = seq_params(args, p, plan.split);
  int64_t const m_blocks = (rows + Traits::kBlockM - 1) / Traits::kBlockM;
  params.seq.num_m_blocks = int32_t(m_blocks);
  // tail_policy.h front_pad: on causal-like calls the last tile's whole
  // warpgroups of padding rows go before row 0.
  if constexpr (Traits::kFrontPad) {
    if (triangular_costs(p)) params.row_shift = front_pad_rows(rows, Traits::kBlockM);
  }

  params.scale_log2 = float(double(p.scale) * 1.4426950408889634);
  params.lse = p.has_lse ? static_cast<float*>(args.lse.data) : nullptr;
  int64_t st[3];
  row_strides(args.lse, p, st);
  params.lse_stride_b = st[0], params.lse_stride_h = st[1], params.lse_stride_s = st[2];
  params.o_direct = p.varlen_q;
  params.o_ptr = static_cast<Element*>(args.out.data);
  row_strides(args.out, p, st);
  params.o_stride_b = st[0], params.o_stride_h = st[1], params.o_stride_s = st[2];

  if (Traits::kServing && p.paged && !no_keys) {
    auto mKp = tma_rows_tensor<Element const>(kv_view(args.k, p.page_size));
    auto mVp = tma_dim_major_tensor<Element const>(kv_view(args.v, p.page_size));
    params.page_wide = p.page_size % Traits::WideChunk::kKeys == 0;
    if (params.page_wide) {
      params.page_tma_wide = Traits::WideChunk::make_tmas(mKp, mVp);
    } else {
      params.page_tma_narrow = Traits::NarrowChunk::make_tmas(mKp, mVp);
    }
    params.block_table = args.block_table;
    params.block_table_stride = int32_t(p.block_table_stride);
    params.max_pages_per_seq = int32_t(p.max_pages_per_seq);
    params.page_size = int32_t(p.page_size);
    params.num_pages = int32_t(p.num_pages);
  }

  if (plan.split.fold && !Traits::kFoldSplits) {
    return Status(StatusCode::kInvalidArgument,
                  "split-KV in one CTA needs a one-warpgroup serving kernel (block_m 64)");
  }
  if (plan.split.across_ctas()) {
    params.partial_o = static_cast<float*>(plan.workspace);
    params.partial_lse = reinterpret_cast<float*>(static_cast<char*>(plan.workspace) + plan.split.partial_o_bytes);
    params.partial_rows = plan.split.partial_rows;
  }

  // Dispatch's view of the two-CTA kernels (tuning_table.h) is this kernel's.
  static_assert(Traits::kCtasPerSm == 1 || has_two_cta_kernel(Traits::kHeadDim, Traits::kBlockM, Traits::kBlockN),
                "a two-CTA kernel dispatch never picks: list it in tuning_table.h has_two_cta_kernel");
  // Dispatch's view of the kernels without turns (tuning_table.h) is this kernel's.
  static_assert(!Traits::kNoTurns || has_no_turns_kernel(Traits::kHeadDim, Traits::kBlockM, Traits::kBlockN),
                "a kernel without turns dispatch never picks: list it in tuning_table.h has_no_turns_kernel");
  // K/V multicast (kernel_traits.h kClusterM): the two CTAs of a cluster
  // walk tiles 2i and 2i+1 in step, so every tile must have as many key
  // blocks and the tiles must pair up. Dispatch only picks these kernels for
  // such calls (tuning_table.h cluster_eligible); this guards direct launches.
  if constexpr (Traits::kClusterM > 1) {
    // Dispatch's view of the multicast kernels (tuning_table.h) is this kernel's.
    static_assert(has_cluster_kernel(Traits::kHeadDim, Traits::kBlockM, Traits::kBlockN),
                  "a K/V-multicast kernel dispatch never picks: list it in tuning_table.h has_cluster_kernel");
    static_assert(cluster_pairs_may_straddle(Traits::kHeadDim) == Traits::kPairsMayStraddle,
                  "dispatch and the kernel disagree on pairs of tiles from two heads (kernel_traits.h)");
    if (!cluster_eligible(p, Traits::kBlockM, Traits::kClusterM, Traits::kPairsMayStraddle)) {
      return Status(StatusCode::kNotSupported,
                    std::string("K/V-multicast kernels take plain calls without a mask and an even number of ") +
                        (Traits::kPairsMayStraddle ? "tiles (" : "query blocks a head (") +
                        std::to_string(Traits::kPairsMayStraddle ? m_blocks * heads * p.batch : m_blocks) +
                        " of " + std::to_string(Traits::kBlockM) + " rows)");
    }
  }
  // Query blocks, or the chunks of split sequences when each is a tile
  // (seq_params gives a folded call max_splits 1: seq_info.h tile_work).
  int64_t const units = m_blocks > params.seq.max_splits ? m_blocks : params.seq.max_splits;
  // The issue-ahead kernels' consumers take every tile as active (the next
  // tile's Q buffer is known in advance), the producer skips inactive ones:
  // a launch with any would deadlock, so refuse it (plain calls never have one).
  if (Traits::kIssueAhead && (units != m_blocks || plan.split.split_keys > 0)) {
    return Status(StatusCode::kInternal, "issue-ahead kernel launched with inactive tiles");
  }
  int64_t const tiles = units * heads * p.batch;
  if (tiles >= (int64_t(1) << 31)) {
    return Status(StatusCode::kNotSupported, "problem has more than 2^31 query tiles");
  }

  auto kernel = flash_fwd_kernel<Traits>;
  int const smem = Traits::kSmemBytes;
  // The dynamic shared-memory limit is a per-device function attribute: set it
  // once per device, never on the hot path.
  static std::once_flag once[kMaxDevices];
  static cudaError_t attr_err[kMaxDevices];
  int const dev = p.device_index;
  if (dev < 0 || dev >= kMaxDevices) return Status(StatusCode::kNotSupported, "device index out of range");
  // CTAs an SM (kernel_traits.h kCtasPerSm): what the occupancy API grants
  // with the shared-memory carveout at its maximum, at most the kernel's.
  static int ctas_per_sm[kMaxDevices];
  // Registers a thread the kernel launched with, against what its
  // setmaxnreg split asks of the CTA's pool: a pool too small would leave the
  // consumers' increase waiting forever, so such a build is refused.
  static int launch_regs[kMaxDevices];
  std::call_once(once[dev], [&] {
    attr_err[dev] = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaFuncAttributes fa{};
    if (attr_err[dev] == cudaSuccess) attr_err[dev] = cudaFuncGetAttributes(&fa, kernel);
    launch_regs[dev] = fa.numRegs;
    ctas_per_sm[dev] = 1;
    if (Traits::kCtasPerSm > 1 && attr_err[dev] == cudaSuccess) {
      attr_err[dev] = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           int(cudaSharedmemCarveoutMaxShared));
      int blocks = 0;
      if (attr_err[dev] == cudaSuccess) {
        attr_err[dev] = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Traits::kNumThreads, smem);
      }
      ctas_per_sm[dev] = blocks < 1 ? 1 : blocks < Traits::kCtasPerSm ? blocks : Traits::kCtasPerSm;
    }
  });
  if (attr_err[dev] != cudaSuccess) {
    return Status(StatusCode::kCudaError, std::string("kernel attribute setup (cudaFuncSetAttribute, "
                                                      "cudaFuncGetAttributes, occupancy) failed: ") +
                                              cudaGetErrorString(attr_err[dev]));
  }
  if constexpr (Traits::kRegSplit) {
    int const pool = launch_regs[dev] * Traits::kNumThreads;
    int const split =
        Traits::kProducerRegs * cutlass::NumThreadsPerWarpGroup + Traits::kConsumerRegs * Traits::kNumMmaThreads;
    if (pool < split) {
      return Status(StatusCode::kInternal, "kernel built with " + std::to_string(launch_regs[dev]) +
                                               " registers a thread; its setmaxnreg split needs " +
                                               std::to_string(split) + " a CTA (kernel_traits.h kRegSplit)");
    }
  }
  int const sms = device_sm_count(dev);
  // CTAs resident at once: one an SM (two for the kernels of kCtasPerSm = 2,
  // as the occupancy API granted above), or with clusters as many whole
  // clusters as the GPCs hold (asked once per device).
  int slots = sms * ctas_per_sm[dev];
  if constexpr (Traits::kClusterM > 1) {
    static std::once_flag cluster_once[kMaxDevices];
    static int cluster_slots[kMaxDevices];
    std::call_once(cluster_once[dev], [&] {
      PdlLaunch probe(dim3(unsigned(sms)), dim3(Traits::kNumThreads), size_t(smem), stream, Traits::kClusterM);
      int clusters = 0;
      cudaError_t const e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &probe.config);
      cluster_slots[dev] = e == cudaSuccess ? clusters * Traits::kClusterM : 0;
    });
    slots = cluster_slots[dev];
    if (slots <= 0) {
      return Status(StatusCode::kCudaError, "cudaOccupancyMaxActiveClusters: no cluster of this kernel fits an SM group");
    }
  }
  // Tiles of differing cost are dealt in balanced pairs (tile_scheduler.h)
  // once some CTA gets two (tuning_table.h). A serving kernel pairs units 2i
  // and 2i+1 of each (head, batch), its query blocks from each sequence's
  // own length (seq_info.h tile_work), when the units are query blocks and
  // some sequence has more than one; an even number of units keeps every
  // pair in one sequence (one empty unit more where the count is odd).
  //
  // With a tile list (tile_list_plan.h) pairs are consecutive entries (with
  // an odd unit count a pair may span two heads of a sequence, and the last
  // pair of a sequence the next one's first unit: close to balanced, no
  // empty unit needed), and sequences of mixed query lengths pair too: the
  // list holds no empty unit (the other pairs' problem, above).
  // KV-cache prefill keeps its pairs, now costliest sequence first.
  bool const listed = Traits::kServing && plan.tile_list != nullptr;
  int64_t const even_units = units + (units & 1);
  params.paired_tiles =
      pair_tiles(tiles, slots) &&
      (Traits::kServing ? m_blocks > 1 && (listed ? mask_bounds_right(p) && serving_pairs_allowed()
                                                  : units == m_blocks && serving_costs_vary_by_tile(p) &&
                                                        even_units * heads * p.batch < (int64_t(1) << 31))
                        : costs_vary_by_tile(p));
  int64_t const launch_units = Traits::kServing && params.paired_tiles && !listed ? even_units : units;
  params.num_units = int32_t(launch_units);
  params.num_tiles = int32_t(launch_units * heads * p.batch);
  params.divisors = make_tile_divisors(params.num_units, params.heads_q, params.group);
  int const grid = int(params.num_tiles < slots ? params.num_tiles : slots);  // multiples of kClusterM
  if constexpr (Traits::kTailPlan) {
    if (params.paired_tiles) params.tail = tail_plan_for<Traits>(params, grid);
  }
  // A programmatic dependent of the previous kernel in the stream
  // (launch_attrs.h): its launch and prologue overlap that kernel's tail.
  // Not before the split-KV combine, which is faster launched as the
  // forward CTAs exit (launch_attrs.h).
  params.trigger_dependents_early = pdl_trigger_early() && !plan.split.across_ctas();
  if constexpr (Traits::kServing) {
    if (listed) {
      TileListParams lp;
      lp.seq = params.seq;
      lp.batch = params.batch;
      lp.heads = params.heads_q;
      lp.num_units = params.num_units;
      lp.capacity = int32_t(plan.list.entries);
      lp.list = plan.tile_list;
      lp.trigger_dependents_early = pdl_trigger_early();
      lp.paired = params.paired_tiles;
      if (plan.list.tail_rounds > 0 && grid <= plan.list.tail_ctas) {  // (the table's width: always)
        lp.tail = plan.tile_list + plan.list.tail_offset;
        lp.tail_rounds = plan.list.tail_rounds;
        lp.grid = grid;
        lp.tail_min_excess = plan.list.tail_min_excess;
      }
      Status const st = launch_tile_list(lp, Traits::kBlockM, Traits::kBlockN, stream);
      if (!st.ok()) return st;
      params.tile_list = plan.tile_list;
      params.tile_tail = lp.tail;
    }
  }
  PdlLaunch launch(dim3(unsigned(grid)), dim3(Traits::kNumThreads), size_t(smem), stream, Traits::kClusterM);
  cudaError_t err = cudaLaunchKernelEx(&launch.config, kernel, params);
  if (err != cudaSuccess) {
    return Status(StatusCode::kCudaError, std::string("kernel launch failed: ") + cudaGetErrorString(err));
  }
  if constexpr (Traits::kTailPlan) {
    if (params.tail.first_k != TailPlan::kNone) count_tail_plan_launch();
  }
  if constexpr (Traits::kCtasPerSm > 1) count_two_cta_launch();
  if constexpr (Traits::kServing) {
    if (params.paired_tiles) count_serving_pair_launch();
    if (listed) count_tile_list_launch();
  }
  return Status::Ok();
}

}  // namespace flashcore::sm90
