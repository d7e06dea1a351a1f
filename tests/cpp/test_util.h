// Host tensors with controllable layout, random fill and error metrics.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#if FLASHCORE_TEST_EXPECT_CUDA
#include <cuda_runtime_api.h>
#endif

#include "common/half_convert.h"
#include "flashcore/attention.h"

namespace fctest {

using flashcore::Device;
using flashcore::DType;
using flashcore::TensorView;

// A workspace allocator (attention_forward's WorkspaceAllocFn, the C ABI's
// fc_workspace_alloc_fn) that counts its calls and allocates nothing: on the
// CPU backend it must never be called.
struct RefusingWorkspaceAlloc {
  int calls = 0;
  static void* alloc(void* self, int64_t) {
    ++static_cast<RefusingWorkspaceAlloc*>(self)->calls;
    return nullptr;
  }
};

// BHSD/BSHD: contiguous. Strided: a view into a bigger (B, S, H, D+16)
// buffer with extra room between batches and a 16-element base offset, like
// q sliced out of a packed qkv tensor. Its padding is poisoned with NaN so a
// backend reading outside the view produces NaN and fails the test.
enum class Layout { kBHSD, kBSHD, kStrided };

inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kBHSD: return "bhsd";
    case Layout::kBSHD: return "bshd";
    case Layout::kStrided: return "strided";
  }
  return "?";
}

inline const char* short_dtype(DType d) {
  return d == DType::kFloat32 ? "f32" : d == DType::kFloat16 ? "f16" : "bf16";
}

// Round-trips x through dtype (round to nearest even).
inline double round_to(DType dtype, double x) {
  const float f = static_cast<float>(x);
  switch (dtype) {
    case DType::kFloat32: return f;
    case DType::kFloat16: return flashcore::half_bits_to_float(flashcore::float_to_half_bits(f));
    case DType::kBFloat16: return flashcore::bf16_bits_to_float(flashcore::float_to_bf16_bits(f));
  }
  return NAN;
}

class HostTensor {
 public:
  HostTensor(DType dtype, int64_t b, int64_t h, int64_t s, int64_t d, Layout layout = Layout::kBHSD) {
    int64_t base = 0;
    int64_t stride[4];
    if (layout == Layout::kBHSD) {
      const int64_t st[4] = {h * s * d, s * d, d, 1};
      std::memcpy(stride, st, sizeof st);
    } else if (layout == Layout::kBSHD) {
      const int64_t st[4] = {s * h * d, d, h * d, 1};
      std::memcpy(stride, st, sizeof st);
    } else {
      const int64_t dp = d + 16;
      const int64_t st[4] = {s * h * dp + 32, dp, h * dp, 1};
      std::memcpy(stride, st, sizeof st);
      base = 16;
    }
    int64_t last = 0;
    const int64_t shape[4] = {b, h, s, d};
    bool empty = false;
    for (int i = 0; i < 4; ++i) {
      if (shape[i] == 0) empty = true;
      else last += (shape[i] - 1) * stride[i];
    }
    const int64_t elems = base + (empty ? 0 : last + 1) + 16;  // trailing pad, poisoned too
    esize_ = flashcore::dtype_size(dtype);
    storage_.resize(static_cast<size_t>(elems * esize_) + kAlign);
    const auto addr = reinterpret_cast<uintptr_t>(storage_.data());
    begin_ = static_cast<size_t>((kAlign - addr % kAlign) % kAlign);
    elems_ = elems;
    view.data = storage_.data() + begin_ + base * esize_;
    view.dtype = dtype;
    for (int i = 0; i < 4; ++i) {
      view.shape[i] = shape[i];
      view.stride[i] = stride[i];
    }
    fill_nan();
  }
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;
  HostTensor(HostTensor&&) = default;  // the heap buffer (and view.data) stays put

  TensorView view;

  int64_t numel() const { return view.shape[0] * view.shape[1] * view.shape[2] * view.shape[3]; }

  // A test helper that indexes past the view throws (gtest reports it as a
  // failure) instead of writing past the buffer.
  int64_t offset(int64_t b, int64_t h, int64_t s, int64_t d) const {
    const int64_t idx[4] = {b, h, s, d};
    for (int i = 0; i < 4; ++i) {
      if (idx[i] < 0 || idx[i] >= view.shape[i]) {
        throw std::out_of_range("HostTensor index " + std::to_string(idx[i]) + " outside dimension " +
                                std::to_string(i) + " of size " + std::to_string(view.shape[i]));
      }
    }
    return b * view.stride[0] + h * view.stride[1] + s * view.stride[2] + d * view.stride[3];
  }

  double get(int64_t b, int64_t h, int64_t s, int64_t d) const { return read(offset(b, h, s, d)); }

  void set(int64_t b, int64_t h, int64_t s, int64_t d, double x) { write(offset(b, h, s, d), x); }

  // Every logical element, (B, H, S, D) order, as double.
  std::vector<double> to_vector() const {
    std::vector<double> r;
    r.reserve(numel());
    for_each_index([&](int64_t b, int64_t h, int64_t s, int64_t d) { r.push_back(get(b, h, s, d)); });
    return r;
  }

  // Values in +-[0.05, 1): never zero, so a dropped term always shows. Two
  // draws of `rng` seed a splitmix64 stream for the elements: three mt19937
  // draws an element through uniform_real/bernoulli cost about 50 ns, and the
  // serving GPU tests fill caches of 10^8 elements (one test took 167 s of
  // host time on the H100 machine, 2026-11-26e).
  void fill_random(std::mt19937& rng) {
    uint64_t state = (uint64_t(rng()) << 32) | rng();
    for_each_index([&](int64_t b, int64_t h, int64_t s, int64_t d) {
      uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      const double m = 0.05 + 0.95 * double(z >> 11) * 0x1.0p-53;  // top 53 bits: [0.05, 1)
      set(b, h, s, d, (z & 1) ? -m : m);
    });
  }

  // Whole buffer (view and padding) to NaN.
  void fill_nan() {
    for (int64_t i = 0; i < elems_; ++i) write_raw(i, NAN);
  }

  void fill_bytes(unsigned char byte) { std::memset(storage_.data() + begin_, byte, elems_ * esize_); }

  bool all_bytes_equal(unsigned char byte) const {
    for (int64_t i = 0; i < elems_ * esize_; ++i) {
      if (storage_[begin_ + i] != byte) return false;
    }
    return true;
  }

  // The whole buffer, padding included, for bitwise comparisons.
  std::vector<unsigned char> bytes() const {
    return std::vector<unsigned char>(storage_.begin() + begin_, storage_.begin() + begin_ + elems_ * esize_);
  }

  // True when every element outside the view is still NaN.
  bool padding_is_nan() const {
    std::vector<bool> in_view(elems_, false);
    const int64_t base = view_base();
    for_each_index([&](int64_t b, int64_t h, int64_t s, int64_t d) { in_view[base + offset(b, h, s, d)] = true; });
    for (int64_t i = 0; i < elems_; ++i) {
      if (!in_view[i] && !std::isnan(read_raw(i))) return false;
    }
    return true;
  }

  template <class F>
  void for_each_index(F&& f) const {
    for (int64_t b = 0; b < view.shape[0]; ++b)
      for (int64_t h = 0; h < view.shape[1]; ++h)
        for (int64_t s = 0; s < view.shape[2]; ++s)
          for (int64_t d = 0; d < view.shape[3]; ++d) f(b, h, s, d);
  }

 private:
  static constexpr size_t kAlign = 64;

  unsigned char* at_raw(int64_t i) { return storage_.data() + begin_ + i * esize_; }
  const unsigned char* at_raw(int64_t i) const { return storage_.data() + begin_ + i * esize_; }
  int64_t view_base() const {
    return (static_cast<const unsigned char*>(view.data) - (storage_.data() + begin_)) / esize_;
  }
  double read(int64_t view_offset) const { return read_raw(view_base() + view_offset); }
  void write(int64_t view_offset, double x) { write_raw(view_base() + view_offset, x); }

  double read_raw(int64_t i) const {
    if (view.dtype == DType::kFloat32) {
      float f;
      std::memcpy(&f, at_raw(i), 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, at_raw(i), 2);
    return view.dtype == DType::kFloat16 ? flashcore::half_bits_to_float(h) : flashcore::bf16_bits_to_float(h);
  }
  void write_raw(int64_t i, double x) {
    const float f = static_cast<float>(x);
    if (view.dtype == DType::kFloat32) {
      std::memcpy(at_raw(i), &f, 4);
      return;
    }
    const uint16_t h = view.dtype == DType::kFloat16 ? flashcore::float_to_half_bits(f)
                                                      : flashcore::float_to_bf16_bits(f);
    std::memcpy(at_raw(i), &h, 2);
  }

  std::vector<unsigned char> storage_;
  size_t begin_ = 0;  // aligned start inside storage_
  int64_t elems_ = 0;
  int64_t esize_ = 0;
};

// (B, H, Sq, 1) float32 LSE tensor.
inline HostTensor make_lse(int64_t b, int64_t h, int64_t s) {
  return HostTensor(DType::kFloat32, b, h, s, 1, Layout::kBHSD);
}

inline double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::fabs(x));
  return m;
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (!(d <= m)) m = d;  // NaN propagates as NaN
  }
  return m;
}

// ||a - ref|| / ||ref||, NaN if anything is NaN.
inline double rel_frobenius(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num) / std::sqrt(den > 0 ? den : 1.0);
}

#if FLASHCORE_TEST_EXPECT_CUDA
// Whether this CUDA build sees a device (tests that need one skip without).
inline bool have_cuda_device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();  // clear the error for the tests that follow
    return false;
  }
  return true;
}
#endif

}  // namespace fctest
