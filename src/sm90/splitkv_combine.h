// Split-KV combine: merges the per-chunk partial results of split sequences
// (seq_info.h) into O and LSE. For each row, chunk s has O_s (normalized by
// its own row sum) and lse_s; the result is
//     lse = log(sum_s exp(lse_s)),   O = sum_s exp(lse_s - lse) * O_s,
// as a running merge over s = n-1, ..., 0 (chunk_merge.h): bitwise the same
// whatever else is in the batch, and the same as one tile walking every
// chunk (chunk_fold.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "flashcore/attention.h"
#include "sm90/seq_info.h"

namespace flashcore::sm90 {

struct CombineParams {
  SeqParams seq;
  int32_t batch = 0, heads = 0, head_dim = 0;
  const float* partial_o = nullptr;
  const float* partial_lse = nullptr;
  int32_t partial_rows = 0;
  void* out = nullptr;  // Element*, (batch, head, row) strides; varlen: rows offset by the sequence start
  int64_t o_stride_b = 0, o_stride_h = 0, o_stride_s = 0;
  float* lse = nullptr;  // optional
  int64_t lse_stride_b = 0, lse_stride_h = 0, lse_stride_s = 0;
  bool trigger_dependents_early = false;  // PDL (launch_attrs.h); set by launch_splitkv_combine
};

// Enqueues the combine on `stream` (a no-op for sequences that did not split).
Status launch_splitkv_combine(const CombineParams& params, DType dtype, cudaStream_t stream);

}  // namespace flashcore::sm90
