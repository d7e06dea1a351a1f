// The C ABI against the C++ API.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <thread>

#include "attention_case.h"
#include "serving_case.h"
#include "flashcore/flashcore.h"

namespace fctest {
namespace {

fc_tensor to_c(const TensorView& t) {
  fc_tensor c;
  c.data = t.data;
  c.dtype = static_cast<int32_t>(t.dtype);
  for (int i = 0; i < 4; ++i) {
    c.shape[i] = t.shape[i];
    c.strides[i] = t.stride[i];
  }
  c.device = static_cast<int32_t>(t.device);
  c.device_index = t.device_index;
  return c;
}

fc_attention_args to_c(const flashcore::AttentionArgs& a) {
  fc_attention_args c;
  fc_attention_args_init(&c);
  c.q = to_c(a.q);
  c.k = to_c(a.k);
  c.v = to_c(a.v);
  c.out = to_c(a.out);
  c.lse = to_c(a.lse);
  c.softmax_scale = a.softmax_scale;
  c.causal = a.causal ? 1 : 0;
  c.window_left = a.window_left;
  c.window_right = a.window_right;
  c.cu_seqlens_q = a.cu_seqlens_q;
  c.cu_seqlens_k = a.cu_seqlens_k;
  c.cache_seqlens = a.cache_seqlens;
  c.block_table = a.block_table;
  c.num_seqs = a.num_seqs;
  c.max_seqlen_q = a.max_seqlen_q;
  c.max_seqlen_k = a.max_seqlen_k;
  c.block_table_stride = a.block_table_stride;
  c.max_pages_per_seq = a.max_pages_per_seq;
  c.k_new = to_c(a.k_new);
  c.v_new = to_c(a.v_new);
  c.workspace = a.workspace;
  c.workspace_bytes = a.workspace_bytes;
  return c;
}

Case small_case() {
  Case c;
  c.dtype = DType::kBFloat16;
  c.layout = Layout::kBSHD;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 1;
  c.seqlen_q = 70;
  c.seqlen_k = 130;
  c.head_dim = 128;
  c.window_left = 40;
  c.causal = true;
  c.scale = 0.1f;
  return c;
}

TEST(CAbi, InitSetsDefaults) {
  fc_attention_args a;
  std::memset(&a, 0x5a, sizeof a);
  fc_attention_args_init(&a);
  EXPECT_EQ(a.q.data, nullptr);
  EXPECT_EQ(a.q.dtype, FC_FLOAT16);
  EXPECT_EQ(a.lse.data, nullptr);
  EXPECT_EQ(a.out.device, FC_DEVICE_CPU);
  EXPECT_EQ(a.k.shape[2], 0);
  EXPECT_EQ(a.v.strides[3], 0);
  EXPECT_EQ(a.softmax_scale, 0.f);
  EXPECT_EQ(a.causal, 0);
  EXPECT_EQ(a.window_left, -1);
  EXPECT_EQ(a.window_right, -1);
  EXPECT_EQ(a.block_m, 0);
  EXPECT_EQ(a.block_n, 0);
  EXPECT_EQ(a.num_splits, 0);
  EXPECT_EQ(a.cu_seqlens_q, nullptr);
  EXPECT_EQ(a.cu_seqlens_k, nullptr);
  EXPECT_EQ(a.cache_seqlens, nullptr);
  EXPECT_EQ(a.block_table, nullptr);
  EXPECT_EQ(a.num_seqs, 0);
  EXPECT_EQ(a.max_seqlen_q, 0);
  EXPECT_EQ(a.max_seqlen_k, 0);
  EXPECT_EQ(a.block_table_stride, 0);
  EXPECT_EQ(a.max_pages_per_seq, 0);
  EXPECT_EQ(a.k_new.data, nullptr);
  EXPECT_EQ(a.k_new.dtype, FC_FLOAT16);
  EXPECT_EQ(a.v_new.device, FC_DEVICE_CPU);
  EXPECT_EQ(a.v_new.shape[2], 0);
  EXPECT_EQ(a.workspace, nullptr);
  EXPECT_EQ(a.workspace_bytes, 0);
  fc_attention_args_init(nullptr);  // documented no-op
}

// An initialized-but-empty argument set is a valid zero-sized problem.
TEST(CAbi, DefaultArgsAreAnEmptyProblem) {
  fc_attention_args a;
  fc_attention_args_init(&a);
  EXPECT_EQ(fc_attention_forward(&a, nullptr), FC_OK) << fc_last_error();
}

TEST(CAbi, MatchesCppApiBitwise) {
  const Case c = small_case();
  CaseTensors cpp(c);
  CaseTensors via_c(c);
  ASSERT_TRUE(flashcore::attention_forward(cpp.args).ok());
  const fc_attention_args ca = to_c(via_c.args);
  ASSERT_EQ(fc_attention_forward(&ca, nullptr), FC_OK) << fc_last_error();
  EXPECT_STREQ(fc_last_error(), "");
  EXPECT_EQ(cpp.out.bytes(), via_c.out.bytes());
  EXPECT_EQ(cpp.lse.bytes(), via_c.lse.bytes());
}

// The allocating entry point on CPU tensors, which never need a workspace:
// the result is the plain call's and the allocator is not called (the GPU
// tests cover a call that needs one: Sm90Serving.WorkspaceAllocatorIs-
// AskedOnlyWhenNeeded); a null allocator is the plain call; bad arguments
// are refused.
TEST(CAbi, ForwardWithAllocatorMatchesPlainCall) {
  const Case c = small_case();
  CaseTensors plain(c), via_alloc(c);
  const fc_attention_args pa = to_c(plain.args);
  fc_attention_args aa = to_c(via_alloc.args);
  RefusingWorkspaceAlloc count;
  ASSERT_EQ(fc_attention_forward(&pa, nullptr), FC_OK) << fc_last_error();
  ASSERT_EQ(fc_attention_forward_alloc(&aa, nullptr, &RefusingWorkspaceAlloc::alloc, &count), FC_OK) << fc_last_error();
  EXPECT_EQ(count.calls, 0);
  EXPECT_EQ(plain.out.bytes(), via_alloc.out.bytes());
  EXPECT_EQ(plain.lse.bytes(), via_alloc.lse.bytes());
  EXPECT_EQ(fc_attention_forward_alloc(nullptr, nullptr, &RefusingWorkspaceAlloc::alloc, &count),
            FC_ERR_INVALID_ARGUMENT);
  CaseTensors no_alloc(c);
  const fc_attention_args na = to_c(no_alloc.args);
  EXPECT_EQ(fc_attention_forward_alloc(&na, nullptr, nullptr, nullptr), FC_OK) << fc_last_error();  // the plain call
  EXPECT_EQ(plain.out.bytes(), no_alloc.out.bytes());
  aa.q.data = nullptr;
  EXPECT_EQ(fc_attention_forward_alloc(&aa, nullptr, &RefusingWorkspaceAlloc::alloc, &count), FC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(count.calls, 0);
}

TEST(CAbi, ErrorCodesAndMessages) {
  const Case c = small_case();
  CaseTensors t(c);
  fc_attention_args a = to_c(t.args);

  a.k.dtype = FC_FLOAT16;
  EXPECT_EQ(fc_attention_forward(&a, nullptr), FC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fc_last_error()).find("k.dtype is float16"), std::string::npos) << fc_last_error();
  a.k.dtype = FC_BFLOAT16;

  a.q.dtype = 99;  // out of the enum: reported, not undefined behaviour
  EXPECT_EQ(fc_attention_forward(&a, nullptr), FC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fc_last_error()).find("q.dtype = 99"), std::string::npos) << fc_last_error();
  a.q.dtype = FC_BFLOAT16;

  const int32_t lens[3] = {0, 10, 20};
  a.cu_seqlens_k = lens;  // without cu_seqlens_q
  EXPECT_EQ(fc_attention_forward(&a, nullptr), FC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fc_last_error()).find("cu_seqlens_k is set but cu_seqlens_q is null"), std::string::npos)
      << fc_last_error();
  a.cu_seqlens_k = nullptr;

  a.window_right = 4;  // conflicts with causal
  EXPECT_EQ(fc_attention_forward(&a, nullptr), FC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fc_last_error()).find("window_right=4"), std::string::npos) << fc_last_error();
  a.window_right = -1;

  for (fc_tensor* x : {&a.q, &a.k, &a.v, &a.out, &a.lse}) x->device = FC_DEVICE_CUDA;
  const int code = fc_attention_forward(&a, nullptr);  // host memory labelled CUDA
  EXPECT_NE(code, FC_OK);
  if (!fc_built_with_cuda()) {
    EXPECT_EQ(code, FC_ERR_NOT_SUPPORTED) << fc_last_error();
  }
  for (fc_tensor* x : {&a.q, &a.k, &a.v, &a.out, &a.lse}) x->device = FC_DEVICE_CPU;

  EXPECT_EQ(fc_attention_forward(&a, nullptr), FC_OK) << fc_last_error();
  EXPECT_STREQ(fc_last_error(), "");  // cleared by success
}

// The serving fields were appended: the original layout is unchanged.
TEST(CAbi, ServingFieldsFollowTheOriginalOnes) {
  EXPECT_LT(offsetof(fc_attention_args, num_splits), offsetof(fc_attention_args, cu_seqlens_q));
  EXPECT_LT(offsetof(fc_attention_args, block_table), offsetof(fc_attention_args, num_seqs));
  EXPECT_LT(offsetof(fc_attention_args, num_seqs), offsetof(fc_attention_args, k_new));
  EXPECT_LT(offsetof(fc_attention_args, v_new), offsetof(fc_attention_args, workspace));
  EXPECT_EQ(offsetof(fc_attention_args, workspace_bytes) + sizeof(int64_t), sizeof(fc_attention_args));
}

TEST(CAbi, ServingMatchesCppApiBitwise) {
  VarlenCase vc;
  vc.lens_q = {3, 0, 40};
  vc.lens_k = {10, 2, 70};
  vc.masks.causal = true;
  VarlenTensors vcpp(vc), vcabi(vc);
  ASSERT_TRUE(flashcore::attention_forward(vcpp.args).ok());
  const fc_attention_args va = to_c(vcabi.args);
  ASSERT_EQ(fc_attention_forward(&va, nullptr), FC_OK) << fc_last_error();
  EXPECT_EQ(vcpp.out.bytes(), vcabi.out.bytes());
  EXPECT_EQ(vcpp.lse.bytes(), vcabi.lse.bytes());

  CacheCase cc;
  cc.page_size = 32;
  cc.capacity = 128;
  cc.cache_lens = {0, 31, 100};
  cc.seqlen_q = cc.seqlen_new = 2;
  cc.masks.causal = true;
  CacheTensors ccpp(cc), ccabi(cc);
  ASSERT_TRUE(flashcore::attention_forward(ccpp.args).ok());
  const fc_attention_args ca = to_c(ccabi.args);
  ASSERT_EQ(fc_attention_forward(&ca, nullptr), FC_OK) << fc_last_error();
  EXPECT_EQ(ccpp.out.bytes(), ccabi.out.bytes());
  EXPECT_EQ(ccpp.lse.bytes(), ccabi.lse.bytes());
  EXPECT_EQ(ccpp.k.bytes(), ccabi.k.bytes());  // the append, too
  EXPECT_EQ(ccpp.v.bytes(), ccabi.v.bytes());
}

TEST(CAbi, WorkspaceSizeAndMetadataCheck) {
  VarlenCase vc;
  vc.lens_q = {3, 4};
  vc.lens_k = {5, 6};
  VarlenTensors t(vc);
  fc_attention_args a = to_c(t.args);
  int64_t bytes = -1;
  EXPECT_EQ(fc_attention_workspace_size(&a, &bytes), FC_OK) << fc_last_error();
  EXPECT_EQ(bytes, 0);  // CPU tensors never need workspace
  EXPECT_EQ(fc_attention_workspace_size(&a, nullptr), FC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fc_last_error()).find("bytes"), std::string::npos) << fc_last_error();
  EXPECT_EQ(fc_attention_workspace_size(nullptr, &bytes), FC_ERR_INVALID_ARGUMENT);
  a.max_seqlen_q = -2;
  EXPECT_EQ(fc_attention_workspace_size(&a, &bytes), FC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fc_last_error()).find("max_seqlen_q = -2"), std::string::npos) << fc_last_error();
  a.max_seqlen_q = t.args.max_seqlen_q;

  EXPECT_EQ(fc_check_serving_metadata(&a, nullptr), FC_OK) << fc_last_error();
  EXPECT_STREQ(fc_last_error(), "");
  const int32_t decreasing[3] = {0, 4, 3};
  a.cu_seqlens_q = decreasing;
  a.q.shape[2] = a.out.shape[2] = a.lse.shape[2] = 3;
  EXPECT_EQ(fc_check_serving_metadata(&a, nullptr), FC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fc_last_error()).find("cu_seqlens_q must be non-decreasing"), std::string::npos)
      << fc_last_error();
  EXPECT_EQ(fc_attention_forward(&a, nullptr), FC_ERR_INVALID_ARGUMENT);  // the CPU backend checks too
  EXPECT_EQ(fc_check_serving_metadata(nullptr, nullptr), FC_ERR_INVALID_ARGUMENT);
}

TEST(CAbi, NullArgsPointer) {
  EXPECT_EQ(fc_attention_forward(nullptr, nullptr), FC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fc_last_error()).find("args"), std::string::npos) << fc_last_error();
}

// The last error belongs to the thread that made the call.
TEST(CAbi, LastErrorIsThreadLocal) {
  EXPECT_EQ(fc_attention_forward(nullptr, nullptr), FC_ERR_INVALID_ARGUMENT);
  const std::string main_error = fc_last_error();
  ASSERT_FALSE(main_error.empty());

  std::string seen_at_start, seen_after_own_error;
  std::thread other([&] {
    seen_at_start = fc_last_error();
    fc_attention_args a;
    fc_attention_args_init(&a);
    a.window_left = -7;
    fc_attention_forward(&a, nullptr);
    seen_after_own_error = fc_last_error();
  });
  other.join();

  EXPECT_EQ(seen_at_start, "");
  EXPECT_NE(seen_after_own_error.find("window_left = -7"), std::string::npos) << seen_after_own_error;
  EXPECT_EQ(std::string(fc_last_error()), main_error);  // untouched by the other thread
}

TEST(CAbi, VersionAndBuildInfo) {
  ASSERT_NE(fc_version(), nullptr);
  EXPECT_GT(std::strlen(fc_version()), 0u);
  EXPECT_STREQ(fc_version(), flashcore::version());
  EXPECT_EQ(fc_built_with_cuda(), flashcore::built_with_cuda() ? 1 : 0);
}

}  // namespace
}  // namespace fctest
