// Runs one small causal GQA attention on the CPU reference through the
// installed flashcore and checks one output row against a direct computation.
#include <flashcore/attention.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  const int64_t B = 1, Hq = 4, Hkv = 2, S = 100, D = 64;
  std::vector<float> q(B * Hq * S * D), k(B * Hkv * S * D), v(B * Hkv * S * D), out(q.size());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = u(rng);

  using flashcore::DType;
  flashcore::AttentionArgs args;
  args.q = flashcore::make_bhsd(q.data(), DType::kFloat32, B, Hq, S, D);
  args.k = flashcore::make_bhsd(k.data(), DType::kFloat32, B, Hkv, S, D);
  args.v = flashcore::make_bhsd(v.data(), DType::kFloat32, B, Hkv, S, D);
  args.out = flashcore::make_bhsd(out.data(), DType::kFloat32, B, Hq, S, D);
  args.causal = true;
  flashcore::Status st = flashcore::attention_forward(args);
  if (!st.ok()) {
    std::fprintf(stderr, "flashcore error: %s\n", st.message().c_str());
    return 1;
  }
  // Row 57 of query head 3 (KV head 1), computed directly.
  const int64_t h = 3, hk = 1, i = 57;
  double mx = -INFINITY, sum = 0, err = 0;
  std::vector<double> p(i + 1);
  for (int64_t j = 0; j <= i; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += double(q[(h * S + i) * D + d]) * k[(hk * S + j) * D + d];
    p[j] = dot / std::sqrt(double(D));
    mx = std::max(mx, p[j]);
  }
  for (double& x : p) sum += (x = std::exp(x - mx));
  for (int64_t d = 0; d < D; ++d) {
    double ref = 0;
    for (int64_t j = 0; j <= i; ++j) ref += p[j] * v[(hk * S + j) * D + d];
    err = std::max(err, std::fabs(ref / sum - out[(h * S + i) * D + d]));
  }
  std::printf("flashcore %s (CUDA backend: %s): max abs error %.2e\n", flashcore::version(),
              flashcore::built_with_cuda() ? "yes" : "no", err);
  return err < 1e-5 ? 0 : 1;
}
