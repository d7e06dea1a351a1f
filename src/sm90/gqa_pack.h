// Decode-time GQA packing. With one query token per sequence (seqlen_q == 1)
// and several query heads per KV head, the query heads that share a KV head
// become the rows of one tile: Q and O are described to TMA as
// (group, head_dim, kv_heads, batch), so each CTA reads its K/V once for the
// whole group instead of once per query head. Rows past the group are
// zero-filled on load and clipped on store by TMA. No row's arithmetic
// changes (same key blocks, same order): the results are bitwise those of the
// unpacked kernel.
#pragma once

#include "common/problem.h"

namespace flashcore::sm90 {

// Packing applies when every query row sees every key (a lone query token at
// the bottom-right corner: causal changes nothing; a left window must reach
// back to key 0).
// Varlen queries are addressed by token offsets, which packing would mix
// up with head offsets: they are not packed.
inline bool packs_gqa(const Problem& p) {
  return !p.varlen_q && p.seqlen_q == 1 && p.group() > 1 && p.window_left >= p.seqlen_k - 1;
}

}  // namespace flashcore::sm90
