// Everything one launch of the sm90 forward kernel reads, passed by value as
// a __grid_constant__ parameter (the TMA descriptors must live in param space).
#pragma once

#include <cstdint>
#include <type_traits>

#include <cute/tensor.hpp>

#include "sm90/seq_info.h"
#include "sm90/tail_plan.h"
#include "sm90/tile_decode.h"

namespace flashcore::sm90 {

template <class Traits>
struct KernelParams {
  using Element = typename Traits::Element;
  static constexpr int kClusterM = Traits::kClusterM;  // CTAs that share K/V loads (tile_scheduler.h)
  static constexpr bool kTailPlan = Traits::kTailPlan;  // tail_plan.h
  static constexpr bool kServing = Traits::kServing;  // per-sequence lengths (tile_scheduler.h)
  typename Traits::TMA_Q tma_q;
  typename Traits::TMA_K tma_k;
  typename Traits::TMA_V tma_v;
  typename Traits::TMA_O tma_o;
  // Paged KV cache: chunks of one page each (kernel_traits.h PageChunk), set
  // for paged calls only (flash_fwd_launch.h): the wide pair when the page
  // size is a multiple of its keys (page_wide, below), else the narrow one.
  typename Traits::NarrowChunk::Tmas page_tma_narrow{};
  typename Traits::WideChunk::Tmas page_tma_wide{};

  int32_t batch = 0, heads_q = 0, heads_kv = 0, group = 1;  // group = heads_q / heads_kv
  int32_t head_dim = 0;
  // Lengths, masks (key j is allowed for query i iff
  //   i + diag - window_left <= j <= i + diag + window_right,  j < seqlen_k,
  // diag = seqlen_k - seqlen_q per sequence: bottom-right alignment) and the
  // split-KV plan: seq_info.h.
  SeqParams seq{};
  float scale_log2 = 0.f;  // softmax_scale * log2(e): scores go through exp2

  float* lse = nullptr;  // optional (nullptr): natural-log LSE, (batch, head, row) strides
  int64_t lse_stride_b = 0, lse_stride_h = 0, lse_stride_s = 0;

  // Varlen q: O is written with plain stores, row by row (a TMA store of a
  // whole tile would spill into the next sequence's rows).
  bool o_direct = false;
  Element* o_ptr = nullptr;
  int64_t o_stride_b = 0, o_stride_h = 0, o_stride_s = 0;

  // Paged KV: k/v are pools (page_size, D, heads_kv, num_pages) for TMA.
  const int32_t* block_table = nullptr;
  int32_t block_table_stride = 0, max_pages_per_seq = 0, page_size = 0, num_pages = 0;
  bool page_wide = false;  // page_size is a multiple of WideChunk's keys

  // Split-KV partial results (workspace): slot ((batch * heads + head) *
  // max_splits + split) holds partial_rows rows of head_dim floats (O
  // normalized by its own row sum) and partial_rows natural-log LSEs.
  float* partial_o = nullptr;
  float* partial_lse = nullptr;
  int32_t partial_rows = 0;

  int32_t num_units = 0;  // tile units per (head, batch): max(query blocks, split chunks)
  int32_t num_tiles = 0;
  // The divisors of a tile's decode and of the K/V head (mainloop_load.h),
  // prepared on the host (tile_decode.h).
  TileDivisors divisors{};
  bool paired_tiles = false;  // causal-like masks: tiles dealt in cost-balanced pairs
  bool trigger_dependents_early = false;  // PDL: let the next kernel launch at once (launch_attrs.h)
  // The last rounds of paired tiles, tile by tile (kernels with kTailPlan
  // only; last, so that no other member moves).
  struct NoTailPlan {};
  std::conditional_t<kTailPlan, TailPlan, NoTailPlan> tail{};
  // Padding rows before row 0 (tail_policy.h front_pad, kernels with
  // kFrontPad only; last, so that no other member moves).
  struct NoFrontPad {};
  std::conditional_t<Traits::kFrontPad, int32_t, NoFrontPad> row_shift{};
  // Serving kernels: the call's tile list (tile_list_plan.h; nullptr: none),
  // built in the workspace before this kernel runs: [0] the count of tiles
  // with work, [1 + i] entry i's index among the launch's tiles. Last, so
  // that no other member moves.
  struct NoTileList {};
  std::conditional_t<Traits::kServing, const int32_t*, NoTileList> tile_list{};
  // And its tail (tile_list.h TileListParams::tail; nullptr: none): [0] the
  // k from which a CTA's tiles come from it, [1] its rows, [2 + q * grid + b]
  // CTA b's q-th tail tile as a list position.
  std::conditional_t<Traits::kServing, const int32_t*, NoTileList> tile_tail{};
};

// A (rows, dim, heads, batch) view for the TMA of Q or O: varlen queries
// are one packed sequence of total_q rows (a sequence's own start is its
// q_offset).
template <class Traits, class Tma>
CUTE_DEVICE auto rows_tma_tensor(Tma const& tma, KernelParams<Traits> const& params, bool varlen_q) {
  SeqParams const& seq = params.seq;
  return tma.get_tma_tensor(cute::make_shape(varlen_q ? seq.total_q : seq.seqlen_q, params.head_dim, params.heads_q,
                                             varlen_q ? 1 : params.batch));
}

// The call's padding rows before row 0: a query block's first row is
// m_block * block_m - row_shift_of(params). 0 without kFrontPad.
template <class Traits>
CUTE_HOST_DEVICE int row_shift_of(KernelParams<Traits> const& params) {
  if constexpr (Traits::kFrontPad) return params.row_shift;
  return 0;
}

}  // namespace flashcore::sm90
