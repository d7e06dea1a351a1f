// Shared pieces of the GPU tests: skipping without a GPU, the per-run data
// seed, one problem mirrored on the device (GpuRun) and error metrics.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "attention_case.h"
#include "device_tensor.h"
#include "api/validation.h"
#include "flashcore/attention.h"
#include "sm90/kernel_registry.h"

namespace fctest {

#define SKIP_WITHOUT_GPU()                                                        \
  do {                                                                            \
    if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device: GPU test skipped"; \
  } while (0)

// Fresh data every run; printed so a failure can be replayed.
inline uint32_t data_seed() {
  static const uint32_t seed = [] {
    uint32_t s = std::random_device{}();
    std::printf("[gpu tests] data seed %u\n", s);
    return s;
  }();
  return seed;
}

struct GpuRun {
  std::unique_ptr<DeviceTensor> q, k, v, out, lse;
  flashcore::AttentionArgs args;

  explicit GpuRun(CaseTensors& t, bool with_lse = true) {
    q = std::make_unique<DeviceTensor>(t.q);
    k = std::make_unique<DeviceTensor>(t.k);
    v = std::make_unique<DeviceTensor>(t.v);
    out = std::make_unique<DeviceTensor>(t.out);
    lse = std::make_unique<DeviceTensor>(t.lse);
    args = t.args;
    args.q = q->view;
    args.k = k->view;
    args.v = v->view;
    args.out = out->view;
    args.lse = lse->view;
    if (!with_lse) args.lse.data = nullptr;
  }

  flashcore::Status run(cudaStream_t stream = nullptr) {
    out->poison();
    lse->poison();
    return finish(flashcore::attention_forward(args, stream));
  }

  // One compiled kernel launched as is (plain calls: no split, no KV append),
  // after the library's validation.
  flashcore::Status run_kernel(const flashcore::sm90::KernelEntry& e) {
    out->poison();
    lse->poison();
    flashcore::Problem p;
    flashcore::Status st = flashcore::validate(args, &p);
    if (!st.ok()) return st;
    return finish(flashcore::sm90::launch_plain(e, args, p, nullptr));
  }

 private:
  static flashcore::Status finish(flashcore::Status st) {
    cudaError_t err = cudaDeviceSynchronize();
    if (st.ok() && err != cudaSuccess) {
      return flashcore::Status(flashcore::StatusCode::kCudaError, cudaGetErrorString(err));
    }
    return st;
  }
};

// Copies batch entry `b` of `src` (q, k, v) into batch entry 0 of `dst`.
inline void copy_sequence(const CaseTensors& src, int64_t b, CaseTensors& dst) {
  for (auto [from, to] : {std::pair{&src.q, &dst.q}, {&src.k, &dst.k}, {&src.v, &dst.v}}) {
    to->for_each_index([&](int64_t, int64_t h, int64_t s, int64_t d) { to->set(0, h, s, d, from->get(b, h, s, d)); });
  }
}

// Batch invariance: batch entry `b` of `all` (case `c`), run alone with the
// batched run's kernel config (`batch`), must give the bits of O and LSE that
// run gave it (`batch_out`, `batch_lse`: its outputs), every output finite.
inline void expect_sequence_alone_matches_batch(const Case& c, const CaseTensors& all, const GpuRun& batch,
                                                const std::vector<double>& batch_out,
                                                const std::vector<double>& batch_lse, int64_t b) {
  Case one = c;
  one.batch = 1;
  CaseTensors single(one, /*fill=*/false);
  copy_sequence(all, b, single);
  GpuRun alone(single);
  alone.args.config = batch.args.config;
  ASSERT_TRUE(alone.run().ok()) << c.name() << " sequence " << b << " alone";
  std::vector<double> const o = alone.out->to_vector(), l = alone.lse->to_vector();
  for (double x : o) ASSERT_TRUE(std::isfinite(x)) << c.name() << " sequence " << b << " alone";
  ASSERT_EQ(batch_out.size(), o.size() * size_t(c.batch));
  ASSERT_EQ(batch_lse.size(), l.size() * size_t(c.batch));
  EXPECT_EQ(std::memcmp(&batch_out[size_t(b) * o.size()], o.data(), o.size() * sizeof(double)), 0)
      << c.name() << " O of sequence " << b;
  EXPECT_EQ(std::memcmp(&batch_lse[size_t(b) * l.size()], l.data(), l.size() * sizeof(double)), 0)
      << c.name() << " LSE of sequence " << b;
}

inline double lse_max_rel_err(const std::vector<double>& got, const std::vector<double>& ref) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i])) {
      if (!(std::isinf(got[i]) && got[i] < 0)) return INFINITY;
      continue;
    }
    double e = std::fabs(got[i] - ref[i]) / std::max(1.0, std::fabs(ref[i]));
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

inline double tolerance(DType dt) { return dt == DType::kBFloat16 ? 1e-2 : 2e-3; }

}  // namespace fctest
