// Which varlen calls dispatch runs as a dense batch on the plain kernels
// (src/sm90/dense_varlen.h), and the dense views it gives them: each element
// of a sequence at the same address as in the packed tensor. Pure host
// arithmetic, so it runs on every machine; the GPU test
// UniformVarlenRunsAsADenseBatch checks the bits.
#include <gtest/gtest.h>

#include "common/problem.h"
#include "sm90/dense_varlen.h"

namespace fctest {
namespace {

using flashcore::AttentionArgs;
using flashcore::Problem;
using flashcore::TensorView;
using namespace flashcore::sm90;

// A varlen problem of `seqs` sequences: bounds sq/sk, packed rows tq/tk.
Problem varlen(int64_t seqs, int64_t sq, int64_t sk, int64_t tq, int64_t tk, int64_t d = 128) {
  Problem p;
  p.batch = seqs, p.heads_q = 8, p.heads_kv = 2, p.head_dim = d;
  p.seqlen_q = sq, p.seqlen_k = sk, p.total_q = tq, p.total_k = tk;
  p.varlen_q = p.varlen_k = true;
  return p;
}

TEST(DenseVarlen, OnlyPackedRowsThatFillEverySequenceMakeADenseBatch) {
  EXPECT_TRUE(varlen_is_dense_batch(varlen(4, 512, 700, 4 * 512, 4 * 700)));
  EXPECT_TRUE(varlen_is_dense_batch(varlen(1, 65, 1, 65, 1)));
  // One row or key short: some sequence is shorter than the bound.
  EXPECT_FALSE(varlen_is_dense_batch(varlen(4, 512, 700, 4 * 512 - 1, 4 * 700)));
  EXPECT_FALSE(varlen_is_dense_batch(varlen(4, 512, 700, 4 * 512, 4 * 700 - 1)));
  // Sequences of at most 64 rows may split their keys (split_calls.h), which
  // the serving kernels and a plain call do differently at head dim 256.
  EXPECT_FALSE(varlen_is_dense_batch(varlen(4, 64, 700, 4 * 64, 4 * 700)));
  // No keys at all: the serving kernels' empty rows.
  EXPECT_FALSE(varlen_is_dense_batch(varlen(4, 512, 0, 4 * 512, 0)));
  // Not varlen, or keys from a cache (whose lengths the host cannot see).
  Problem plain = varlen(4, 512, 512, 0, 0);
  plain.varlen_q = plain.varlen_k = false;
  EXPECT_FALSE(varlen_is_dense_batch(plain));
  Problem cache = varlen(4, 512, 512, 4 * 512, 0);
  cache.varlen_k = false, cache.kv_cache = true;
  EXPECT_FALSE(varlen_is_dense_batch(cache));
}

TEST(DenseVarlen, DenseProblemKeepsTheServingKeyBlock) {
  // Head dim 256: 64 keys (a plain call of 2k keys would take 80).
  Problem d256 = dense_problem(varlen(2, 4096, 4096, 8192, 8192, 256));
  EXPECT_FALSE(d256.has_per_seq_lengths());
  EXPECT_EQ(d256.config.block_n, 64);
  EXPECT_NE(tuned_block_n(256, 4096, true), 64);  // the key block the plain call would have taken
  EXPECT_EQ(dense_problem(varlen(2, 512, 512, 1024, 1024, 128)).config.block_n, 128);
  // The caller's choice stays; a split override is dropped (nothing splits).
  Problem mine = varlen(2, 4096, 4096, 8192, 8192, 256);
  mine.config.block_n = 80, mine.config.num_splits = 3;
  Problem const d = dense_problem(mine);
  EXPECT_EQ(d.config.block_n, 80);
  EXPECT_EQ(d.config.num_splits, 0);
  EXPECT_EQ(d.batch, 2);
  EXPECT_EQ(d.seqlen_q, 4096);
}

// Offset of element (b, h, i, c) of a view.
int64_t offset(const TensorView& t, int64_t b, int64_t h, int64_t i, int64_t c) {
  return b * t.stride[0] + h * t.stride[1] + i * t.stride[2] + c * t.stride[3];
}

TEST(DenseVarlen, DenseViewsAddressThePackedRows) {
  int64_t const B = 3, S = 100, SK = 130, H = 8, HKV = 2, D = 64;
  Problem const p = varlen(B, S, SK, B * S, B * SK, D);
  AttentionArgs a;
  // Packed THD tensors as the API takes them: (1, H, total, D), BSHD memory
  // (q, out), BHSD memory (k, v), a head-major LSE.
  a.q = flashcore::make_bshd(nullptr, flashcore::DType::kBFloat16, 1, H, B * S, D);
  a.out = a.q;
  a.k = flashcore::make_bhsd(nullptr, flashcore::DType::kBFloat16, 1, HKV, B * SK, D);
  a.v = a.k;
  static float lse_storage;
  a.lse.data = &lse_storage;
  a.lse.shape[0] = 1, a.lse.shape[1] = H, a.lse.shape[2] = B * S, a.lse.shape[3] = 1;
  a.lse.stride[0] = H * B * S, a.lse.stride[1] = B * S, a.lse.stride[2] = 1, a.lse.stride[3] = 1;
  int32_t cu[4] = {0, 100, 200, 300};
  a.cu_seqlens_q = a.cu_seqlens_k = cu;
  AttentionArgs const d = dense_args(a, p);
  EXPECT_EQ(d.cu_seqlens_q, nullptr);
  EXPECT_EQ(d.cu_seqlens_k, nullptr);
  const TensorView* pairs[][2] = {{&a.q, &d.q}, {&a.out, &d.out}, {&a.lse, &d.lse}, {&a.k, &d.k}, {&a.v, &d.v}};
  for (auto& pr : pairs) {
    const TensorView& packed = *pr[0];
    const TensorView& dense = *pr[1];
    int64_t const rows = dense.shape[2];
    EXPECT_EQ(dense.shape[0], B);
    EXPECT_EQ(dense.shape[1], packed.shape[1]);
    EXPECT_EQ(rows, packed.shape[2] / B);
    EXPECT_EQ(dense.shape[3], packed.shape[3]);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i : {int64_t(0), int64_t(1), rows - 1}) {
        int64_t const c = packed.shape[3] - 1, h = packed.shape[1] - 1;
        EXPECT_EQ(offset(dense, b, h, i, c), offset(packed, 0, h, b * rows + i, c)) << "b " << b << " i " << i;
      }
    }
  }
}

}  // namespace
}  // namespace fctest
