// Small public helpers around TensorView and the library identity.
#include "flashcore/attention.h"

#ifndef FLASHCORE_VERSION_STRING
#error "FLASHCORE_VERSION_STRING must be defined by the build (CMakeLists.txt does)"
#endif

namespace flashcore {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "unknown";  // a value cast from an integer outside the enum
}

int64_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
  }
  return 0;
}

static TensorView make_view(void* data, DType dtype, const int64_t shape[4], const int64_t stride[4],
                            Device device, int device_index) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  for (int i = 0; i < 4; ++i) {
    t.shape[i] = shape[i];
    t.stride[i] = stride[i];
  }
  t.device = device;
  t.device_index = device_index;
  return t;
}

TensorView make_bhsd(void* data, DType dtype, int64_t b, int64_t h, int64_t s, int64_t d, Device device,
                     int device_index) {
  const int64_t shape[4] = {b, h, s, d};
  const int64_t stride[4] = {h * s * d, s * d, d, 1};
  return make_view(data, dtype, shape, stride, device, device_index);
}

// Memory is (B, S, H, D); the logical shape stays (B, H, S, D).
TensorView make_bshd(void* data, DType dtype, int64_t b, int64_t h, int64_t s, int64_t d, Device device,
                     int device_index) {
  const int64_t shape[4] = {b, h, s, d};
  const int64_t stride[4] = {s * h * d, d, h * d, 1};
  return make_view(data, dtype, shape, stride, device, device_index);
}

const char* version() { return FLASHCORE_VERSION_STRING; }

bool built_with_cuda() { return FLASHCORE_WITH_CUDA != 0; }

}  // namespace flashcore
