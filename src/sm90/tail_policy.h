// Which kernels take a tail plan (tail_plan.h), how many rounds of pairs it
// deals tile by tile, and up to how many keys; and which move their padding
// rows to the front (front_pad, below): measured choices, kept here (not in
// kernel_traits.h) so that the host tests of the plans can ask them.
//
// Same-run A/Bs on an H100, bf16 causal, medians of three rounds, output
// bits identical:
// - full_rounds = 1 (the last full round of pairs and the partial one):
//   head dim 64's one-CTA 192-row kernel (causal from 2k tokens, where 2752
//   tiles leave 5% of the SMs idle at the end): 1.8% (2k), 2.7% (8k) and
//   4.4% (16k) faster (bench/results/2026-11-27f-h100/ab1-*), against
//   FLASHCORE_TAIL_PLAN=0 2.1% (2k), 3.4% (4k) and 2.3% (8k) (ab6-*). The
//   same deal was 1.6-5.3% slower at head dim 256 (2k-16k) and 2.2-2.4%
//   slower at head dim 128's 512-token causal cell (the kernel with turns).
// - full_rounds = 0 (only the partial round), calls of at most 2048 keys:
//   the one-CTA 128-row kernels of head dim 128 (both forms) and 256 with
//   64-key blocks. Head dim 128 causal 1k 1.8% and 2k 1.0% faster, head dim
//   256 causal 2k 2.1%, every round faster (2026-11-27g-h100/ab1-*);
//   against FLASHCORE_TAIL_LAST_ROUND=0, four rounds (ab2-*): head dim 128
//   causal 1k 1.0%, 2k 0.9%, 512 0.5%, head dim 256 causal 2k 0.9%, 1k 0.4%
//   faster. The bound is where gains were measured: above it, head dim
//   128's kernel without turns was level with a plan (4k-16k, within the
//   rounds' spread: ab5-*, ab6-*), and head dim 256's 64-key kernel (causal
//   calls up to 4095 keys) was not timed with one.
//   Not given the plan: head dim 256's 80-key kernel, whose key loop ptxas
//   orders differently with the plan's code (5.8% slower at causal 16k with
//   that code and no plan, 5.3% with the plan: ab6-*; DRAM bytes and L2
//   hit rate unchanged: call5-*), and head dim 64's 128-row kernel, level
//   with the plan (+0.2% at causal 512, -0.2% at 1k: ab2-*, whose tree
//   still gave it the plan).
// Multicast kernels run unmasked calls only (no pairs), serving kernels
// their own schedules.
// FLASHCORE_TAIL_PLAN=0 builds without any plan, FLASHCORE_TAIL_LAST_ROUND=0
// without the second kind (same bits: the A/B baselines).
#pragma once

#include <cstdint>

#ifndef FLASHCORE_TAIL_PLAN
#define FLASHCORE_TAIL_PLAN 1
#endif
#ifndef FLASHCORE_TAIL_LAST_ROUND
#define FLASHCORE_TAIL_LAST_ROUND 1
#endif

namespace flashcore::sm90 {

struct TailPolicy {
  bool plan = false;
  int full_rounds = 0;  // full rounds of pairs dealt tile by tile with the partial one
  int max_keys = 0;     // no plan for calls with more keys
};

constexpr TailPolicy tail_policy(int head_dim, int block_m, int block_n, int cluster_m, bool serving) {
  if (!FLASHCORE_TAIL_PLAN || cluster_m != 1 || serving) return {};
  if (head_dim == 64 && block_m == 192) return {true, 1, 0x7fffffff};
  bool const last_round = block_m == 128 && ((head_dim == 128 && block_n == 128) || (head_dim == 256 && block_n == 64));
  if (FLASHCORE_TAIL_LAST_ROUND && last_round) return {true, 0, 2048};
  return {};
}

// Front padding (kernel_traits.h kFrontPad): on causal-like calls whose
// query rows leave whole warpgroups of padding in the last tile, that
// padding goes before row 0 (KernelParams row_shift, a multiple of 64), into
// the first tile, which visits the fewest key blocks, and every tile ends 64
// or 128 rows earlier. A tile visits the key blocks up to its last row's, so
// with 192-row tiles and 128-key blocks half of them end a block sooner: 5%
// fewer key blocks at 2k and 4k tokens, 1.5% at 8k and 16k, never more
// (test_tail_plan.cpp FrontPad). Rows keep their arithmetic: a visited block
// past a row's last key is masked whole for it, as with any block_m. Head
// dim 64's one-CTA 192-row kernel (causal from 1k); a 128-row tile with
// 128-key blocks visits as many either way. Same-run A/B on the H200, bf16,
// three rounds, output bits identical (bench/results/2026-11-29c-h200/
// call1-ab1-*): causal 2k 5.8% and 4k 3.4% faster (every round faster than
// every baseline round), 8k 0.4%, 16k 1.1%. FLASHCORE_FRONT_PAD=0 builds
// without it (same bits: the A/B baseline).
#ifndef FLASHCORE_FRONT_PAD
#define FLASHCORE_FRONT_PAD 1
#endif

constexpr bool front_pad(int block_m, int block_n, int cluster_m, bool serving) {
  return FLASHCORE_FRONT_PAD && !serving && cluster_m == 1 && block_m == 192 && block_n == 128;
}

// The rows before row 0 of a front-padded call of `rows` query rows: the
// last tile's padding, in whole 64-row warpgroups.
constexpr int front_pad_rows(int64_t rows, int block_m) {
  return int(((rows + block_m - 1) / block_m * block_m - rows) / 64 * 64);
}

}  // namespace flashcore::sm90
