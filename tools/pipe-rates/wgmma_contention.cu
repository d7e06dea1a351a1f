// flashcore-wgmma-contention: does arithmetic on other warps slow the
// tensor cores? (docs/kernels.md, "Next experiments": the softmax's
// instruction mix on chains that never read the scores costs 70-106% of
// what the softmax costs, 2026-11-25g.)
//
// One CTA per SM of three warpgroups. Warpgroup 0 issues batches of WGMMAs
// shaped as the head-dim-128 kernel's products (m64n128k16, 8 k-steps a
// batch: a 64x128x128 product, 2.1 MFLOP; the "n64"/"n256" modes other
// widths) on one accumulator, one batch in flight behind the one it issues,
// and times them with clock64. By mode,
// the other warpgroups idle, warpgroup 1 issues the same WGMMAs (the tensor
// cores then shared), or one or two warpgroups run an arithmetic mix until
// warpgroup 0 is done (one: as the ping-pong kernels' other consumer
// warpgroup in its softmax, a warp on each scheduler). Printed:
// warpgroup 0's SM cycles a batch (median over the CTAs) and its FLOP per
// clock per SM (4096 is the tensor cores' dense bf16 peak), and the SM
// cycles one pass of warpgroup 1's arithmetic loop took (64 of each of its
// instructions a thread; the "no products" modes, where warpgroup 0 only
// spins, give the loop's rate on its own). The "own mix" modes have
// warpgroup 0 alone run one pass of the mix in its own warps under each of
// its batches (a softmax under its own P·V): cycles a batch against the
// same loop without the mix and the mix's ~730 cycles alone.
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
using TiledMmaRS = decltype(make_tiled_mma(
    GMMA::rs_op_selector<Element, Element, float, TileShape, GMMA::Major::K, GMMA::Major::K>()));

// SS products N = 64, 128 or 256 keys wide (the same 64 x 128 A): does the
// mix's slowdown follow the tensor cores' FLOP or their instructions?
template <int kN>
using SmemLayoutBN = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kN>, _128>{}));
template <int kN>
using TiledMmaSSN = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kN>, _128>>()));

struct alignas(1024) SharedStorage {
  cute::array_aligned<Element, cosize_v<SmemLayoutA>, 1024> a;
  cute::array_aligned<Element, cosize_v<SmemLayoutBN<256>>, 1024> b;  // room for the widest B
  int done;
};

// What warpgroups 1 and 2 do while warpgroup 0 issues its products.
constexpr int kIdle = 0;      // nothing (they exit)
constexpr int kMma = 1;       // warpgroup 1 issues the same products (2 at a time on the tensor cores)
constexpr int kMix = 2;       // the softmax's mix: FFMA, MUFU.EX2, FADD, FMNMX on 8 chains
constexpr int kFmaOnly = 3;   // FFMA only (register traffic, no MUFU)
constexpr int kMufuOnly = 4;  // MUFU.EX2 only
constexpr int kOwnMix = 5;    // others idle; warpgroup 0 runs a pass of the mix under each of its batches
constexpr int kOwnNone = 6;   // the same loop (a wait after each batch) without the mix

// One pass of the arithmetic loop: 8 x 8 of each of its instructions a thread,
// on 8 independent chains.
template <int kKind>
__device__ __forceinline__ void arithmetic_pass(float (&a)[8]) {
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

__device__ __forceinline__ void keep_live(float const (&a)[8]) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += a[i];
  if (s == 12345.f) asm volatile("trap;");  // keeps the chains live; never true
}

__device__ __forceinline__ void init_chains(float (&a)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) a[i] = 0.5f + 0.01f * float(threadIdx.x % 7 + i);
}

// Returns the SM cycles one pass took, averaged over the passes until
// warpgroup 0 was done.
template <int kKind>
__device__ float arithmetic_until(volatile int const* done) {
  float a[8];
  init_chains(a);
  long long const t0 = clock64();
  int passes = 0;
  while (*done == 0) {
    ++passes;
    arithmetic_pass<kKind>(a);
  }
  long long const t1 = clock64();
  keep_live(a);
  return passes > 0 ? float(t1 - t0) / float(passes) : 0.f;
}

// Warpgroup 0 without products: as long as `batches` full-rate batches take.
// Its warps poll clock64 meanwhile, one on each scheduler, and take issue
// slots from the arithmetic beside them: the "no products" rates are, if
// anything, slow, and the slowdowns the products cause understated.
__device__ long long spin_batches(int batches) {
  long long const t0 = clock64();
  long long const until = t0 + 512LL * batches;
  while (clock64() < until) {
  }
  return clock64() - t0;
}

// Warpgroup 0's (or 1's) products. kOwnPasses < 0: one batch in flight
// behind the one issued, so the tensor cores never wait for the issuing
// warps. kOwnPasses >= 0: each batch waited for after that many passes of
// the softmax mix in the issuing warps, under the batch (the overlap of a
// softmax under its own warpgroup's P·V; 0 times the same loop without it).
template <bool kRS, int kN = 128, int kOwnPasses = -1>
__device__ long long mma_batches(SharedStorage& smem, int batches) {
  static_assert(kN == 128 || !kRS, "other widths are timed with SS only");
  using TiledMma = std::conditional_t<kRS, TiledMmaRS, TiledMmaSSN<kN>>;
  TiledMma tiled_mma;
  int const t = threadIdx.x % 128;
  auto thr = tiled_mma.get_thread_slice(t);
  Tensor sA = make_tensor(make_smem_ptr(smem.a.data()), SmemLayoutA{});
  Tensor sB = make_tensor(make_smem_ptr(smem.b.data()), SmemLayoutBN<kN>{});
  Tensor tB = thr.partition_fragment_B(sB);
  Tensor acc = partition_fragment_C(tiled_mma, Shape<_64, Int<kN>>{});
  clear(acc);
  Tensor tA = thr.partition_fragment_A(sA);  // registers (RS) or descriptors (SS)
  if constexpr (kRS) clear(tA);
  float a[8];
  init_chains(a);
  long long const t0 = clock64();
  for (int i = 0; i < batches; ++i) {
    if constexpr (kOwnPasses < 0) {
      wgmma_tile<false, 1>(tiled_mma, tA, tB, acc);
    } else {
      wgmma_tile<false, -1>(tiled_mma, tA, tB, acc);
#pragma unroll
      for (int p = 0; p < kOwnPasses; ++p) arithmetic_pass<kMix>(a);
      warpgroup_wait<0>();
    }
  }
  warpgroup_wait<0>();
  long long const c = clock64() - t0;
  warpgroup_fence_operand(acc);
  if constexpr (kOwnPasses > 0) keep_live(a);
  if (acc(0) == 12345.f) asm volatile("trap;");  // keeps the products live; never true
  return c;
}

// kWg0: 0 = warpgroup 0 spins (no products), 1 = SS products, 2 = RS products,
// 64 / 256 = SS products of that width.
template <int kWg0, int kOther, int kOtherWgs>
__global__ void __launch_bounds__(384, 1) contention_kernel(int batches, long long* cycles, float* pass_cycles) {
  constexpr bool kRS = kWg0 == 2;
  constexpr int kN = kWg0 == 64 || kWg0 == 256 ? kWg0 : 128;
  extern __shared__ char smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  for (int i = threadIdx.x; i < cosize_v<SmemLayoutA>; i += blockDim.x) smem.a[i] = Element(0.f);
  for (int i = threadIdx.x; i < cosize_v<SmemLayoutBN<256>>; i += blockDim.x) smem.b[i] = Element(0.f);
  if (threadIdx.x == 0) smem.done = 0;
  cutlass::arch::fence_view_async_shared();  // the zeros, visible to the WGMMAs' async proxy
  __syncthreads();
  int const wg = threadIdx.x / 128;
  if (wg == 0) {
    long long c = 0;
    if constexpr (kWg0 == 0) {
      c = spin_batches(batches);
    } else if constexpr (kOther == kOwnMix) {
      c = mma_batches<kRS, 128, 1>(smem, batches);
    } else if constexpr (kOther == kOwnNone) {
      c = mma_batches<kRS, 128, 0>(smem, batches);
    } else {
      c = mma_batches<kRS, kN>(smem, batches);
    }
    if (threadIdx.x == 0) {
      cycles[blockIdx.x] = c;
      *reinterpret_cast<volatile int*>(&smem.done) = 1;  // ends the other warpgroups' arithmetic
    }
  } else if constexpr (kOther == kMma) {
    if (wg == 1) mma_batches<kRS, kN>(smem, batches);
  } else if constexpr (kOther != kIdle && kOther != kOwnMix && kOther != kOwnNone) {
    if (wg <= kOtherWgs) {
      float const p = arithmetic_until<kOther>(reinterpret_cast<volatile int const*>(&smem.done));
      if (threadIdx.x == 128) pass_cycles[blockIdx.x] = p;
    }
  }
}

struct Mode {
  const char* name;
  void (*kernel)(int, long long*, float*);
  int n;  // keys a WGMMA of warpgroup 0 (0: no products)
};

}  // namespace wgmma_contention

int main(int argc, char** argv) {
  using namespace wgmma_contention;
  cudaDeviceProp prop;
  if (!tool_device("flashcore-wgmma-contention", &prop)) return 0;
  int const batches = argc > 1 ? std::atoi(argv[1]) : 2048;
  int const sms = prop.multiProcessorCount;
  Mode const modes[] = {
      {"SS, others idle", contention_kernel<1, kIdle, 0>, 128},
      {"SS, warpgroup 1 SS too", contention_kernel<1, kMma, 1>, 128},
      {"no products, one warpgroup of softmax mix", contention_kernel<0, kMix, 1>, 0},
      {"SS, one warpgroup of softmax mix", contention_kernel<1, kMix, 1>, 128},
      {"RS, one warpgroup of softmax mix", contention_kernel<2, kMix, 1>, 128},
      {"no products, two warpgroups of softmax mix", contention_kernel<0, kMix, 2>, 0},
      {"SS, two warpgroups of softmax mix", contention_kernel<1, kMix, 2>, 128},
      {"RS, two warpgroups of softmax mix", contention_kernel<2, kMix, 2>, 128},
      {"no products, one warpgroup of FFMA only", contention_kernel<0, kFmaOnly, 1>, 0},
      {"SS, one warpgroup of FFMA only", contention_kernel<1, kFmaOnly, 1>, 128},
      {"RS, one warpgroup of FFMA only", contention_kernel<2, kFmaOnly, 1>, 128},
      {"no products, one warpgroup of MUFU.EX2 only", contention_kernel<0, kMufuOnly, 1>, 0},
      {"SS, one warpgroup of MUFU.EX2 only", contention_kernel<1, kMufuOnly, 1>, 128},
      {"RS, one warpgroup of MUFU.EX2 only", contention_kernel<2, kMufuOnly, 1>, 128},
      {"SS n64, others idle", contention_kernel<64, kIdle, 0>, 64},
      {"SS n64, one warpgroup of softmax mix", contention_kernel<64, kMix, 1>, 64},
      {"SS n64, one warpgroup of MUFU.EX2 only", contention_kernel<64, kMufuOnly, 1>, 64},
      {"SS n256, others idle", contention_kernel<256, kIdle, 0>, 256},
      {"SS n256, one warpgroup of softmax mix", contention_kernel<256, kMix, 1>, 256},
      {"SS n256, one warpgroup of MUFU.EX2 only", contention_kernel<256, kMufuOnly, 1>, 256},
      {"SS, batch waited each time", contention_kernel<1, kOwnNone, 0>, 128},
      {"SS, own mix pass under each batch", contention_kernel<1, kOwnMix, 0>, 128},
      {"RS, batch waited each time", contention_kernel<2, kOwnNone, 0>, 128},
      {"RS, own mix pass under each batch", contention_kernel<2, kOwnMix, 0>, 128},
      {"RS, others idle", contention_kernel<2, kIdle, 0>, 128},
      {"RS, warpgroup 1 RS too", contention_kernel<2, kMma, 1>, 128},
  };
  long long* cycles = nullptr;
  float* pass_cycles = nullptr;
  CHECK_CUDA(cudaMalloc(&cycles, sizeof(long long) * sms));
  CHECK_CUDA(cudaMalloc(&pass_cycles, sizeof(float) * sms));
  size_t const smem = sizeof(SharedStorage);  // the dynamic base is 1024-aligned, as the kernels assume
  std::printf("device: %s, %d SMs; %d batches of 8 m64nNk16 WGMMAs (N = 128 unless named) by warpgroup 0\n", prop.name,
              sms, batches);
  std::printf("%-46s %15s %20s %22s\n", "mode", "cycles / batch", "wg0 FLOP / clk / SM",
              "wg1 cycles / pass");
  for (Mode const& m : modes) {
    CHECK_CUDA(cudaFuncSetAttribute(m.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    for (int rep = 0; rep < 2; ++rep) {  // the first launch warms up
      CHECK_CUDA(cudaMemset(pass_cycles, 0, sizeof(float) * sms));
      m.kernel<<<sms, 384, smem>>>(batches, cycles, pass_cycles);
      CHECK_CUDA(cudaGetLastError());
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<long long> c(sms);
    CHECK_CUDA(cudaMemcpy(c.data(), cycles, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
    std::vector<float> p(sms);
    CHECK_CUDA(cudaMemcpy(p.data(), pass_cycles, sizeof(float) * sms, cudaMemcpyDeviceToHost));
    std::sort(c.begin(), c.end());
    std::sort(p.begin(), p.end());
    double const per_batch = double(c[sms / 2]) / batches;
    std::printf("%-46s %15.1f %20.0f %22.1f\n", m.name, per_batch,
                2.0 * 64 * m.n * 128 / per_batch, double(p[sms / 2]));
  }
  CHECK_CUDA(cudaFree(cycles));
  CHECK_CUDA(cudaFree(pass_cycles));
  return 0;
}
