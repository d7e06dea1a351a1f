// The CUDA half of validation: pointers labelled CUDA must really be device
// memory of the named device. Calls validate() only, so it needs no kernel.
// Compiled in CUDA builds; each test skips when no device is present.
#include <gtest/gtest.h>

#if FLASHCORE_TEST_EXPECT_CUDA
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "api/device_memory.h"
#include "api/validation.h"
#include "test_util.h"

namespace fctest {
namespace {

using flashcore::StatusCode;

constexpr int64_t B = 2, Hq = 4, Hkv = 2, Sq = 16, Sk = 24, D = 64;

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

class CudaValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
    for (auto* buf : {&q_, &k_, &v_, &o_, &l_}) ASSERT_NE(buf->get(), nullptr) << "cudaMalloc failed";
    a.q = flashcore::make_bhsd(q_.get(), DType::kBFloat16, B, Hq, Sq, D, Device::kCUDA, 0);
    a.k = flashcore::make_bhsd(k_.get(), DType::kBFloat16, B, Hkv, Sk, D, Device::kCUDA, 0);
    a.v = flashcore::make_bhsd(v_.get(), DType::kBFloat16, B, Hkv, Sk, D, Device::kCUDA, 0);
    a.out = flashcore::make_bhsd(o_.get(), DType::kBFloat16, B, Hq, Sq, D, Device::kCUDA, 0);
    a.lse = flashcore::make_bhsd(l_.get(), DType::kFloat32, B, Hq, Sq, 1, Device::kCUDA, 0);
  }

  void expect_error(StatusCode code, const std::string& fragment) {
    flashcore::Problem p;
    const flashcore::Status s = flashcore::validate(a, &p);
    EXPECT_EQ(static_cast<int>(s.code()), static_cast<int>(code)) << s.message();
    EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
    // Our failed query must not linger as the caller's "last error".
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }

  DeviceBuffer q_{B * Hq * Sq * D * 2}, k_{B * Hkv * Sk * D * 2}, v_{B * Hkv * Sk * D * 2},
      o_{B * Hq * Sq * D * 2}, l_{B * Hq * Sq * 4};
  flashcore::AttentionArgs a;
};

TEST_F(CudaValidation, DeviceMemoryPasses) {
  flashcore::Problem p;
  const flashcore::Status s = flashcore::validate(a, &p);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(p.device, Device::kCUDA);
  EXPECT_EQ(p.device_index, 0);
  EXPECT_TRUE(p.has_lse);
}

TEST_F(CudaValidation, PlainHostPointerIsNamed) {
  HostTensor host(DType::kBFloat16, B, Hkv, Sk, D);
  a.k.data = host.view.data;
  expect_error(StatusCode::kInvalidArgument, "k.data is host memory unknown to CUDA but k.device is cuda:0");
}

TEST_F(CudaValidation, PinnedHostPointerIsNamed) {
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, B * Hq * Sq * 4), cudaSuccess);
  a.lse.data = pinned;
  expect_error(StatusCode::kInvalidArgument, "lse.data is pinned host memory but lse.device is cuda:0");
  cudaFreeHost(pinned);
}

TEST_F(CudaValidation, WrongDeviceOrdinal) {
  int n = 0;
  cudaGetDeviceCount(&n);
  for (flashcore::TensorView* t : {&a.q, &a.k, &a.v, &a.out, &a.lse}) t->device_index = n;  // memory is on 0
  expect_error(StatusCode::kInvalidArgument, "q.data is memory of cuda:0 but q.device is cuda:" + std::to_string(n));
}

// The tensors of one call in one allocation (a packed QKV projection, or
// PyTorch's caching allocator): one CUDA query answers for all of them.
TEST_F(CudaValidation, ViewsOfOneAllocationPass) {
  const size_t q_bytes = B * Hq * Sq * D * 2, kv_bytes = B * Hkv * Sk * D * 2, l_bytes = B * Hq * Sq * 4;
  DeviceBuffer all(2 * q_bytes + 2 * kv_bytes + l_bytes);
  ASSERT_NE(all.get(), nullptr);
  char* base = static_cast<char*>(all.get());
  a.q.data = base;
  a.k.data = base + q_bytes;
  a.v.data = base + q_bytes + kv_bytes;
  a.out.data = base + q_bytes + 2 * kv_bytes;
  a.lse.data = base + 2 * q_bytes + 2 * kv_bytes;
  flashcore::Problem p;
  const flashcore::Status s = flashcore::validate(a, &p);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST_F(CudaValidation, ManagedMemoryPasses) {
  void* managed = nullptr;
  ASSERT_EQ(cudaMallocManaged(&managed, B * Hkv * Sk * D * 2), cudaSuccess);
  a.v.data = managed;
  flashcore::Problem p;
  const flashcore::Status s = flashcore::validate(a, &p);
  EXPECT_TRUE(s.ok()) << s.message();
  cudaFree(managed);
}

// A host pointer after a device one (checked first) is still found: each
// allocation is asked about, not only the first.
TEST_F(CudaValidation, HostPointerAfterDevicePointersIsNamed) {
  HostTensor host(DType::kFloat32, B, Hq, Sq, 1);
  a.lse.data = host.view.data;
  expect_error(StatusCode::kInvalidArgument, "lse.data is host memory unknown to CUDA but lse.device is cuda:0");
}

// MemoryQueries itself: what each kind of memory is reported as, and that a
// plain device allocation is asked about once.
TEST_F(CudaValidation, MemoryQueriesKindsAndReuse) {
  using flashcore::MemoryKind;
  const size_t bytes = size_t(1) << 20;
  DeviceBuffer dev(bytes);
  ASSERT_NE(dev.get(), nullptr);
  char* base = static_cast<char*>(dev.get());
  flashcore::MemoryQueries q;
  flashcore::MemoryRange r;
  std::string error;
  ASSERT_TRUE(q.find(base, &r, &error)) << error;
  EXPECT_EQ(r.kind, MemoryKind::kDevice);
  EXPECT_EQ(r.device, 0);
  // cudaMalloc memory comes with its range (the premise of asking once).
  ASSERT_GT(r.end, r.begin) << "no allocation range for cudaMalloc memory";
  EXPECT_LE(r.begin, reinterpret_cast<uintptr_t>(base));
  EXPECT_GE(r.end, reinterpret_cast<uintptr_t>(base + bytes));
  const int after_first = q.queries();
  EXPECT_GE(after_first, 1);
  flashcore::MemoryRange inside;
  ASSERT_TRUE(q.find(base + bytes / 2, &inside, &error)) << error;
  EXPECT_EQ(q.queries(), after_first);  // answered from the first query
  EXPECT_EQ(inside.kind, MemoryKind::kDevice);
  flashcore::MemoryRange past;
  (void)q.find(reinterpret_cast<const void*>(r.end), &past, &error);
  EXPECT_GT(q.queries(), after_first);  // one past the range is asked about

  void* managed = nullptr;
  ASSERT_EQ(cudaMallocManaged(&managed, 4096), cudaSuccess);
  ASSERT_TRUE(q.find(managed, &r, &error)) << error;
  EXPECT_EQ(r.kind, MemoryKind::kManaged);
  cudaFree(managed);

  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 4096), cudaSuccess);
  ASSERT_TRUE(q.find(pinned, &r, &error)) << error;
  EXPECT_EQ(r.kind, MemoryKind::kPinnedHost);
  cudaFreeHost(pinned);

  std::vector<char> host(4096);
  ASSERT_TRUE(q.find(host.data(), &r, &error)) << error;
  EXPECT_EQ(r.kind, MemoryKind::kUnknownToCuda);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(CudaValidation, EmptyTensorsSkipThePointerCheck) {
  HostTensor host(DType::kBFloat16, B, Hkv, Sk, D);
  for (flashcore::TensorView* t : {&a.q, &a.k, &a.v, &a.out, &a.lse}) t->shape[0] = 0;
  a.k.data = host.view.data;  // never accessed: not an error
  flashcore::Problem p;
  const flashcore::Status s = flashcore::validate(a, &p);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(p.is_empty());
}

}  // namespace
}  // namespace fctest

#endif  // FLASHCORE_TEST_EXPECT_CUDA
