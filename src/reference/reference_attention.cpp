#include "reference/reference_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "api/validation.h"
#include "common/half_convert.h"

namespace flashcore::reference {
namespace {

// Query rows that share one fp32 conversion of each K/V block. Only a speed
// knob: every row's arithmetic is independent of it.
constexpr int64_t kBlockM = 64;
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t row_offset(const TensorView& t, int64_t b, int64_t h, int64_t s) {
  return b * t.stride[0] + h * t.stride[1] + s * t.stride[2];
}

// Reads n elements of t starting at element offset `off`, stride stride[3].
void load_row(const TensorView& t, int64_t off, int64_t n, float* dst) {
  const int64_t step = t.stride[3];
  switch (t.dtype) {
    case DType::kFloat32: {
      const float* src = static_cast<const float*>(t.data) + off;
      for (int64_t d = 0; d < n; ++d) dst[d] = src[d * step];
      break;
    }
    case DType::kFloat16: {
      const uint16_t* src = static_cast<const uint16_t*>(t.data) + off;
      for (int64_t d = 0; d < n; ++d) dst[d] = half_bits_to_float(src[d * step]);
      break;
    }
    case DType::kBFloat16: {
      const uint16_t* src = static_cast<const uint16_t*>(t.data) + off;
      for (int64_t d = 0; d < n; ++d) dst[d] = bf16_bits_to_float(src[d * step]);
      break;
    }
  }
}

void store_row(const TensorView& t, int64_t off, int64_t n, const float* src) {
  const int64_t step = t.stride[3];
  switch (t.dtype) {
    case DType::kFloat32: {
      float* dst = static_cast<float*>(t.data) + off;
      for (int64_t d = 0; d < n; ++d) dst[d * step] = src[d];
      break;
    }
    case DType::kFloat16: {
      uint16_t* dst = static_cast<uint16_t*>(t.data) + off;
      for (int64_t d = 0; d < n; ++d) dst[d * step] = float_to_half_bits(src[d]);
      break;
    }
    case DType::kBFloat16: {
      uint16_t* dst = static_cast<uint16_t*>(t.data) + off;
      for (int64_t d = 0; d < n; ++d) dst[d * step] = float_to_bf16_bits(src[d]);
      break;
    }
  }
}

// Where one sequence's rows live and how long it is. Its own Problem copy
// carries its lengths (seqlen_q, seqlen_k), so the mask rules of
// Problem::key_lo/key_hi apply per sequence, bottom-right aligned. For a
// plain call this is the batch entry itself, unchanged.
struct Sequence {
  Problem p;
  int64_t q_batch = 0, q_row0 = 0;  // q/out/lse row i is (q_batch, h, q_row0 + i)
  int64_t k_batch = 0, k_row0 = 0;  // contiguous k/v: key j is (k_batch, h, k_row0 + j)
  const int32_t* pages = nullptr;   // paged: key j is (pages[j / page_size], h, j % page_size)

  int64_t q_offset(const TensorView& t, int64_t h, int64_t i) const { return row_offset(t, q_batch, h, q_row0 + i); }
  int64_t k_offset(const TensorView& t, int64_t h, int64_t j) const {
    if (pages != nullptr) return row_offset(t, pages[j / p.page_size], h, j % p.page_size);
    return row_offset(t, k_batch, h, k_row0 + j);
  }
};

// Sequence b of a problem whose metadata check_metadata_values accepted.
Sequence sequence(const AttentionArgs& a, const Problem& p, int64_t b) {
  Sequence s;
  s.p = p;
  s.q_batch = s.k_batch = b;
  if (p.varlen_q) {
    s.q_batch = 0;
    s.q_row0 = a.cu_seqlens_q[b];
    s.p.seqlen_q = a.cu_seqlens_q[b + 1] - s.q_row0;
  }
  if (p.varlen_k) {
    s.k_batch = 0;
    s.k_row0 = a.cu_seqlens_k[b];
    s.p.seqlen_k = a.cu_seqlens_k[b + 1] - s.k_row0;
  }
  if (p.kv_cache) s.p.seqlen_k = int64_t(a.cache_seqlens[b]) + p.seqlen_new;
  if (p.paged) s.pages = a.block_table + b * p.block_table_stride;
  return s;
}

// Writes k_new/v_new into the cache at [cache_seqlens[b], + seqlen_new), as
// raw element copies (same dtype; rows are contiguous by the layout rule).
void append_new_keys(const AttentionArgs& a, const Problem& p) {
  const size_t row_bytes = static_cast<size_t>(p.head_dim * dtype_size(p.dtype));
  const struct {
    const TensorView& src;
    const TensorView& dst;
  } pairs[] = {{a.k_new, a.k}, {a.v_new, a.v}};
  for (int64_t b = 0; b < p.batch; ++b) {
    const Sequence s = sequence(a, p, b);
    const int64_t start = a.cache_seqlens[b];
    for (const auto& pr : pairs) {
      const int64_t esize = dtype_size(pr.src.dtype);
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        for (int64_t t = 0; t < p.seqlen_new; ++t) {
          const char* src = static_cast<const char*>(pr.src.data) + row_offset(pr.src, b, h, t) * esize;
          char* dst = static_cast<char*>(pr.dst.data) + s.k_offset(pr.dst, h, start + t) * esize;
          std::memmove(dst, src, row_bytes);  // k_new may alias the cache: defined, if odd
        }
      }
    }
  }
}

// Eight independent partial sums: lets the compiler vectorize without
// -ffast-math while keeping one fixed summation order (reproducible).
float dot(const float* a, const float* b, int64_t n) {
  float part[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    for (int u = 0; u < 8; ++u) part[u] += a[d + u] * b[d + u];
  }
  for (; d < n; ++d) part[0] += a[d] * b[d];
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// Per-thread working memory, allocated once per thread.
struct Scratch {
  explicit Scratch(int64_t head_dim)
      : q(kBlockM * head_dim), k(kBlockN * head_dim), v(kBlockN * head_dim), acc(kBlockM * head_dim),
        m(kBlockM), l(kBlockM), s(kBlockN) {}
  std::vector<float> q, k, v, acc;  // q tile, K/V block (fp32), output accumulators
  std::vector<float> m, l;          // running max (log2-scaled domain) and running sum, per row
  std::vector<float> s;             // one row's scores for one key block
};

class HeadRunner {
 public:
  HeadRunner(const AttentionArgs& args, const Problem& p)
      : a_(args), p_(p), d_(p.head_dim), scale_log2_(p.scale * kLog2e) {}

  // All query rows of one (sequence, q head) pair.
  void run(int64_t b, int64_t hq, Scratch& w) const {
    const Sequence s = sequence(a_, p_, b);
    const int64_t hkv = hq / p_.group();
    for (int64_t i0 = 0; i0 < s.p.seqlen_q; i0 += kBlockM) {
      const int64_t rows = std::min(kBlockM, s.p.seqlen_q - i0);
      run_tile(s, hq, hkv, i0, rows, w);
    }
  }

 private:
  void run_tile(const Sequence& s, int64_t hq, int64_t hkv, int64_t i0, int64_t rows, Scratch& w) const {
    const Problem& p = s.p;
    // The whole q tile is read before any of its output rows is written.
    for (int64_t r = 0; r < rows; ++r) load_row(a_.q, s.q_offset(a_.q, hq, i0 + r), d_, &w.q[r * d_]);
    std::fill(w.m.begin(), w.m.end(), kNegInf);
    std::fill(w.l.begin(), w.l.end(), 0.f);
    std::fill(w.acc.begin(), w.acc.end(), 0.f);

    // key_lo/key_hi are non-decreasing in the row, so the tile needs keys
    // [key_lo(first row), key_hi(last row)].
    const int64_t tile_lo = p.key_lo(i0);
    const int64_t tile_hi = p.key_hi(i0 + rows - 1);
    if (tile_lo <= tile_hi) {
      for (int64_t j0 = tile_lo / kBlockN * kBlockN; j0 <= tile_hi; j0 += kBlockN) {
        const int64_t lo = std::max(j0, tile_lo);
        const int64_t hi = std::min(j0 + kBlockN - 1, tile_hi);
        for (int64_t j = lo; j <= hi; ++j) {
          load_row(a_.k, s.k_offset(a_.k, hkv, j), d_, &w.k[(j - j0) * d_]);
          load_row(a_.v, s.k_offset(a_.v, hkv, j), d_, &w.v[(j - j0) * d_]);
        }
        for (int64_t r = 0; r < rows; ++r) update_row(p, i0 + r, r, j0, w);
      }
    }
    for (int64_t r = 0; r < rows; ++r) finish_row(s, hq, i0 + r, r, w);
  }

  // One online-softmax step: row i against the keys of block [j0, j0+kBlockN)
  // it may attend. Rows with no allowed key in the block are left alone,
  // which is what a fully masked block does on the GPU (alpha = 1, p = 0).
  void update_row(const Problem& p, int64_t i, int64_t r, int64_t j0, Scratch& w) const {
    const int64_t lo = std::max(p.key_lo(i), j0);
    const int64_t hi = std::min(p.key_hi(i), j0 + kBlockN - 1);
    if (lo > hi) return;
    const float* q = &w.q[r * d_];
    float* s = w.s.data();
    float block_max = kNegInf;
    for (int64_t j = lo; j <= hi; ++j) {
      s[j - j0] = dot(q, &w.k[(j - j0) * d_], d_) * scale_log2_;
      block_max = std::max(block_max, s[j - j0]);
    }
    const float m_old = w.m[r];
    const float m_new = std::max(m_old, block_max);
    // All scores -inf so far: nothing to add, and exp2(-inf - -inf) would be NaN.
    if (m_new == kNegInf) return;
    const float alpha = std::exp2(m_old - m_new);  // 0 on the first block (m_old = -inf)
    float* acc = &w.acc[r * d_];
    for (int64_t d = 0; d < d_; ++d) acc[d] *= alpha;
    float row_sum = 0.f;
    for (int64_t j = lo; j <= hi; ++j) {
      const float pj = std::exp2(s[j - j0] - m_new);
      row_sum += pj;
      const float* vj = &w.v[(j - j0) * d_];
      for (int64_t d = 0; d < d_; ++d) acc[d] += pj * vj[d];
    }
    w.l[r] = w.l[r] * alpha + row_sum;
    w.m[r] = m_new;
  }

  void finish_row(const Sequence& s, int64_t hq, int64_t i, int64_t r, Scratch& w) const {
    float* acc = &w.acc[r * d_];
    const float l = w.l[r];
    float lse = kNegInf;
    if (l > 0.f) {
      for (int64_t d = 0; d < d_; ++d) acc[d] /= l;
      lse = (w.m[r] + std::log2(l)) * kLn2;  // m is log2-scaled: back to natural log
    } else {
      std::fill(acc, acc + d_, 0.f);  // no allowed key: zeros, LSE = -inf
    }
    store_row(a_.out, s.q_offset(a_.out, hq, i), d_, acc);
    if (p_.has_lse) static_cast<float*>(a_.lse.data)[s.q_offset(a_.lse, hq, i)] = lse;
  }

  const AttentionArgs& a_;
  const Problem& p_;
  const int64_t d_;
  const float scale_log2_;
};

}  // namespace

Status forward(const AttentionArgs& args, const Problem& problem) { return forward(args, problem, 0); }

Status forward(const AttentionArgs& args, const Problem& problem, int num_threads) {
  // Everything below trusts the metadata: check it first.
  const Status metadata = check_metadata_values(problem, host_metadata(args));
  if (!metadata.ok()) return metadata;
  if (problem.is_empty()) return Status::Ok();
  if (problem.seqlen_new > 0) append_new_keys(args, problem);  // before attention reads the cache
  const HeadRunner runner(args, problem);
  const int64_t items = problem.batch * problem.heads_q;  // one (sequence, q head) pair per work item

  int64_t threads = num_threads > 0 ? num_threads : static_cast<int64_t>(std::thread::hardware_concurrency());
  threads = std::clamp<int64_t>(threads, 1, items);

  // Work items are handed out dynamically; which thread takes an item does
  // not change its result, so the output is the same for any schedule.
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  auto worker = [&]() noexcept {
    try {
      Scratch scratch(problem.head_dim);
      for (int64_t item = next++; item < items && !failed; item = next++) {
        runner.run(item / problem.heads_q, item % problem.heads_q, scratch);
      }
    } catch (...) {
      failed = true;  // allocation failure; reported below
    }
  };

  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (...) {
      break;  // could not start a thread: the ones we have (and this one) take the rest
    }
  }
  worker();
  for (std::thread& t : pool) t.join();
  if (failed) return Status(StatusCode::kInternal, "CPU reference: out of memory for per-thread scratch");
  return Status::Ok();
}

}  // namespace flashcore::reference
