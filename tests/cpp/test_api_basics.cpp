// Public helpers: layouts, dtype names and sizes, version.
#include <gtest/gtest.h>

#include <cstring>
#include <regex>
#include <string>

#include "flashcore/attention.h"

namespace {

using flashcore::Device;
using flashcore::DType;

TEST(ApiBasics, MakeBhsdStrides) {
  int dummy = 0;
  const flashcore::TensorView t = flashcore::make_bhsd(&dummy, DType::kBFloat16, 2, 3, 5, 64, Device::kCUDA, 1);
  EXPECT_EQ(t.data, &dummy);
  EXPECT_EQ(t.dtype, DType::kBFloat16);
  const int64_t shape[4] = {2, 3, 5, 64}, stride[4] = {3 * 5 * 64, 5 * 64, 64, 1};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(t.shape[i], shape[i]);
    EXPECT_EQ(t.stride[i], stride[i]);
  }
  EXPECT_EQ(t.device, Device::kCUDA);
  EXPECT_EQ(t.device_index, 1);
  EXPECT_EQ(t.numel(), 2 * 3 * 5 * 64);
}

TEST(ApiBasics, MakeBshdStrides) {
  const flashcore::TensorView t = flashcore::make_bshd(nullptr, DType::kFloat16, 2, 3, 5, 64);
  const int64_t shape[4] = {2, 3, 5, 64}, stride[4] = {5 * 3 * 64, 64, 3 * 64, 1};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(t.shape[i], shape[i]);
    EXPECT_EQ(t.stride[i], stride[i]);
  }
  EXPECT_EQ(t.device, Device::kCPU);
  EXPECT_EQ(t.device_index, 0);
}

TEST(ApiBasics, DtypeNamesAndSizes) {
  EXPECT_STREQ(flashcore::dtype_name(DType::kFloat32), "float32");
  EXPECT_STREQ(flashcore::dtype_name(DType::kFloat16), "float16");
  EXPECT_STREQ(flashcore::dtype_name(DType::kBFloat16), "bfloat16");
  EXPECT_STREQ(flashcore::dtype_name(static_cast<DType>(42)), "unknown");
  EXPECT_EQ(flashcore::dtype_size(DType::kFloat32), 4);
  EXPECT_EQ(flashcore::dtype_size(DType::kFloat16), 2);
  EXPECT_EQ(flashcore::dtype_size(DType::kBFloat16), 2);
  EXPECT_EQ(flashcore::dtype_size(static_cast<DType>(42)), 0);
}

TEST(ApiBasics, VersionIsSemver) {
  EXPECT_TRUE(std::regex_match(flashcore::version(), std::regex(R"(\d+\.\d+\.\d+)"))) << flashcore::version();
}

TEST(ApiBasics, BuiltWithCudaMatchesBuild) {
#if defined(FLASHCORE_TEST_EXPECT_CUDA)
  EXPECT_EQ(flashcore::built_with_cuda(), FLASHCORE_TEST_EXPECT_CUDA != 0);
#else
  GTEST_SKIP() << "build did not say whether CUDA is expected";
#endif
}

}  // namespace
