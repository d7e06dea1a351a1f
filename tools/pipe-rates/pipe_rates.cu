// flashcore-pipe-rates: issue rates and dependent latencies of the
// instructions the forward kernels' softmax is made of, measured on the
// device rather than taken from tables (docs/kernels.md cites them).
//
// Each test runs one CTA per SM with W warps per scheduler (W = 1 or 2: the
// ping-pong kernels put one warp of each consumer warpgroup on every
// scheduler) and times, with clock64 on each warp, a loop whose body is
// straight-line inline PTX:
//   - rate tests: 8 independent chains, so only the pipe limits the issue;
//     printed as SM cycles per warp instruction of one warp, and as results
//     per clock per SM (32 lanes x 4 schedulers x W / cycles);
//   - latency tests: one dependent chain; cycles per instruction.
// "mix" tests issue two kinds, 8 chains each: if they share a pipe, a mix
// takes the sum of its parts' times; if not, about the larger one.
//
//   flashcore-pipe-rates            (prints a table; exits 0 without a GPU)
#include <algorithm>
#include <cstdio>
#include <vector>

#include "tool_check_cuda.h"

namespace {

constexpr int kIters = 4096;
constexpr int kChains = 8;

// One step of the op on register r (its own chain: no operand comes from
// another chain, so chains are independent).
template <int kOp>
__device__ __forceinline__ void step(float& r) {
  if constexpr (kOp == 0) {  // MUFU.EX2
    asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(r));
  } else if constexpr (kOp == 1) {  // F2FP.BF16.F32.PACK_AB, the packed pair fed back
    asm volatile("{\n .reg .b32 t;\n cvt.rn.bf16x2.f32 t, %0, %0;\n mov.b32 %0, t;\n}" : "+f"(r));
  } else if constexpr (kOp == 2) {  // FFMA
    asm volatile("fma.rn.ftz.f32 %0, %0, 0f3F7FF000, 0f3A800000;" : "+f"(r));
  } else if constexpr (kOp == 3) {  // FMNMX
    asm volatile("max.ftz.f32 %0, %0, 0f3A800000;" : "+f"(r));
  } else if constexpr (kOp == 4) {  // FADD
    asm volatile("add.ftz.f32 %0, %0, 0f3A800000;" : "+f"(r));
  } else if constexpr (kOp == 5) {  // F2FP.F16.F32.PACK_AB
    asm volatile("{\n .reg .b32 t;\n cvt.rn.f16x2.f32 t, %0, %0;\n mov.b32 %0, t;\n}" : "+f"(r));
  } else if constexpr (kOp == 6) {  // FMUL
    asm volatile("mul.ftz.f32 %0, %0, 0f3F7FF000;" : "+f"(r));
  }
}

// Stores a thread's chains (so the compiler keeps them) and, from each
// warp's lane 0, the warp's cycle count.
__device__ __forceinline__ void record(float* out, long long* cycles, float const (&x)[kChains], long long elapsed,
                                       float const* y = nullptr) {
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < kChains; ++j) s += x[j];
  if (y != nullptr) {
#pragma unroll
    for (int j = 0; j < kChains; ++j) s += y[j];
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x % 32 == 0) cycles[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = elapsed;
}

// kOpB < 0: kOpA on each of 8 chains a loop iteration (or on one chain for a
// latency test). Otherwise a mix: kOpA on 8 chains and kOpB on 8 chains of
// its own (ptxas orders them as it likes; only the total time counts).
template <int kOpA, int kOpB, bool kLatency>
__global__ void pipe_kernel(float* out, long long* cycles) {
  float x[kChains], y[kChains];
#pragma unroll
  for (int j = 0; j < kChains; ++j) x[j] = 0.25f + 0.01f * float((threadIdx.x + j) % 7);
#pragma unroll
  for (int j = 0; j < kChains; ++j) y[j] = 0.5f + 0.01f * float((threadIdx.x + j) % 5);
  __syncwarp();
  long long const t0 = clock64();
  for (int i = 0; i < kIters; ++i) {
    if constexpr (kLatency) {
      step<kOpA>(x[0]);
    } else {
#pragma unroll
      for (int j = 0; j < kChains; ++j) {
        step<kOpA>(x[j]);
        if constexpr (kOpB >= 0) {
          step<kOpB>(y[j]);
        }
      }
    }
  }
  long long const t1 = clock64();
  record(out, cycles, x, t1 - t0, y);
}

// MUFU.EX2 under a guard predicate: 8 chains a loop iteration, each
// `@q ex2`, q set once an iteration from a run-time value (one ISETP a
// iteration besides the 8 MUFU). kMode 0: q true on every lane; 1: false on
// every lane (a warp-uniform skip, as a masked key block's dead column
// groups would be); 2: true on lanes 0-15 only. Whether a predicated-off
// MUFU.EX2 still takes the pipe's 8 cycles a warp decides whether skipping
// exponentials by predicate can save MUFU time (2026-11-29b,
// tools/variant-ab/patches/diag-pred.patch).
template <int kMode>
__global__ void pred_kernel(float* out, long long* cycles) {
  int const zero = int(blockIdx.x >> 30);  // 0, unknown to the compiler
  float x[kChains];
#pragma unroll
  for (int j = 0; j < kChains; ++j) x[j] = 0.25f + 0.01f * float((threadIdx.x + j) % 7);
  int const lane = int(threadIdx.x % 32);
  int const on = kMode == 0 ? 1 + zero : kMode == 1 ? zero : int(lane < 16) + zero;
  __syncwarp();
  long long const t0 = clock64();
  for (int i = 0; i < kIters; ++i) {
    asm volatile(
        "{\n .reg .pred q;\n setp.ne.s32 q, %8, 0;\n"
        " @q ex2.approx.ftz.f32 %0, %0;\n @q ex2.approx.ftz.f32 %1, %1;\n"
        " @q ex2.approx.ftz.f32 %2, %2;\n @q ex2.approx.ftz.f32 %3, %3;\n"
        " @q ex2.approx.ftz.f32 %4, %4;\n @q ex2.approx.ftz.f32 %5, %5;\n"
        " @q ex2.approx.ftz.f32 %6, %6;\n @q ex2.approx.ftz.f32 %7, %7;\n}"
        : "+f"(x[0]), "+f"(x[1]), "+f"(x[2]), "+f"(x[3]), "+f"(x[4]), "+f"(x[5]), "+f"(x[6]), "+f"(x[7])
        : "r"(on));
  }
  long long const t1 = clock64();
  record(out, cycles, x, t1 - t0);
}

struct Test {
  const char* name;
  void (*kernel)(float*, long long*);
  int instrs_per_iter;  // warp instructions a warp issues per loop iteration
  bool latency;
};

}  // namespace

int main() {
  cudaDeviceProp prop;
  if (!tool_device("flashcore-pipe-rates", &prop)) return 0;
  int const sms = prop.multiProcessorCount;
  Test const tests[] = {
      {"MUFU.EX2 rate", pipe_kernel<0, -1, false>, kChains, false},
      {"F2FP.BF16 (cvt.rn.bf16x2) rate", pipe_kernel<1, -1, false>, kChains, false},
      {"F2FP.F16 (cvt.rn.f16x2) rate", pipe_kernel<5, -1, false>, kChains, false},
      {"FFMA rate", pipe_kernel<2, -1, false>, kChains, false},
      {"FMUL rate", pipe_kernel<6, -1, false>, kChains, false},
      {"FADD rate", pipe_kernel<4, -1, false>, kChains, false},
      {"FMNMX rate", pipe_kernel<3, -1, false>, kChains, false},
      {"mix MUFU.EX2 + F2FP.BF16 (1:1)", pipe_kernel<0, 1, false>, 2 * kChains, false},
      {"mix MUFU.EX2 + FFMA (1:1)", pipe_kernel<0, 2, false>, 2 * kChains, false},
      {"mix MUFU.EX2 + FMNMX (1:1)", pipe_kernel<0, 3, false>, 2 * kChains, false},
      {"MUFU.EX2 @q, q true", pred_kernel<0>, kChains, false},
      {"MUFU.EX2 @q, q false (warp)", pred_kernel<1>, kChains, false},
      {"MUFU.EX2 @q, q on lanes 0-15", pred_kernel<2>, kChains, false},
      {"MUFU.EX2 latency", pipe_kernel<0, -1, true>, 1, true},
      {"F2FP.BF16 latency", pipe_kernel<1, -1, true>, 1, true},
      {"FFMA latency", pipe_kernel<2, -1, true>, 1, true},
      {"FADD latency", pipe_kernel<4, -1, true>, 1, true},
      {"FMNMX latency", pipe_kernel<3, -1, true>, 1, true},
  };
  std::printf("device: %s, %d SMs; %d iterations a warp, one CTA per SM\n", prop.name, sms, kIters);
  std::printf("%-34s %5s %22s %22s\n", "test", "warps", "cycles / warp instr", "results / clk / SM");
  float* out = nullptr;
  long long* cycles = nullptr;
  CHECK_CUDA(cudaMalloc(&out, sizeof(float) * sms * 256));
  CHECK_CUDA(cudaMalloc(&cycles, sizeof(long long) * sms * 8));
  for (Test const& t : tests) {
    for (int w : {1, 2}) {
      int const threads = 128 * w;  // w warps on each of the 4 schedulers
      t.kernel<<<sms, threads>>>(out, cycles);  // warm-up (clock ramp, module load)
      CHECK_CUDA(cudaGetLastError());
      t.kernel<<<sms, threads>>>(out, cycles);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaDeviceSynchronize());
      std::vector<long long> c(size_t(sms) * threads / 32);
      CHECK_CUDA(cudaMemcpy(c.data(), cycles, sizeof(long long) * c.size(), cudaMemcpyDeviceToHost));
      std::sort(c.begin(), c.end());
      double const med = double(c[c.size() / 2]);  // median over the warps
      double const per_instr = med / (double(kIters) * t.instrs_per_iter);
      if (t.latency) {
        std::printf("%-34s %5d %22.2f %22s\n", t.name, w, per_instr, "-");
      } else {
        std::printf("%-34s %5d %22.2f %22.1f\n", t.name, w, per_instr, 32.0 * 4 * w / per_instr);
      }
    }
  }
  CHECK_CUDA(cudaFree(out));
  CHECK_CUDA(cudaFree(cycles));
  return 0;
}
