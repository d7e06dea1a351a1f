// The simplest correct attention, in double precision: full softmax over the
// allowed keys of each row, masks taken straight from the rule documented in
// attention.h (not from Problem), so it checks the library independently.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace fctest {

struct NaiveParams {
  int64_t batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_k = 1, head_dim = 64;
  double scale = 0.125;  // already resolved: no "0 means default" here
  bool causal = false;
  int64_t window_left = -1;   // -1: unbounded
  int64_t window_right = -1;  // -1: unbounded (causal forces 0)
};

struct NaiveResult {
  std::vector<double> out;  // (B, Hq, Sq, D), contiguous
  std::vector<double> lse;  // (B, Hq, Sq), natural log; -inf for rows with no allowed key
};

inline bool naive_allowed(const NaiveParams& p, int64_t i, int64_t j) {
  const int64_t diag = i + (p.seqlen_k - p.seqlen_q);  // bottom-right aligned
  const int64_t right = p.causal ? 0 : p.window_right;
  if (p.window_left >= 0 && j < diag - p.window_left) return false;
  if (right >= 0 && j > diag + right) return false;
  return true;
}

// q: (B, Hq, Sq, D); k, v: (B, Hkv, Sk, D); all contiguous, logical order.
inline NaiveResult naive_attention(const std::vector<double>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, const NaiveParams& p) {
  const int64_t D = p.head_dim, Sq = p.seqlen_q, Sk = p.seqlen_k;
  NaiveResult r;
  r.out.assign(p.batch * p.heads_q * Sq * D, 0.0);
  r.lse.assign(p.batch * p.heads_q * Sq, -std::numeric_limits<double>::infinity());
  std::vector<double> s(Sk);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = h / (p.heads_q / p.heads_kv);
      const double* K = &k[(b * p.heads_kv + hk) * Sk * D];
      const double* V = &v[(b * p.heads_kv + hk) * Sk * D];
      for (int64_t i = 0; i < Sq; ++i) {
        const double* Q = &q[((b * p.heads_q + h) * Sq + i) * D];
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Sk; ++j) {
          if (!naive_allowed(p, i, j)) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += Q[d] * K[j * D + d];
          s[j] = dot * p.scale;
          mx = std::max(mx, s[j]);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;  // no allowed key: zeros, -inf
        double sum = 0;
        double* O = &r.out[((b * p.heads_q + h) * Sq + i) * D];
        for (int64_t j = 0; j < Sk; ++j) {
          if (!naive_allowed(p, i, j)) continue;
          const double e = std::exp(s[j] - mx);
          sum += e;
          for (int64_t d = 0; d < D; ++d) O[d] += e * V[j * D + d];
        }
        for (int64_t d = 0; d < D; ++d) O[d] /= sum;
        r.lse[(b * p.heads_q + h) * Sq + i] = mx + std::log(sum);
      }
    }
  }
  return r;
}

}  // namespace fctest
