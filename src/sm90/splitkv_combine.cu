#include "sm90/splitkv_combine.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

namespace flashcore::sm90 {
namespace {

constexpr int kRowsPerCta = 4;  // one warp per row

template <class T>
__device__ T to_element(float x);
template <>
__device__ __half to_element<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __nv_bfloat16 to_element<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <class Element>
__global__ void __launch_bounds__(32 * kRowsPerCta) splitkv_combine_kernel(const CombineParams p) {
  int const bh = blockIdx.x;
  int const batch = bh / p.heads, head = bh % p.heads;
  int const lane = threadIdx.x % 32;
  int const row = blockIdx.y * kRowsPerCta + threadIdx.x / 32;
  SeqInfo const si = seq_info(p.seq, batch);
  if (!splits(p.seq, si) || row >= si.seqlen_q) return;
  int const n = num_splits_of(p.seq, si);
  if (n <= 1) return;  // the forward kernel wrote this sequence itself

  int64_t const slot0 = (int64_t(batch) * p.heads + head) * p.seq.max_splits;
  auto lse_of = [&](int s) { return p.partial_lse[(slot0 + s) * p.partial_rows + row]; };
  // Max and sum over the chunks: lane-strided in chunk order, then a
  // butterfly of fixed shape. A NaN LSE (NaN inputs) makes the sum NaN.
  float m = -INFINITY;
  for (int s = lane; s < n; s += 32) m = fmaxf(m, lse_of(s));
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float const m_safe = m == -INFINITY ? 0.f : m;
  float sum = 0.f;
  for (int s = lane; s < n; s += 32) sum += __expf(lse_of(s) - m_safe);
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  bool const empty = sum == 0.f;
  float const lse = empty ? -INFINITY : m_safe + __logf(sum);

  int64_t const q_row = si.q_offset + row;
  Element* out = static_cast<Element*>(p.out) + batch * p.o_stride_b + head * p.o_stride_h + q_row * p.o_stride_s;
  for (int c = 2 * lane; c < p.head_dim; c += 64) {
    float2 acc = make_float2(0.f, 0.f);
    for (int s = 0; s < n; ++s) {
      float const w = empty ? 0.f : __expf(lse_of(s) - lse);
      float2 const o = *reinterpret_cast<const float2*>(p.partial_o + ((slot0 + s) * p.partial_rows + row) * p.head_dim + c);
      acc.x += w * o.x;
      acc.y += w * o.y;
    }
    Element pair[2] = {to_element<Element>(acc.x), to_element<Element>(acc.y)};
    *reinterpret_cast<uint32_t*>(out + c) = *reinterpret_cast<uint32_t*>(pair);
  }
  if (p.lse != nullptr && lane == 0) {
    p.lse[batch * p.lse_stride_b + head * p.lse_stride_h + q_row * p.lse_stride_s] = lse;
  }
}

}  // namespace

Status launch_splitkv_combine(const CombineParams& params, DType dtype, cudaStream_t stream) {
  dim3 grid(unsigned(params.batch) * unsigned(params.heads), unsigned((params.partial_rows + kRowsPerCta - 1) / kRowsPerCta));
  dim3 block(32 * kRowsPerCta);
  if (dtype == DType::kFloat16) {
    splitkv_combine_kernel<__half><<<grid, block, 0, stream>>>(params);
  } else {
    splitkv_combine_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(params);
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    return Status(StatusCode::kCudaError, std::string("split-KV combine launch failed: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

}  // namespace flashcore::sm90
