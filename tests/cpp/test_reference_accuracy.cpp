// The CPU reference against naive double-precision attention over many
// shapes, masks, GQA ratios, layouts and dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attention_case.h"

namespace fctest {
namespace {

struct Tolerance {
  double out_rel_frobenius;
  double out_max_abs;  // relative to max(1, max |naive out|)
};

// f32: only fp32 accumulation error. f16/bf16: the naive answer uses the same
// rounded inputs, so the gap is mostly the final rounding of out.
Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return {1e-5, 1e-5};
    case DType::kFloat16: return {2e-3, 1e-3};
    case DType::kBFloat16: return {1e-2, 8e-3};
  }
  return {0, 0};
}

constexpr double kLseRelTol = 1e-4;

void check_against_naive(const Case& c) {
  CaseTensors t(c);
  const flashcore::Status s = flashcore::attention_forward(t.args);
  ASSERT_TRUE(s.ok()) << s.message();
  const NaiveResult want = t.naive(c);
  const std::vector<double> got = t.out.to_vector();
  const std::vector<double> got_lse = t.lse.to_vector();

  const Tolerance tol = tolerance_for(c.dtype);
  const double scale = std::max(1.0, max_abs(want.out));
  EXPECT_LE(rel_frobenius(got, want.out), tol.out_rel_frobenius);
  EXPECT_LE(max_abs_diff(got, want.out), tol.out_max_abs * scale);
  EXPECT_TRUE(t.out.padding_is_nan()) << "out was written outside its view";

  int lse_bad = 0;
  for (size_t i = 0; i < want.lse.size(); ++i) {
    const double w = want.lse[i], g = got_lse[i];
    const bool ok = std::isinf(w) ? (g == w) : std::fabs(g - w) <= kLseRelTol * std::max(1.0, std::fabs(w));
    if (!ok && ++lse_bad <= 5) ADD_FAILURE() << "lse row " << i << ": got " << g << ", naive " << w;
  }
  EXPECT_EQ(lse_bad, 0);
}

// ---------------------------------------------------------------- the cases

std::vector<Case> sequence_cases() {
  // Lengths around the 64-row tiles and 128-key blocks, plus 1 and 513.
  const int64_t pairs[][2] = {{1, 1},     {17, 17},   {63, 63},   {64, 64},   {65, 65},  {127, 127},
                              {128, 128}, {129, 129}, {255, 255}, {513, 513}, {1, 513},  {513, 1},
                              {17, 129},  {129, 17},  {64, 255},  {255, 64},  {65, 128}, {128, 65},
                              {127, 513}, {513, 127}, {1, 17},    {255, 129}};
  struct Mask {
    bool causal;
    int64_t left, right;
  };
  const Mask masks[] = {{false, -1, -1}, {true, -1, -1}, {false, 32, -1},
                        {false, -1, 16}, {false, 40, 7}, {true, 50, -1}};
  const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  const Layout layouts[] = {Layout::kBHSD, Layout::kBSHD, Layout::kStrided};
  const int64_t dims[] = {64, 96, 128, 256};
  const int64_t groups[] = {1, 2, 4, 8};

  std::vector<Case> cases;
  uint32_t seed = 100;
  int pi = 0;
  for (const auto& pr : pairs) {
    int mi = 0;
    for (const Mask& m : masks) {
      Case c;
      c.seqlen_q = pr[0];
      c.seqlen_k = pr[1];
      c.causal = m.causal;
      c.window_left = m.left;
      c.window_right = m.right;
      // Rotate the other axes so every combination of pairs appears somewhere.
      c.dtype = dtypes[(pi + mi) % 3];
      c.layout = layouts[(pi + 2 * mi) % 3];
      c.head_dim = dims[(pi + mi / 2) % 4];
      c.heads_kv = 1;
      c.heads_q = groups[(pi * 3 + mi) % 4];
      c.batch = 1 + (pi + mi) % 2;
      // Keep the naive O(S^2 D) cost in check on the longest pairs.
      if (pr[0] * pr[1] > 40000) {
        c.head_dim = std::min<int64_t>(c.head_dim, 128);
        c.heads_q = std::min<int64_t>(c.heads_q, 2);
        c.batch = 1;
      }
      c.seed = seed++;
      cases.push_back(c);
      ++mi;
    }
    ++pi;
  }
  return cases;
}

// Every dtype x layout x head_dim on one medium shape, with GQA and causal.
std::vector<Case> dtype_layout_dim_cases() {
  std::vector<Case> cases;
  uint32_t seed = 500;
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (Layout l : {Layout::kBHSD, Layout::kBSHD, Layout::kStrided}) {
      for (int64_t d : {64, 96, 128, 256}) {
        Case c;
        c.dtype = dt;
        c.layout = l;
        c.head_dim = d;
        c.batch = 2;
        c.heads_q = 4;
        c.heads_kv = 2;
        c.seqlen_q = 70;
        c.seqlen_k = 150;
        c.causal = (d == 96 || d == 256);
        c.seed = seed++;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

// GQA ratios 1, 2, 4, 8 (and MQA) with every dtype.
std::vector<Case> gqa_cases() {
  std::vector<Case> cases;
  uint32_t seed = 700;
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (int64_t group : {1, 2, 4, 8}) {
      Case c;
      c.dtype = dt;
      c.layout = Layout::kBSHD;
      c.heads_kv = group == 8 ? 1 : 2;
      c.heads_q = c.heads_kv * group;
      c.seqlen_q = 33;
      c.seqlen_k = 200;
      c.head_dim = 128;
      c.seed = seed++;
      cases.push_back(c);
    }
  }
  return cases;
}

// Peaky softmax (big scale) and nearly flat (small scale): both ends of exp2.
std::vector<Case> scale_cases() {
  std::vector<Case> cases;
  uint32_t seed = 900;
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (float scale : {0.001f, 0.5f, 2.0f}) {
      Case c;
      c.dtype = dt;
      c.heads_q = 2;
      c.heads_kv = 2;
      c.seqlen_q = 100;
      c.seqlen_k = 300;
      c.head_dim = 64;
      c.scale = scale;
      c.causal = scale == 2.0f;
      c.seed = seed++;
      cases.push_back(c);
    }
  }
  return cases;
}

class ReferenceVsNaive : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceVsNaive, MatchesDoublePrecision) { check_against_naive(GetParam()); }

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name(); }

INSTANTIATE_TEST_SUITE_P(Sequences, ReferenceVsNaive, ::testing::ValuesIn(sequence_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(DtypeLayoutDim, ReferenceVsNaive, ::testing::ValuesIn(dtype_layout_dim_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Gqa, ReferenceVsNaive, ::testing::ValuesIn(gqa_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Scale, ReferenceVsNaive, ::testing::ValuesIn(scale_cases()), case_name);

// Scores that grow along the keys, so the running max rises in every key
// block and each block must rescale what came before.
TEST(ReferenceRescale, MaxRisesInEveryBlock) {
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    Case c;
    c.dtype = dt;
    c.seqlen_q = 8;
    c.seqlen_k = 640;
    c.head_dim = 128;
    c.scale = 0.3f;  // top scores ~ 14: a sharp softmax
    CaseTensors t(c);
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> noise(-0.05, 0.05);
    for (int64_t j = 0; j < c.seqlen_k; ++j) {
      for (int64_t d = 0; d < c.head_dim; ++d) {
        // k_j ~ (j / Sk) * q_0 + noise: score with row 0 climbs to ~ |q|^2.
        const double base = t.q.get(0, 0, 0, d) * (0.05 + double(j) / c.seqlen_k);
        t.k.set(0, 0, j, d, base + noise(rng));
      }
    }
    SCOPED_TRACE(c.name());
    const flashcore::Status s = flashcore::attention_forward(t.args);
    ASSERT_TRUE(s.ok()) << s.message();
    const NaiveResult want = t.naive(c);
    const std::vector<double> got = t.out.to_vector();
    EXPECT_LE(rel_frobenius(got, want.out), tolerance_for(dt).out_rel_frobenius);
    const std::vector<double> lse = t.lse.to_vector();
    for (size_t i = 0; i < lse.size(); ++i) {
      EXPECT_NEAR(lse[i], want.lse[i], kLseRelTol * std::max(1.0, std::fabs(want.lse[i])));
    }
  }
}

}  // namespace
}  // namespace fctest
