// flashcore-wgmma-contention: does arithmetic on other warps slow the
// tensor cores? (docs/kernels.md, "Next experiments": the softmax's
// instruction mix on chains that never read the scores costs 70-106% of
// what the softmax costs, 2026-11-25g.)
//
// One CTA per SM of three warpgroups. Warpgroup 0 issues batches of WGMMAs
// shaped as the head-dim-128 kernel's products (m64n128k16, 8 k-steps a
// batch: a 64x128x128 product, 2.1 MFLOP) on one accumulator, one batch in
// flight behind the one it issues, and times them with clock64. By mode,
// the other warpgroups idle, warpgroup 1 issues the same WGMMAs (the tensor
// cores then shared), or one or two warpgroups run an arithmetic mix until
// warpgroup 0 is done (one: as the ping-pong kernels' other consumer
// warpgroup in its softmax, a warp on each scheduler). Printed:
// warpgroup 0's SM cycles a batch (median over the CTAs) and its FLOP per
// clock per SM (4096 is the tensor cores' dense bf16 peak).
//
//   flashcore-wgmma-contention [BATCHES]   (exits 0 without a GPU)
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "sm90/wgmma_utils.h"
#include "tool_check_cuda.h"

namespace wgmma_contention {

using namespace cute;
using flashcore::sm90::wgmma_tile;
using Element = cutlass::bfloat16_t;
using TileShape = Shape<_64, _128, _128>;  // M (rows of a warpgroup), N (keys), K (head dim)
using SmemLayoutA = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<_64, _128>{}));
using SmemLayoutB = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<_128, _128>{}));
using TiledMmaSS = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, TileShape>()));
using TiledMmaRS = decltype(make_tiled_mma(
    GMMA::rs_op_selector<Element, Element, float, TileShape, GMMA::Major::K, GMMA::Major::K>()));

struct alignas(1024) SharedStorage {
  cute::array_aligned<Element, cosize_v<SmemLayoutA>, 1024> a;
  cute::array_aligned<Element, cosize_v<SmemLayoutB>, 1024> b;
  int done;
};

// What warpgroups 1 and 2 do while warpgroup 0 issues its products.
constexpr int kIdle = 0;      // nothing (they exit)
constexpr int kMma = 1;       // warpgroup 1 issues the same products (2 at a time on the tensor cores)
constexpr int kMix = 2;       // the softmax's mix: FFMA, MUFU.EX2, FADD, FMNMX on 8 chains
constexpr int kFmaOnly = 3;   // FFMA only (register traffic, no MUFU)
constexpr int kMufuOnly = 4;  // MUFU.EX2 only

template <int kKind>
__device__ void arithmetic_until(volatile int const* done) {
  float a[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) a[i] = 0.5f + 0.01f * float(threadIdx.x % 7 + i);
  while (*done == 0) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if constexpr (kKind == kMix || kKind == kFmaOnly) {
          asm("fma.rn.ftz.f32 %0, %0, 0f3F000000, 0fBF800000;" : "+f"(a[i]));
        }
        if constexpr (kKind == kMix || kKind == kMufuOnly) asm("ex2.approx.ftz.f32 %0, %0;" : "+f"(a[i]));
        if constexpr (kKind == kMix) {
          asm("add.ftz.f32 %0, %0, 0f3F000000;" : "+f"(a[i]));
          asm("max.ftz.f32 %0, %0, 0f3E800000;" : "+f"(a[i]));
        }
      }
    }
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += a[i];
  if (s == 12345.f) asm volatile("trap;");  // keeps the chains live; never true
}

template <bool kRS>
__device__ long long mma_batches(SharedStorage& smem, int batches) {
  using TiledMma = std::conditional_t<kRS, TiledMmaRS, TiledMmaSS>;
  TiledMma tiled_mma;
  int const t = threadIdx.x % 128;
  auto thr = tiled_mma.get_thread_slice(t);
  Tensor sA = make_tensor(make_smem_ptr(smem.a.data()), SmemLayoutA{});
  Tensor sB = make_tensor(make_smem_ptr(smem.b.data()), SmemLayoutB{});
  Tensor tB = thr.partition_fragment_B(sB);
  Tensor acc = partition_fragment_C(tiled_mma, Shape<_64, _128>{});
  clear(acc);
  long long t0 = 0;
  if constexpr (kRS) {
    Tensor tA = thr.partition_fragment_A(sA);  // registers
    clear(tA);
    t0 = clock64();
    for (int i = 0; i < batches; ++i) wgmma_tile<false, 1>(tiled_mma, tA, tB, acc);
  } else {
    Tensor tA = thr.partition_fragment_A(sA);  // descriptors
    t0 = clock64();
    for (int i = 0; i < batches; ++i) wgmma_tile<false, 1>(tiled_mma, tA, tB, acc);
  }
  warpgroup_wait<0>();
  long long const t1 = clock64();
  if (acc(0) == 12345.f) asm volatile("trap;");  // keeps the products live; never true
  return t1 - t0;
}

template <bool kRS, int kOther, int kOtherWgs>
__global__ void __launch_bounds__(384, 1) contention_kernel(int batches, long long* cycles) {
  extern __shared__ char smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  for (int i = threadIdx.x; i < cosize_v<SmemLayoutA>; i += blockDim.x) smem.a[i] = Element(0.f);
  for (int i = threadIdx.x; i < cosize_v<SmemLayoutB>; i += blockDim.x) smem.b[i] = Element(0.f);
  if (threadIdx.x == 0) smem.done = 0;
  cutlass::arch::fence_view_async_shared();  // the zeros, visible to the WGMMAs' async proxy
  __syncthreads();
  int const wg = threadIdx.x / 128;
  if (wg == 0) {
    long long const c = mma_batches<kRS>(smem, batches);
    if (threadIdx.x == 0) {
      cycles[blockIdx.x] = c;
      *reinterpret_cast<volatile int*>(&smem.done) = 1;  // ends the other warpgroups' arithmetic
    }
  } else if constexpr (kOther == kMma) {
    if (wg == 1) mma_batches<kRS>(smem, batches);
  } else if constexpr (kOther != kIdle) {
    if (wg <= kOtherWgs) arithmetic_until<kOther>(reinterpret_cast<volatile int const*>(&smem.done));
  }
}

struct Mode {
  const char* name;
  void (*kernel)(int, long long*);
};

}  // namespace wgmma_contention

int main(int argc, char** argv) {
  using namespace wgmma_contention;
  cudaDeviceProp prop;
  if (!tool_device("flashcore-wgmma-contention", &prop)) return 0;
  int const batches = argc > 1 ? std::atoi(argv[1]) : 2048;
  int const sms = prop.multiProcessorCount;
  Mode const modes[] = {
      {"SS, others idle", contention_kernel<false, kIdle, 0>},
      {"SS, warpgroup 1 SS too", contention_kernel<false, kMma, 1>},
      {"SS, one warpgroup of softmax mix", contention_kernel<false, kMix, 1>},
      {"SS, two warpgroups of softmax mix", contention_kernel<false, kMix, 2>},
      {"SS, one warpgroup of FFMA only", contention_kernel<false, kFmaOnly, 1>},
      {"SS, one warpgroup of MUFU.EX2 only", contention_kernel<false, kMufuOnly, 1>},
      {"RS, others idle", contention_kernel<true, kIdle, 0>},
      {"RS, warpgroup 1 RS too", contention_kernel<true, kMma, 1>},
      {"RS, one warpgroup of softmax mix", contention_kernel<true, kMix, 1>},
      {"RS, one warpgroup of FFMA only", contention_kernel<true, kFmaOnly, 1>},
  };
  long long* cycles = nullptr;
  CHECK_CUDA(cudaMalloc(&cycles, sizeof(long long) * sms));
  size_t const smem = sizeof(SharedStorage);  // the dynamic base is 1024-aligned, as the kernels assume
  std::printf("device: %s, %d SMs; %d batches of 8 m64n128k16 WGMMAs (2.1 MFLOP) by warpgroup 0\n", prop.name,
              sms, batches);
  std::printf("%-40s %18s %22s\n", "mode", "cycles / batch", "wg0 FLOP / clk / SM");
  for (Mode const& m : modes) {
    CHECK_CUDA(cudaFuncSetAttribute(m.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    for (int rep = 0; rep < 2; ++rep) {  // the first launch warms up
      m.kernel<<<sms, 384, smem>>>(batches, cycles);
      CHECK_CUDA(cudaGetLastError());
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<long long> c(sms);
    CHECK_CUDA(cudaMemcpy(c.data(), cycles, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
    std::sort(c.begin(), c.end());
    double const per_batch = double(c[sms / 2]) / batches;
    std::printf("%-40s %18.1f %22.0f\n", m.name, per_batch, 2.0 * 64 * 128 * 128 / per_batch);
  }
  CHECK_CUDA(cudaFree(cycles));
  return 0;
}
