// Serving on the CPU reference backend: variable-length batches, contiguous
// and paged KV caches, the append of k_new/v_new, and every argument and
// metadata error. The reference answers are the library's own plain calls
// on slices (bitwise), so these tests pin the per-sequence semantics.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#if FLASHCORE_TEST_EXPECT_CUDA
#include <cuda_runtime_api.h>
#endif

#include "api/validation.h"
#include "attention_case.h"
#include "reference/reference_attention.h"
#include "serving_case.h"

namespace fctest {
namespace {

using flashcore::AttentionArgs;
using flashcore::Problem;
using flashcore::Status;
using flashcore::StatusCode;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr unsigned char kPoison = 0xA5;

// Mismatching elements between rows [row0, row0 + rows) of `got` batch gb
// and rows [0, rows) of `want` batch wb (all heads, all of the last dim).
int64_t row_mismatches(const HostTensor& got, int64_t gb, int64_t row0, const HostTensor& want, int64_t wb,
                       int64_t rows) {
  int64_t bad = 0;
  for (int64_t h = 0; h < want.view.shape[1]; ++h)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t d = 0; d < want.view.shape[3]; ++d)
        bad += !same_value(got.get(gb, h, row0 + i, d), want.get(wb, h, i, d));
  return bad;
}

// Sequence `b` alone through the plain path: q rows and keys given as plain
// (1, H, S, D) views; returns (out, lse) in fresh tensors.
struct PlainResult {
  HostTensor out, lse;
};
PlainResult plain_call(const AttentionArgs& serving, const TensorView& q, const TensorView& k,
                       const TensorView& v) {
  PlainResult r{HostTensor(q.dtype, 1, q.shape[1], q.shape[2], q.shape[3]), make_lse(1, q.shape[1], q.shape[2])};
  AttentionArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.out = r.out.view;
  a.lse = r.lse.view;
  a.softmax_scale = serving.softmax_scale;
  a.causal = serving.causal;
  a.window_left = serving.window_left;
  a.window_right = serving.window_right;
  const Status s = flashcore::attention_forward(a);
  EXPECT_TRUE(s.ok()) << s.message();
  return r;
}

const Masks kMasks[] = {{false, -1, -1}, {true, -1, -1}, {false, 17, 5}, {true, 40, -1}};

// ---------------------------------------------------------------- varlen

VarlenCase varlen_case(DType dt, Layout layout, const Masks& m, int64_t hq, int64_t hkv) {
  VarlenCase c;
  c.dtype = dt;
  c.layout = layout;
  c.heads_q = hq;
  c.heads_kv = hkv;
  // Lengths around the 64-row tiles and 128-key blocks, empty on either side,
  // and more queries than keys (bottom-right alignment per sequence).
  c.lens_q = {5, 0, 130, 1, 64, 7};
  c.lens_k = {40, 3, 0, 1, 300, 129};
  c.masks = m;
  return c;
}

// Every sequence of a varlen call equals, bitwise, the plain call on its
// own rows.
TEST(ServingVarlen, MatchesEachSequenceAlone) {
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (Layout layout : {Layout::kBHSD, Layout::kBSHD, Layout::kStrided}) {
      for (const Masks& m : kMasks) {
        for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 2}, {3, 1}}) {
          const VarlenCase c = varlen_case(dt, layout, m, hq, hkv);
          SCOPED_TRACE(c.name());
          VarlenTensors t(c);
          const Status s = flashcore::attention_forward(t.args);
          ASSERT_TRUE(s.ok()) << s.message();
          for (size_t b = 0; b < c.lens_q.size(); ++b) {
            SCOPED_TRACE("sequence " + std::to_string(b));
            const int64_t q0 = t.cu_q[b], nq = c.lens_q[b], k0 = t.cu_k[b], nk = c.lens_k[b];
            const PlainResult want = plain_call(t.args, slice_rows(t.q.view, 0, q0, nq),
                                                slice_rows(t.k.view, 0, k0, nk), slice_rows(t.v.view, 0, k0, nk));
            EXPECT_EQ(row_mismatches(t.out, 0, q0, want.out, 0, nq), 0);
            EXPECT_EQ(row_mismatches(t.lse, 0, q0, want.lse, 0, nq), 0);
          }
          if (layout == Layout::kStrided) {
            EXPECT_TRUE(t.out.padding_is_nan()) << "wrote outside out";
          }
        }
      }
    }
  }
}

// Against float64 math, per sequence (the semantics, not just consistency).
TEST(ServingVarlen, MatchesDoublePrecision) {
  VarlenCase c = varlen_case(DType::kFloat32, Layout::kBSHD, {true, 50, -1}, 4, 2);
  VarlenTensors t(c);
  ASSERT_TRUE(flashcore::attention_forward(t.args).ok());
  const double scale = 1.0 / std::sqrt(64.0);
  for (size_t b = 0; b < c.lens_q.size(); ++b) {
    NaiveParams p;
    p.heads_q = c.heads_q;
    p.heads_kv = c.heads_kv;
    p.seqlen_q = c.lens_q[b];
    p.seqlen_k = c.lens_k[b];
    p.scale = scale;
    p.causal = true;
    p.window_left = 50;
    std::vector<double> q, k, v;
    for (int64_t h = 0; h < c.heads_q; ++h)
      for (int64_t i = 0; i < p.seqlen_q; ++i)
        for (int64_t d = 0; d < 64; ++d) q.push_back(t.q.get(0, h, t.cu_q[b] + i, d));
    for (int64_t h = 0; h < c.heads_kv; ++h)
      for (int64_t j = 0; j < p.seqlen_k; ++j)
        for (int64_t d = 0; d < 64; ++d) {
          k.push_back(t.k.get(0, h, t.cu_k[b] + j, d));
          v.push_back(t.v.get(0, h, t.cu_k[b] + j, d));
        }
    const NaiveResult want = naive_attention(q, k, v, p);
    double err = 0;
    for (int64_t h = 0; h < c.heads_q; ++h)
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        const double lse = want.lse[h * p.seqlen_q + i];
        const double got_lse = t.lse.get(0, h, t.cu_q[b] + i, 0);
        if (std::isinf(lse)) {
          EXPECT_EQ(got_lse, -kInf);
        } else {
          err = std::max(err, std::fabs(got_lse - lse));
        }
        for (int64_t d = 0; d < 64; ++d)
          err = std::max(err, std::fabs(t.out.get(0, h, t.cu_q[b] + i, d) - want.out[(h * p.seqlen_q + i) * 64 + d]));
      }
    EXPECT_LT(err, 2e-5) << "sequence " << b;
  }
}

// A sequence without keys gives zeros and LSE -inf; one without rows
// writes nothing (its neighbours' rows are checked by the test above).
TEST(ServingVarlen, ZeroLengthSequences) {
  VarlenCase c = varlen_case(DType::kBFloat16, Layout::kBSHD, {}, 4, 2);
  c.lens_q = {3, 0, 4};
  c.lens_k = {0, 5, 0};
  VarlenTensors t(c);
  ASSERT_TRUE(flashcore::attention_forward(t.args).ok());
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 7; ++i) {
      EXPECT_EQ(t.lse.get(0, h, i, 0), -kInf);
      for (int64_t d = 0; d < 64; ++d) ASSERT_EQ(t.out.get(0, h, i, d), 0.0);
    }
}

TEST(ServingVarlen, ThreadCountDoesNotChangeResults) {
  const VarlenCase c = varlen_case(DType::kFloat16, Layout::kBSHD, {true, -1, -1}, 4, 2);
  VarlenTensors one(c);
  Problem p;
  ASSERT_TRUE(flashcore::validate(one.args, &p).ok());
  ASSERT_TRUE(flashcore::reference::forward(one.args, p, 1).ok());
  for (int threads : {2, 5}) {
    VarlenTensors many(c);
    ASSERT_TRUE(flashcore::reference::forward(many.args, p, threads).ok());
    EXPECT_EQ(one.out.bytes(), many.out.bytes()) << threads;
    EXPECT_EQ(one.lse.bytes(), many.lse.bytes()) << threads;
  }
}

TEST(ServingVarlen, ResolvesProblem) {
  const VarlenCase c = varlen_case(DType::kFloat16, Layout::kBSHD, {}, 4, 2);
  VarlenTensors t(c);
  Problem p;
  ASSERT_TRUE(flashcore::validate(t.args, &p).ok());
  EXPECT_TRUE(p.varlen_q && p.varlen_k && p.has_per_seq_lengths());
  EXPECT_FALSE(p.kv_cache || p.paged);
  EXPECT_EQ(p.batch, 6);
  EXPECT_EQ(p.seqlen_q, 130);
  EXPECT_EQ(p.seqlen_k, 300);
  EXPECT_EQ(p.total_q, 207);
  EXPECT_EQ(p.total_k, 473);
  EXPECT_EQ(p.heads_q, 4);
  EXPECT_EQ(p.heads_kv, 2);
  EXPECT_EQ(p.seqlen_new, 0);
}

// ---------------------------------------------------------------- KV cache

CacheCase cache_case(DType dt, Layout layout, int64_t page_size, int64_t seqlen_q, int64_t seqlen_new,
                     const Masks& m) {
  CacheCase c;
  c.dtype = dt;
  c.layout = layout;
  c.seqlen_q = seqlen_q;
  c.seqlen_new = seqlen_new;
  c.page_size = page_size;
  c.capacity = 256;  // a multiple of every page size
  c.cache_lens = {0, 17, 256 - seqlen_new - 3};
  c.masks = m;
  return c;
}

// A contiguous cache call equals, per sequence, the plain call on the cache
// sliced to its first cache_seqlens[b] + S_new keys (after the append).
TEST(ServingCache, ContiguousMatchesPlainOnSlicedCache) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    for (Layout layout : {Layout::kBHSD, Layout::kBSHD, Layout::kStrided}) {
      for (const Masks& m : kMasks) {
        for (auto [sq, snew] : {std::pair<int64_t, int64_t>{1, 0}, {4, 4}, {70, 0}, {3, 1}}) {
          const CacheCase c = cache_case(dt, layout, 0, sq, snew, m);
          SCOPED_TRACE(c.name());
          CacheTensors t(c);
          const Status s = flashcore::attention_forward(t.args);
          ASSERT_TRUE(s.ok()) << s.message();
          for (int64_t b = 0; b < c.batch; ++b) {
            const int64_t keys = c.cache_lens[b] + snew;
            const PlainResult want = plain_call(t.args, slice_rows(t.q.view, b, 0, sq), slice_rows(t.k.view, b, 0, keys),
                                                slice_rows(t.v.view, b, 0, keys));
            EXPECT_EQ(row_mismatches(t.out, b, 0, want.out, 0, sq), 0) << "sequence " << b;
            EXPECT_EQ(row_mismatches(t.lse, b, 0, want.lse, 0, sq), 0) << "sequence " << b;
          }
        }
      }
    }
  }
}

// Paged caches (every page size, permuted pages) equal the contiguous cache
// with the same contents, bitwise, appended rows included.
TEST(ServingCache, PagedMatchesContiguous) {
  for (int64_t page : {16, 32, 64, 128, 256}) {
    for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
      for (auto [sq, snew] : {std::pair<int64_t, int64_t>{1, 1}, {5, 0}, {16, 16}}) {
        const Masks m = page == 32 ? Masks{false, 20, 3} : Masks{true, -1, -1};
        const CacheCase pc = cache_case(dt, Layout::kBSHD, page, sq, snew, m);
        const CacheCase cc = cache_case(dt, Layout::kBSHD, 0, sq, snew, m);
        SCOPED_TRACE(pc.name());
        CacheTensors paged(pc), contiguous(cc);
        Status s = flashcore::attention_forward(paged.args);
        ASSERT_TRUE(s.ok()) << s.message();
        s = flashcore::attention_forward(contiguous.args);
        ASSERT_TRUE(s.ok()) << s.message();
        EXPECT_EQ(paged.out.bytes(), contiguous.out.bytes());
        EXPECT_EQ(paged.lse.bytes(), contiguous.lse.bytes());
        int64_t bad = 0;
        for (int64_t b = 0; b < pc.batch; ++b)
          for (int64_t h = 0; h < pc.heads_kv; ++h)
            for (int64_t j = 0; j < pc.cache_lens[b] + snew; ++j)
              for (int64_t d = 0; d < pc.head_dim; ++d)
                bad += !same_value(paged.key(paged.v, b, h, j, d), contiguous.key(contiguous.v, b, h, j, d)) +
                       !same_value(paged.key(paged.k, b, h, j, d), contiguous.key(contiguous.k, b, h, j, d));
        EXPECT_EQ(bad, 0) << "cache contents differ after the append";
      }
    }
  }
}

// The append writes exactly rows [cache_seqlens[b], + S_new) of each
// sequence (through the block table when paged) and nothing else.
TEST(ServingCache, AppendWritesExactlyTheNewRows) {
  for (int64_t page : {0, 16, 64}) {
    for (Layout layout : {Layout::kBHSD, Layout::kStrided}) {
      const CacheCase c = cache_case(DType::kBFloat16, layout, page, 3, 3, {true, -1, -1});
      SCOPED_TRACE(c.name());
      CacheTensors t(c);
      const std::vector<double> k_before = t.k.to_vector(), v_before = t.v.to_vector();
      const Status s = flashcore::attention_forward(t.args);
      ASSERT_TRUE(s.ok()) << s.message();
      for (auto [cache, fresh, before] : {std::tuple<HostTensor*, HostTensor*, const std::vector<double>*>{
                                              &t.k, &t.k_new, &k_before},
                                          {&t.v, &t.v_new, &v_before}}) {
        // Expected contents: the old ones with the new rows put in place.
        std::vector<double> want = *before;
        const TensorView& w = cache->view;
        auto index = [&](int64_t n, int64_t h, int64_t s, int64_t d) {
          return ((n * w.shape[1] + h) * w.shape[2] + s) * w.shape[3] + d;
        };
        for (int64_t b = 0; b < c.batch; ++b)
          for (int64_t h = 0; h < c.heads_kv; ++h)
            for (int64_t i = 0; i < c.seqlen_new; ++i) {
              const auto [n, row] = t.key_slot(b, c.cache_lens[b] + i);
              for (int64_t d = 0; d < c.head_dim; ++d) want[index(n, h, row, d)] = fresh->get(b, h, i, d);
            }
        const std::vector<double> got = cache->to_vector();
        int64_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) bad += !same_value(got[i], want[i]);
        EXPECT_EQ(bad, 0);
        if (layout == Layout::kStrided) {
          EXPECT_TRUE(cache->padding_is_nan());
        }
      }
    }
  }
}

// Decode with GQA 8:1 and a long prefix: against float64 math.
TEST(ServingCache, DecodeMatchesDoublePrecision) {
  CacheCase c = cache_case(DType::kFloat32, Layout::kBSHD, 64, 1, 1, {true, -1, -1});
  c.heads_q = 8;
  c.heads_kv = 1;
  c.capacity = 512;
  c.cache_lens = {500, 1, 130};
  CacheTensors t(c);
  ASSERT_TRUE(flashcore::attention_forward(t.args).ok());
  for (int64_t b = 0; b < c.batch; ++b) {
    NaiveParams p;
    p.heads_q = 8;
    p.seqlen_q = 1;
    p.seqlen_k = c.cache_lens[b] + 1;
    p.scale = 1.0 / std::sqrt(64.0);
    p.causal = true;
    std::vector<double> q, k, v;
    for (int64_t h = 0; h < 8; ++h)
      for (int64_t d = 0; d < 64; ++d) q.push_back(t.q.get(b, h, 0, d));
    for (int64_t j = 0; j < p.seqlen_k; ++j)
      for (int64_t d = 0; d < 64; ++d) {
        k.push_back(t.key(t.k, b, 0, j, d));
        v.push_back(t.key(t.v, b, 0, j, d));
      }
    const NaiveResult want = naive_attention(q, k, v, p);
    for (int64_t h = 0; h < 8; ++h) {
      EXPECT_NEAR(t.lse.get(b, h, 0, 0), want.lse[h], 2e-5);
      for (int64_t d = 0; d < 64; ++d) EXPECT_NEAR(t.out.get(b, h, 0, d), want.out[h * 64 + d], 2e-5);
    }
  }
}

TEST(ServingCache, EmptyCacheGivesZerosAndMinusInf) {
  CacheCase c = cache_case(DType::kFloat16, Layout::kBSHD, 16, 2, 0, {});
  c.cache_lens = {0, 0, 0};
  CacheTensors t(c);
  ASSERT_TRUE(flashcore::attention_forward(t.args).ok());
  t.out.for_each_index([&](int64_t b, int64_t h, int64_t s, int64_t d) { ASSERT_EQ(t.out.get(b, h, s, d), 0.0); });
  t.lse.for_each_index([&](int64_t b, int64_t h, int64_t s, int64_t) { ASSERT_EQ(t.lse.get(b, h, s, 0), -kInf); });
}

// A problem with no query rows is a no-op: the append does not happen either.
TEST(ServingCache, EmptyProblemDoesNotAppend) {
  CacheCase c = cache_case(DType::kFloat16, Layout::kBSHD, 0, 0, 2, {});
  CacheTensors t(c);
  const std::vector<unsigned char> before = t.k.bytes();
  ASSERT_TRUE(flashcore::attention_forward(t.args).ok());
  EXPECT_EQ(t.k.bytes(), before);
}

TEST(ServingCache, ResolvesProblem) {
  CacheCase c = cache_case(DType::kFloat16, Layout::kBSHD, 32, 4, 4, {});
  CacheTensors t(c);
  Problem p;
  ASSERT_TRUE(flashcore::validate(t.args, &p).ok());
  EXPECT_TRUE(p.kv_cache && p.paged && p.has_per_seq_lengths());
  EXPECT_FALSE(p.varlen_q || p.varlen_k);
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.seqlen_q, 4);
  EXPECT_EQ(p.seqlen_k, 256);  // max_pages_per_seq * page_size
  EXPECT_EQ(p.page_size, 32);
  EXPECT_EQ(p.num_pages, 3 * 8 + 2);
  EXPECT_EQ(p.max_pages_per_seq, 8);
  EXPECT_EQ(p.block_table_stride, 9);
  EXPECT_EQ(p.seqlen_new, 4);

  CacheCase cc = cache_case(DType::kFloat16, Layout::kBSHD, 0, 4, 0, {});
  cc.capacity = 100;
  cc.cache_lens = {1, 2, 3};
  CacheTensors ct(cc);
  ASSERT_TRUE(flashcore::validate(ct.args, &p).ok());
  EXPECT_TRUE(p.kv_cache);
  EXPECT_FALSE(p.paged);
  EXPECT_EQ(p.seqlen_k, 100);  // k.shape[2]
  EXPECT_EQ(p.seqlen_new, 0);
}

// ---------------------------------------------------------------- errors

// Checks the code and message of attention_forward (nothing written) and,
// for metadata errors, of check_serving_metadata too.
class ServingErrors : public ::testing::Test {
 protected:
  void expect_error(AttentionArgs& a, std::initializer_list<HostTensor*> untouched, StatusCode code,
                    std::initializer_list<std::string> fragments, bool metadata = false) {
    for (HostTensor* t : untouched) t->fill_bytes(kPoison);
    const Status s = flashcore::attention_forward(a);
    expect_status(s, code, fragments);
    for (HostTensor* t : untouched) EXPECT_TRUE(t->all_bytes_equal(kPoison)) << "written on error";
    if (metadata) {
      expect_status(flashcore::check_serving_metadata(a), code, fragments);
      // Structurally valid: only the contents are wrong.
      Problem p;
      EXPECT_TRUE(flashcore::validate(a, &p).ok());
    }
  }
  static void expect_status(const Status& s, StatusCode code, std::initializer_list<std::string> fragments) {
    EXPECT_EQ(static_cast<int>(s.code()), static_cast<int>(code)) << s.message();
    for (const std::string& f : fragments) {
      EXPECT_NE(s.message().find(f), std::string::npos) << "message: '" << s.message() << "' lacks '" << f << "'";
    }
  }
};

VarlenCase small_varlen() {
  VarlenCase c;
  c.lens_q = {5, 0, 20};
  c.lens_k = {7, 3, 30};
  return c;
}

CacheCase small_paged() {
  CacheCase c;
  c.batch = 2;
  c.seqlen_q = 2;
  c.seqlen_new = 2;
  c.page_size = 16;
  c.capacity = 48;  // 3 pages per sequence
  c.cache_lens = {5, 30};
  return c;
}

TEST_F(ServingErrors, ValidFixturesPass) {
  VarlenTensors v(small_varlen());
  EXPECT_TRUE(flashcore::attention_forward(v.args).ok());
  EXPECT_TRUE(flashcore::check_serving_metadata(v.args).ok());
  CacheTensors p(small_paged());
  EXPECT_TRUE(flashcore::attention_forward(p.args).ok());
  EXPECT_TRUE(flashcore::check_serving_metadata(p.args).ok());
  CaseTensors plain(Case{});
  EXPECT_TRUE(flashcore::check_serving_metadata(plain.args).ok());  // nothing to check
}

TEST_F(ServingErrors, VarlenPointerCombinations) {
  VarlenTensors t(small_varlen());
  AttentionArgs a = t.args;
  a.cu_seqlens_q = nullptr;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument,
               {"cu_seqlens_k is set but cu_seqlens_q is null"});
  a = t.args;
  a.cu_seqlens_k = nullptr;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument,
               {"cu_seqlens_q is set but cu_seqlens_k is null"});
  a = t.args;
  const int32_t lens[3] = {1, 1, 1};
  a.cache_seqlens = lens;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kNotSupported, {"cu_seqlens_q together with cache_seqlens"});
}

TEST_F(ServingErrors, VarlenSizesWithoutCuSeqlens) {
  CaseTensors t(Case{});
  for (int64_t AttentionArgs::*field : {&AttentionArgs::num_seqs, &AttentionArgs::max_seqlen_q,
                                        &AttentionArgs::max_seqlen_k}) {
    AttentionArgs a = t.args;
    a.*field = 3;
    expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument, {" = 3 is set but cu_seqlens_q is null"});
  }
}

TEST_F(ServingErrors, VarlenSizeRanges) {
  VarlenTensors t(small_varlen());
  AttentionArgs a = t.args;
  a.max_seqlen_q = -1;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument, {"max_seqlen_q = -1 must be in [0, 2^31)"});
  a = t.args;
  a.num_seqs = int64_t(1) << 31;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument, {"num_seqs = 2147483648 must be in [0, 2^31)"});
  a = t.args;
  a.max_seqlen_k = int64_t(1) << 40;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument, {"max_seqlen_k"});
}

TEST_F(ServingErrors, VarlenShapes) {
  VarlenTensors t(small_varlen());
  AttentionArgs a = t.args;
  a.q.shape[0] = a.out.shape[0] = a.lse.shape[0] = 2;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument,
               {"q.shape[0] = 2 must be 1 with cu_seqlens_q", "(1, heads, total_q, head_dim)"});
  a = t.args;
  a.k.shape[0] = a.v.shape[0] = 2;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument, {"k.shape[0] = 2 must be 1 with cu_seqlens_k"});
  a = t.args;
  a.lse.shape[2] = 24;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument,
               {"lse.shape must be (1, q heads, total_q, 1) = (1, 4, 25, 1)"});
  a = t.args;
  a.k.shape[1] = a.v.shape[1] = 3;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument, {"q heads (4) must be a multiple of k heads (3)"});
}

TEST_F(ServingErrors, MetadataMustBeAligned) {
  VarlenTensors t(small_varlen());
  AttentionArgs a = t.args;
  a.cu_seqlens_k = reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(t.cu_k.data()) + 2);
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument, {"cu_seqlens_k is not 4-byte aligned"});
}

TEST_F(ServingErrors, CuSeqlensContents) {
  VarlenTensors t(small_varlen());  // cu_q {0, 5, 5, 25}, cu_k {0, 7, 10, 40}
  AttentionArgs a = t.args;
  std::vector<int32_t> bad = {1, 5, 5, 25};
  a.cu_seqlens_q = bad.data();
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument, {"cu_seqlens_q[0] = 1 must be 0"}, true);
  bad = {0, 6, 5, 25};
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument,
               {"cu_seqlens_q must be non-decreasing: cu_seqlens_q[2] = 5 < cu_seqlens_q[1] = 6",
                "sequence 1 would have length -1"},
               true);
  bad = {0, 5, 5, 24};
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument,
               {"cu_seqlens_q[num_seqs] = cu_seqlens_q[3] = 24 must equal total_q (q.shape[2]) = 25"}, true);
  a = t.args;
  a.max_seqlen_k = 29;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument,
               {"sequence 2 has 30 rows", "more than max_seqlen_k = 29"}, true);
  a = t.args;
  bad = {0, 8, 11, 41};
  a.cu_seqlens_k = bad.data();
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument, {"cu_seqlens_k[num_seqs]", "total_k"}, true);
}

TEST_F(ServingErrors, CachePointerCombinations) {
  CacheTensors t(small_paged());
  AttentionArgs a = t.args;
  a.cache_seqlens = nullptr;
  a.k_new = a.v_new = TensorView{};
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument, {"block_table is set but cache_seqlens is null"});
  a = t.args;
  a.v_new.data = nullptr;
  expect_error(a, {&t.out, &t.lse, &t.k, &t.v}, StatusCode::kInvalidArgument,
               {"k_new is set but v_new.data is null"});
  a = t.args;
  a.k_new.data = nullptr;
  expect_error(a, {&t.out, &t.lse, &t.k, &t.v}, StatusCode::kInvalidArgument,
               {"v_new is set but k_new.data is null"});

  CaseTensors plain(Case{});
  a = plain.args;
  a.k_new = plain.k.view;
  a.v_new = plain.v.view;
  expect_error(a, {&plain.out, &plain.lse}, StatusCode::kInvalidArgument,
               {"k_new/v_new are set but cache_seqlens is null"});
  a = plain.args;
  a.max_pages_per_seq = 3;
  expect_error(a, {&plain.out, &plain.lse}, StatusCode::kInvalidArgument,
               {"max_pages_per_seq = 3 is set but block_table is null"});
  a = plain.args;
  a.block_table_stride = 4;
  expect_error(a, {&plain.out, &plain.lse}, StatusCode::kInvalidArgument,
               {"block_table_stride = 4 is set but block_table is null"});
}

TEST_F(ServingErrors, PagingSizes) {
  CacheTensors t(small_paged());
  AttentionArgs a = t.args;
  a.max_pages_per_seq = 0;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument, {"max_pages_per_seq = 0 must be > 0"});
  a = t.args;
  a.block_table_stride = 2;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument,
               {"block_table_stride = 2 must be >= max_pages_per_seq = 3"});
  a = t.args;
  a.max_pages_per_seq = -4;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument, {"max_pages_per_seq = -4 must be in [0, 2^31)"});
  a = t.args;
  a.k.shape[2] = a.v.shape[2] = 8;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument,
               {"k.shape[2] (page_size) = 8 must be a positive multiple of 16"});
  a = t.args;
  a.max_pages_per_seq = a.block_table_stride = int64_t(1) << 30;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument, {"max_pages_per_seq * page_size", "< 2^31"});
}

TEST_F(ServingErrors, ContiguousCacheBatch) {
  CacheCase c = small_paged();
  c.page_size = 0;
  CacheTensors t(c);
  AttentionArgs a = t.args;
  a.k.shape[0] = a.v.shape[0] = 1;
  expect_error(a, {&t.out, &t.lse}, StatusCode::kInvalidArgument, {"k.shape[0] (batch) = 1 must equal q.shape[0] = 2"});
}

TEST_F(ServingErrors, NewKeysShapesAndLayout) {
  CacheTensors t(small_paged());
  const std::initializer_list<HostTensor*> untouched = {&t.out, &t.lse, &t.k, &t.v};
  AttentionArgs a = t.args;
  a.k_new.shape[1] = a.v_new.shape[1] = 1;
  expect_error(a, untouched, StatusCode::kInvalidArgument, {"k_new.shape[1] (heads) = 1 must equal k.shape[1] = 2"});
  a = t.args;
  a.k_new.shape[0] = a.v_new.shape[0] = 1;
  expect_error(a, untouched, StatusCode::kInvalidArgument, {"k_new.shape[0] (batch) = 1 must equal q.shape[0] = 2"});
  a = t.args;
  a.v_new.shape[2] = 1;
  expect_error(a, untouched, StatusCode::kInvalidArgument, {"v_new.shape[2] (seqlen) = 1 must equal k_new.shape[2] = 2"});
  a = t.args;
  a.k_new.dtype = DType::kBFloat16;
  expect_error(a, untouched, StatusCode::kInvalidArgument, {"q.dtype is float16 but k_new.dtype is bfloat16"});
  a = t.args;
  a.v_new.stride[3] = 2;
  expect_error(a, untouched, StatusCode::kInvalidArgument, {"v_new.stride[3] must be 1"});
  a = t.args;
  a.k_new.device = Device::kCUDA;
  expect_error(a, untouched, StatusCode::kInvalidArgument, {"tensors are on different devices (q: cpu, k_new: cuda:0)"});
  a = t.args;
  a.k_new.shape[2] = a.v_new.shape[2] = 49;
  HostTensor big_k(DType::kFloat16, 2, 2, 49, 64), big_v(DType::kFloat16, 2, 2, 49, 64);
  a.k_new = big_k.view;
  a.v_new = big_v.view;
  expect_error(a, untouched, StatusCode::kInvalidArgument,
               {"k_new.shape[2] = 49 new tokens do not fit the cache capacity 48 (max_pages_per_seq * page_size = 3 * 16)"});
  a = t.args;
  a.k.stride[2] = 0;  // the cache is written: it must not alias itself
  expect_error(a, untouched, StatusCode::kInvalidArgument, {"k has overlapping elements"});
}

TEST_F(ServingErrors, CacheContents) {
  CacheTensors t(small_paged());  // cache_seqlens {5, 30} + 2 new, capacity 48, pool of 8 pages
  const std::initializer_list<HostTensor*> untouched = {&t.out, &t.lse, &t.k, &t.v};
  AttentionArgs a = t.args;
  std::vector<int32_t> lens = {5, -1};
  a.cache_seqlens = lens.data();
  expect_error(a, untouched, StatusCode::kInvalidArgument, {"cache_seqlens[1] = -1 must be >= 0"}, true);
  lens = {5, 47};
  expect_error(a, untouched, StatusCode::kInvalidArgument,
               {"sequence 1: cache_seqlens[1] = 47 + 2 new tokens (k_new.shape[2]) = 49 exceeds the cache capacity 48"},
               true);
  a.k_new = a.v_new = TensorView{};  // without new tokens 47 fits, 49 does not
  lens = {5, 47};
  expect_error(a, {}, StatusCode::kOk, {});
  lens = {49, 5};
  expect_error(a, {}, StatusCode::kInvalidArgument,
               {"sequence 0: cache_seqlens[0] = 49 exceeds the cache capacity 48 (max_pages_per_seq * page_size = 3 * 16)"},
               true);
}

TEST_F(ServingErrors, BlockTableOutsidePool) {
  CacheTensors t(small_paged());
  const std::initializer_list<HostTensor*> untouched = {&t.out, &t.lse, &t.k, &t.v};
  AttentionArgs a = t.args;
  std::vector<int32_t> table = t.block_table;  // stride 4; sequence 1 uses 2 pages (32 keys)
  a.block_table = table.data();
  table[4 + 1] = 8;
  expect_error(a, untouched, StatusCode::kInvalidArgument,
               {"block_table[1][1] = 8 (sequence 1, page 1", "outside the page pool [0, 8)"}, true);
  table[4 + 1] = -1;
  expect_error(a, untouched, StatusCode::kInvalidArgument, {"block_table[1][1] = -1"}, true);
  // Entries past the pages in use are never read or checked.
  table = t.block_table;
  table[4 + 2] = -5;
  table[1] = 1000;
  expect_error(a, {}, StatusCode::kOk, {});
}

TEST_F(ServingErrors, MetadataOfEmptyProblemIsStillChecked) {
  VarlenCase c = small_varlen();
  c.heads_q = c.heads_kv = 0;  // nothing to compute
  VarlenTensors t(c);
  std::vector<int32_t> bad = {0, 6, 5, 25};
  t.args.cu_seqlens_q = bad.data();
  const Status s = flashcore::attention_forward(t.args);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
}

TEST_F(ServingErrors, CudaLabelledMetadataWithoutCuda) {
  if (flashcore::built_with_cuda()) GTEST_SKIP() << "CUDA build: covered by the GPU tests";
  VarlenTensors t(small_varlen());
  for (TensorView* v : {&t.args.q, &t.args.k, &t.args.v, &t.args.out, &t.args.lse}) v->device = Device::kCUDA;
  expect_error(t.args, {&t.out, &t.lse}, StatusCode::kNotSupported, {"built without CUDA"});
  EXPECT_EQ(flashcore::check_serving_metadata(t.args).code(), StatusCode::kNotSupported);
}

// ---------------------------------------------------------------- CUDA metadata
// Validation and check_serving_metadata with tensors and metadata in device
// memory (no kernel runs). Compiled in CUDA builds; skips without a device.
#if FLASHCORE_TEST_EXPECT_CUDA
class DeviceCopy {
 public:
  DeviceCopy(const void* host, size_t bytes) {
    if (cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes) != cudaSuccess) ptr_ = nullptr;
    if (ptr_ && bytes && cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceCopy() { cudaFree(ptr_); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  template <class T>
  T* get() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

// The tensor's elements (from its first to its last) copied to the device;
// `view` is the same view of the copy.
struct DeviceTensor {
  static size_t extent_bytes(const TensorView& t) {
    int64_t last = 0;
    for (int i = 0; i < 4; ++i) {
      if (t.shape[i] == 0) return 0;
      last += (t.shape[i] - 1) * t.stride[i];
    }
    return static_cast<size_t>((last + 1) * flashcore::dtype_size(t.dtype));
  }
  explicit DeviceTensor(const TensorView& t) : copy(t.data, extent_bytes(t)), view(t) {
    view.data = copy.get<void>();
    view.device = Device::kCUDA;
    view.device_index = 0;
  }
  DeviceCopy copy;
  TensorView view;
};

class CudaServing : public ServingErrors {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
  // Tensors of `a` moved to the device (the metadata stays as it is).
  struct OnDevice {
    explicit OnDevice(const AttentionArgs& host)
        : q(host.q), k(host.k), v(host.v), out(host.out), lse(host.lse), k_new(host.k_new), v_new(host.v_new) {
      args = host;
      args.q = q.view;
      args.k = k.view;
      args.v = v.view;
      args.out = out.view;
      args.lse = lse.view;
      if (host.k_new.data) {
        args.k_new = k_new.view;
        args.v_new = v_new.view;
      }
    }
    DeviceTensor q, k, v, out, lse, k_new, v_new;
    AttentionArgs args;
  };
  static void expect_cuda_status(const Status& s, StatusCode code, const std::string& fragment) {
    expect_status(s, code, {fragment});
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // nothing left for the caller
  }
};

TEST_F(CudaServing, PagedMetadataOnDevice) {
  CacheTensors t(small_paged());
  OnDevice d(t.args);
  DeviceCopy lens(t.cache_seqlens.data(), t.cache_seqlens.size() * 4);
  std::vector<int32_t> table = t.block_table;
  DeviceCopy dtable(table.data(), table.size() * 4);
  d.args.cache_seqlens = lens.get<int32_t>();
  d.args.block_table = dtable.get<int32_t>();
  Problem p;
  Status s = flashcore::validate(d.args, &p);
  ASSERT_TRUE(s.ok()) << s.message();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  s = flashcore::check_serving_metadata(d.args, stream);
  EXPECT_TRUE(s.ok()) << s.message();

  table[4 + 1] = 8;  // sequence 1, page 1: one past the pool
  ASSERT_EQ(cudaMemcpy(dtable.get<int32_t>(), table.data(), table.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  expect_cuda_status(flashcore::check_serving_metadata(d.args, stream), StatusCode::kInvalidArgument,
                     "block_table[1][1] = 8 (sequence 1, page 1");
  table = t.block_table;
  std::vector<int32_t> bad_lens = {5, 47};  // + 2 new > 48
  ASSERT_EQ(cudaMemcpy(dtable.get<int32_t>(), table.data(), table.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(lens.get<int32_t>(), bad_lens.data(), 8, cudaMemcpyHostToDevice), cudaSuccess);
  expect_cuda_status(flashcore::check_serving_metadata(d.args, nullptr), StatusCode::kInvalidArgument,
                     "sequence 1: cache_seqlens[1] = 47 + 2 new tokens");
  cudaStreamDestroy(stream);

  // Host metadata with CUDA tensors is refused by validation, by name.
  d.args.cache_seqlens = t.cache_seqlens.data();
  expect_cuda_status(flashcore::validate(d.args, &p), StatusCode::kInvalidArgument,
                     "cache_seqlens is host memory unknown to CUDA but the tensors are on cuda:0");
}

TEST_F(CudaServing, VarlenMetadataOnDevice) {
  VarlenTensors t(small_varlen());
  OnDevice d(t.args);
  DeviceCopy cu_q(t.cu_q.data(), t.cu_q.size() * 4), cu_k(t.cu_k.data(), t.cu_k.size() * 4);
  d.args.cu_seqlens_q = cu_q.get<int32_t>();
  d.args.cu_seqlens_k = cu_k.get<int32_t>();
  Status s = flashcore::check_serving_metadata(d.args, nullptr);
  EXPECT_TRUE(s.ok()) << s.message();
  const int32_t bad[4] = {0, 6, 5, 25};
  ASSERT_EQ(cudaMemcpy(cu_q.get<int32_t>(), bad, sizeof bad, cudaMemcpyHostToDevice), cudaSuccess);
  expect_cuda_status(flashcore::check_serving_metadata(d.args, nullptr), StatusCode::kInvalidArgument,
                     "cu_seqlens_q must be non-decreasing");
  // The workspace query reads no metadata: fine either way.
  int64_t bytes = -1;
  s = flashcore::attention_workspace_size(d.args, &bytes);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_GE(bytes, 0);
}
#endif  // FLASHCORE_TEST_EXPECT_CUDA

}  // namespace
}  // namespace fctest
