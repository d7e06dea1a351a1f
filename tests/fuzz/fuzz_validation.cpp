// libFuzzer target: random AttentionArgs (any enum value, shape, stride,
// pointer, scale, window, config, and the serving fields: cu_seqlens, KV
// cache lengths, block table, k_new/v_new, with random metadata contents)
// through flashcore's validation. It must never crash, every rejection must
// carry a message, and every accepted problem must be self-consistent. Host
// problems small enough to live inside the fuzzer's own buffers are also run
// through check_serving_metadata and the CPU reference backend under
// AddressSanitizer, so an accepted layout (or accepted metadata) that reads
// or writes out of its tensor is caught.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "api/validation.h"
#include "flashcore/attention.h"

namespace {

struct Reader {
  const uint8_t* p;
  size_t n;
  template <class T>
  T get() {
    T v{};
    size_t k = n < sizeof(T) ? n : sizeof(T);
    std::memcpy(&v, p, k);
    p += k;
    n -= k;
    return v;
  }
  // Mostly small values (the interesting edge cases), sometimes anything.
  int64_t dim() {
    uint8_t sel = get<uint8_t>();
    if (sel < 200) return int64_t(sel % 70) - 2;
    return get<int64_t>();
  }
};

constexpr size_t kBufBytes = 1 << 16;
alignas(64) unsigned char g_buf[kBufBytes + 64];
constexpr int64_t kMetaEntries = 256;
int32_t g_meta[kMetaEntries];  // metadata arrays point in here

// A metadata pointer: mostly absent; else 16-entry aligned slots of g_meta,
// sometimes misaligned (validation must refuse it without reading).
const int32_t* make_meta(Reader& r) {
  const uint8_t sel = r.get<uint8_t>();
  if (sel < 100) return nullptr;
  if (sel < 108) return reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(g_meta) + 2);
  return g_meta + 16 * (sel % 8);
}

// True when `count` entries from p lie inside g_meta.
bool meta_fits(const int32_t* p, int64_t count) {
  if (p == nullptr || count <= 0) return true;
  const int64_t first = p - g_meta;
  return first >= 0 && first <= kMetaEntries && count <= kMetaEntries - first;
}

// Bytes from the view's lowest to its highest element (the tensor's span), or
// -1 when negative/overflowing (then the tensor is never touched here).
int64_t span_bytes(const flashcore::TensorView& t) {
  __int128 hi = 0;
  for (int i = 0; i < 4; ++i) {
    if (t.shape[i] <= 0) return 0;
    if (t.stride[i] < 0) return -1;
    hi += __int128(t.shape[i] - 1) * t.stride[i];
  }
  hi = (hi + 1) * flashcore::dtype_size(t.dtype);
  return hi > __int128(kBufBytes) ? -1 : int64_t(hi);
}

flashcore::TensorView make_view(Reader& r) {
  flashcore::TensorView t;
  t.dtype = static_cast<flashcore::DType>(r.get<uint8_t>() % 4);  // 3: not a dtype
  uint8_t dev = r.get<uint8_t>();
  t.device = static_cast<flashcore::Device>(dev < 250 ? 0 : dev % 3);  // mostly host
  t.device_index = dev < 250 ? 0 : int(r.get<int8_t>());
  for (int i = 0; i < 4; ++i) t.shape[i] = r.dim();
  uint8_t layout = r.get<uint8_t>();
  if (layout < 128) {  // contiguous in a random axis order
    uint64_t s = 1;  // wraps on absurd shapes: validation must cope with any stride
    for (int i = 3; i >= 0; --i) {
      t.stride[i] = int64_t(s);
      s *= t.shape[i] > 0 ? uint64_t(t.shape[i]) : 1u;
    }
  } else {
    for (int i = 0; i < 4; ++i) t.stride[i] = r.dim();
  }
  uint8_t where = r.get<uint8_t>();
  if (where < 16) t.data = nullptr;
  else if (where < 32) t.data = g_buf + 2;  // misaligned
  else t.data = g_buf + 16 * (where % 4);
  return t;
}

void set_contiguous(flashcore::TensorView& t, int64_t b, int64_t h, int64_t s, int64_t d) {
  const int64_t shape[4] = {b, h, s, d};
  int64_t stride = 1;
  for (int i = 3; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.stride[i] = stride;
    stride *= shape[i];
  }
}

void same_dtypes(flashcore::AttentionArgs& a) {
  for (flashcore::TensorView* t : {&a.k, &a.v, &a.out, &a.k_new, &a.v_new}) t->dtype = a.q.dtype;
  a.lse.dtype = flashcore::DType::kFloat32;
}

// Usually valid metadata for the problem's shapes, now and then one entry
// off (the checks must catch it before anything reads through it).
void fill_cu_seqlens(Reader& r, int32_t* cu, int64_t num_seqs, int64_t total) {
  cu[0] = 0;
  for (int64_t b = 1; b < num_seqs; ++b) cu[b] = int32_t(std::min<int64_t>(total, cu[b - 1] + r.get<uint8_t>() % 40));
  cu[num_seqs] = int32_t(total);
  if (r.get<uint8_t>() < 24) cu[r.get<uint8_t>() % (num_seqs + 1)] += int32_t(r.get<int8_t>());
}

// Serving fields in one of four shapes: a variable-length batch, a
// contiguous KV cache, a paged KV cache (each mostly coherent with the
// tensors), or arbitrary pointers and sizes.
void add_serving_fields(Reader& r, int kind, flashcore::AttentionArgs& a) {
  int32_t* const cu_q = g_meta;
  int32_t* const cu_k = g_meta + 64;
  int32_t* const lens = g_meta + 128;
  int32_t* const table = g_meta + 160;
  const bool bend = r.get<uint8_t>() < 32;  // now and then break a structural rule too
  if (kind == 3) {
    a.cu_seqlens_q = make_meta(r);
    a.cu_seqlens_k = make_meta(r);
    a.cache_seqlens = make_meta(r);
    a.block_table = make_meta(r);
    a.num_seqs = r.dim();
    a.max_seqlen_q = r.dim();
    a.max_seqlen_k = r.dim();
    a.max_pages_per_seq = r.dim();
    a.block_table_stride = r.dim();
    for (int32_t& m : g_meta) m = int32_t(r.get<int8_t>());  // small, sometimes negative
  } else if (kind == 0) {
    if (!bend) {  // small coherent packed shapes: (1, Hq, total_q, 64) against (1, Hkv, total_k, 64)
      const int64_t hkv = 1 + r.get<uint8_t>() % 2, hq = hkv * (1 + r.get<uint8_t>() % 2);
      const int64_t total_q = r.get<uint8_t>() % 60, total_k = r.get<uint8_t>() % 100;
      set_contiguous(a.q, 1, hq, total_q, 64);
      set_contiguous(a.out, 1, hq, total_q, 64);
      set_contiguous(a.lse, 1, hq, total_q, 1);
      set_contiguous(a.k, 1, hkv, total_k, 64);
      set_contiguous(a.v, 1, hkv, total_k, 64);
      same_dtypes(a);
    }
    a.num_seqs = r.get<uint8_t>() % 8;
    a.cu_seqlens_q = cu_q;
    a.cu_seqlens_k = bend && r.get<uint8_t>() < 128 ? nullptr : cu_k;
    a.max_seqlen_q = bend ? r.dim() : std::max<int64_t>(a.q.shape[2], 0);
    a.max_seqlen_k = bend ? r.dim() : std::max<int64_t>(a.k.shape[2], 0);
    fill_cu_seqlens(r, cu_q, a.num_seqs, a.q.shape[2]);
    fill_cu_seqlens(r, cu_k, a.num_seqs, a.k.shape[2]);
  } else {
    const bool paged = kind == 2;
    if (paged) {
      a.block_table = table;
      a.max_pages_per_seq = bend ? r.dim() : 1 + r.get<uint8_t>() % 4;
      a.block_table_stride = bend ? r.dim() : a.max_pages_per_seq + r.get<uint8_t>() % 2;
    }
    a.cache_seqlens = lens;
    if (r.get<uint8_t>() < 100) {
      a.k_new = make_view(r);
      a.v_new = r.get<uint8_t>() < 200 ? a.k_new : make_view(r);
    }
    if (!bend) {  // small coherent shapes: (B, Hq, Sq, 64) queries against the cache or pool
      const int64_t b = 1 + r.get<uint8_t>() % 3, hkv = 1 + r.get<uint8_t>() % 2;
      const int64_t hq = hkv * (1 + r.get<uint8_t>() % 2), sq = 1 + r.get<uint8_t>() % 4, d = 64;
      const int64_t rows = paged ? 16 * (1 + r.get<uint8_t>() % 2) : r.get<uint8_t>() % 40;
      const int64_t slots = paged ? 1 + r.get<uint8_t>() % 6 : b;
      const int64_t fresh = r.get<uint8_t>() % 4;
      set_contiguous(a.q, b, hq, sq, d);
      set_contiguous(a.out, b, hq, sq, d);
      set_contiguous(a.lse, b, hq, sq, 1);
      set_contiguous(a.k, slots, hkv, rows, d);
      set_contiguous(a.v, slots, hkv, rows, d);
      set_contiguous(a.k_new, b, hkv, fresh, d);
      set_contiguous(a.v_new, b, hkv, fresh, d);
      same_dtypes(a);
    }
    const int64_t batch = std::max<int64_t>(a.q.shape[0], 0);
    const bool sane = a.max_pages_per_seq >= 0 && a.max_pages_per_seq < 1024 && a.k.shape[2] >= 0 &&
                      a.k.shape[2] < (1 << 20);
    const int64_t capacity = !sane ? 0 : paged ? a.max_pages_per_seq * a.k.shape[2] : a.k.shape[2];
    const int64_t fresh = a.k_new.data ? std::max<int64_t>(a.k_new.shape[2], 0) : 0;
    const int64_t room = std::max<int64_t>(capacity - fresh, 0);
    for (int64_t b = 0; b < std::min<int64_t>(batch, 32); ++b) {
      lens[b] = int32_t(std::min<int64_t>(room, r.get<uint8_t>()));
      if (r.get<uint8_t>() < 8) lens[b] += int32_t(r.get<int8_t>());  // now and then out of range
    }
    const int64_t pages = std::max<int64_t>(a.k.shape[0], 1);
    for (int64_t i = 0; i < 96; ++i) {
      table[i] = int32_t(r.get<uint8_t>() % pages);
      if (r.get<uint8_t>() < 4) table[i] = int32_t(r.get<int8_t>());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r{data, size};
  flashcore::AttentionArgs a;
  a.q = make_view(r);
  a.k = r.get<uint8_t>() < 200 ? a.q : make_view(r);
  a.v = r.get<uint8_t>() < 200 ? a.k : make_view(r);
  a.out = r.get<uint8_t>() < 200 ? a.q : make_view(r);
  if (r.get<uint8_t>() < 64) a.lse = make_view(r);
  a.softmax_scale = r.get<float>();
  a.causal = r.get<uint8_t>() & 1;
  a.window_left = r.dim();
  a.window_right = r.dim();
  const uint8_t serving = r.get<uint8_t>();
  if (serving >= 64) add_serving_fields(r, serving % 4, a);
  a.config.block_m = int(r.get<int8_t>());
  a.config.block_n = int(r.get<int8_t>());
  a.config.num_splits = int(r.get<int8_t>());

  flashcore::Problem p;
  flashcore::Status st = flashcore::validate(a, &p);
  if (!st.ok()) {
    if (st.message().empty()) std::abort();  // every rejection explains itself
    return 0;
  }
  // Accepted: the resolved problem must be consistent.
  if (p.batch < 0 || p.heads_q < 0 || p.heads_kv < 0 || p.seqlen_q < 0 || p.seqlen_k < 0) std::abort();
  if (p.heads_kv > 0 && p.heads_q % p.heads_kv != 0) std::abort();
  if (!std::isfinite(p.scale) || p.scale < 0.f) std::abort();
  if (p.window_left < 0 || p.window_right < 0) std::abort();
  if (p.causal && p.window_right != 0) std::abort();
  if (p.varlen_q && (p.batch != a.num_seqs || !p.varlen_k || p.kv_cache)) std::abort();
  if (p.paged && (!p.kv_cache || p.page_size <= 0 || p.page_size % 16 != 0 || p.max_pages_per_seq <= 0 ||
                  p.block_table_stride < p.max_pages_per_seq || p.seqlen_k != p.max_pages_per_seq * p.page_size))
    std::abort();
  if (p.seqlen_new > 0 && (!p.kv_cache || p.seqlen_new > p.seqlen_k)) std::abort();

  // The metadata the problem reads must lie in g_meta (the caller's promise).
  const int64_t rows = p.batch + 1;
  if (!meta_fits(a.cu_seqlens_q, rows) || !meta_fits(a.cu_seqlens_k, rows) ||
      !meta_fits(a.cache_seqlens, p.batch) ||
      (p.paged && p.batch > 0 && !meta_fits(a.block_table, (p.batch - 1) * p.block_table_stride + p.max_pages_per_seq)))
    return 0;
  flashcore::Status meta = flashcore::check_serving_metadata(a, nullptr);
  if (!meta.ok() && meta.message().empty()) std::abort();

  // Run it on the CPU when every tensor fits in the buffer: ASan checks the
  // reference backend stays inside the views validation accepted.
  if (p.device != flashcore::Device::kCPU) return 0;
  for (const flashcore::TensorView* t : {&a.q, &a.k, &a.v, &a.out, &a.k_new, &a.v_new}) {
    if (span_bytes(*t) < 0 || (t->data && static_cast<unsigned char*>(t->data) + span_bytes(*t) >
                                             g_buf + sizeof g_buf)) return 0;
  }
  if (a.lse.data && (span_bytes(a.lse) < 0 || static_cast<unsigned char*>(a.lse.data) + span_bytes(a.lse) >
                                                  g_buf + sizeof g_buf)) return 0;
  flashcore::Status run = flashcore::attention_forward(a, nullptr);
  if (!run.ok() && run.message().empty()) std::abort();
  if (run.ok() != meta.ok()) std::abort();  // the CPU backend runs the same metadata check
  return 0;
}
