// GPU tests of the sm90 forward kernels against the float64 naive attention
// (tests/cpp/naive_attention.h) on fresh random inputs, with every output
// poisoned before each run. Without a CUDA device every test skips with a
// message, so this binary also runs on CI.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <future>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "flashcore/attention.h"
#include "gpu_case.h"
#include "tail_plan_cases.h"
#include "sm90/kernel_registry.h"
#include "sm90/tuning_table.h"

namespace fctest {
namespace {

// The randomized sweep: >= 200 shapes covering dtypes, head dims, masks, GQA
// ratios, layouts and awkward lengths. Shapes are fixed (seed 2026); data is not.
std::vector<Case> sweep_cases() {
  std::mt19937 rng(2026);
  auto pick = [&](auto const& v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]; };
  const std::vector<int64_t> lens = {1, 17, 63, 64, 65, 127, 128, 129, 200, 255, 256, 383, 1000, 4097};
  const std::vector<int64_t> dims = {64, 96, 128, 256};
  const std::vector<int64_t> groups = {1, 1, 2, 3, 4, 8};
  std::vector<Case> cases;
  for (int i = 0; i < 240; ++i) {
    Case c;
    c.dtype = i % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.head_dim = dims[(i / 2) % 4];
    c.layout = pick(std::vector<Layout>{Layout::kBHSD, Layout::kBSHD, Layout::kStrided});
    c.seqlen_q = rng() % 3 == 0 ? int64_t(1 + rng() % 600) : pick(lens);
    c.seqlen_k = rng() % 2 == 0 ? c.seqlen_q : (rng() % 3 == 0 ? int64_t(1 + rng() % 600) : pick(lens));
    c.heads_kv = 1 + rng() % 2;
    c.heads_q = c.heads_kv * pick(groups);
    c.batch = 1 + rng() % 2;
    switch (rng() % 5) {
      case 0: case 1: break;
      case 2: c.causal = true; break;
      case 3: c.window_left = rng() % 300; c.window_right = rng() % 2 ? 0 : int64_t(rng() % 100); break;
      default: c.window_left = rng() % 200; break;
    }
    if (rng() % 8 == 0) c.scale = 0.3f;
    // Keep the float64 reference affordable: shrink heads/batch on long sequences.
    while (double(c.batch) * c.heads_q * c.seqlen_q * c.seqlen_k * c.head_dim > 6e8 && c.heads_q > 1) {
      if (c.batch > 1) c.batch = 1;
      else if (c.heads_q > c.heads_kv) c.heads_q = c.heads_kv;
      else { c.heads_q = 1; c.heads_kv = 1; }
    }
    c.seed = data_seed() + uint32_t(i);
    cases.push_back(c);
  }
  return cases;
}

struct Prepared {
  Case c;
  std::unique_ptr<CaseTensors> host;
  NaiveResult ref;
};

TEST(Sm90Forward, RandomSweepMatchesFloat64Reference) {
  SKIP_WITHOUT_GPU();
  std::vector<Case> cases = sweep_cases();
  // The float64 references take most of the time: compute them on all cores.
  std::vector<std::future<Prepared>> futures;
  std::vector<Prepared> prepared(cases.size());
  unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  for (size_t start = 0; start < cases.size(); start += workers) {
    futures.clear();
    for (size_t i = start; i < std::min(cases.size(), start + workers); ++i) {
      futures.push_back(std::async(std::launch::async, [c = cases[i]] {
        Prepared p{c, std::make_unique<CaseTensors>(c), {}};
        p.ref = p.host->naive(c);
        return p;
      }));
    }
    for (size_t i = start; i < std::min(cases.size(), start + workers); ++i) prepared[i] = futures[i - start].get();
  }
  double worst[3] = {0, 0, 0};
  double worst_lse = 0;
  int failures = 0;
  for (Prepared& p : prepared) {
    GpuRun gpu(*p.host);
    ASSERT_TRUE(gpu.q->ok() && gpu.out->ok());
    flashcore::Status st = gpu.run();
    ASSERT_TRUE(st.ok()) << p.c.name() << ": " << st.message();
    double err = rel_frobenius(gpu.out->to_vector(), p.ref.out);
    double lerr = lse_max_rel_err(gpu.lse->to_vector(), p.ref.lse);
    int slot = int(p.c.dtype);
    if (!(err <= worst[slot])) worst[slot] = err;
    if (!(lerr <= worst_lse)) worst_lse = lerr;
    bool ok = err < tolerance(p.c.dtype) && lerr < 1e-3;
    EXPECT_TRUE(ok) << p.c.name() << ": rel err " << err << ", lse rel err " << lerr;
    failures += !ok;
    if (failures > 10) break;
  }
  std::printf("[gpu tests] sweep: %zu cases, worst rel err fp16 %.3g bf16 %.3g, worst LSE rel err %.3g\n",
              prepared.size(), worst[int(DType::kFloat16)], worst[int(DType::kBFloat16)], worst_lse);
}

// A case for compiled kernel `e` (its dtype and head dim), shape variant
// `variant` of a test's loop: variant 1 in BSHD, the others in BHSD.
Case kernel_case(const flashcore::sm90::KernelEntry& e, int variant) {
  Case c;
  c.dtype = e.dtype;
  c.head_dim = e.head_dim;
  c.layout = variant == 1 ? Layout::kBSHD : Layout::kBHSD;
  return c;
}

// Every compiled tile configuration, not only the tuned defaults, on shapes
// with tails, masks and GQA.
TEST(Sm90Forward, EveryCompiledTileMatchesReference) {
  SKIP_WITHOUT_GPU();
  int n = 0;
  const flashcore::sm90::KernelEntry* table = flashcore::sm90::kernel_table(&n);
  ASSERT_GT(n, 0);
  for (int i = 0; i < n; ++i) {
    const auto& e = table[i];
    // Serving variants: test_sm90_serving.cpp; K/V multicast ones (which take
    // unmasked calls only): ClusterKernelsMatchOneCtaKernels.
    if (e.serving || e.cluster_m > 1) continue;
    for (int variant = 0; variant < 3; ++variant) {
      Case c = kernel_case(e, variant);
      c.heads_kv = 2;
      c.heads_q = variant == 2 ? 6 : 2;
      c.seqlen_q = variant == 0 ? 333 : 129;
      c.seqlen_k = variant == 0 ? 333 : 517;
      c.causal = variant != 1;
      if (variant == 1) c.window_left = 100, c.window_right = 17;
      c.seed = data_seed() + 7919u * uint32_t(i * 3 + variant);
      CaseTensors host(c);
      NaiveResult ref = host.naive(c);
      GpuRun gpu(host);
      // Launched directly, not through dispatch: every stage variant of a
      // tile (kernel_traits.h) runs, whatever dispatch would pick here.
      flashcore::Status st = gpu.run_kernel(e);
      ASSERT_TRUE(st.ok()) << e.name << " " << c.name() << ": " << st.message();
      double err = rel_frobenius(gpu.out->to_vector(), ref.out);
      double lerr = lse_max_rel_err(gpu.lse->to_vector(), ref.lse);
      EXPECT_TRUE(err < tolerance(c.dtype) && lerr < 1e-3)
          << e.name << " " << c.name() << ": rel err " << err << ", lse rel err " << lerr;
    }
  }
}

// Kernel `e` and `twin` (the same tile, another build of it) on the same
// inputs: bit for bit the same output and LSE, and, with_reference, within
// tolerance of float64.
void expect_same_bits_as_twin(const flashcore::sm90::KernelEntry& e, const flashcore::sm90::KernelEntry& twin,
                              const Case& c, bool with_reference) {
  CaseTensors host(c);
  GpuRun run(host), twin_run(host);
  flashcore::Status st = run.run_kernel(e);
  ASSERT_TRUE(st.ok()) << e.name << " " << c.name() << ": " << st.message();
  ASSERT_TRUE(twin_run.run_kernel(twin).ok()) << twin.name << " " << c.name();
  EXPECT_EQ(run.out->bytes(), twin_run.out->bytes()) << e.name << " " << c.name();
  EXPECT_EQ(run.lse->bytes(), twin_run.lse->bytes()) << e.name << " " << c.name();
  if (!with_reference) return;
  NaiveResult ref = host.naive(c);
  double err = rel_frobenius(run.out->to_vector(), ref.out);
  double lerr = lse_max_rel_err(run.lse->to_vector(), ref.lse);
  EXPECT_TRUE(err < tolerance(c.dtype) && lerr < 1e-3)
      << e.name << " " << c.name() << ": rel err " << err << ", lse rel err " << lerr;
}

// Runs check(i, e, twin, sms) for every compiled kernel `e` that `selected`
// picks (i: its index in the table), against `twin_of(e)`: the kernel of the
// same tile it must match bit for bit. Returns how many it checked.
template <class Selected, class TwinOf, class Check>
int check_against_twins(Selected selected, TwinOf twin_of, Check check) {
  int sms = 0;
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  int n = 0, tested = 0;
  const flashcore::sm90::KernelEntry* table = flashcore::sm90::kernel_table(&n);
  for (int i = 0; i < n; ++i) {
    const auto& e = table[i];
    if (!selected(e)) continue;
    const flashcore::sm90::KernelEntry* twin = twin_of(e);
    EXPECT_NE(twin, nullptr) << e.name << ": no twin";
    if (twin == nullptr) continue;
    ++tested;
    check(i, e, *twin, sms);
  }
  return tested;
}

// The K/V-multicast kernels (kernel_traits.h kClusterM) change only where K
// and V bytes come from: bit for bit the output and LSE of the same tile on
// one CTA, and within tolerance of float64. Shapes with GQA, tails in both
// lengths, BSHD, more tiles than SMs (CTAs walk several tile pairs) and,
// where the kernel allows it, pairs of tiles from two heads (three query
// blocks a head: mainloop_load.h loads those apart); a masked call, or tiles
// that do not pair up, are refused with a clear error.
TEST(Sm90Forward, ClusterKernelsMatchOneCtaKernels) {
  SKIP_WITHOUT_GPU();
  auto one_cta = [](const flashcore::sm90::KernelEntry& e) {
    return flashcore::sm90::find_kernel(e.dtype, e.head_dim, e.block_m, e.block_n, e.serving, 1);
  };
  auto check = [](int i, const flashcore::sm90::KernelEntry& e, const flashcore::sm90::KernelEntry& one, int sms) {
    bool const straddle = flashcore::sm90::cluster_pairs_may_straddle(e.head_dim);
    int64_t const blocks = straddle ? 3 : 4;  // query blocks a head: odd where pairs may straddle two heads
    for (int variant = 0; variant < 4; ++variant) {
      Case c = kernel_case(e, variant);
      c.batch = variant == 1 ? 1 : 2;
      c.heads_q = variant == 1 ? 4 : variant == 2 ? sms / 4 + 5 : 3;  // variant 2: more tile pairs than clusters
      c.heads_kv = variant == 1 ? 2 : c.heads_q;
      c.seqlen_q = variant == 1 ? 2 * e.block_m : blocks * e.block_m - 37;
      c.seqlen_k = variant == 0 ? 517 : variant == 1 ? 1000 : 300;
      c.causal = variant == 3;  // refused: the two tiles of a cluster would see other keys
      c.seed = data_seed() + 7717u * uint32_t(i * 4 + variant);
      if (variant == 3) {
        CaseTensors host(c);
        GpuRun cluster(host);
        flashcore::Status st = cluster.run_kernel(e);
        EXPECT_EQ(st.code(), flashcore::StatusCode::kNotSupported) << e.name << " " << c.name();
        EXPECT_NE(st.message().find("K/V-multicast"), std::string::npos) << st.message();
        continue;
      }
      expect_same_bits_as_twin(e, one, c, /*with_reference=*/variant < 2);
    }
    // Tiles that do not pair up: an odd number in all (three), or where pairs
    // may not straddle, an odd number a head (three, in two heads).
    Case c = kernel_case(e, /*variant=*/0);  // BHSD
    c.heads_q = c.heads_kv = straddle ? 1 : 2;
    c.seqlen_q = 3 * e.block_m;
    c.seqlen_k = 200;
    CaseTensors host(c);
    GpuRun gpu(host);
    flashcore::Status st = gpu.run_kernel(e);
    EXPECT_EQ(st.code(), flashcore::StatusCode::kNotSupported) << e.name << ": " << st.message();
  };
  int const tested = check_against_twins([](const auto& e) { return e.cluster_m > 1; }, one_cta, check);
  EXPECT_GT(tested, 0) << "no K/V-multicast kernel compiled";
}

// The kernels without ping-pong turns (kernel_traits.h kNoTurns_) run the
// same operations in the same order as their twins with turns: bit for bit
// the same output and LSE, on causal, sliding-window and unmasked calls with
// tails in both lengths, GQA, BSHD, more tiles than SMs, and key counts on
// both sides of dispatch's 1k threshold (tuning_table.h tuned_no_turns).
TEST(Sm90Forward, NoTurnsKernelsMatchTheirTwinsWithTurns) {
  SKIP_WITHOUT_GPU();
  auto with_turns = [](const flashcore::sm90::KernelEntry& e) {
    return flashcore::sm90::find_kernel(e.dtype, e.head_dim, e.block_m, e.block_n, e.serving, e.cluster_m, e.fold);
  };
  auto check = [](int i, const flashcore::sm90::KernelEntry& e, const flashcore::sm90::KernelEntry& twin, int sms) {
    ASSERT_FALSE(twin.no_turns);
    for (int variant = 0; variant < 4; ++variant) {
      Case c = kernel_case(e, variant);
      c.batch = 2;
      c.heads_kv = 2;
      c.heads_q = variant == 2 ? 2 * (sms / 8 + 3) : 6;  // variant 2: more tiles than SMs
      c.seqlen_q = variant == 3 ? 1000 : 2 * e.block_m + 37;
      c.seqlen_k = variant == 0 ? 1100 : variant == 1 ? 517 : variant == 2 ? 300 : 1000;
      c.causal = variant != 1;
      if (variant == 1) c.window_left = 200, c.window_right = 33;
      if (e.cluster_m > 1) {  // multicast: unmasked, an even number of query blocks a head
        c.causal = false;
        c.window_left = c.window_right = -1;
        c.seqlen_q = 4 * e.block_m - 37;
      }
      c.seed = data_seed() + 6911u * uint32_t(i * 4 + variant);
      expect_same_bits_as_twin(e, twin, c, /*with_reference=*/variant < 2);
    }
  };
  // (The serving kernels without turns: test_sm90_serving.cpp.)
  int const tested = check_against_twins([](const auto& e) { return e.no_turns && !e.serving; }, with_turns, check);
  EXPECT_GT(tested, 0) << "no kernel without turns compiled";
}

// The kernels that run two CTAs an SM (kernel_traits.h kCtasPerSm_) compute
// each tile as their one-CTA twins do: bit for bit the same output and LSE,
// with more tiles than the two CTAs of every SM take at once (CTAs walk
// several tiles), unmasked, causal (paired tiles) and sliding-window calls,
// tails in both lengths, GQA and BSHD; and dispatch takes them for unmasked
// head-dim-64 calls of a few tiles an SM (tuning_table.h), with the same bits.
TEST(Sm90Forward, TwoCtaKernelsMatchTheirOneCtaTwins) {
  SKIP_WITHOUT_GPU();
  auto one_cta_an_sm = [](const flashcore::sm90::KernelEntry& e) {
    return flashcore::sm90::find_kernel(e.dtype, e.head_dim, e.block_m, e.block_n, e.serving, 1, false, false, 1);
  };
  auto check = [](int i, const flashcore::sm90::KernelEntry& e, const flashcore::sm90::KernelEntry& twin, int sms) {
    for (int variant = 0; variant < 4; ++variant) {
      Case c = kernel_case(e, variant);
      c.batch = 2;
      c.heads_kv = variant == 0 ? 2 : 3;
      c.heads_q = c.heads_kv * (sms / 8 + 2);  // 6 query blocks a head: more than 2 x sms tiles
      c.seqlen_q = 6 * e.block_m - 29;
      c.seqlen_k = variant == 3 ? 1000 : 517;
      c.causal = variant == 2;
      if (variant == 3) c.window_left = 150, c.window_right = 40;
      c.seed = data_seed() + 5153u * uint32_t(i * 4 + variant);
      expect_same_bits_as_twin(e, twin, c, /*with_reference=*/variant < 2);
    }
  };
  int const tested = check_against_twins([](const auto& e) { return e.ctas_per_sm > 1; }, one_cta_an_sm, check);
  EXPECT_GT(tested, 0) << "no two-CTA kernel compiled";
  // Dispatch: B8 H16 S128 head dim 64 (256 tiles of 64 rows) takes the
  // two-CTA kernel; the same bits as the one-CTA tile forced by the caller.
  Case c;
  c.dtype = DType::kBFloat16;
  c.head_dim = 64;
  c.batch = 8;
  c.heads_q = c.heads_kv = 16;
  c.seqlen_q = c.seqlen_k = 128;
  c.seed = data_seed() + 77u;
  CaseTensors host(c);
  GpuRun run(host), one(host);
  uint64_t const before = flashcore::sm90::two_cta_launches();
  ASSERT_TRUE(run.run().ok());
  if (flashcore::sm90::two_ctas_allowed()) {
    EXPECT_EQ(flashcore::sm90::two_cta_launches(), before + 1) << "dispatch did not take the two-CTA kernel";
  }
  const flashcore::sm90::KernelEntry* m64 = flashcore::sm90::find_kernel(c.dtype, 64, 64, 128, false);
  ASSERT_NE(m64, nullptr);
  ASSERT_TRUE(one.run_kernel(*m64).ok());
  EXPECT_EQ(run.out->bytes(), one.out->bytes());
  EXPECT_EQ(run.lse->bytes(), one.lse->bytes());
}

TEST(Sm90Forward, FullyMaskedRowsAreZeroWithMinusInfLse) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.dtype = DType::kBFloat16;
  c.head_dim = 128;
  c.heads_q = c.heads_kv = 2;
  c.seqlen_q = 300;  // causal with seqlen_q > seqlen_k: the top 200 rows see no key
  c.seqlen_k = 100;
  c.causal = true;
  c.seed = data_seed();
  CaseTensors host(c);
  NaiveResult ref = host.naive(c);
  GpuRun gpu(host);
  ASSERT_TRUE(gpu.run().ok());
  std::vector<double> out = gpu.out->to_vector(), lse = gpu.lse->to_vector();
  for (double x : out) ASSERT_FALSE(std::isnan(x));
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 200; ++i) {
      EXPECT_TRUE(std::isinf(lse[h * 300 + i]) && lse[h * 300 + i] < 0);
      for (int64_t d = 0; d < 128; ++d) ASSERT_EQ(out[(h * 300 + i) * 128 + d], 0.0);
    }
  }
  EXPECT_LT(rel_frobenius(out, ref.out), tolerance(c.dtype));
}

TEST(Sm90Forward, EmptyKeySequenceGivesZeros) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.dtype = DType::kFloat16;
  c.seqlen_q = 70;
  c.seqlen_k = 0;
  CaseTensors host(c);
  GpuRun gpu(host);
  flashcore::Status st = gpu.run();
  ASSERT_TRUE(st.ok()) << st.message();
  for (double x : gpu.out->to_vector()) ASSERT_EQ(x, 0.0);
  for (double x : gpu.lse->to_vector()) ASSERT_TRUE(std::isinf(x) && x < 0);
}

TEST(Sm90Forward, RepeatedRunsAreBitwiseIdentical) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.dtype = DType::kBFloat16;
  c.head_dim = 128;
  c.batch = 2;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.seqlen_q = c.seqlen_k = 1031;
  c.causal = true;
  c.seed = data_seed();
  CaseTensors host(c);
  GpuRun gpu(host);
  ASSERT_TRUE(gpu.run().ok());
  std::vector<unsigned char> first = gpu.out->bytes(), first_lse = gpu.lse->bytes();
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(gpu.run().ok());
    ASSERT_EQ(gpu.out->bytes(), first) << "run " << i;
    ASSERT_EQ(gpu.lse->bytes(), first_lse) << "run " << i;
  }
}

// The host caches TMA descriptors by (address, extents, strides)
// (sm90/recent_cache.h): the same buffers seen as another problem, as a
// caching allocator hands them out, must get descriptors of their own.
TEST(Sm90Forward, SameBuffersAsAnotherProblemGetTheirOwnDescriptors) {
  SKIP_WITHOUT_GPU();
  for (int64_t len : {129, 300}) {  // fewer, then as many rows and keys as before
    Case a;
    a.dtype = DType::kFloat16;
    a.heads_q = a.heads_kv = 2;
    a.seqlen_q = a.seqlen_k = 300;
    a.seed = data_seed();
    Case b = a;
    b.seqlen_q = len;
    b.seqlen_k = len == 300 ? 200 : len;  // same q/out views as a, shorter k/v
    b.seed = data_seed() + 1;
    CaseTensors ha(a), hb(b);
    GpuRun ga(ha), gb(hb);
    ASSERT_TRUE(ga.run().ok());  // caches a's descriptors
    ASSERT_TRUE(gb.run().ok());
    std::vector<unsigned char> const want = gb.out->bytes(), want_lse = gb.lse->bytes();
    // b's inputs copied into a's (at least as large) contiguous buffers, then
    // b's problem run on a's addresses.
    auto bytes_of = [](const flashcore::TensorView& t) { return size_t(t.numel()) * flashcore::dtype_size(t.dtype); };
    flashcore::AttentionArgs args = gb.args;
    for (auto [from, to, arg] : {std::tuple{gb.q.get(), ga.q.get(), &args.q}, {gb.k.get(), ga.k.get(), &args.k},
                                 {gb.v.get(), ga.v.get(), &args.v}, {gb.out.get(), ga.out.get(), &args.out},
                                 {gb.lse.get(), ga.lse.get(), &args.lse}}) {
      ASSERT_EQ(cudaMemcpy(to->view.data, from->view.data, bytes_of(from->view), cudaMemcpyDeviceToDevice),
                cudaSuccess);
      arg->data = to->view.data;
    }
    ga.out->poison();
    ga.lse->poison();
    flashcore::Status st = flashcore::attention_forward(args);
    ASSERT_TRUE(st.ok()) << st.message();
    gb.out->poison();
    gb.lse->poison();
    for (auto [from, to] : {std::pair{ga.out.get(), gb.out.get()}, {ga.lse.get(), gb.lse.get()}}) {
      ASSERT_EQ(cudaMemcpy(to->view.data, from->view.data, bytes_of(to->view), cudaMemcpyDeviceToDevice),
                cudaSuccess);
    }
    EXPECT_EQ(gb.out->bytes(), want) << "seqlen " << len;
    EXPECT_EQ(gb.lse->bytes(), want_lse) << "seqlen " << len;
  }
}

// A sequence's output must not depend on the batch it is computed in.
TEST(Sm90Forward, BatchInvariant) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
    Case big;
    big.dtype = dt;
    big.head_dim = 64;
    big.batch = 5;
    big.heads_q = 4;
    big.heads_kv = 4;
    big.seqlen_q = big.seqlen_k = 777;
    big.causal = true;
    big.seed = data_seed();
    CaseTensors all(big);
    GpuRun ga(all);
    ASSERT_TRUE(ga.run().ok());
    expect_sequence_alone_matches_batch(big, all, ga, ga.out->to_vector(), ga.lse->to_vector(), 3);
  }
}

// Each kernel with a tail plan (tail_plan.h, tail_policy.h): the last round
// or two of a paired call dealt tile by tile from a host-built plan. Every
// sequence of the batch (which takes the plan) gives the same bits of O and
// LSE as that sequence alone (too few tiles for a plan), with every output
// poisoned first: a tile the plan missed stays NaN, one dealt to the wrong
// place differs. The host test TailPlan.GpuTestCallsTakeAPlan checks that
// these calls take a plan on a 132-SM card by the model, and the launcher's
// count (tail_plan_launches) that the kernel was given one.
TEST(Sm90Forward, TailPlanSequencesMatchRunsAlone) {
  SKIP_WITHOUT_GPU();
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  if (sms != kTailPlanSms) {
    std::printf("[gpu tests] %d SMs: these calls were chosen to take a tail plan on %d; bits checked anyway\n", sms,
                kTailPlanSms);
  }
  uint32_t salt = 0;
  for (TailPlanCall const& t : tail_plan_calls()) {
    Case c;
    c.dtype = t.bf16 ? DType::kBFloat16 : DType::kFloat16;
    c.head_dim = t.head_dim;
    c.batch = t.batch;
    c.heads_q = t.heads_q;
    c.heads_kv = t.heads_kv;
    c.seqlen_q = t.seqlen_q;
    c.seqlen_k = t.seqlen_k;
    c.causal = t.causal;
    c.window_left = t.window_left;
    c.window_right = t.window_right;
    c.seed = data_seed() + 41 * ++salt;
    CaseTensors all(c);
    GpuRun ga(all);
    ga.args.config.block_m = t.block_m;
    ga.args.config.block_n = t.block_n;
    uint64_t const before = flashcore::sm90::tail_plan_launches();
    ASSERT_TRUE(ga.run().ok()) << c.name();
    uint64_t const after = flashcore::sm90::tail_plan_launches();
    // The bits cannot show whether the plan was used: the launcher's count
    // does (each call is one launch; alone, a sequence has too few tiles).
    if (sms == kTailPlanSms) {
      EXPECT_EQ(after, before + 1) << c.name() << ": no tail plan taken";
    }
    std::vector<double> const oa = ga.out->to_vector(), la = ga.lse->to_vector();
    for (int64_t b = 0; b < c.batch; ++b) expect_sequence_alone_matches_batch(c, all, ga, oa, la, b);
    if (sms == kTailPlanSms) {
      EXPECT_EQ(flashcore::sm90::tail_plan_launches(), after) << c.name() << " alone";
    }
  }
}

// Decode (one query token) with GQA runs packed (gqa_pack.h): all query heads
// of a KV head in one tile. Checked against float64 with LSE, for causal and
// for a left window that still reaches key 0 (both packed) and one that does
// not (unpacked), and for batch invariance.
TEST(Sm90Forward, GqaPackedDecode) {
  SKIP_WITHOUT_GPU();
  for (int variant = 0; variant < 3; ++variant) {
    Case c;
    c.dtype = variant == 1 ? DType::kFloat16 : DType::kBFloat16;
    c.head_dim = variant == 2 ? 64 : 128;
    c.layout = variant == 1 ? Layout::kBSHD : Layout::kBHSD;
    c.batch = 3;
    c.heads_q = 32;
    c.heads_kv = 8;
    c.seqlen_q = 1;
    c.seqlen_k = 1000 + 77 * variant;
    c.causal = variant == 0;
    if (variant == 1) c.window_left = c.seqlen_k;        // reaches key 0: packed
    if (variant == 2) c.window_left = c.seqlen_k / 2;    // does not: unpacked
    c.seed = data_seed() + 31 * uint32_t(variant);
    CaseTensors host(c);
    NaiveResult ref = host.naive(c);
    GpuRun gpu(host);
    ASSERT_TRUE(gpu.run().ok());
    EXPECT_LT(rel_frobenius(gpu.out->to_vector(), ref.out), tolerance(c.dtype)) << c.name();
    EXPECT_LT(lse_max_rel_err(gpu.lse->to_vector(), ref.lse), 1e-3) << c.name();
    // Sequence 2 alone gives the same bits as inside the batch.
    expect_sequence_alone_matches_batch(c, host, gpu, gpu.out->to_vector(), gpu.lse->to_vector(), 2);
  }
}

// Runs `c` with block_m = bm_a and bm_b (0: dispatch's choice) and expects
// the same bytes of O and LSE; with `check_reference` also O against float64.
void expect_same_bits_across_block_m(const Case& c, int bm_a, int bm_b, bool check_reference) {
  CaseTensors host(c);
  GpuRun a(host), b(host);
  a.args.config.block_m = bm_a;
  b.args.config.block_m = bm_b;
  ASSERT_TRUE(a.run().ok()) << c.name() << " block_m " << bm_a;
  ASSERT_TRUE(b.run().ok()) << c.name() << " block_m " << bm_b;
  EXPECT_EQ(a.out->bytes(), b.out->bytes()) << c.name() << " block_m " << bm_a << " vs " << bm_b;
  EXPECT_EQ(a.lse->bytes(), b.lse->bytes()) << c.name() << " block_m " << bm_a << " vs " << bm_b;
  if (check_reference) {
    EXPECT_LT(rel_frobenius(b.out->to_vector(), host.naive(c).out), tolerance(c.dtype)) << c.name();
  }
}

// Dispatch picks block_m from the total work (batch included); that is only
// batch-invariant because block_m never changes a row's arithmetic.
TEST(Sm90Forward, BlockMDoesNotChangeResults) {
  SKIP_WITHOUT_GPU();
  for (int64_t d : {64, 128}) {
    Case c;
    c.dtype = DType::kBFloat16;
    c.head_dim = d;
    c.heads_q = 8;
    c.heads_kv = 2;
    c.seqlen_q = 461;
    c.seqlen_k = 397;
    c.causal = true;
    c.seed = data_seed() + uint32_t(d);
    expect_same_bits_across_block_m(c, 64, 128, false);
  }
  // Head dim 64's 128-row kernel issues each tile's first Q·Kᵀ in the
  // previous tile's last turn (kernel_traits.h kIssueAhead), and a query
  // block whose rows are all masked visits one masked key block there:
  // whole masked 128-row blocks (causal with seqlen_q > seqlen_k, a sliding
  // window that ends before key 0, no keys at all) among several tiles a
  // CTA, and many unmasked tiles a CTA; bit for bit the 64-row tiles' output
  // (zeros with their sign, LSE -inf) and within tolerance of float64.
  for (int variant = 0; variant < 4; ++variant) {
    Case c;
    c.dtype = variant == 1 ? DType::kFloat16 : DType::kBFloat16;
    c.head_dim = 64;
    c.batch = variant == 3 ? 4 : 2;
    c.heads_q = variant == 3 ? 32 : 16;
    c.heads_kv = 4;
    c.seqlen_q = variant == 2 ? 900 : variant == 3 ? 1000 : 700;
    c.seqlen_k = variant == 0 ? 300 : variant == 1 ? 0 : variant == 2 ? 300 : 1000;
    c.causal = variant == 0;
    if (variant == 2) c.window_left = 40, c.window_right = 0;  // rows below 600 see no key
    c.seed = data_seed() + 31 * uint32_t(variant);
    expect_same_bits_across_block_m(c, 64, 128, variant != 1);
    if (variant == 1) {  // no keys: every row +0 (not -0), LSE -inf
      CaseTensors host(c);
      GpuRun gpu(host);
      gpu.args.config.block_m = 128;
      ASSERT_TRUE(gpu.run().ok());
      for (double x : gpu.out->to_vector()) ASSERT_TRUE(x == 0.0 && !std::signbit(x));
      for (double x : gpu.lse->to_vector()) ASSERT_TRUE(std::isinf(x) && x < 0);
    }
  }
  // A row masked whole beside unmasked rows of its query block, with V
  // not finite on the keys it cannot see: +0, the same at every block_m
  // (softmax.h normalize_o), and the other rows as before.
  {
    Case c;
    c.dtype = DType::kBFloat16;
    c.head_dim = 64;
    c.heads_q = c.heads_kv = 2;
    c.seqlen_q = 300;  // causal, seqlen_k 200: rows below 100 see no key
    c.seqlen_k = 200;
    c.causal = true;
    c.seed = data_seed() + 41;
    CaseTensors host(c);
    // Key 120: in the key block rows 64-127 visit, seen by rows >= 220 only.
    host.v.set(0, 0, 120, 3, std::numeric_limits<double>::infinity());
    GpuRun a(host), b(host);
    a.args.config.block_m = 64;
    b.args.config.block_m = 128;
    ASSERT_TRUE(a.run().ok());
    ASSERT_TRUE(b.run().ok());
    EXPECT_EQ(a.out->bytes(), b.out->bytes());
    for (GpuRun* r : {&a, &b}) {
      std::vector<double> out = r->out->to_vector();
      for (int64_t i = 0; i < 100; ++i) {  // head 0, BHSD
        for (int64_t d = 0; d < 64; ++d) ASSERT_TRUE(out[i * 64 + d] == 0.0 && !std::signbit(out[i * 64 + d])) << i;
      }
    }
  }
  // Head dim 64 also has 192-row tiles (three consumer warpgroups, the
  // compact form of the mask: mask.h), here with a causal mask, a sliding
  // window on both sides and a window whose left edge lies before key 0 for
  // every row; each against 64-row tiles bit for bit and against float64.
  for (int variant = 0; variant < 3; ++variant) {
    Case c;
    c.dtype = variant == 1 ? DType::kFloat16 : DType::kBFloat16;
    c.heads_q = 6;
    c.heads_kv = 3;
    c.seqlen_q = variant == 0 ? 461 : 700;
    c.seqlen_k = variant == 0 ? 397 : 1000;
    c.causal = variant == 0;
    if (variant == 1) c.window_left = 150, c.window_right = 40;
    if (variant == 2) c.window_left = 5000, c.window_right = 0;
    c.seed = data_seed() + 11 * uint32_t(variant);
    expect_same_bits_across_block_m(c, 64, 192, true);
  }
  // More 192-row tiles than SMs, so CTAs run several tiles: the second Q
  // buffer, the turn barriers and O stores carried from tile to tile, and
  // the paired causal schedule with an even (6) and an odd (5) number of
  // query blocks; key counts not a multiple of 128. Variants 3 and 4 leave
  // 128 and 64 rows of whole-warpgroup padding, which causal calls take
  // before row 0 (tail_policy.h front_pad): a first tile with one or two
  // warpgroups of padding, no Q rows loaded and no O stored for them.
  for (int variant = 0; variant < 5; ++variant) {
    Case c;
    c.dtype = variant == 1 || variant == 4 ? DType::kFloat16 : DType::kBFloat16;
    c.batch = variant == 2 ? 3 : 2;
    c.heads_q = 32;
    c.heads_kv = variant == 2 || variant == 4 ? 8 : 32;
    c.seqlen_q = variant == 2 ? 900 : variant == 3 ? 1000 : variant == 4 ? 1080 : 1100;
    c.seqlen_k = variant == 2 ? 1000 : variant == 3 ? 1000 : variant == 4 ? 1200 : 1100;
    c.causal = variant > 0;
    c.seed = data_seed() + 23 * uint32_t(variant);
    expect_same_bits_across_block_m(c, 64, 192, false);
  }
  // Three 192-row query blocks a head with more tiles than SMs: the pairs
  // (0, 2), then every head's middle block (tile_scheduler.h), 512 rows
  // causal (64 padding rows first: a first tile with a padding warpgroup,
  // the others passing over the last block: mainloop_mma.h
  // kSkipMaskedBlocks) and 400 rows against 450 keys with a right window
  // of 30 keys (128 padding rows first: two padding warpgroups); bit for
  // bit against 64-row tiles.
  for (int variant = 0; variant < 2; ++variant) {
    Case c;
    c.dtype = variant == 0 ? DType::kBFloat16 : DType::kFloat16;
    c.batch = 3;
    c.heads_q = 32;
    c.heads_kv = 8;
    c.seqlen_q = variant == 0 ? 512 : 400;
    c.seqlen_k = variant == 0 ? 512 : 450;
    c.causal = variant == 0;
    if (variant == 1) c.window_right = 30;  // left: unbounded (-1)
    c.seed = data_seed() + 29 * uint32_t(variant);
    expect_same_bits_across_block_m(c, 64, 192, variant == 0);
  }
  // One wave of 128-row causal tiles (B1 H16 S1024): dispatch runs 64-row
  // tiles dealt in pairs (tuning_table.h); the same bits as one unpaired wave
  // of 128-row tiles, and right.
  Case c;
  c.dtype = DType::kFloat16;
  c.heads_q = c.heads_kv = 16;
  c.seqlen_q = c.seqlen_k = 1024;
  c.causal = true;
  c.seed = data_seed() + 7;
  expect_same_bits_across_block_m(c, 0, 128, true);
}

TEST(Sm90Forward, UncompiledTileOverrideIsAClearError) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.dtype = DType::kFloat16;
  c.seqlen_q = c.seqlen_k = 64;
  CaseTensors host(c);
  GpuRun gpu(host);
  gpu.args.config.block_n = 48;
  flashcore::Status st = gpu.run();
  EXPECT_EQ(st.code(), flashcore::StatusCode::kNotSupported);
  EXPECT_NE(st.message().find("block_n=48"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace fctest
