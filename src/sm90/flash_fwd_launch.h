// Host side of one kernel instantiation: builds the TMA descriptors from the
// tensor views (any strides with a contiguous head dim: BHSD, BSHD, views),
// fills KernelParams and launches the persistent grid. Included only by the
// generated files in instantiations/, one translation unit per config.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <mutex>

#include "common/problem.h"
#include "flashcore/attention.h"
#include "sm90/device_info.h"
#include "sm90/flash_fwd_kernel.h"
#include "sm90/gqa_pack.h"
#include "sm90/kernel_traits.h"

namespace flashcore::sm90 {

template <class Traits>
Status launch_flash_fwd(const AttentionArgs& args, const Problem& p, cudaStream_t stream) {
  using Element = typename Traits::Element;
  using namespace cute;

  auto qkv_tensor = [](const TensorView& t, int64_t seq_extent) {
    return make_tensor(make_gmem_ptr(static_cast<Element const*>(t.data)),
                       make_shape(int32_t(seq_extent), int32_t(t.shape[3]), int32_t(t.shape[1]), int32_t(t.shape[0])),
                       make_stride(t.stride[2], _1{}, t.stride[1], t.stride[0]));
  };
  // With seqlen_k == 0 no key block is ever loaded, but a TMA descriptor still
  // needs a non-empty box and a valid address: describe one row of Q instead.
  bool const no_keys = p.seqlen_k == 0;
  const TensorView& k = no_keys ? args.q : args.k;
  const TensorView& v = no_keys ? args.q : args.v;
  int64_t const seqlen_k_desc = no_keys ? 1 : p.seqlen_k;

  // Decode-time GQA packing (gqa_pack.h): the kernel sees `group` rows per
  // KV head instead of one row per query head.
  bool const packed = packs_gqa(p);
  int64_t const rows = packed ? p.group() : p.seqlen_q;
  int64_t const heads = packed ? p.heads_kv : p.heads_q;
  auto rows_tensor = [&](auto* ptr, const TensorView& t) {
    int64_t const row_stride = packed ? t.stride[1] : t.stride[2];
    int64_t const head_stride = packed ? t.stride[1] * p.group() : t.stride[1];
    return make_tensor(make_gmem_ptr(ptr),
                       make_shape(int32_t(rows), int32_t(p.head_dim), int32_t(heads), int32_t(p.batch)),
                       make_stride(row_stride, _1{}, head_stride, t.stride[0]));
  };
  auto mQ = rows_tensor(static_cast<Element const*>(args.q.data), args.q);
  auto mK = qkv_tensor(k, seqlen_k_desc);
  auto mVt = make_tensor(make_gmem_ptr(static_cast<Element const*>(v.data)),
                         make_shape(int32_t(v.shape[3]), int32_t(seqlen_k_desc), int32_t(v.shape[1]), int32_t(v.shape[0])),
                         make_stride(_1{}, v.stride[2], v.stride[1], v.stride[0]));
  auto mO = rows_tensor(static_cast<Element*>(args.out.data), args.out);

  KernelParams<Traits> params{
      make_tma_copy(SM90_TMA_LOAD{}, mQ, typename Traits::SmemLayoutQ{},
                    select<0, 2>(typename Traits::TileShapeQK{}), _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, mK, take<0, 2>(typename Traits::SmemLayoutK{}),
                    select<1, 2>(typename Traits::TileShapeQK{}), _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, mVt, take<0, 2>(typename Traits::SmemLayoutVt{}),
                    select<1, 2>(typename Traits::TileShapePV{}), _1{}),
      make_tma_copy(SM90_TMA_STORE{}, mO, typename Traits::SmemLayoutO{},
                    select<0, 1>(typename Traits::TileShapePV{}), _1{}),
  };
  constexpr int64_t kWindowClamp = int64_t(1) << 30;
  params.batch = int32_t(p.batch);
  params.heads_q = int32_t(heads);
  params.heads_kv = int32_t(p.heads_kv);
  params.group = packed ? 1 : int32_t(p.group());
  params.seqlen_q = int32_t(rows);
  params.seqlen_k = int32_t(p.seqlen_k);
  params.head_dim = int32_t(p.head_dim);
  // Packed rows all see every key (that is when packing applies).
  params.window_left = int32_t(!packed && p.window_left < kWindowClamp ? p.window_left : kWindowClamp);
  params.window_right = int32_t(!packed && p.window_right < kWindowClamp ? p.window_right : kWindowClamp);
  params.scale_log2 = float(double(p.scale) * 1.4426950408889634);
  params.lse = p.has_lse ? static_cast<float*>(args.lse.data) : nullptr;
  params.lse_stride_b = args.lse.stride[0];
  params.lse_stride_h = packed ? args.lse.stride[1] * p.group() : args.lse.stride[1];
  params.lse_stride_s = packed ? args.lse.stride[1] : args.lse.stride[2];
  params.num_m_blocks = int32_t((rows + Traits::kBlockM - 1) / Traits::kBlockM);
  int64_t const tiles = int64_t(params.num_m_blocks) * heads * p.batch;
  if (tiles >= (int64_t(1) << 31)) {
    return Status(StatusCode::kNotSupported, "problem has more than 2^31 query tiles");
  }
  params.num_tiles = int32_t(tiles);

  auto kernel = flash_fwd_kernel<Traits>;
  int const smem = Traits::kSmemBytes;
  // The dynamic shared-memory limit is a per-device function attribute: set it
  // once per device, never on the hot path.
  static std::once_flag once[kMaxDevices];
  static cudaError_t attr_err[kMaxDevices];
  int const dev = p.device_index;
  if (dev < 0 || dev >= kMaxDevices) return Status(StatusCode::kNotSupported, "device index out of range");
  std::call_once(once[dev], [&] {
    attr_err[dev] = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  });
  if (attr_err[dev] != cudaSuccess) {
    return Status(StatusCode::kCudaError,
                  std::string("cudaFuncSetAttribute failed: ") + cudaGetErrorString(attr_err[dev]));
  }
  int const sms = device_sm_count(dev);
  int const grid = int(tiles < sms ? tiles : sms);
  // Causal-like masks make tile costs differ: deal them in balanced pairs
  // (tile_scheduler.h) once every CTA has several tiles anyway. With fewer
  // tiles, pairing would only leave SMs idle.
  params.paired_tiles = !packed && p.window_right < p.seqlen_k && tiles >= 2 * int64_t(sms);
  kernel<<<grid, Traits::kNumThreads, smem, stream>>>(params);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    return Status(StatusCode::kCudaError, std::string("kernel launch failed: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

}  // namespace flashcore::sm90
