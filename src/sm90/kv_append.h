// KV-cache append: copies k_new/v_new (B, Hkv, S_new, D) into the cache at
// positions [cache_seqlens[b], cache_seqlens[b] + S_new) before attention
// reads it, through the block table when the cache is paged. Positions past
// the cache's capacity, and pages outside the pool, are skipped: bad
// metadata never makes it write out of bounds.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "flashcore/attention.h"

namespace flashcore::sm90 {

struct AppendParams {
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  int64_t new_stride[3] = {0, 0, 0};  // (batch, head, row) in elements; v_new's
  int64_t v_new_stride[3] = {0, 0, 0};
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int64_t cache_stride[3] = {0, 0, 0};  // (batch or page, head, row) in elements
  int64_t v_cache_stride[3] = {0, 0, 0};
  const int32_t* cache_seqlens = nullptr;
  const int32_t* block_table = nullptr;  // null: contiguous cache
  int64_t block_table_stride = 0;
  int32_t max_pages_per_seq = 0, page_size = 0, num_pages = 0;
  int32_t batch = 0, heads_kv = 0, seqlen_new = 0, head_dim = 0, capacity = 0;
  int32_t element_bytes = 2;
};

Status launch_kv_append(const AppendParams& params, cudaStream_t stream);

}  // namespace flashcore::sm90
