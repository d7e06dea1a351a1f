// The split-KV combine kernel (splitkv_combine.h). A warp merges 64 columns
// of one row of one (batch, head): lane l holds columns [2l, 2l + 2) of its
// slice, so head dim 128 spreads a row over two warps (256: four). Every lane walks the
// chunks in the merge order of chunk_merge.h (the last chunk first), with
// kUnroll chunks' loads issued before any of them is used, so a row of up to
// kUnroll chunks costs one round trip to L2.
// No shared memory and no block-wide barrier: a CTA is kWarpsPerCta
// independent warps.
//
// History (H100, decode bf16 32/8 heads d128): the first version walked the
// chunks with one dependent load chain (130 us of 158 at batch 1, 32k keys).
// The two-pass version after it (lane-strided max and sum, then the
// weighted sum) took about 10 us of a 400 us call at batch 64 x 4k keys
// (Nsight Compute, bench/results/2026-11-22-h100/ncu-decode-b64.txt). The
// single-pass version in the order a one-CTA tile merges (chunk_fold.h), a
// warp a row with four columns a lane and 8 chunks a round, took 6.2-6.5 us
// at batch 1 under Nsight Compute, against 5.0-5.4 for cuDNN's reduction
// (bench/results/2026-11-26-h100/ncu-decode.txt): two round trips for 16
// chunks, from 8 CTAs (16 chunks a round with float4 loads measured 2.4 us
// slower: ptxas then issued the loads one by one). Two columns a lane halve
// the registers a chunk takes, so 16 chunks' loads fit in one round, and
// twice the warps share the rows.
//
// The merge order depends only on the chunk count of the sequence, and each
// column's arithmetic is the same whichever warp holds it: results are
// bitwise reproducible, batch invariant, and those of the one-CTA schedule.
#include "sm90/splitkv_combine.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "sm90/chunk_merge.h"
#include "sm90/launch_attrs.h"

namespace flashcore::sm90 {
namespace {

// 4 warps a CTA: 16 CTAs at batch 1 over 8 KV heads (4 packed rows of two
// warps each a KV head). 2 or 1 warps a CTA (32 or 64 CTAs; cuDNN's
// reduction runs 32) measured level or up to 0.3 us slower
// (bench/results/2026-11-26c-h100/ab2-trigger-table.txt).
constexpr int kWarpsPerCta = 4;
constexpr int kColsPerWarp = 64;  // 2 columns a lane
constexpr int kMaxHeadDim = 256;
// Chunks whose loads are in flight together: the 16 of a batch-1 decode
// sequence over 8 KV heads (split_policy.h) in one round.
constexpr int kUnroll = 16;

// Two floats rounded to the output type, packed in 32 bits (low: a). Built
// with intrinsics so that no array has to live in local memory.
template <class T>
__device__ uint32_t pack2(float a, float b);
template <>
__device__ uint32_t pack2<__half>(float a, float b) {
  __half2 const h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <>
__device__ uint32_t pack2<__nv_bfloat16>(float a, float b) {
  __nv_bfloat162 const h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <class Element>
__global__ void __launch_bounds__(32 * kWarpsPerCta) splitkv_combine_kernel(const CombineParams p) {
  // A programmatic dependent of the forward kernel (launch_splitkv_combine):
  // wait until its partial results are written and visible.
  pdl_wait_for_previous_kernel();
  // The next kernel may launch now, as after the forward kernels
  // (launch_attrs.h): 0.2-0.5 us at batch 1 (ab2-trigger-table.txt, w4t).
  if (p.trigger_dependents_early) pdl_launch_dependents();
  int const bh = blockIdx.x;
  int const batch = bh / p.heads, head = bh % p.heads;
  int const lane = threadIdx.x % 32;
  int const warps_per_row = (p.head_dim + kColsPerWarp - 1) / kColsPerWarp;
  int const warp = blockIdx.y * kWarpsPerCta + threadIdx.x / 32;
  int const row = warp / warps_per_row;
  int const col = (warp % warps_per_row) * kColsPerWarp + 2 * lane;  // this lane's first column
  SeqInfo const si = seq_info(p.seq, batch);
  if (!splits(p.seq, si) || row >= si.seqlen_q) return;  // the whole warp
  int const n = num_splits_of(p.seq, si);
  if (n <= 1) return;  // the forward kernel wrote this sequence itself

  int64_t const slot0 = (int64_t(batch) * p.heads + head) * p.seq.max_splits;
  const float* lse_row = p.partial_lse + slot0 * p.partial_rows + row;  // chunk s at s * partial_rows
  bool const col_active = col < p.head_dim;  // head_dim is even
  int64_t const chunk_stride = int64_t(p.partial_rows) * p.head_dim;  // floats between chunks
  const float* o_col = p.partial_o + (slot0 * p.partial_rows + row) * p.head_dim + col;

  // Chunks in the order the single-CTA schedule merges them (chunk_merge.h):
  // the last one first. Step i reads chunk n - 1 - i; a round's loads are all
  // issued before the first of them is used. Steps past n read nothing and
  // carry lse -inf: chunk_merge leaves the state unchanged.
  float2 o[kUnroll];
  float l[kUnroll];
  auto load_round = [&](int i0) {
    int64_t const s0 = n - 1 - i0;  // this round's first chunk
    const float* o_s = o_col + s0 * chunk_stride;
    const float* l_s = lse_row + s0 * p.partial_rows;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      bool const ok = u <= s0;  // chunk s0 - u exists
      o[u] = ok && col_active ? *reinterpret_cast<const float2*>(o_s) : make_float2(0.f, 0.f);
      l[u] = ok ? *l_s : -INFINITY;
      if (u < s0) {  // the pointers stay on chunks that exist
        o_s -= chunk_stride;
        l_s -= p.partial_rows;
      }
    }
  };
  MergeRow state;
  float2 acc = make_float2(0.f, 0.f);
  for (int i0 = 0; i0 < n; i0 += kUnroll) {
    load_round(i0);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      MergeStep const st = merge_step(state, l[u]);
      acc.x = merge_value(acc.x, o[u].x, st), acc.y = merge_value(acc.y, o[u].y, st);
    }
  }
  float inv, lse;
  merge_finish(state, inv, lse);

  int64_t const q_row = si.q_offset + row;
  Element* out = static_cast<Element*>(p.out) + batch * p.o_stride_b + head * p.o_stride_h + q_row * p.o_stride_s;
  if (col_active) {
    *reinterpret_cast<uint32_t*>(out + col) = pack2<Element>(__fmul_rn(acc.x, inv), __fmul_rn(acc.y, inv));
  }
  if (p.lse != nullptr && col == 0) {
    p.lse[batch * p.lse_stride_b + head * p.lse_stride_h + q_row * p.lse_stride_s] = lse;
  }
}

}  // namespace

Status launch_splitkv_combine(const CombineParams& params, DType dtype, cudaStream_t stream) {
  if (params.head_dim % 2 != 0 || params.head_dim > kMaxHeadDim) {
    return Status(StatusCode::kNotSupported,
                  "split-KV combine: head_dim " + std::to_string(params.head_dim) + " is not supported");
  }
  auto kernel = dtype == DType::kFloat16 ? splitkv_combine_kernel<__half> : splitkv_combine_kernel<__nv_bfloat16>;
  // Programmatic dependent launch (launch_attrs.h): the forward kernel lets
  // the combine launch as its CTAs exit (not earlier: faster, launch_attrs.h),
  // so its CTAs start as SMs free up; griddepcontrol.wait holds them until
  // all partials are written.
  int const warps = params.partial_rows * ((params.head_dim + kColsPerWarp - 1) / kColsPerWarp);
  PdlLaunch launch(dim3(unsigned(params.batch) * unsigned(params.heads), unsigned((warps + kWarpsPerCta - 1) / kWarpsPerCta)),
                   dim3(32 * kWarpsPerCta), 0, stream);
  CombineParams launched = params;
  launched.trigger_dependents_early = pdl_trigger_early();
  cudaError_t err = cudaLaunchKernelEx(&launch.config, kernel, launched);
  if (err != cudaSuccess) {
    return Status(StatusCode::kCudaError, std::string("split-KV combine launch failed: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

}  // namespace flashcore::sm90
