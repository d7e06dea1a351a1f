// Everything one launch of the sm90 forward kernel reads, passed by value as
// a __grid_constant__ parameter (the TMA descriptors must live in param space).
#pragma once

#include <cstdint>

namespace flashcore::sm90 {

template <class Traits>
struct KernelParams {
  typename Traits::TMA_Q tma_q;
  typename Traits::TMA_K tma_k;
  typename Traits::TMA_V tma_v;
  typename Traits::TMA_O tma_o;

  int32_t batch = 0, heads_q = 0, heads_kv = 0, group = 1;  // group = heads_q / heads_kv
  int32_t seqlen_q = 0, seqlen_k = 0, head_dim = 0;
  // Mask: key j is allowed for query i iff
  //   i + diag - window_left <= j <= i + diag + window_right,  j < seqlen_k,
  // with diag = seqlen_k - seqlen_q (bottom-right alignment). Unbounded
  // windows are clamped to 2^30 so the index arithmetic stays in int32.
  int32_t window_left = 0, window_right = 0;
  float scale_log2 = 0.f;  // softmax_scale * log2(e): scores go through exp2

  float* lse = nullptr;  // optional (nullptr): natural-log LSE, (batch, head, row) strides
  int64_t lse_stride_b = 0, lse_stride_h = 0, lse_stride_s = 0;

  int32_t num_m_blocks = 0;
  int32_t num_tiles = 0;
  bool paired_tiles = false;  // causal-like masks: tiles dealt in cost-balanced pairs
};

}  // namespace flashcore::sm90
