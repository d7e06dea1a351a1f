// Calls of head dim 64's 192-row kernel that take a tail plan
// (src/sm90/tail_plan.h) on a 132-SM card (H100 SXM, H200): more than two
// rounds of tile pairs, and a plan the model says finishes earlier. The GPU
// test Sm90Forward.TailPlanSequencesMatchRunsAlone runs them; the host test
// TailPlan.GpuTestCallsTakeAPlan checks that each still takes a plan, so the
// GPU test cannot silently stop covering it.
#pragma once

#include <cstdint>
#include <vector>

namespace fctest {

struct TailPlanCall {
  bool bf16;
  int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k;
  bool causal;
  int64_t window_left, window_right;  // -1: none
};

constexpr int kTailPlanSms = 132;

inline std::vector<TailPlanCall> tail_plan_calls() {
  return {
      {true, 5, 16, 16, 2049, 2049, true, -1, -1},   // 11 query blocks a head (odd): middle tiles after the pairs
      {false, 3, 16, 8, 2300, 1900, true, -1, -1},   // more queries than keys, GQA
      {true, 4, 16, 16, 2048, 2048, false, 700, 0},  // a left window
  };
}

}  // namespace fctest
