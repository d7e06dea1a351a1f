// Calls that take a tail plan (src/sm90/tail_plan.h) on a 132-SM card (H100
// SXM, H200), in each kernel that has one (src/sm90/tail_policy.h): enough
// rounds of tile pairs, and a plan the model says finishes earlier. The GPU
// test Sm90Forward.TailPlanSequencesMatchRunsAlone runs them; the host test
// TailPlan.GpuTestCallsTakeAPlan checks that each still takes a plan, so the
// GPU test cannot silently stop covering it.
#pragma once

#include <cstdint>
#include <vector>

namespace fctest {

struct TailPlanCall {
  int head_dim, block_m, block_n;  // the kernel (the calls force its tile)
  bool bf16;
  int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k;
  bool causal;
  int64_t window_left, window_right;  // -1: none
};

constexpr int kTailPlanSms = 132;

inline std::vector<TailPlanCall> tail_plan_calls() {
  return {
      // Head dim 64's 192-row kernel: the last two rounds dealt.
      {64, 192, 128, true, 5, 16, 16, 2049, 2049, true, -1, -1},   // 11 query blocks a head (odd): middle tiles
      {64, 192, 128, false, 3, 16, 8, 2300, 1900, true, -1, -1},   // more queries than keys, GQA
      {64, 192, 128, true, 4, 16, 16, 2048, 2048, false, 700, 0},  // a left window
      {64, 192, 128, true, 5, 16, 16, 2048, 2048, true, -1, -1},   // 64 padding rows first (front_pad)
      {64, 192, 128, false, 4, 16, 8, 1980, 2100, true, -1, -1},   // 128 padding rows first, more keys, GQA
      // The last round only (up to 2048 keys).
      {128, 128, 128, true, 5, 16, 16, 1000, 1000, true, -1, -1},  // below 1k keys: the kernel with turns
      {128, 128, 128, false, 3, 16, 4, 2000, 1800, true, -1, -1},  // the kernel without turns, GQA
      {256, 128, 64, true, 5, 8, 8, 1500, 1500, false, 500, 0},    // a left window
  };
}

}  // namespace fctest
