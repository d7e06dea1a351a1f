// Device copies of the host test tensors (tests/cpp/test_util.h): same dtype,
// shape and strides, padding poisoned with 0xFF bytes (NaN in every float
// format), so reads outside a view and unwritten outputs both show.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "test_util.h"

namespace fctest {

#define FC_CUDA_OK(expr)                                                          \
  do {                                                                            \
    cudaError_t fc_err_ = (expr);                                                 \
    ASSERT_EQ(fc_err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(fc_err_); \
  } while (0)

inline bool cuda_device_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

class DeviceTensor {
 public:
  // Mirrors `h` (values copied element by element through its own strides).
  explicit DeviceTensor(const HostTensor& h) : view(h.view) {
    esize_ = flashcore::dtype_size(h.view.dtype);
    int64_t last = 0;
    bool empty = false;
    for (int i = 0; i < 4; ++i) {
      if (h.view.shape[i] == 0) empty = true;
      else last += (h.view.shape[i] - 1) * h.view.stride[i];
    }
    elems_ = kBase + (empty ? 0 : last + 1) + kBase;
    staging_.assign(size_t(elems_ * esize_), 0xFF);
    h.for_each_index([&](int64_t b, int64_t hh, int64_t s, int64_t d) {
      put(kBase + h.offset(b, hh, s, d), h.get(b, hh, s, d));
    });
    if (cudaMalloc(&base_, staging_.size()) != cudaSuccess) base_ = nullptr;
    if (base_) cudaMemcpy(base_, staging_.data(), staging_.size(), cudaMemcpyHostToDevice);
    view.data = static_cast<unsigned char*>(base_) + kBase * esize_;
    view.device = flashcore::Device::kCUDA;
    view.device_index = 0;
  }
  ~DeviceTensor() { cudaFree(base_); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  bool ok() const { return base_ != nullptr; }

  // Re-poisons the whole device buffer.
  void poison() { cudaMemset(base_, 0xFF, staging_.size()); }

  // Every logical element, (B, H, S, D) order, as double.
  std::vector<double> to_vector() {
    cudaMemcpy(staging_.data(), base_, staging_.size(), cudaMemcpyDeviceToHost);
    std::vector<double> r;
    for (int64_t b = 0; b < view.shape[0]; ++b)
      for (int64_t h = 0; h < view.shape[1]; ++h)
        for (int64_t s = 0; s < view.shape[2]; ++s)
          for (int64_t d = 0; d < view.shape[3]; ++d)
            r.push_back(get(kBase + b * view.stride[0] + h * view.stride[1] + s * view.stride[2] + d * view.stride[3]));
    return r;
  }

  // The raw bytes of the whole buffer, for bitwise comparisons.
  std::vector<unsigned char> bytes() {
    std::vector<unsigned char> r(staging_.size());
    cudaMemcpy(r.data(), base_, r.size(), cudaMemcpyDeviceToHost);
    return r;
  }

  flashcore::TensorView view;

 private:
  static constexpr int64_t kBase = 64;  // poisoned elements before the view (keeps 16-byte alignment)

  void put(int64_t i, double x) {
    const float f = float(x);
    if (view.dtype == DType::kFloat32) {
      std::memcpy(&staging_[i * 4], &f, 4);
      return;
    }
    const uint16_t bits = view.dtype == DType::kFloat16 ? flashcore::float_to_half_bits(f)
                                                        : flashcore::float_to_bf16_bits(f);
    std::memcpy(&staging_[i * 2], &bits, 2);
  }
  double get(int64_t i) const {
    if (view.dtype == DType::kFloat32) {
      float f;
      std::memcpy(&f, &staging_[i * 4], 4);
      return f;
    }
    uint16_t bits;
    std::memcpy(&bits, &staging_[i * 2], 2);
    return view.dtype == DType::kFloat16 ? flashcore::half_bits_to_float(bits) : flashcore::bf16_bits_to_float(bits);
  }

  void* base_ = nullptr;
  int64_t esize_ = 0, elems_ = 0;
  std::vector<unsigned char> staging_;
};

}  // namespace fctest
