// The committed tuning table: which tile shape dispatch uses for a problem on
// an sm90 GPU. Picked from flashcore-tune runs on an H100 (bench/results/):
//
//  - block_n (keys per step) fixes the order of the floating-point reduction
//    of a row, so it depends only on dtype and head dim: never on the batch or
//    on the GPU's load, which keeps results batch-invariant.
//  - block_m (query rows per CTA) does not change any row's arithmetic (the
//    GPU test BlockMDoesNotChangeResults checks it bit for bit), so it may
//    follow the total amount of work: 64-row tiles when 128-row tiles would
//    leave more than half of the SMs idle (small batches, short sequences),
//    and for decode with GQA packing (gqa_pack.h), whose tiles hold only the
//    query heads of one KV head.
#pragma once

#include <cstdint>

#include "flashcore/attention.h"

namespace flashcore::sm90 {

struct TileChoice {
  int block_m, block_n;
};

inline TileChoice tuned_tile(DType /*dtype*/, int head_dim, int64_t tiles_of_128_rows, int num_sms,
                             bool gqa_packed_decode) {
  int const block_n = head_dim == 256 ? 64 : 128;
  bool const has_m64 = head_dim == 64 || head_dim == 128;
  bool const small = tiles_of_128_rows * 2 <= num_sms;
  // Packed decode has at most `group` (<= 64 in practice) valid rows a tile.
  return {has_m64 && (small || gqa_packed_decode) ? 64 : 128, block_n};
}

}  // namespace flashcore::sm90
