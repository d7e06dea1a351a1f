// Every argument error: the right StatusCode, a message naming the argument,
// and out/lse left untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "api/validation.h"
#include "test_util.h"

namespace fctest {
namespace {

using flashcore::AttentionArgs;
using flashcore::StatusCode;

constexpr unsigned char kPoison = 0xA5;

// A valid fp16 CPU problem (B=2, Hq=4, Hkv=2, Sq=16, Sk=24, D=64, with lse)
// whose out and lse are poisoned; each test breaks one thing.
class Validation : public ::testing::Test {
 protected:
  Validation()
      : q(DType::kFloat16, 2, 4, 16, 64), k(DType::kFloat16, 2, 2, 24, 64), v(DType::kFloat16, 2, 2, 24, 64),
        out(DType::kFloat16, 2, 4, 16, 64), lse(make_lse(2, 4, 16)) {
    std::mt19937 rng(7);
    q.fill_random(rng);
    k.fill_random(rng);
    v.fill_random(rng);
    out.fill_bytes(kPoison);
    lse.fill_bytes(kPoison);
    a.q = q.view;
    a.k = k.view;
    a.v = v.view;
    a.out = out.view;
    a.lse = lse.view;
  }

  // Runs attention_forward and checks the code, the message fragments and
  // that nothing was written.
  void expect_error(StatusCode code, std::initializer_list<std::string> fragments) {
    const flashcore::Status s = flashcore::attention_forward(a);
    EXPECT_EQ(static_cast<int>(s.code()), static_cast<int>(code)) << s.message();
    for (const std::string& f : fragments) {
      EXPECT_NE(s.message().find(f), std::string::npos) << "message: '" << s.message() << "' lacks '" << f << "'";
    }
    EXPECT_TRUE(out.all_bytes_equal(kPoison)) << "out written on error";
    EXPECT_TRUE(lse.all_bytes_equal(kPoison)) << "lse written on error";
  }

  void set_all_devices(Device d) {
    for (TensorView* t : {&a.q, &a.k, &a.v, &a.out, &a.lse}) t->device = d;
  }

  HostTensor q, k, v, out, lse;
  AttentionArgs a;
};

TEST_F(Validation, BaselineIsValid) {
  const flashcore::Status s = flashcore::attention_forward(a);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(out.all_bytes_equal(kPoison));
}

// ---------------------------------------------------------------- shapes

TEST_F(Validation, HeadDimMismatch) {
  HostTensor k80(DType::kFloat16, 2, 2, 24, 80);
  a.k = k80.view;
  expect_error(StatusCode::kInvalidArgument, {"k.shape[3] (head_dim) = 80 must equal q.shape[3] = 64"});
}

TEST_F(Validation, UnsupportedHeadDim) {
  HostTensor q80(DType::kFloat16, 2, 4, 16, 80), k80(DType::kFloat16, 2, 2, 24, 80),
      v80(DType::kFloat16, 2, 2, 24, 80), o80(DType::kFloat16, 2, 4, 16, 80);
  a.q = q80.view;
  a.k = k80.view;
  a.v = v80.view;
  a.out = o80.view;
  expect_error(StatusCode::kNotSupported, {"head_dim 80 is not supported (supported: 64, 96, 128, 256)"});
}

TEST_F(Validation, HeadsNotAMultiple) {
  a.q.shape[1] = 12;
  a.out.shape[1] = 12;
  a.lse.shape[1] = 12;
  a.k.shape[1] = 5;
  a.v.shape[1] = 5;
  expect_error(StatusCode::kInvalidArgument, {"q heads (12) must be a multiple of k heads (5)"});
}

TEST_F(Validation, ZeroKvHeadsWithQueryHeads) {
  a.k.shape[1] = 0;
  a.v.shape[1] = 0;
  expect_error(StatusCode::kInvalidArgument, {"k heads (0)"});
}

TEST_F(Validation, BatchMismatch) {
  a.k.shape[0] = 1;
  a.v.shape[0] = 1;
  expect_error(StatusCode::kInvalidArgument, {"k.shape[0] (batch) = 1 must equal q.shape[0] = 2"});
}

TEST_F(Validation, ValueShapeMustEqualKeyShape) {
  a.v.shape[2] = 23;
  expect_error(StatusCode::kInvalidArgument, {"v.shape[2] (seqlen) = 23 must equal k.shape[2] = 24"});
}

TEST_F(Validation, OutShapeMustEqualQueryShape) {
  a.out.shape[2] = 15;
  expect_error(StatusCode::kInvalidArgument, {"out.shape[2] (seqlen) = 15 must equal q.shape[2] = 16"});
}

TEST_F(Validation, NegativeShape) {
  a.q.shape[2] = -1;
  expect_error(StatusCode::kInvalidArgument, {"q.shape[2] = -1 must be >= 0"});
}

TEST_F(Validation, DimensionTooLarge) {
  a.k.shape[2] = int64_t(1) << 31;
  expect_error(StatusCode::kInvalidArgument, {"k.shape[2] = 2147483648 must be < 2^31"});
}

TEST_F(Validation, ElementCountOverflow) {
  // Broadcast strides keep the extent small while the element count overflows.
  for (int i = 0; i < 4; ++i) a.v.shape[i] = (int64_t(1) << 31) - 1;
  a.v.stride[0] = a.v.stride[1] = a.v.stride[2] = 0;
  expect_error(StatusCode::kInvalidArgument, {"v with shape", "2^63 elements"});
}

TEST_F(Validation, HugeButEmptyTensorIsNotAnOverflow) {
  // A zero dim makes the tensor empty however large the other dims are.
  a.q.shape[0] = a.k.shape[0] = a.v.shape[0] = a.out.shape[0] = a.lse.shape[0] = 0;
  for (TensorView* t : {&a.q, &a.out}) t->shape[1] = t->shape[2] = (int64_t(1) << 31) - 1;
  a.lse.shape[1] = a.lse.shape[2] = (int64_t(1) << 31) - 1;
  a.k.shape[1] = a.v.shape[1] = (int64_t(1) << 31) - 1;
  const flashcore::Status s = flashcore::attention_forward(a);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(out.all_bytes_equal(kPoison));
}

TEST_F(Validation, ElementOffsetOverflow) {
  a.q.stride[0] = int64_t(1) << 62;
  a.q.stride[1] = int64_t(1) << 61;  // (2-1)*2^62 + (4-1)*2^61 > 2^63
  expect_error(StatusCode::kInvalidArgument, {"q: shape", "overflow int64"});
}

TEST_F(Validation, ByteOffsetOverflow) {
  a.q.stride[0] = int64_t(1) << 62;  // fits in elements, not in bytes (2 per element)
  expect_error(StatusCode::kInvalidArgument, {"q: shape", "2^63 bytes"});
}

// ---------------------------------------------------------------- dtypes

TEST_F(Validation, KeyDtypeMismatch) {
  a.k.dtype = DType::kBFloat16;
  expect_error(StatusCode::kInvalidArgument, {"q.dtype is float16 but k.dtype is bfloat16"});
}

TEST_F(Validation, ValueDtypeMismatch) {
  a.v.dtype = DType::kBFloat16;
  expect_error(StatusCode::kInvalidArgument, {"q.dtype is float16 but v.dtype is bfloat16"});
}

TEST_F(Validation, OutDtypeMismatch) {
  a.out.dtype = DType::kFloat32;
  expect_error(StatusCode::kInvalidArgument, {"q.dtype is float16 but out.dtype is float32"});
}

TEST_F(Validation, InvalidDtypeValue) {
  a.q.dtype = static_cast<DType>(7);
  expect_error(StatusCode::kInvalidArgument, {"q.dtype = 7 is not a valid dtype"});
}

// ---------------------------------------------------------------- null data

TEST_F(Validation, NullDataWithElements) {
  a.q.data = nullptr;
  expect_error(StatusCode::kInvalidArgument, {"q.data is null but q has 8192 elements"});
}

TEST_F(Validation, NullOutData) {
  a.out.data = nullptr;
  expect_error(StatusCode::kInvalidArgument, {"out.data is null"});
}

// ---------------------------------------------------------------- strides & alignment

TEST_F(Validation, LastStrideMustBeOne) {
  a.q.stride[3] = 2;
  expect_error(StatusCode::kInvalidArgument, {"q.stride[3] must be 1 (got 2)"});
}

TEST_F(Validation, NegativeStride) {
  a.k.stride[1] = -64;
  expect_error(StatusCode::kInvalidArgument, {"k.stride[1] = -64 must be >= 0"});
}

TEST_F(Validation, MisalignedData) {
  a.q.data = static_cast<char*>(a.q.data) + 2;  // one fp16 element in
  expect_error(StatusCode::kInvalidArgument, {"q.data is not 16-byte aligned"});
}

TEST_F(Validation, StrideNotMultipleOf16Bytes) {
  a.q.stride[2] = 3;
  expect_error(StatusCode::kInvalidArgument, {"q.stride[2]=3 elements is not a multiple of 16 bytes"});
}

TEST_F(Validation, OutStrideNotMultipleOf16Bytes) {
  a.out.stride[0] = a.out.stride[0] + 4;  // 8 bytes extra per batch
  expect_error(StatusCode::kInvalidArgument, {"out.stride[0]=", "not a multiple of 16 bytes"});
}

TEST_F(Validation, OutMustNotOverlapItself) {
  a.out.stride[1] = 64;  // heads step by one row: head h row s+1 == head h+1 row s
  expect_error(StatusCode::kInvalidArgument, {"out has overlapping elements"});
}

TEST_F(Validation, OutBroadcastStrideRejected) {
  a.out.stride[2] = 0;
  expect_error(StatusCode::kInvalidArgument, {"out has overlapping elements"});
}

TEST_F(Validation, InputsMayBroadcast) {
  // Stride 0 on an input is legal (e.g. one K row repeated): only outputs must not alias.
  a.k.stride[2] = 0;
  a.v.stride[2] = 0;
  const flashcore::Status s = flashcore::attention_forward(a);
  EXPECT_TRUE(s.ok()) << s.message();
}

// ---------------------------------------------------------------- lse

TEST_F(Validation, LseMustBeFloat32) {
  a.lse.dtype = DType::kFloat16;
  expect_error(StatusCode::kInvalidArgument, {"lse.dtype is float16 but must be float32"});
}

TEST_F(Validation, LseShape) {
  a.lse.shape[2] = 15;
  expect_error(StatusCode::kInvalidArgument, {"lse.shape must be (batch, q heads, seqlen_q, 1) = (2, 4, 16, 1)"});
}

TEST_F(Validation, LseLastDimMustBeOne) {
  a.lse.shape[3] = 2;
  expect_error(StatusCode::kInvalidArgument, {"lse.shape", "got (2, 4, 16, 2)"});
}

TEST_F(Validation, LseOnOtherDevice) {
  a.lse.device = Device::kCUDA;
  expect_error(StatusCode::kInvalidArgument, {"tensors are on different devices (q: cpu, lse: cuda:0)"});
}

TEST_F(Validation, LseMisaligned) {
  a.lse.data = static_cast<char*>(a.lse.data) + 2;
  expect_error(StatusCode::kInvalidArgument, {"lse.data is not 4-byte aligned"});
}

TEST_F(Validation, LseIgnoredWhenNull) {
  a.lse.data = nullptr;
  a.lse.dtype = DType::kFloat16;  // would be wrong, but lse is absent
  const flashcore::Status s = flashcore::attention_forward(a);
  EXPECT_TRUE(s.ok()) << s.message();
}

// ---------------------------------------------------------------- devices

TEST_F(Validation, DifferentDevices) {
  set_all_devices(Device::kCUDA);
  a.k.device = Device::kCPU;
  expect_error(StatusCode::kInvalidArgument, {"tensors are on different devices (q: cuda:0, k: cpu)"});
}

TEST_F(Validation, DifferentCudaOrdinals) {
  set_all_devices(Device::kCUDA);
  a.v.device_index = 1;
  expect_error(StatusCode::kInvalidArgument, {"tensors are on different devices (q: cuda:0, v: cuda:1)"});
}

TEST_F(Validation, CpuIgnoresDeviceIndex) {
  a.k.device_index = 3;
  const flashcore::Status s = flashcore::attention_forward(a);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST_F(Validation, InvalidDeviceValue) {
  a.out.device = static_cast<Device>(5);
  expect_error(StatusCode::kInvalidArgument, {"out.device = 5 is not a valid device"});
}

TEST_F(Validation, NegativeCudaOrdinal) {
  set_all_devices(Device::kCUDA);
  for (TensorView* t : {&a.q, &a.k, &a.v, &a.out, &a.lse}) t->device_index = -1;
  expect_error(StatusCode::kInvalidArgument, {"q.device_index = -1 must be >= 0"});
}

TEST_F(Validation, Float32NotSupportedOnCuda) {
  HostTensor q32(DType::kFloat32, 2, 4, 16, 64), k32(DType::kFloat32, 2, 2, 24, 64),
      v32(DType::kFloat32, 2, 2, 24, 64), o32(DType::kFloat32, 2, 4, 16, 64);
  a.q = q32.view;
  a.k = k32.view;
  a.v = v32.view;
  a.out = o32.view;
  set_all_devices(Device::kCUDA);
  expect_error(StatusCode::kNotSupported, {"float32 is not supported on CUDA"});
}

// Structural errors are found before any CUDA call, so they are testable
// here and give the same answer with or without a GPU.
TEST_F(Validation, StructuralChecksComeBeforeCudaChecks) {
  set_all_devices(Device::kCUDA);
  a.q.stride[2] = 3;
  expect_error(StatusCode::kInvalidArgument, {"q.stride[2]=3 elements is not a multiple of 16 bytes"});
}

// Host memory labelled as CUDA: refused without touching it. Without CUDA
// in the build that is kNotSupported; with CUDA the pointer check fails
// (host memory, or no usable device on this machine).
TEST_F(Validation, HostPointersLabelledCuda) {
  set_all_devices(Device::kCUDA);
  if (!flashcore::built_with_cuda()) {
    expect_error(StatusCode::kNotSupported, {"flashcore was built without CUDA"});
    return;
  }
  const flashcore::Status s = flashcore::attention_forward(a);
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kCudaError) << s.message();
  EXPECT_NE(s.message().find("q.data"), std::string::npos) << s.message();
  EXPECT_TRUE(out.all_bytes_equal(kPoison));
}

// ---------------------------------------------------------------- scalars

TEST_F(Validation, ScaleMustBeFinite) {
  a.softmax_scale = std::numeric_limits<float>::infinity();
  expect_error(StatusCode::kInvalidArgument, {"softmax_scale = inf must be finite"});
  a.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  expect_error(StatusCode::kInvalidArgument, {"softmax_scale", "must be finite"});
}

TEST_F(Validation, ScaleMustNotBeNegative) {
  a.softmax_scale = -0.5f;
  expect_error(StatusCode::kInvalidArgument, {"softmax_scale = -0.5 must not be negative"});
  a.softmax_scale = -std::numeric_limits<float>::denorm_min();
  expect_error(StatusCode::kInvalidArgument, {"softmax_scale", "must not be negative"});
}

TEST_F(Validation, WindowLeftBelowMinusOne) {
  a.window_left = -5;
  expect_error(StatusCode::kInvalidArgument, {"window_left = -5 must be -1 (unbounded) or >= 0"});
}

TEST_F(Validation, WindowRightBelowMinusOne) {
  a.window_right = -2;
  expect_error(StatusCode::kInvalidArgument, {"window_right = -2 must be -1 (unbounded) or >= 0"});
}

TEST_F(Validation, CausalConflictsWithWindowRight) {
  a.causal = true;
  a.window_right = 3;
  expect_error(StatusCode::kInvalidArgument,
               {"causal=true conflicts with window_right=3 (causal means window_right=0)"});
}

TEST_F(Validation, NegativeKernelConfig) {
  a.config.block_m = -1;
  expect_error(StatusCode::kInvalidArgument, {"config.block_m = -1 must be >= 0"});
  a.config.block_m = 0;
  a.config.block_n = -64;
  expect_error(StatusCode::kInvalidArgument, {"config.block_n = -64"});
  a.config.block_n = 0;
  a.config.num_splits = -3;
  expect_error(StatusCode::kInvalidArgument, {"config.num_splits = -3"});
}

// The serving fields (cu_seqlens, KV cache, block table, k_new/v_new) have
// their own tests: test_serving_reference.cpp.

// ---------------------------------------------------------------- resolution

TEST_F(Validation, ResolvesDefaults) {
  flashcore::Problem p;
  ASSERT_TRUE(flashcore::validate(a, &p).ok());
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.heads_q, 4);
  EXPECT_EQ(p.heads_kv, 2);
  EXPECT_EQ(p.group(), 2);
  EXPECT_EQ(p.seqlen_q, 16);
  EXPECT_EQ(p.seqlen_k, 24);
  EXPECT_EQ(p.head_dim, 64);
  EXPECT_EQ(p.dtype, DType::kFloat16);
  EXPECT_EQ(p.device, Device::kCPU);
  EXPECT_FLOAT_EQ(p.scale, 0.125f);
  EXPECT_EQ(p.window_left, flashcore::kUnboundedWindow);
  EXPECT_EQ(p.window_right, flashcore::kUnboundedWindow);
  EXPECT_FALSE(p.causal);
  EXPECT_TRUE(p.has_lse);
}

TEST_F(Validation, ResolvesCausalAndWindows) {
  flashcore::Problem p;
  a.causal = true;
  a.window_left = 5;
  a.softmax_scale = 0.3f;
  a.lse.data = nullptr;
  ASSERT_TRUE(flashcore::validate(a, &p).ok());
  EXPECT_TRUE(p.causal);
  EXPECT_EQ(p.window_right, 0);
  EXPECT_EQ(p.window_left, 5);
  EXPECT_FLOAT_EQ(p.scale, 0.3f);
  EXPECT_FALSE(p.has_lse);
  a.window_right = 0;  // explicit 0 with causal is consistent
  ASSERT_TRUE(flashcore::validate(a, &p).ok());
  // Windows beyond any sequence length are clamped so key_lo/key_hi cannot overflow.
  a.causal = false;
  a.window_left = std::numeric_limits<int64_t>::max();
  a.window_right = std::numeric_limits<int64_t>::max();
  ASSERT_TRUE(flashcore::validate(a, &p).ok());
  EXPECT_EQ(p.window_left, flashcore::kUnboundedWindow);
  EXPECT_EQ(p.key_lo(0), 0);
  EXPECT_EQ(p.key_hi(0), 23);
}

}  // namespace
}  // namespace fctest
