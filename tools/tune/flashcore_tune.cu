// flashcore-tune: times every compiled sm90 tile configuration on the shapes
// of the benchmark grids, on the current GPU, after checking each one against
// a float64 reference on sampled rows. Prints a table, writes a CSV, and prints
// the best tile per (dtype, head dim, mask, shape) for the tuning table
// (src/sm90/tuning_table.h).
//
//   flashcore-tune [--suite fa3|seeds|all] [--reps N] [--csv FILE]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/half_convert.h"
#include "flashcore/attention.h"
#include "sm90/kernel_registry.h"
#include "tool_check_cuda.h"

using flashcore::DType;

namespace {

// Uniform values in +-[0.05, 1) from a counter hash: fresh data without a
// host round trip, never zero.
__global__ void fill_random(uint16_t* p, int64_t n, uint32_t seed, bool bf16) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16;
    float m = 0.05f + 0.95f * float(x & 0xffffff) / 16777216.f;
    float v = (x >> 31) ? -m : m;
    p[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16(v)) : __half_as_ushort(__float2half(v));
  }
}

struct Shape {
  const char* suite;
  DType dtype;
  int64_t b, h, s, d;
  bool causal;
};

std::vector<Shape> shapes(const std::string& suite) {
  std::vector<Shape> out;
  if (suite == "fa3" || suite == "all") {
    for (int64_t d : {64, 128, 256})
      for (bool causal : {false, true})
        for (int64_t s : {512, 1024, 2048, 4096, 8192, 16384})
          out.push_back({"fa3", DType::kBFloat16, 16384 / s, 2048 / d, s, d, causal});
  }
  if (suite == "seeds" || suite == "all") {
    for (int64_t s : {128, 256, 512})
      for (int64_t b : {1, 8, 16, 32}) out.push_back({"seeds", DType::kFloat16, b, 16, s, 64, false});
    out.push_back({"seeds", DType::kFloat16, 1, 16, 1024, 64, false});
    out.push_back({"seeds", DType::kFloat16, 1, 16, 1024, 64, true});
  }
  return out;
}

double to_double(uint16_t bits, DType dt) {
  return dt == DType::kBFloat16 ? flashcore::bf16_bits_to_float(bits) : flashcore::half_bits_to_float(bits);
}

// Max relative error of sampled output rows against a float64 computation.
double spot_check(const Shape& sh, const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* o,
                  std::mt19937& rng) {
  const int64_t S = sh.s, D = sh.d;
  double num = 0, den = 0;
  std::vector<uint16_t> hq(D), hk(S * D), hv(S * D), ho(D);
  for (int sample = 0; sample < 6; ++sample) {
    int64_t b = rng() % sh.b, h = rng() % sh.h, i = rng() % S;
    int64_t head = (b * sh.h + h) * S * D;
    CHECK_CUDA(cudaMemcpy(hq.data(), q + head + i * D, D * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(ho.data(), o + head + i * D, D * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(hk.data(), k + head, S * D * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(hv.data(), v + head, S * D * 2, cudaMemcpyDeviceToHost));
    int64_t last = sh.causal ? i : S - 1;
    std::vector<double> p(last + 1);
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j <= last; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < D; ++c) dot += to_double(hq[c], sh.dtype) * to_double(hk[j * D + c], sh.dtype);
      p[j] = dot / std::sqrt(double(D));
      mx = std::max(mx, p[j]);
    }
    for (auto& x : p) sum += (x = std::exp(x - mx));
    for (int64_t c = 0; c < D; ++c) {
      double ref = 0;
      for (int64_t j = 0; j <= last; ++j) ref += p[j] * to_double(hv[j * D + c], sh.dtype);
      ref /= sum;
      double got = to_double(ho[c], sh.dtype);
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
  }
  return std::sqrt(num / den);
}

}  // namespace

int main(int argc, char** argv) {
  std::string suite = "all", csv_path;
  int reps = 30;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--suite" && i + 1 < argc) suite = argv[++i];
    else if (a == "--reps" && i + 1 < argc) reps = std::max(3, std::atoi(argv[++i]));
    else if (a == "--csv" && i + 1 < argc) csv_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: flashcore-tune [--suite fa3|seeds|all] [--reps N] [--csv FILE]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  if (!tool_device("flashcore-tune", &prop)) return 0;
  std::printf("flashcore-tune on %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
  FILE* csv = csv_path.empty() ? nullptr : std::fopen(csv_path.c_str(), "w");
  if (csv) std::fprintf(csv, "# gpu: %s\nsuite,dtype,B,H,S,D,causal,block_m,block_n,us_median,tflops,relerr,best\n", prop.name);

  int nk = 0;
  const flashcore::sm90::KernelEntry* table = flashcore::sm90::kernel_table(&nk);
  std::mt19937 rng(12345);
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::printf("%-6s %-5s %4s %3s %6s %4s %-6s | %s\n", "suite", "dtype", "B", "H", "S", "D", "causal",
              "block_m x block_n: us (TFLOP/s) [relerr]");

  for (const Shape& sh : shapes(suite)) {
    int64_t n = sh.b * sh.h * sh.s * sh.d;
    uint16_t *q, *k, *v, *o;
    CHECK_CUDA(cudaMalloc(&q, n * 2));
    CHECK_CUDA(cudaMalloc(&k, n * 2));
    CHECK_CUDA(cudaMalloc(&v, n * 2));
    CHECK_CUDA(cudaMalloc(&o, n * 2));
    bool bf16 = sh.dtype == DType::kBFloat16;
    fill_random<<<1024, 256>>>(q, n, rng(), bf16);
    fill_random<<<1024, 256>>>(k, n, rng(), bf16);
    fill_random<<<1024, 256>>>(v, n, rng(), bf16);
    CHECK_CUDA(cudaGetLastError());

    flashcore::AttentionArgs args;
    auto dev = flashcore::Device::kCUDA;
    args.q = flashcore::make_bhsd(q, sh.dtype, sh.b, sh.h, sh.s, sh.d, dev);
    args.k = flashcore::make_bhsd(k, sh.dtype, sh.b, sh.h, sh.s, sh.d, dev);
    args.v = flashcore::make_bhsd(v, sh.dtype, sh.b, sh.h, sh.s, sh.d, dev);
    args.out = flashcore::make_bhsd(o, sh.dtype, sh.b, sh.h, sh.s, sh.d, dev);
    args.causal = sh.causal;
    double flops = 4.0 * sh.b * sh.h * sh.s * sh.s * sh.d * (sh.causal ? 0.5 : 1.0);

    std::printf("%-6s %-5s %4ld %3ld %6ld %4ld %-6s |", sh.suite, bf16 ? "bf16" : "fp16", long(sh.b), long(sh.h),
                long(sh.s), long(sh.d), sh.causal ? "yes" : "no");
    struct Result { int bm, bn; double us, err; };
    std::vector<Result> results;
    for (int i = 0; i < nk; ++i) {
      const auto& e = table[i];
      if (e.dtype != sh.dtype || e.head_dim != sh.d || e.serving) continue;
      bool seen = false;  // one timing per tile shape (dispatch picks the stage count)
      for (const Result& r : results) seen = seen || (r.bm == e.block_m && r.bn == e.block_n);
      if (seen) continue;
      args.config.block_m = e.block_m;
      args.config.block_n = e.block_n;
      CHECK_CUDA(cudaMemset(o, 0xFF, n * 2));
      flashcore::Status st = flashcore::attention_forward(args, nullptr);
      if (!st.ok()) {
        std::printf(" %dx%d: %s |", e.block_m, e.block_n, st.message().c_str());
        continue;
      }
      CHECK_CUDA(cudaDeviceSynchronize());
      double err = spot_check(sh, q, k, v, o, rng);
      std::vector<float> times;
      for (int r = 0; r < reps + 5; ++r) {
        CHECK_CUDA(cudaEventRecord(e0));
        (void)flashcore::attention_forward(args, nullptr);
        CHECK_CUDA(cudaEventRecord(e1));
        CHECK_CUDA(cudaEventSynchronize(e1));
        float ms;
        CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 5) times.push_back(ms * 1000.f);
      }
      std::sort(times.begin(), times.end());
      double us = times[times.size() / 2];
      bool ok = err < (bf16 ? 1e-2 : 2e-3);
      results.push_back({e.block_m, e.block_n, ok ? us : INFINITY, err});
      std::printf(" %dx%d: %.1f (%.0f) [%.1e]%s |", e.block_m, e.block_n, us, flops / us * 1e-6, err,
                  ok ? "" : " WRONG");
    }
    auto best = std::min_element(results.begin(), results.end(),
                                 [](const Result& a, const Result& b) { return a.us < b.us; });
    std::printf(" best %dx%d\n", best != results.end() ? best->bm : 0, best != results.end() ? best->bn : 0);
    if (csv) {
      for (const Result& r : results) {
        std::fprintf(csv, "%s,%s,%ld,%ld,%ld,%ld,%d,%d,%d,%.2f,%.1f,%.2e,%d\n", sh.suite, bf16 ? "bf16" : "fp16",
                     long(sh.b), long(sh.h), long(sh.s), long(sh.d), int(sh.causal), r.bm, r.bn, r.us,
                     flops / r.us * 1e-6, r.err, int(&r == &*best));
      }
    }
    CHECK_CUDA(cudaFree(q));
    CHECK_CUDA(cudaFree(k));
    CHECK_CUDA(cudaFree(v));
    CHECK_CUDA(cudaFree(o));
  }
  if (csv) std::fclose(csv);
  return 0;
}
