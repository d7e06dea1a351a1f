// Serving problems for tests: a variable-length batch (packed q/k/v with
// cu_seqlens) and a KV cache (contiguous or paged, with or without k_new/v_new),
// host tensors filled with reproducible random data and the matching
// AttentionArgs. Memory that a correct backend never reads is NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "flashcore/attention.h"
#include "test_util.h"

namespace fctest {

// Equal bits for values read back from one dtype (NaN equals NaN: poison).
inline bool same_value(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

inline std::vector<int32_t> prefix_sums(const std::vector<int64_t>& lens) {
  std::vector<int32_t> cu(1, 0);
  for (int64_t n : lens) cu.push_back(static_cast<int32_t>(cu.back() + n));
  return cu;
}

// Rows [row0, row0 + rows) of batch entry b of t, as a (1, H, rows, D) view.
// Row slices keep the layout rule: strides are whole multiples of 16 bytes.
inline TensorView slice_rows(const TensorView& t, int64_t b, int64_t row0, int64_t rows) {
  TensorView v = t;
  v.data = static_cast<char*>(t.data) + (b * t.stride[0] + row0 * t.stride[2]) * flashcore::dtype_size(t.dtype);
  v.shape[0] = 1;
  v.shape[2] = rows;
  return v;
}

inline void set_tensors(flashcore::AttentionArgs& a, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                        const HostTensor& out, const HostTensor& lse) {
  a.q = q.view;
  a.k = k.view;
  a.v = v.view;
  a.out = out.view;
  a.lse = lse.view;
}

struct Masks {
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  std::string name() const {
    std::ostringstream os;
    os << (causal ? "causal" : "full");
    if (window_left >= 0) os << "_wl" << window_left;
    if (window_right >= 0) os << "_wr" << window_right;
    return os.str();
  }
  void apply(flashcore::AttentionArgs& a) const {
    a.causal = causal;
    a.window_left = window_left;
    a.window_right = window_right;
  }
};

struct VarlenCase {
  DType dtype = DType::kFloat16;
  Layout layout = Layout::kBSHD;  // of the packed (1, H, total, D) tensors: kBSHD is THD memory
  int64_t heads_q = 4, heads_kv = 2, head_dim = 64;
  std::vector<int64_t> lens_q, lens_k;
  Masks masks;
  uint32_t seed = 3;

  int64_t max_q() const { return lens_q.empty() ? 0 : *std::max_element(lens_q.begin(), lens_q.end()); }
  int64_t max_k() const { return lens_k.empty() ? 0 : *std::max_element(lens_k.begin(), lens_k.end()); }
  std::string name() const {
    std::ostringstream os;
    os << short_dtype(dtype) << "_" << layout_name(layout) << "_hq" << heads_q << "_hkv" << heads_kv << "_"
       << masks.name();
    return os.str();
  }
};

class VarlenTensors {
 public:
  explicit VarlenTensors(const VarlenCase& c)
      : cu_q(prefix_sums(c.lens_q)),
        cu_k(prefix_sums(c.lens_k)),
        q(c.dtype, 1, c.heads_q, cu_q.back(), c.head_dim, c.layout),
        k(c.dtype, 1, c.heads_kv, cu_k.back(), c.head_dim, c.layout),
        v(c.dtype, 1, c.heads_kv, cu_k.back(), c.head_dim, c.layout),
        out(c.dtype, 1, c.heads_q, cu_q.back(), c.head_dim, c.layout),
        lse(make_lse(1, c.heads_q, cu_q.back())) {
    std::mt19937 rng(c.seed);
    q.fill_random(rng);
    k.fill_random(rng);
    v.fill_random(rng);
    set_tensors(args, q, k, v, out, lse);
    args.cu_seqlens_q = cu_q.data();
    args.cu_seqlens_k = cu_k.data();
    args.num_seqs = static_cast<int64_t>(c.lens_q.size());
    args.max_seqlen_q = c.max_q();
    args.max_seqlen_k = c.max_k();
    c.masks.apply(args);
  }

  std::vector<int32_t> cu_q, cu_k;
  HostTensor q, k, v, out, lse;
  flashcore::AttentionArgs args;
};

struct CacheCase {
  DType dtype = DType::kFloat16;
  Layout layout = Layout::kBSHD;
  int64_t batch = 3, heads_q = 4, heads_kv = 2, seqlen_q = 2, head_dim = 64;
  std::vector<int64_t> cache_lens;  // batch entries
  int64_t seqlen_new = 0;            // k_new/v_new rows (0: no append)
  int64_t page_size = 0;             // 0: contiguous cache
  int64_t capacity = 256;            // keys per sequence; a multiple of page_size when paged
  Masks masks;
  uint32_t seed = 5;

  bool paged() const { return page_size > 0; }
  int64_t max_pages() const { return paged() ? capacity / page_size : 0; }
  std::string name() const {
    std::ostringstream os;
    os << short_dtype(dtype) << "_" << layout_name(layout) << "_b" << batch << "_hq" << heads_q << "_hkv"
       << heads_kv << "_sq" << seqlen_q << "_new" << seqlen_new << "_page" << page_size << "_" << masks.name();
    return os.str();
  }
};

// A KV cache problem. The logical cache contents (key j of sequence b) are
// the same for a contiguous and a paged CacheCase with the same seed and
// capacity; only where they are stored differs. Paged pools get two unused
// pages, a random page permutation and a block table whose row stride has
// one spare entry (out of the pool: never read).
class CacheTensors {
 public:
  explicit CacheTensors(const CacheCase& c)
      : c_(c),
        num_pages(c.paged() ? c.batch * c.max_pages() + 2 : 0),
        q(c.dtype, c.batch, c.heads_q, c.seqlen_q, c.head_dim, c.layout),
        k(c.dtype, c.paged() ? num_pages : c.batch, c.heads_kv, c.paged() ? c.page_size : c.capacity, c.head_dim,
          c.layout),
        v(c.dtype, c.paged() ? num_pages : c.batch, c.heads_kv, c.paged() ? c.page_size : c.capacity, c.head_dim,
          c.layout),
        k_new(c.dtype, c.batch, c.heads_kv, c.seqlen_new, c.head_dim, c.layout),
        v_new(c.dtype, c.batch, c.heads_kv, c.seqlen_new, c.head_dim, c.layout),
        out(c.dtype, c.batch, c.heads_q, c.seqlen_q, c.head_dim, c.layout),
        lse(make_lse(c.batch, c.heads_q, c.seqlen_q)) {
    for (int64_t n : c.cache_lens) cache_seqlens.push_back(static_cast<int32_t>(n));
    if (c.paged()) {
      std::vector<int32_t> perm(num_pages);
      std::iota(perm.begin(), perm.end(), 0);
      std::mt19937 prng(c.seed + 1000);
      std::shuffle(perm.begin(), perm.end(), prng);
      table_stride = c.max_pages() + 1;
      block_table.assign(c.batch * table_stride, 1 << 30);  // the spare entry of each row: never read
      for (int64_t b = 0; b < c.batch; ++b) {
        for (int64_t p = 0; p < c.max_pages(); ++p) block_table[b * table_stride + p] = perm[b * c.max_pages() + p];
      }
    }
    std::mt19937 rng(c.seed);
    q.fill_random(rng);
    std::uniform_real_distribution<double> mag(0.05, 1.0);
    for (HostTensor* t : {&k, &v}) {
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t h = 0; h < c.heads_kv; ++h)
          for (int64_t j = 0; j < c.cache_lens[b]; ++j)
            for (int64_t d = 0; d < c.head_dim; ++d) set_key(*t, b, h, j, d, (rng() & 1) ? mag(rng) : -mag(rng));
    }
    k_new.fill_random(rng);
    v_new.fill_random(rng);

    set_tensors(args, q, k, v, out, lse);
    args.cache_seqlens = cache_seqlens.data();
    if (c.paged()) {
      args.block_table = block_table.data();
      args.block_table_stride = table_stride;
      args.max_pages_per_seq = c.max_pages();
    }
    if (c.seqlen_new > 0) {
      args.k_new = k_new.view;
      args.v_new = v_new.view;
    }
    c.masks.apply(args);
  }

  // Where key j of sequence b is stored: (batch or page, row).
  std::pair<int64_t, int64_t> key_slot(int64_t b, int64_t j) const {
    if (!c_.paged()) return {b, j};
    return {block_table[b * table_stride + j / c_.page_size], j % c_.page_size};
  }
  double key(const HostTensor& t, int64_t b, int64_t h, int64_t j, int64_t d) const {
    const auto [n, s] = key_slot(b, j);
    return t.get(n, h, s, d);
  }
  void set_key(HostTensor& t, int64_t b, int64_t h, int64_t j, int64_t d, double x) const {
    const auto [n, s] = key_slot(b, j);
    t.set(n, h, s, d, x);
  }

 private:
  CacheCase c_;

 public:
  int64_t num_pages = 0, table_stride = 0;
  std::vector<int32_t> cache_seqlens, block_table;
  HostTensor q, k, v, k_new, v_new, out, lse;
  flashcore::AttentionArgs args;
};

}  // namespace fctest
