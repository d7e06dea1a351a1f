// Bitwise reproducibility: across runs, thread counts and batch composition.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "api/validation.h"
#include "attention_case.h"
#include "reference/reference_attention.h"

namespace fctest {
namespace {

// Values read back from the same dtype: equal with equal sign means equal
// bits (no NaN is expected here).
bool same_bits(double a, double b) { return a == b && std::signbit(a) == std::signbit(b); }

Case medium_case(DType dt, Layout layout) {
  Case c;
  c.dtype = dt;
  c.layout = layout;
  c.batch = 3;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = 150;
  c.seqlen_k = 260;
  c.head_dim = 96;
  c.causal = true;
  c.window_left = 200;
  c.seed = 42;
  return c;
}

TEST(Determinism, TwoRunsAreBitwiseIdentical) {
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const Case c = medium_case(dt, Layout::kBSHD);
    CaseTensors a(c), b(c);
    ASSERT_EQ(a.q.bytes(), b.q.bytes());  // same seed, same inputs
    ASSERT_TRUE(flashcore::attention_forward(a.args).ok());
    ASSERT_TRUE(flashcore::attention_forward(b.args).ok());
    EXPECT_EQ(a.out.bytes(), b.out.bytes()) << c.name();
    EXPECT_EQ(a.lse.bytes(), b.lse.bytes()) << c.name();
  }
}

// attention_forward with a workspace allocator: the CPU backend needs no
// workspace, so the allocator is never called and the result is the plain
// call's, bit for bit; a decode-shaped call (which would split on the GPU)
// alike. Bad arguments are refused before any allocation.
TEST(Determinism, WorkspaceAllocatorIsNotCalledOnTheCpu) {
  for (int64_t sq : {int64_t(1), int64_t(150)}) {
    Case c = medium_case(DType::kBFloat16, Layout::kBSHD);
    c.seqlen_q = sq;
    c.causal = false;
    CaseTensors a(c), b(c);
    RefusingWorkspaceAlloc count;
    ASSERT_TRUE(flashcore::attention_forward(a.args).ok());
    flashcore::Status st = flashcore::attention_forward(b.args, nullptr, &RefusingWorkspaceAlloc::alloc, &count);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(count.calls, 0);
    EXPECT_EQ(a.out.bytes(), b.out.bytes()) << c.name();
    EXPECT_EQ(a.lse.bytes(), b.lse.bytes()) << c.name();
    b.args.q.data = nullptr;
    st = flashcore::attention_forward(b.args, nullptr, &RefusingWorkspaceAlloc::alloc, &count);
    EXPECT_EQ(st.code(), flashcore::StatusCode::kInvalidArgument) << st.message();
    EXPECT_EQ(count.calls, 0);
  }
}

// The reference's thread count is a schedule detail; it must not show.
TEST(Determinism, ThreadCountDoesNotChangeResults) {
  const Case c = medium_case(DType::kBFloat16, Layout::kStrided);
  CaseTensors one(c);
  flashcore::Problem problem;
  ASSERT_TRUE(flashcore::validate(one.args, &problem).ok());
  ASSERT_TRUE(flashcore::reference::forward(one.args, problem, 1).ok());
  for (int threads : {2, 3, 5, 16}) {
    CaseTensors many(c);
    ASSERT_TRUE(flashcore::reference::forward(many.args, problem, threads).ok());
    EXPECT_EQ(one.out.bytes(), many.out.bytes()) << threads << " threads";
    EXPECT_EQ(one.lse.bytes(), many.lse.bytes()) << threads << " threads";
  }
}

// A sequence computed alone equals, bitwise, the same sequence computed as
// batch entry 1 of 3.
TEST(Determinism, BatchInvariance) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    for (Layout layout : {Layout::kBHSD, Layout::kBSHD}) {
      const Case batched_case = medium_case(dt, layout);
      CaseTensors batched(batched_case);
      Case alone_case = batched_case;
      alone_case.batch = 1;
      CaseTensors alone(alone_case, /*fill=*/false);
      const int64_t pick = 1;
      for (HostTensor* src : {&batched.q, &batched.k, &batched.v}) {
        HostTensor* dst = src == &batched.q ? &alone.q : src == &batched.k ? &alone.k : &alone.v;
        dst->for_each_index([&](int64_t, int64_t h, int64_t s, int64_t d) {
          dst->set(0, h, s, d, src->get(pick, h, s, d));
        });
      }
      ASSERT_TRUE(flashcore::attention_forward(batched.args).ok());
      ASSERT_TRUE(flashcore::attention_forward(alone.args).ok());
      int64_t mismatches = 0;
      alone.out.for_each_index([&](int64_t, int64_t h, int64_t s, int64_t d) {
        mismatches += !same_bits(alone.out.get(0, h, s, d), batched.out.get(pick, h, s, d));
      });
      alone.lse.for_each_index([&](int64_t, int64_t h, int64_t s, int64_t) {
        mismatches += !same_bits(alone.lse.get(0, h, s, 0), batched.lse.get(pick, h, s, 0));
      });
      EXPECT_EQ(mismatches, 0) << alone_case.name();
    }
  }
}

}  // namespace
}  // namespace fctest
