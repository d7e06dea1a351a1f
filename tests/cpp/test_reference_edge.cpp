// Rows with no key, empty key sets and zero-sized problems.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attention_case.h"

namespace fctest {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Causal with seqlen_q > seqlen_k: bottom-right alignment leaves the first
// seqlen_q - seqlen_k rows without any key. They must be exactly zero with
// LSE -inf; the other rows must still be right; nothing may be NaN.
TEST(ReferenceEdge, FullyMaskedRowsAreZeroWithMinusInfLse) {
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    Case c;
    c.dtype = dt;
    c.heads_q = 2;
    c.heads_kv = 1;
    c.seqlen_q = 200;
    c.seqlen_k = 70;
    c.causal = true;
    SCOPED_TRACE(c.name());
    CaseTensors t(c);
    const flashcore::Status s = flashcore::attention_forward(t.args);
    ASSERT_TRUE(s.ok()) << s.message();
    const NaiveResult want = t.naive(c);
    const int64_t masked_rows = c.seqlen_q - c.seqlen_k;
    for (int64_t h = 0; h < c.heads_q; ++h) {
      for (int64_t i = 0; i < c.seqlen_q; ++i) {
        const double lse = t.lse.get(0, h, i, 0);
        if (i < masked_rows) {
          ASSERT_EQ(lse, -kInf) << "row " << i;
          for (int64_t d = 0; d < c.head_dim; ++d) ASSERT_EQ(t.out.get(0, h, i, d), 0.0) << "row " << i;
        } else {
          ASSERT_TRUE(std::isfinite(lse)) << "row " << i;
          const double w = want.lse[h * c.seqlen_q + i];
          ASSERT_NEAR(lse, w, 1e-4 * std::max(1.0, std::fabs(w)));
          for (int64_t d = 0; d < c.head_dim; ++d) ASSERT_TRUE(std::isfinite(t.out.get(0, h, i, d)));
        }
      }
    }
    const double tol = dt == DType::kFloat32 ? 1e-5 : dt == DType::kFloat16 ? 2e-3 : 1e-2;
    EXPECT_LE(rel_frobenius(t.out.to_vector(), want.out), tol);
  }
}

// A right window reaching below key 0 for the first rows masks them too.
TEST(ReferenceEdge, WindowCanMaskWholeRows) {
  Case c;
  c.seqlen_q = 90;
  c.seqlen_k = 40;
  c.window_left = 3;
  c.window_right = 5;
  CaseTensors t(c);
  ASSERT_TRUE(flashcore::attention_forward(t.args).ok());
  const NaiveResult want = t.naive(c);
  int64_t masked = 0;
  for (int64_t i = 0; i < c.seqlen_q; ++i) {
    const double lse = t.lse.get(0, 0, i, 0);
    EXPECT_EQ(std::isinf(want.lse[i]), std::isinf(lse)) << "row " << i;
    masked += std::isinf(lse) ? 1 : 0;
  }
  // Row i's keys are [i - 53, i - 45]: rows 0..44 have none, and rows past
  // 92 would have none too (there are only 90).
  EXPECT_EQ(masked, 45);
  EXPECT_LE(max_abs_diff(t.out.to_vector(), want.out), 1e-5);
}

// No keys at all: every row is fully masked. k and v may be null.
TEST(ReferenceEdge, EmptyKeysGiveZerosAndMinusInf) {
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    Case c;
    c.dtype = dt;
    c.batch = 2;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.seqlen_q = 33;
    c.seqlen_k = 0;
    c.head_dim = 96;
    CaseTensors t(c);
    t.args.k.data = nullptr;
    t.args.v.data = nullptr;
    const flashcore::Status s = flashcore::attention_forward(t.args);
    ASSERT_TRUE(s.ok()) << s.message();
    for (double x : t.out.to_vector()) ASSERT_EQ(x, 0.0);
    for (double x : t.lse.to_vector()) ASSERT_EQ(x, -kInf);
  }
}

// A zero-sized problem returns Ok and writes nothing: out and lse keep their
// poison even though they point at real memory.
TEST(ReferenceEdge, ZeroBatchIsANoOp) {
  HostTensor q(DType::kFloat16, 0, 4, 16, 64), k(DType::kFloat16, 0, 2, 16, 64), v(DType::kFloat16, 0, 2, 16, 64);
  HostTensor out_storage(DType::kFloat16, 1, 4, 16, 64);  // real memory behind a batch-0 view
  HostTensor lse_storage = make_lse(1, 4, 16);
  out_storage.fill_bytes(0xA5);
  lse_storage.fill_bytes(0xA5);
  flashcore::AttentionArgs a;
  a.q = q.view;
  a.k = k.view;
  a.v = v.view;
  a.out = out_storage.view;
  a.out.shape[0] = 0;
  a.lse = lse_storage.view;
  a.lse.shape[0] = 0;
  const flashcore::Status s = flashcore::attention_forward(a);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(out_storage.all_bytes_equal(0xA5));
  EXPECT_TRUE(lse_storage.all_bytes_equal(0xA5));
}

// Every way of being empty is Ok. Tensors with no elements get null data
// (the others real memory), and out/lse stay untouched.
TEST(ReferenceEdge, ZeroSizedProblemsAreNoOps) {
  struct Dims {
    int64_t b, hq, hkv, sq, sk, d;
  };
  const Dims cases[] = {{0, 4, 2, 16, 16, 64}, {2, 0, 0, 16, 16, 64}, {2, 0, 2, 16, 16, 64},
                        {2, 4, 2, 0, 16, 64},  {2, 4, 2, 0, 0, 128}, {2, 4, 2, 16, 16, 0}};
  for (const Dims& c : cases) {
    HostTensor q(DType::kBFloat16, c.b, c.hq, c.sq, c.d), k(DType::kBFloat16, c.b, c.hkv, c.sk, c.d),
        v(DType::kBFloat16, c.b, c.hkv, c.sk, c.d), out(DType::kBFloat16, c.b, c.hq, c.sq, c.d);
    out.fill_bytes(0xA5);
    flashcore::AttentionArgs a;
    a.q = q.view;
    a.k = k.view;
    a.v = v.view;
    a.out = out.view;
    // Empty tensors: null data and all-zero strides (both meaningless without elements).
    for (TensorView* t : {&a.q, &a.k, &a.v, &a.out}) {
      if (t->numel() != 0) continue;
      t->data = nullptr;
      for (int64_t& st : t->stride) st = 0;
    }
    a.causal = true;
    const flashcore::Status s = flashcore::attention_forward(a);
    EXPECT_TRUE(s.ok()) << c.b << " " << c.hq << " " << c.hkv << " " << c.sq << " " << c.sk << " " << c.d
                        << ": " << s.message();
    EXPECT_TRUE(out.all_bytes_equal(0xA5));
  }
}

// Empty problems are still checked for consistency.
TEST(ReferenceEdge, ZeroSizedStillValidatesShapes) {
  flashcore::AttentionArgs a;
  a.q = flashcore::make_bhsd(nullptr, DType::kFloat16, 0, 4, 16, 64);
  a.k = flashcore::make_bhsd(nullptr, DType::kFloat16, 0, 4, 16, 96);
  a.v = a.k;
  a.out = a.q;
  const flashcore::Status s = flashcore::attention_forward(a);
  EXPECT_EQ(s.code(), flashcore::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("k.shape[3]"), std::string::npos) << s.message();
}

// Single key: softmax weight exactly 1, out = that value row.
TEST(ReferenceEdge, SingleKeyCopiesValueRow) {
  Case c;
  c.seqlen_q = 5;
  c.seqlen_k = 1;
  CaseTensors t(c);
  ASSERT_TRUE(flashcore::attention_forward(t.args).ok());
  for (int64_t i = 0; i < c.seqlen_q; ++i) {
    for (int64_t d = 0; d < c.head_dim; ++d) EXPECT_EQ(t.out.get(0, 0, i, d), t.v.get(0, 0, 0, d));
  }
}

// lse is optional: leaving it null must not change out.
TEST(ReferenceEdge, LseIsOptional) {
  Case c;
  c.dtype = DType::kFloat16;
  c.seqlen_q = 40;
  c.seqlen_k = 300;
  c.causal = true;
  CaseTensors with(c), without(c);
  without.args.lse = TensorView{};
  ASSERT_TRUE(flashcore::attention_forward(with.args).ok());
  ASSERT_TRUE(flashcore::attention_forward(without.args).ok());
  EXPECT_EQ(with.out.bytes(), without.out.bytes());
  EXPECT_TRUE(without.lse.padding_is_nan());
  for (double x : without.lse.to_vector()) EXPECT_TRUE(std::isnan(x));  // never written
}

}  // namespace
}  // namespace fctest
