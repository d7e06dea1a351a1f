// One attention problem for tests: its description (Case), host tensors
// filled with reproducible random data, and the matching AttentionArgs.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>

#include "flashcore/attention.h"
#include "naive_attention.h"
#include "test_util.h"

namespace fctest {

struct Case {
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kBHSD;
  int64_t batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_k = 1, head_dim = 64;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float scale = 0.f;  // 0: the library default 1/sqrt(head_dim)
  uint32_t seed = 1;

  // A gtest-safe name (letters, digits, underscores).
  std::string name() const {
    std::ostringstream os;
    os << short_dtype(dtype) << "_" << layout_name(layout) << "_b" << batch << "_hq" << heads_q << "_hkv"
       << heads_kv << "_sq" << seqlen_q << "_sk" << seqlen_k << "_d" << head_dim;
    if (causal) os << "_causal";
    if (window_left >= 0) os << "_wl" << window_left;
    if (window_right >= 0) os << "_wr" << window_right;
    if (scale != 0.f) os << "_scale" << static_cast<int>(scale * 1000);
    return os.str();
  }

  NaiveParams naive() const {
    NaiveParams p;
    p.batch = batch;
    p.heads_q = heads_q;
    p.heads_kv = heads_kv;
    p.seqlen_q = seqlen_q;
    p.seqlen_k = seqlen_k;
    p.head_dim = head_dim;
    p.scale = scale != 0.f ? double(scale) : 1.0 / std::sqrt(double(head_dim));
    p.causal = causal;
    p.window_left = window_left;
    p.window_right = window_right;
    return p;
  }
};

// Tensors of a Case: q, k, v random; out poisoned with NaN; lse present.
class CaseTensors {
 public:
  explicit CaseTensors(const Case& c, bool fill = true)
      : q(c.dtype, c.batch, c.heads_q, c.seqlen_q, c.head_dim, c.layout),
        k(c.dtype, c.batch, c.heads_kv, c.seqlen_k, c.head_dim, c.layout),
        v(c.dtype, c.batch, c.heads_kv, c.seqlen_k, c.head_dim, c.layout),
        out(c.dtype, c.batch, c.heads_q, c.seqlen_q, c.head_dim, c.layout),
        lse(make_lse(c.batch, c.heads_q, c.seqlen_q)) {
    if (fill) {
      std::mt19937 rng(c.seed);
      q.fill_random(rng);
      k.fill_random(rng);
      v.fill_random(rng);
    }
    args.q = q.view;
    args.k = k.view;
    args.v = v.view;
    args.out = out.view;
    args.lse = lse.view;
    args.softmax_scale = c.scale;
    args.causal = c.causal;
    args.window_left = c.window_left;
    args.window_right = c.window_right;
  }

  // Reference answer from the rounded inputs actually stored.
  NaiveResult naive(const Case& c) const {
    return naive_attention(q.to_vector(), k.to_vector(), v.to_vector(), c.naive());
  }

  HostTensor q, k, v, out, lse;
  flashcore::AttentionArgs args;
};

}  // namespace fctest
