// libFuzzer target: random AttentionArgs (any enum value, shape, stride,
// pointer, scale, window, config) through flashcore's validation. It must
// never crash, every rejection must carry a message, and every accepted
// problem must be self-consistent. Host problems small enough to live inside
// the fuzzer's own buffer are also run through the CPU reference backend
// under AddressSanitizer, so an accepted layout that reads or writes out of
// its tensor is caught.
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
  if (r.get<uint8_t>() == 255) a.cu_seqlens_q = reinterpret_cast<const int32_t*>(g_buf);
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
  if (!std::isfinite(p.scale)) std::abort();
  if (p.window_left < 0 || p.window_right < 0) std::abort();
  if (p.causal && p.window_right != 0) std::abort();

  // Run it on the CPU when every tensor fits in the buffer: ASan checks the
  // reference backend stays inside the views validation accepted.
  if (p.device != flashcore::Device::kCPU) return 0;
  for (const flashcore::TensorView* t : {&a.q, &a.k, &a.v, &a.out}) {
    if (span_bytes(*t) < 0 || (t->data && static_cast<unsigned char*>(t->data) + span_bytes(*t) >
                                             g_buf + sizeof g_buf)) return 0;
  }
  if (a.lse.data && (span_bytes(a.lse) < 0 || static_cast<unsigned char*>(a.lse.data) + span_bytes(a.lse) >
                                                  g_buf + sizeof g_buf)) return 0;
  flashcore::Status run = flashcore::attention_forward(a, nullptr);
  if (!run.ok() && run.message().empty()) std::abort();
  return 0;
}
