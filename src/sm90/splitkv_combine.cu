// The split-KV combine kernel (splitkv_combine.h). One warp merges one row
// of one (batch, head); lane l holds columns [4l, 4l + 4). Every lane walks
// the chunks in the merge order of chunk_merge.h (the last chunk first),
// with kUnroll chunks' loads issued before any of them is used, so a row
// costs a few round trips to L2 instead of one per chunk.
// No shared memory and no block-wide barrier: a CTA is kRowsPerCta
// independent warps, which keeps many rows in flight at large batches.
//
// History (H100, decode bf16 32/8 heads d128): the first version walked the
// chunks with one dependent load chain (130 us of 158 at batch 1, 32k keys).
// The two-pass version after it (lane-strided max and sum, then the
// weighted sum) took about 10 us of a 400 us call at batch 64 x 4k keys
// (Nsight Compute, bench/results/2026-11-22-h100/ncu-decode-b64.txt); this
// one merges in a single pass, in the order a one-CTA tile merges
// (chunk_fold.h): 6.2-6.5 us at batch 1 under Nsight Compute, against
// 5.0-5.4 for cuDNN's reduction (bench/results/2026-11-26-h100/ncu-decode.txt).
//
// The merge order depends only on the chunk count of the sequence: results
// are bitwise reproducible, batch invariant, and those of the one-CTA
// schedule.
#include "sm90/splitkv_combine.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "sm90/chunk_merge.h"
#include "sm90/launch_attrs.h"

namespace flashcore::sm90 {
namespace {

constexpr int kRowsPerCta = 4;    // one warp a row
constexpr int kMaxColLanes = 32;  // head_dim <= 128, 4 columns a lane
// Chunks whose loads are in flight together. 16 measured 2.4 us slower at
// batch 1, 4k keys (16 chunks): ptxas then keeps 32 registers and no
// longer issues the round's loads together (bench/results/2026-11-26-h100).
constexpr int kUnroll = 8;

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
__global__ void __launch_bounds__(32 * kRowsPerCta) splitkv_combine_kernel(const CombineParams p) {
  // The combine may be scheduled before the forward kernel exits
  // (launch_splitkv_combine): wait for its partial results first.
  pdl_wait_for_previous_kernel();
  int const bh = blockIdx.x;
  int const batch = bh / p.heads, head = bh % p.heads;
  int const lane = threadIdx.x % 32;
  int const row = blockIdx.y * kRowsPerCta + threadIdx.x / 32;
  SeqInfo const si = seq_info(p.seq, batch);
  if (!splits(p.seq, si) || row >= si.seqlen_q) return;  // the whole warp
  int const n = num_splits_of(p.seq, si);
  if (n <= 1) return;  // the forward kernel wrote this sequence itself

  int64_t const slot0 = (int64_t(batch) * p.heads + head) * p.seq.max_splits;
  const float* lse_row = p.partial_lse + slot0 * p.partial_rows + row;  // chunk s at s * partial_rows
  bool const col_active = 4 * lane < p.head_dim;
  int64_t const chunk_stride = int64_t(p.partial_rows) * p.head_dim;  // floats between chunks
  const float* o_col = p.partial_o + (slot0 * p.partial_rows + row) * p.head_dim + 4 * lane;

  // Chunks in the order the single-CTA schedule merges them (chunk_merge.h):
  // the last one first. Step i reads chunk n - 1 - i; a round's loads are all
  // issued before the first of them is used. Steps past n read nothing and
  // carry lse -inf: chunk_merge leaves the state unchanged.
  float4 o[kUnroll];
  float l[kUnroll];
  auto load_round = [&](int i0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      int const s = n - 1 - (i0 + u);
      bool const ok = s >= 0;
      o[u] = ok && col_active ? *reinterpret_cast<const float4*>(o_col + int64_t(s) * chunk_stride)
                              : make_float4(0.f, 0.f, 0.f, 0.f);
      l[u] = ok ? lse_row[int64_t(s) * p.partial_rows] : -INFINITY;
    }
  };
  MergeRow state;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int i0 = 0; i0 < n; i0 += kUnroll) {
    load_round(i0);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      MergeStep const st = merge_step(state, l[u]);
      acc.x = merge_value(acc.x, o[u].x, st), acc.y = merge_value(acc.y, o[u].y, st);
      acc.z = merge_value(acc.z, o[u].z, st), acc.w = merge_value(acc.w, o[u].w, st);
    }
  }
  float inv, lse;
  merge_finish(state, inv, lse);

  int64_t const q_row = si.q_offset + row;
  Element* out = static_cast<Element*>(p.out) + batch * p.o_stride_b + head * p.o_stride_h + q_row * p.o_stride_s;
  if (col_active) {
    *reinterpret_cast<uint2*>(out + 4 * lane) =
        make_uint2(pack2<Element>(__fmul_rn(acc.x, inv), __fmul_rn(acc.y, inv)),
                   pack2<Element>(__fmul_rn(acc.z, inv), __fmul_rn(acc.w, inv)));
  }
  if (p.lse != nullptr && lane == 0) {
    p.lse[batch * p.lse_stride_b + head * p.lse_stride_h + q_row * p.lse_stride_s] = lse;
  }
}

}  // namespace

Status launch_splitkv_combine(const CombineParams& params, DType dtype, cudaStream_t stream) {
  if (params.head_dim % 4 != 0 || params.head_dim / 4 > kMaxColLanes) {
    return Status(StatusCode::kNotSupported,
                  "split-KV combine: head_dim " + std::to_string(params.head_dim) + " is not supported");
  }
  auto kernel = dtype == DType::kFloat16 ? splitkv_combine_kernel<__half> : splitkv_combine_kernel<__nv_bfloat16>;
  // Programmatic dependent launch (launch_attrs.h): the combine is queued
  // while the forward kernel still runs, and griddepcontrol.wait holds it
  // until the partials are written, which hides most of a second launch.
  PdlLaunch launch(dim3(unsigned(params.batch) * unsigned(params.heads),
                        unsigned((params.partial_rows + kRowsPerCta - 1) / kRowsPerCta)),
                   dim3(32 * kRowsPerCta), 0, stream);
  cudaError_t err = cudaLaunchKernelEx(&launch.config, kernel, params);
  if (err != cudaSuccess) {
    return Status(StatusCode::kCudaError, std::string("split-KV combine launch failed: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

}  // namespace flashcore::sm90
