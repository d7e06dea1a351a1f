// L2 eviction priorities of the producer's TMA loads. A tile's Q is read
// once; a K/V block is read by every query block of its head (and, with
// GQA, by every query head of its group), on other SMs and at other times,
// so K/V lines are worth keeping in L2 over Q's. The hint is a priority in
// L2's replacement, not a reservation: results do not depend on it.
// Values: 0 normal (what an unhinted load gets), 1 evict first, 2 evict last.
// FLASHCORE_L2_HINT_Q / FLASHCORE_L2_HINT_KV set them at build time.
// Measured (2026-11-28b, bench/results/2026-11-28b-h100/ab{1,2}-l2-hints*,
// same-run A/B, output bits identical): Q evict-first makes the short calls
// faster where K/V come from DRAM at each tile start (head dim 128 causal
// 512 1.2%, head dim 256 at 512-1k 1.2-1.7%, every round); K/V evict-last
// on top of it changed nothing measurable, alone it was mixed (head dim 128
// causal 16k +1.2%), so K/V keep the normal priority.
// Except in the split-KV fold kernels (chunk_fold.h): they run GQA-packed
// decode whose sequences fill the GPU, one tile a (sequence, KV head)
// walking all of its keys, so every K/V line is read once and is worth
// nothing in L2 after. Evict-first there (2026-11-29i, H200, same-run
// A/Bs of three rounds, bits identical, bench/results/2026-11-29i-h200/):
// bf16 decode B16 and B64 with 4k keys 0.5-0.6% faster, on its own
// (call3, every serving kernel) and on top of the merge diet (call6, the
// fold kernels only); in the kernels that split across CTAs it was 0.5%
// slower at B1 (call3), so they keep the normal priority.
#pragma once

#include <cute/config.hpp>
#include <cute/arch/copy_sm90_desc.hpp>

#ifndef FLASHCORE_L2_HINT_Q
#define FLASHCORE_L2_HINT_Q 1
#endif
#ifndef FLASHCORE_L2_HINT_KV
#define FLASHCORE_L2_HINT_KV 0
#endif

namespace flashcore::sm90 {

CUTE_HOST_DEVICE constexpr cute::TMA::CacheHintSm90 l2_hint(int code) {
  return code == 1   ? cute::TMA::CacheHintSm90::EVICT_FIRST
         : code == 2 ? cute::TMA::CacheHintSm90::EVICT_LAST
                     : cute::TMA::CacheHintSm90::EVICT_NORMAL;
}

// Functions, not variables: CuTe's .with() takes the hint by reference,
// and a namespace-scope constexpr variable has no address in device code.
CUTE_HOST_DEVICE constexpr cute::TMA::CacheHintSm90 l2_hint_q() { return l2_hint(FLASHCORE_L2_HINT_Q); }
template <bool kFoldSplits>
CUTE_HOST_DEVICE constexpr cute::TMA::CacheHintSm90 l2_hint_kv() {
  return kFoldSplits ? cute::TMA::CacheHintSm90::EVICT_FIRST : l2_hint(FLASHCORE_L2_HINT_KV);
}

}  // namespace flashcore::sm90
