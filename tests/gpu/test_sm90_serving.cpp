// GPU tests of the serving paths (varlen, KV cache, paged KV, append,
// split-KV) on the sm90 serving kernels. The plain path is checked against
// float64 by test_sm90_forward.cpp; here every unsplit serving result must be
// BITWISE equal to the plain call (the plain kernel) on the same sequence
// alone, so the same float64 bound holds; split-KV results (serving calls
// only) are checked against float64 directly. Batch invariance: a sequence
// alone and inside random batches gives the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "flashcore/attention.h"
#include "gpu_case.h"
#include "api/validation.h"
#include "sm90/kernel_registry.h"
#include "sm90/tile_list.h"
#include "sm90/tile_list_plan.h"

namespace fctest {
namespace {

using flashcore::AttentionArgs;
using flashcore::Device;

struct DeviceInts {
  int32_t* ptr = nullptr;
  explicit DeviceInts(const std::vector<int32_t>& v) {
    cudaMalloc(&ptr, std::max<size_t>(1, v.size()) * sizeof(int32_t));
    cudaMemcpy(ptr, v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice);
  }
  ~DeviceInts() { cudaFree(ptr); }
  DeviceInts(const DeviceInts&) = delete;
  DeviceInts& operator=(const DeviceInts&) = delete;
};

struct Workspace {
  void* ptr = nullptr;
  void attach(AttentionArgs& a) {
    int64_t bytes = 0;
    ASSERT_TRUE(flashcore::attention_workspace_size(a, &bytes).ok());
    if (bytes > 0) {
      cudaFree(ptr);
      ASSERT_EQ(cudaMalloc(&ptr, size_t(bytes)), cudaSuccess);
      a.workspace = ptr;
      a.workspace_bytes = bytes;
    }
  }
  ~Workspace() { cudaFree(ptr); }
};

// A workspace allocator (what the Python bindings pass) that counts its calls.
struct CountingAlloc {
  int calls = 0;
  int64_t bytes = 0;
  bool fail = false;
  void* ptr = nullptr;
  static void* alloc(void* self, int64_t bytes) {
    auto* c = static_cast<CountingAlloc*>(self);
    ++c->calls;
    c->bytes = bytes;
    if (c->fail) return nullptr;
    cudaFree(c->ptr);
    c->ptr = nullptr;
    return cudaMalloc(&c->ptr, size_t(bytes)) == cudaSuccess ? c->ptr : nullptr;
  }
  ~CountingAlloc() { cudaFree(ptr); }
};

// One sequence: q (1, Hq, Sq, D), k/v (1, Hkv, Sk, D), host copies.
struct Seq {
  std::shared_ptr<HostTensor> q, k, v;  // shared: a sequence may sit in several batches
  int64_t sq, sk;
};

struct Shape {
  DType dtype = DType::kBFloat16;
  int64_t hq = 4, hkv = 2, d = 128;
  bool causal = false;
  int64_t window_left = -1;
};

Seq make_seq(const Shape& s, int64_t sq, int64_t sk, std::mt19937& rng) {
  Seq x{std::make_shared<HostTensor>(s.dtype, 1, s.hq, sq, s.d), std::make_shared<HostTensor>(s.dtype, 1, s.hkv, sk, s.d),
        std::make_shared<HostTensor>(s.dtype, 1, s.hkv, sk, s.d), sq, sk};
  x.q->fill_random(rng);
  x.k->fill_random(rng);
  x.v->fill_random(rng);
  return x;
}

void set_mask(const Shape& s, AttentionArgs& a) {
  a.causal = s.causal;
  a.window_left = s.window_left;
}

struct Result {
  std::vector<double> out;  // (Hq, Sq, D) of one sequence
  std::vector<double> lse;  // (Hq, Sq)
};

// One call (plain or serving): workspace, poisoned outputs, the call, the results.
// `kernel`: that compiled kernel instead of dispatch's (an unsplit call).
// `alloc`: no workspace attached, attention_forward asks it for one.
void run_call(AttentionArgs& a, int num_splits, DeviceTensor& dout, DeviceTensor& dlse, std::vector<double>& o,
              std::vector<double>& l, bool workspace = true, const flashcore::sm90::KernelEntry* kernel = nullptr,
              CountingAlloc* alloc = nullptr) {
  a.config.num_splits = num_splits;
  Workspace ws;
  if (workspace && alloc == nullptr) ws.attach(a);
  dout.poison();
  dlse.poison();
  flashcore::Problem p;
  flashcore::Status st = kernel != nullptr  ? flashcore::validate(a, &p)
                         : alloc != nullptr ? flashcore::attention_forward(a, nullptr, &CountingAlloc::alloc, alloc)
                                            : flashcore::attention_forward(a);
  if (st.ok() && kernel != nullptr) st = flashcore::sm90::launch_plain(*kernel, a, p, nullptr);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  o = dout.to_vector();
  l = dlse.to_vector();
}

// num_splits: config.num_splits of the call (0: split-KV as dispatch
// decides, 1: never split: the plain kernel, to which unsplit serving
// results are compared).
constexpr int kSplitDefault = 0, kNoSplit = 1;

// The plain call on one sequence alone. Calls of at most 64 query rows split
// their keys as serving calls do (src/sm90/split_calls.h): across CTAs with
// a workspace, in one CTA without.
//
// Head dim 256: serving calls run 64-key blocks whatever the lengths
// (tuning_table.h tuned_block_n), plain calls 80 from 2k keys (4k with a
// mask); the plain twin is asked for 64 keys, which changes nothing below
// those lengths.
Result run_plain(const Shape& s, const Seq& x, int num_splits = kNoSplit, bool workspace = true) {
  HostTensor out(s.dtype, 1, s.hq, x.sq, s.d);
  HostTensor lse = make_lse(1, s.hq, x.sq);
  DeviceTensor q(*x.q), k(*x.k), v(*x.v), o(out), l(lse);
  AttentionArgs a;
  a.q = q.view, a.k = k.view, a.v = v.view, a.out = o.view, a.lse = l.view;
  set_mask(s, a);
  if (s.d == 256) a.config.block_n = 64;
  Result r;
  run_call(a, num_splits, o, l, r.out, r.lse, workspace);
  return r;
}

// Rows [row0, row0 + rows) of head-major (1, H, S, D) data of a packed tensor.
Result slice_rows(const std::vector<double>& out, const std::vector<double>& lse, int64_t heads, int64_t total,
                  int64_t d, int64_t row0, int64_t rows) {
  Result r;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t c = 0; c < d; ++c) r.out.push_back(out[(h * total + row0 + i) * d + c]);
      r.lse.push_back(lse[h * total + row0 + i]);
    }
  }
  return r;
}

void expect_bitwise(const Result& got, const Result& want, const char* what, int seq) {
  ASSERT_EQ(got.out.size(), want.out.size());
  int64_t bad = 0;
  for (size_t i = 0; i < got.out.size(); ++i) bad += !(got.out[i] == want.out[i]);
  for (size_t i = 0; i < got.lse.size(); ++i) bad += !(got.lse[i] == want.lse[i]);
  EXPECT_EQ(bad, 0) << what << ": sequence " << seq << " differs from the plain call in " << bad << " values";
}

// Varlen: all sequences packed (THD); each compared to its plain call.
// workspace = false: none (a call that then needs one for its split is an
// error; one that would hold a tile list runs without it).
std::vector<Result> run_varlen(const Shape& s, const std::vector<Seq>& seqs, int num_splits = kSplitDefault,
                               const flashcore::sm90::KernelEntry* kernel = nullptr, bool workspace = true,
                               CountingAlloc* alloc = nullptr) {
  int64_t total_q = 0, total_k = 0, max_q = 0, max_k = 0;
  std::vector<int32_t> cu_q{0}, cu_k{0};
  for (const Seq& x : seqs) {
    total_q += x.sq, total_k += x.sk;
    max_q = std::max(max_q, x.sq), max_k = std::max(max_k, x.sk);
    cu_q.push_back(int32_t(total_q)), cu_k.push_back(int32_t(total_k));
  }
  HostTensor q(s.dtype, 1, s.hq, total_q, s.d, Layout::kBSHD), k(s.dtype, 1, s.hkv, total_k, s.d, Layout::kBSHD),
      v(s.dtype, 1, s.hkv, total_k, s.d, Layout::kBSHD), out(s.dtype, 1, s.hq, total_q, s.d, Layout::kBSHD);
  HostTensor lse = make_lse(1, s.hq, total_q);
  for (size_t b = 0; b < seqs.size(); ++b) {
    seqs[b].q->for_each_index([&](int64_t, int64_t h, int64_t i, int64_t c) {
      q.set(0, h, cu_q[b] + i, c, seqs[b].q->get(0, h, i, c));
    });
    seqs[b].k->for_each_index([&](int64_t, int64_t h, int64_t i, int64_t c) {
      k.set(0, h, cu_k[b] + i, c, seqs[b].k->get(0, h, i, c));
      v.set(0, h, cu_k[b] + i, c, seqs[b].v->get(0, h, i, c));
    });
  }
  DeviceTensor dq(q), dk(k), dv(v), dout(out), dlse(lse);
  DeviceInts dcq(cu_q), dck(cu_k);
  AttentionArgs a;
  a.q = dq.view, a.k = dk.view, a.v = dv.view, a.out = dout.view, a.lse = dlse.view;
  set_mask(s, a);
  a.cu_seqlens_q = dcq.ptr, a.cu_seqlens_k = dck.ptr;
  a.num_seqs = int64_t(seqs.size()), a.max_seqlen_q = max_q, a.max_seqlen_k = max_k;
  std::vector<double> o, l;
  run_call(a, num_splits, dout, dlse, o, l, workspace, kernel, alloc);
  std::vector<Result> r;
  for (size_t b = 0; b < seqs.size(); ++b) r.push_back(slice_rows(o, l, s.hq, total_q, s.d, cu_q[b], seqs[b].sq));
  return r;
}

// KV cache: q (B, Hq, Sq, D) (all sequences share Sq); each sequence's k/v
// are its cache (the last `append` rows come in through k_new/v_new).
// page_size 0: contiguous cache; else a pool of shuffled pages.
std::vector<Result> run_kvcache(const Shape& s, const std::vector<Seq>& seqs, int64_t page_size, int64_t append,
                                std::mt19937& rng, int num_splits = kSplitDefault) {
  int64_t const B = int64_t(seqs.size()), sq = seqs[0].sq;
  int64_t max_k = 0;
  for (const Seq& x : seqs) {
    if (x.sq != sq) throw std::invalid_argument("run_kvcache: every sequence needs the same query length");
    max_k = std::max(max_k, x.sk);
  }
  int64_t const cap = page_size ? (max_k + page_size - 1) / page_size * page_size + page_size : max_k + 7;
  int64_t const pages_per_seq = page_size ? cap / page_size : 0;
  int64_t const num_pages = page_size ? B * pages_per_seq + 3 : 0;
  HostTensor q(s.dtype, B, s.hq, sq, s.d, Layout::kBSHD), out(s.dtype, B, s.hq, sq, s.d, Layout::kBSHD);
  HostTensor lse = make_lse(B, s.hq, sq);
  int64_t const slots = page_size ? num_pages : B, rows = page_size ? page_size : cap;
  HostTensor kc(s.dtype, slots, s.hkv, rows, s.d, Layout::kBSHD), vc(s.dtype, slots, s.hkv, rows, s.d, Layout::kBSHD);
  kc.fill_random(rng);  // stale cache contents past each sequence: finite, never attended
  vc.fill_random(rng);
  HostTensor kn(s.dtype, B, s.hkv, std::max<int64_t>(append, 1), s.d), vn(s.dtype, B, s.hkv, std::max<int64_t>(append, 1), s.d);
  std::vector<int32_t> lens(B), table;
  std::vector<int32_t> perm(num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  if (page_size) table.assign(B * pages_per_seq, 0);
  for (int64_t b = 0; b < B; ++b) {
    lens[b] = int32_t(seqs[b].sk - append);
    for (int64_t p = 0; p < pages_per_seq; ++p) table[b * pages_per_seq + p] = perm[b * pages_per_seq + p];
    seqs[b].q->for_each_index([&](int64_t, int64_t h, int64_t i, int64_t c) { q.set(b, h, i, c, seqs[b].q->get(0, h, i, c)); });
    seqs[b].k->for_each_index([&](int64_t, int64_t h, int64_t j, int64_t c) {
      double kv = seqs[b].k->get(0, h, j, c), vv = seqs[b].v->get(0, h, j, c);
      if (j >= lens[b]) {  // comes in through the append
        kn.set(b, h, j - lens[b], c, kv);
        vn.set(b, h, j - lens[b], c, vv);
        return;
      }
      int64_t slot = b, row = j;
      if (page_size) slot = table[b * pages_per_seq + j / page_size], row = j % page_size;
      kc.set(slot, h, row, c, kv);
      vc.set(slot, h, row, c, vv);
    });
  }
  DeviceTensor dq(q), dk(kc), dv(vc), dout(out), dlse(lse), dkn(kn), dvn(vn);
  DeviceInts dlens(lens), dtable(page_size ? table : std::vector<int32_t>{0});
  AttentionArgs a;
  a.q = dq.view, a.k = dk.view, a.v = dv.view, a.out = dout.view, a.lse = dlse.view;
  set_mask(s, a);
  a.cache_seqlens = dlens.ptr;
  if (page_size) {
    a.block_table = dtable.ptr;
    a.block_table_stride = pages_per_seq;
    a.max_pages_per_seq = pages_per_seq;
  }
  if (append) a.k_new = dkn.view, a.v_new = dvn.view;
  std::vector<double> o, l;
  run_call(a, num_splits, dout, dlse, o, l);
  std::vector<Result> r(B);
  for (int64_t b = 0; b < B; ++b) {
    r[b].out.assign(o.begin() + b * s.hq * sq * s.d, o.begin() + (b + 1) * s.hq * sq * s.d);
    r[b].lse.assign(l.begin() + b * s.hq * sq, l.begin() + (b + 1) * s.hq * sq);
  }
  return r;
}

std::vector<Seq> make_batch(const Shape& s, const std::vector<std::pair<int64_t, int64_t>>& lens, std::mt19937& rng) {
  std::vector<Seq> v;
  for (auto [sq, sk] : lens) v.push_back(make_seq(s, sq, sk, rng));
  return v;
}

TEST(Sm90Serving, VarlenMatchesPlainCallsBitwise) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(data_seed());
  for (Shape s : {Shape{DType::kBFloat16, 4, 2, 128, false}, Shape{DType::kFloat16, 8, 8, 64, true},
                  Shape{DType::kFloat16, 4, 1, 96, false, 100}, Shape{DType::kBFloat16, 4, 2, 256, true},
                  Shape{DType::kFloat16, 2, 1, 256, false}}) {
    std::vector<Seq> seqs = make_batch(s, {{1, 1}, {17, 300}, {129, 129}, {0, 5}, {1, 4097}, {300, 17}, {64, 1000}}, rng);
    std::vector<Result> got = run_varlen(s, seqs, kNoSplit);
    for (size_t b = 0; b < seqs.size(); ++b) expect_bitwise(got[b], run_plain(s, seqs[b]), "varlen", int(b));
  }
}

// Causal serving calls of more tiles than SMs deal each sequence's query
// blocks in pairs from its own length (tile_scheduler.h, seq_info.h
// tile_work pair_blocks): varlen with an odd block count (9) and mixed key
// lengths, a sliding window, chunked prefill over a KV cache (an even
// count, 6), and query lengths that differ. With a workspace all of them
// take a tile list (tile_list_plan.h), whose pairs are consecutive
// entries; without one, the same query lengths pair in the launch's own
// units (tuning_table.h serving_costs_vary_by_tile: an even unit count,
// one empty unit a head when the count is odd) and query lengths that
// differ keep round robin. Every sequence keeps the bits of its plain call
// either way.
TEST(Sm90Serving, CausalServingCallsPairBlocksWithinEachSequence) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(data_seed() + 7);
  for (Shape s : {Shape{DType::kBFloat16, 16, 4, 64, true}, Shape{DType::kFloat16, 16, 16, 128, true},
                  Shape{DType::kBFloat16, 8, 8, 256, true}, Shape{DType::kFloat16, 16, 8, 128, true, 300}}) {
    SCOPED_TRACE("d " + std::to_string(s.d) + " window " + std::to_string(s.window_left));
    uint64_t const before = flashcore::sm90::serving_pair_launches();
    // Every call here but the last takes a tile list (tile_list_plan.h:
    // key or query lengths that differ), whose pairs are consecutive entries.
    uint64_t const lists = flashcore::sm90::tile_list_launches();
    std::vector<Seq> same = make_batch(s, {{1100, 1100}, {1100, 1500}, {1100, 3000}, {1100, 1100}, {1100, 2222}}, rng);
    // Split-KV as dispatch decides: no sequence of the batch can have 64 rows
    // or fewer, so it plans no chunks (split_calls.h may_split_keys), whose
    // count (up to 12 at 3000 keys) would exceed the 9 query blocks.
    std::vector<Result> got = run_varlen(s, same, kSplitDefault);
    EXPECT_EQ(flashcore::sm90::serving_pair_launches(), before + 1) << "varlen tiles not dealt in pairs";
    EXPECT_EQ(flashcore::sm90::tile_list_launches(), lists + 1) << "varlen key lengths that differ without a list";
    for (size_t b = 0; b < same.size(); ++b) expect_bitwise(got[b], run_plain(s, same[b]), "varlen", int(b));
    // The launch's own pairs (no workspace for a list): 9 blocks, one empty
    // unit a head.
    got = run_varlen(s, same, kSplitDefault, nullptr, /*workspace=*/false);
    EXPECT_EQ(flashcore::sm90::serving_pair_launches(), before + 2) << "unlisted varlen tiles not dealt in pairs";
    EXPECT_EQ(flashcore::sm90::tile_list_launches(), lists + 1) << "a tile list without workspace";
    for (size_t b = 0; b < same.size(); ++b) expect_bitwise(got[b], run_plain(s, same[b]), "unlisted varlen", int(b));
    // 6 blocks of 128 rows (an even count: no empty unit), 4 sequences: more
    // tiles than SMs at 8 heads too.
    std::vector<Seq> chunks = make_batch(s, {{700, 3000}, {700, 800}, {700, 701}, {700, 1500}}, rng);
    std::vector<Result> cached = run_kvcache(s, chunks, 0, 0, rng, kNoSplit);
    EXPECT_EQ(flashcore::sm90::serving_pair_launches(), before + 3) << "KV-cache tiles not dealt in pairs";
    EXPECT_EQ(flashcore::sm90::tile_list_launches(), lists + 2) << "KV-cache prefill without a list";
    for (size_t b = 0; b < chunks.size(); ++b) expect_bitwise(cached[b], run_plain(s, chunks[b]), "cache", int(b));
    // Mixed query lengths pair through a tile list too (no empty units); a
    // call without one (no workspace for it) keeps round robin.
    std::vector<Seq> mixed =
        make_batch(s, {{1000, 1000}, {129, 129}, {2049, 2049}, {1, 1}, {700, 1500}, {384, 384}, {63, 63}}, rng);
    std::vector<Result> rr = run_varlen(s, mixed, kNoSplit);
    EXPECT_EQ(flashcore::sm90::tile_list_launches(), lists + 3) << "mixed query lengths without a tile list";
    EXPECT_EQ(flashcore::sm90::serving_pair_launches(), before + 4) << "listed mixed query lengths not paired";
    for (size_t b = 0; b < mixed.size(); ++b) expect_bitwise(rr[b], run_plain(s, mixed[b]), "mixed varlen", int(b));
    rr = run_varlen(s, mixed, kNoSplit, nullptr, /*workspace=*/false);
    EXPECT_EQ(flashcore::sm90::tile_list_launches(), lists + 3) << "a tile list without workspace";
    EXPECT_EQ(flashcore::sm90::serving_pair_launches(), before + 4) << "mixed query lengths paired without a list";
    for (size_t b = 0; b < mixed.size(); ++b) expect_bitwise(rr[b], run_plain(s, mixed[b]), "unlisted", int(b));
  }
}

// Varlen calls of mixed query lengths and KV-cache prefill over caches of
// different lengths, of more launch tiles than SMs, run with a tile list
// (tile_list_plan.h: only the tiles with work, costliest sequence first):
// every sequence keeps the bits of its plain call. Head
// dims 64 (128- and 64-row serving tiles), 96, 128 and 256 (64-key blocks),
// causal, unmasked, a sliding window with GQA; sequences without keys or
// rows, longer in queries than in keys; and with split-KV as dispatch
// decides, where the short sequences split across CTAs (the list after the
// partials in the workspace) and are compared with their own varlen calls
// alone (batch invariance; a call of one sequence takes no list).
TEST(Sm90Serving, TileListsKeepEverySequencesBits) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(data_seed() + 17);
  for (Shape s : {Shape{DType::kBFloat16, 16, 16, 64, true}, Shape{DType::kFloat16, 8, 2, 64, false},
                  Shape{DType::kFloat16, 8, 8, 96, true}, Shape{DType::kBFloat16, 16, 4, 128, true, 300},
                  Shape{DType::kFloat16, 16, 16, 128, false}, Shape{DType::kBFloat16, 8, 8, 256, true}}) {
    SCOPED_TRACE("d " + std::to_string(s.d) + " causal " + std::to_string(s.causal) + " window " +
                 std::to_string(s.window_left));
    std::vector<Seq> seqs = make_batch(
        s, {{1500, 1500}, {129, 2000}, {700, 300}, {300, 0}, {0, 40}, {2600, 2600}, {65, 65}, {900, 1200}}, rng);
    uint64_t const before = flashcore::sm90::tile_list_launches();
    std::vector<Result> got = run_varlen(s, seqs, kNoSplit);
    EXPECT_EQ(flashcore::sm90::tile_list_launches(), before + 1) << "no tile list";
    for (size_t b = 0; b < seqs.size(); ++b) expect_bitwise(got[b], run_plain(s, seqs[b]), "listed", int(b));
    // Chunked prefill over a KV cache: the same query rows, caches of
    // different lengths, contiguous and paged, with an append.
    std::vector<Seq> chunks = make_batch(s, {{600, 3000}, {600, 700}, {600, 5000}, {600, 1200}, {600, 600}}, rng);
    for (int64_t page : {int64_t(0), int64_t(64)}) {
      std::vector<Result> cached = run_kvcache(s, chunks, page, page ? 3 : 0, rng, kSplitDefault);
      EXPECT_EQ(flashcore::sm90::tile_list_launches(), before + (page ? 3 : 2)) << "KV-cache prefill, page " << page;
      for (size_t b = 0; b < chunks.size(); ++b) {
        expect_bitwise(cached[b], run_plain(s, chunks[b]), page ? "listed paged cache" : "listed cache", int(b));
      }
    }
    if (s.d == 96) continue;  // (no split-KV at head dim 96)
    std::vector<Seq> with_short = seqs;
    for (auto [sq, sk] : {std::pair<int64_t, int64_t>{1, 3000}, {17, 5000}, {64, 64}}) {
      with_short.push_back(make_seq(s, sq, sk, rng));
    }
    got = run_varlen(s, with_short, kSplitDefault);
    EXPECT_EQ(flashcore::sm90::tile_list_launches(), before + 4) << "no tile list beside split partials";
    for (size_t b = 0; b < with_short.size(); ++b) {
      Result const want = with_short[b].sq <= 64 ? run_varlen(s, {with_short[b]}, kSplitDefault)[0]
                                                 : run_plain(s, with_short[b]);
      expect_bitwise(got[b], want, "listed with splits", int(b));
    }
    EXPECT_EQ(flashcore::sm90::tile_list_launches(), before + 4) << "a call of one sequence took a tile list";
  }
}

// The builder's tail (src/sm90/tile_list.cu, tile_list_plan.h): every CTA
// walks its tiles as the attention kernel's scheduler does (tile_scheduler.h),
// and every list entry is dealt exactly once, with and without pairs; a
// batch whose round robin leaves some CTAs more work (ramps of 16 causal
// sequences at head dim 256's 128 x 64 tile and 8 heads: 1.17x the mean
// work in tools/tile-deal-sim) gets a tail with the gate at 1/64, and the
// same one every call. (The tail is off in dispatch unless
// FLASHCORE_TILE_LIST_TAIL is set; scripts/gpu-check runs the serving bits
// with it on.)
TEST(Sm90Serving, TileListTailDealsEveryEntryOnce) {
  SKIP_WITHOUT_GPU();
  using flashcore::sm90::kTileListNoTail;
  int constexpr kGrid = 132, kRounds = flashcore::sm90::kTileListTailMaxRounds, kHeads = 8;
  struct Case {
    bool causal;
    std::vector<int32_t> lengths;
    bool engages;
  };
  std::vector<int32_t> ramp, mixed;
  for (int j = 0; j < 16; ++j) ramp.push_back(1024 * (j + 1) / 16);
  for (int j = 0; j < 24; ++j) mixed.push_back(100 + (j * 977) % 3000);
  for (const Case& c : {Case{true, ramp, true}, Case{false, mixed, false}, Case{true, mixed, false}}) {
    SCOPED_TRACE(std::string(c.causal ? "causal" : "unmasked") + ", " + std::to_string(c.lengths.size()) + " seqs");
    int const batch = int(c.lengths.size());
    std::vector<int32_t> cu(1, 0);
    for (int32_t l : c.lengths) cu.push_back(cu.back() + l);
    int32_t const longest = *std::max_element(c.lengths.begin(), c.lengths.end());
    int const units = (longest + 127) / 128, capacity = units * batch * kHeads;
    int64_t const tail_ints = flashcore::sm90::tile_list_tail_ints(kRounds, kGrid);
    DeviceInts const d_cu(cu), d_buf(std::vector<int32_t>(size_t(1 + capacity + tail_ints), -1));
    flashcore::sm90::TileListParams lp;
    lp.seq.seqlen_q = lp.seq.seqlen_k = longest;
    lp.seq.window_left = 1 << 30;
    lp.seq.window_right = c.causal ? 0 : 1 << 30;
    lp.seq.cu_seqlens_q = lp.seq.cu_seqlens_k = d_cu.ptr;
    lp.seq.total_q = lp.seq.total_k = cu.back();
    lp.seq.num_m_blocks = units;
    lp.batch = batch;
    lp.heads = kHeads;
    lp.num_units = units;
    lp.capacity = capacity;
    lp.list = d_buf.ptr;
    lp.paired = c.causal;
    lp.tail = d_buf.ptr + 1 + capacity;
    lp.tail_rounds = kRounds;
    lp.grid = kGrid;
    lp.tail_min_excess = 1;  // deal wherever the greedy finishes earlier
    std::vector<int32_t> first, again(size_t(1 + capacity + tail_ints));
    for (std::vector<int32_t>* out : {&first, &again}) {
      FC_CUDA_OK(cudaMemset(d_buf.ptr, 0xFF, (1 + capacity + tail_ints) * 4));
      ASSERT_TRUE(flashcore::sm90::launch_tile_list(lp, 128, 64, nullptr).ok());
      FC_CUDA_OK(cudaDeviceSynchronize());
      out->resize(size_t(1 + capacity + tail_ints));
      FC_CUDA_OK(cudaMemcpy(out->data(), d_buf.ptr, out->size() * 4, cudaMemcpyDeviceToHost));
    }
    int const count = first[0];
    int expected = 0;
    for (int32_t l : c.lengths) expected += (l + 127) / 128 * kHeads;
    ASSERT_EQ(count, expected);
    int32_t const* tail = first.data() + 1 + capacity;
    int const first_k = tail[0], rows = first_k == kTileListNoTail ? 0 : tail[1];
    if (c.engages) EXPECT_NE(first_k, kTileListNoTail) << "no tail";
    // The same list, and where there is one the same tail, every call.
    EXPECT_TRUE(std::equal(first.begin(), first.begin() + 1 + count, again.begin()));
    EXPECT_EQ(again[1 + capacity], first_k);
    if (first_k != kTileListNoTail) {
      EXPECT_TRUE(std::equal(tail, tail + 2 + rows * kGrid, again.data() + 1 + capacity));
    }
    std::vector<int> dealt(size_t(count), 0);
    for (int b = 0; b < kGrid; ++b) {
      for (int k = 0;; ++k) {
        int t = flashcore::sm90::listed_tile_at(k, b, kGrid, c.causal);
        if (k >= first_k) t = k - first_k < rows ? tail[2 + (k - first_k) * kGrid + b] : kTileListNoTail;
        if (t >= count) break;
        ASSERT_GE(t, 0);
        ++dealt[size_t(t)];
      }
    }
    EXPECT_EQ(std::count(dealt.begin(), dealt.end(), 1), count) << "entries dealt other than once";
  }
}

// A varlen call whose sequences all have the same query and key lengths is
// a dense batch (src/sm90/dense_varlen.h): dispatch runs it on the plain
// kernels (head dim 64's 192-row multicast tile, causal issue-ahead, head dim
// 256 with the serving kernels' 64 keys from 2k keys, query and key lengths
// that differ, GQA, a sliding window) with every sequence's plain bits. Batches
// with a sequence shorter than the bound, or of at most 64 rows (which may
// split their keys), stay on the serving kernels.
TEST(Sm90Serving, UniformVarlenRunsAsADenseBatch) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(data_seed() + 11);
  struct Case {
    Shape s;
    int64_t sq, sk, seqs;
  };
  for (const Case& c : {Case{Shape{DType::kBFloat16, 16, 16, 64, false}, 512, 512, 8},
                        Case{Shape{DType::kBFloat16, 16, 4, 64, true}, 512, 512, 6},
                        Case{Shape{DType::kFloat16, 8, 8, 128, false}, 300, 700, 3},
                        Case{Shape{DType::kFloat16, 16, 8, 128, true, 300}, 1100, 1100, 4},
                        Case{Shape{DType::kBFloat16, 8, 2, 256, false}, 200, 2100, 3},
                        Case{Shape{DType::kFloat16, 4, 4, 96, true}, 65, 65, 5}}) {
    SCOPED_TRACE("d " + std::to_string(c.s.d) + " sq " + std::to_string(c.sq) + " sk " + std::to_string(c.sk));
    uint64_t const before = flashcore::sm90::dense_varlen_calls();
    std::vector<Seq> seqs = make_batch(c.s, std::vector<std::pair<int64_t, int64_t>>(c.seqs, {c.sq, c.sk}), rng);
    std::vector<Result> got = run_varlen(c.s, seqs, kSplitDefault);
    EXPECT_EQ(flashcore::sm90::dense_varlen_calls(), before + 1) << "not run as a dense batch";
    for (size_t b = 0; b < seqs.size(); ++b) expect_bitwise(got[b], run_plain(c.s, seqs[b]), "dense varlen", int(b));
  }
  Shape const s{DType::kBFloat16, 8, 2, 128, true};
  uint64_t const before = flashcore::sm90::dense_varlen_calls();
  for (const std::vector<std::pair<int64_t, int64_t>>& lens :
       {std::vector<std::pair<int64_t, int64_t>>{{300, 300}, {299, 300}, {300, 300}},
        std::vector<std::pair<int64_t, int64_t>>{{300, 300}, {300, 299}},
        std::vector<std::pair<int64_t, int64_t>>{{64, 3000}, {64, 3000}}}) {
    std::vector<Seq> seqs = make_batch(s, lens, rng);
    std::vector<Result> got = run_varlen(s, seqs, kSplitDefault);
    for (size_t b = 0; b < seqs.size(); ++b) {
      if (seqs[b].sq > 64) expect_bitwise(got[b], run_plain(s, seqs[b]), "serving varlen", int(b));
    }
  }
  EXPECT_EQ(flashcore::sm90::dense_varlen_calls(), before) << "a batch that is not dense ran as one";
}

// The serving kernels without ping-pong turns (kernel_traits.h kNoTurns_,
// tools/gen_sm90_kernels.py SERVING_NO_TURNS_TILES; dispatch takes them from
// 1k keys, tuning_table.h tuned_no_turns) give every sequence the bits of
// their twins with turns and of its plain call: varlen batches of mixed
// lengths (a sequence with no keys, one longer in queries than in keys),
// causal, a sliding window with GQA, unmasked, with more tiles than SMs.
TEST(Sm90Serving, NoTurnsServingKernelsMatchTheirTwinsWithTurns) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(data_seed() + 13);
  int n = 0, tested = 0;
  const flashcore::sm90::KernelEntry* table = flashcore::sm90::kernel_table(&n);
  for (int i = 0; i < n; ++i) {
    const flashcore::sm90::KernelEntry& e = table[i];
    if (!e.serving || !e.no_turns) continue;
    const flashcore::sm90::KernelEntry* twin =
        flashcore::sm90::find_kernel(e.dtype, e.head_dim, e.block_m, e.block_n, true, 1, false, false, 1);
    ASSERT_NE(twin, nullptr) << e.name << ": no twin with turns";
    ++tested;
    for (Shape s : {Shape{e.dtype, 16, 16, e.head_dim, true}, Shape{e.dtype, 16, 4, e.head_dim, true, 300},
                    Shape{e.dtype, 8, 8, e.head_dim, false}}) {
      SCOPED_TRACE(std::string(e.name) + " causal " + std::to_string(s.causal) + " window " +
                   std::to_string(s.window_left));
      std::vector<Seq> seqs =
          make_batch(s, {{1100, 1100}, {129, 2000}, {700, 300}, {300, 0}, {1000, 1500}, {65, 65}}, rng);
      std::vector<Result> got = run_varlen(s, seqs, kNoSplit, &e);
      std::vector<Result> want = run_varlen(s, seqs, kNoSplit, twin);
      for (size_t b = 0; b < seqs.size(); ++b) {
        expect_bitwise(got[b], want[b], "without turns against with turns", int(b));
        expect_bitwise(got[b], run_plain(s, seqs[b]), "without turns against the plain call", int(b));
      }
    }
  }
  EXPECT_GT(tested, 0) << "no serving kernel without turns compiled";
}

TEST(Sm90Serving, KvCacheContiguousAndPagedMatchPlainCallsBitwise) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(data_seed() + 1);
  // Page sizes that are not multiples of 64 are read in 16-key chunks, the
  // others in 64-key chunks (kernel_traits.h PageChunk); 48 and 192 put page
  // boundaries inside a 128-key block.
  for (int64_t page : {int64_t(0), int64_t(16), int64_t(32), int64_t(48), int64_t(64), int64_t(128), int64_t(192),
                       int64_t(256)}) {
    for (int64_t append : {int64_t(0), int64_t(1), int64_t(3)}) {
      for (Shape s : {Shape{DType::kBFloat16, 8, 2, 128, true}, Shape{DType::kFloat16, 4, 4, 64, true},
                      Shape{DType::kBFloat16, 4, 1, 96, false}, Shape{DType::kFloat16, 4, 2, 256, true}}) {
        int64_t const sq = append ? append : 1;
        std::vector<Seq> seqs = make_batch(s, {{sq, 5 + append}, {sq, 700}, {sq, 129 + append}, {sq, 3000}}, rng);
        std::vector<Result> got = run_kvcache(s, seqs, page, append, rng, kNoSplit);
        for (size_t b = 0; b < seqs.size(); ++b) {
          SCOPED_TRACE("page " + std::to_string(page) + " append " + std::to_string(append) + " d " + std::to_string(s.d));
          expect_bitwise(got[b], run_plain(s, seqs[b]), page ? "paged cache" : "contiguous cache", int(b));
        }
      }
    }
  }
}

void expect_matches_float64(const Shape& s, const Seq& x, const Result& got) {
  NaiveParams p;
  p.heads_q = s.hq, p.heads_kv = s.hkv, p.seqlen_q = x.sq, p.seqlen_k = x.sk, p.head_dim = s.d;
  p.scale = 1.0 / std::sqrt(double(s.d));
  p.causal = s.causal;
  p.window_left = s.window_left;
  NaiveResult ref = naive_attention(x.q->to_vector(), x.k->to_vector(), x.v->to_vector(), p);
  EXPECT_LT(rel_frobenius(got.out, ref.out), tolerance(s.dtype)) << "sq " << x.sq << " sk " << x.sk << " d " << s.d;
  EXPECT_LT(lse_max_rel_err(got.lse, ref.lse), 1e-3) << "sq " << x.sq << " sk " << x.sk << " d " << s.d;
}

// Split-KV decode and short prefill chunks (<= 64 rows after GQA packing)
// against float64 directly: varlen alone, and in a contiguous KV cache.
TEST(Sm90Serving, SplitKvMatchesFloat64) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(data_seed() + 2);
  for (Shape s : {Shape{DType::kBFloat16, 32, 8, 128, true}, Shape{DType::kFloat16, 16, 16, 64, false},
                  Shape{DType::kBFloat16, 4, 4, 96, true}, Shape{DType::kFloat16, 8, 8, 64, true, 500},
                  Shape{DType::kBFloat16, 16, 8, 256, true}}) {
    // 33333 keys: chunks sized by the length (split_policy.h). Head dim 256
    // splits across CTAs only (no 64-row tile to fold in) and its combine
    // spreads a row over four warps.
    for (auto [sq, sk] : {std::pair<int64_t, int64_t>{1, 4096}, {1, 777}, {3, 2000}, {60, 3001}, {1, 33333}}) {
      Seq x = make_seq(s, sq, sk, rng);
      expect_matches_float64(s, x, run_varlen(s, {x})[0]);
      expect_matches_float64(s, x, run_kvcache(s, {x}, 0, 0, rng)[0]);
    }
    // The num_splits override: 261 chunks of 128 keys, more than one load
    // round of the combine kernel for every head dim, with a partial last round.
    Seq x = make_seq(s, 1, 33333, rng);
    expect_matches_float64(s, x, run_kvcache(s, {x}, 0, 0, rng, 261)[0]);
  }
}

// Each sequence alone vs inside 20 random batches of mixed lengths: bit-identical.
void expect_batch_invariant(const Shape& s, std::mt19937& rng) {
  std::vector<Seq> pool;
  for (int i = 0; i < 8; ++i) {
    int64_t sk = std::uniform_int_distribution<int64_t>(1, 3000)(rng);
    int64_t sq = i % 3 == 0 ? std::uniform_int_distribution<int64_t>(1, std::min<int64_t>(sk, 200))(rng) : 1;
    pool.push_back(make_seq(s, sq, sk, rng));
  }
  std::vector<Result> alone;
  for (const Seq& x : pool) {
    alone.push_back(run_varlen(s, {x})[0]);
  }
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int> idx(pool.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(1 + rng() % pool.size());
    std::vector<Seq> batch;
    for (int i : idx) batch.push_back(pool[i]);
    std::vector<Result> got = run_varlen(s, batch);
    for (size_t j = 0; j < idx.size(); ++j) expect_bitwise(got[j], alone[idx[j]], "varlen batch", idx[j]);
  }
  // Paged decode (one query token each): alone vs random batches.
  std::vector<int> decode;
  for (size_t i = 0; i < pool.size(); ++i) if (pool[i].sq == 1) decode.push_back(int(i));
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int> idx = decode;
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(1 + rng() % decode.size());
    std::vector<Seq> batch;
    for (int i : idx) batch.push_back(pool[i]);
    std::vector<Result> got = run_kvcache(s, batch, 64, 0, rng);
    for (size_t j = 0; j < idx.size(); ++j) expect_bitwise(got[j], alone[idx[j]], "paged decode batch", idx[j]);
  }
}

TEST(Sm90Serving, BatchInvariantVarlenAndPagedDecode) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(data_seed() + 3);
  for (Shape s : {Shape{DType::kBFloat16, 32, 8, 128, true}, Shape{DType::kBFloat16, 16, 8, 256, true}}) {
    SCOPED_TRACE("d " + std::to_string(s.d));
    expect_batch_invariant(s, rng);
  }
}

// Split-KV runs across CTAs (a sequence alone: its chunks fill the GPU) or
// in one CTA (a batch whose sequences alone fill it: splitkv_plan.h
// fold_splits, chunk_fold.h). Both must give the same bits: each sequence of
// a 17-sequence batch against the same sequence alone, contiguous and paged
// caches, decode (GQA-packed and not, a sliding window) and 3- or 20-row
// chunks; and plain calls of the same sequences, with and without a
// workspace. A tile's rows: 1-4 (decode; GQA-packed: the group), 3 and 20,
// so the fold merges one, two and three of the accumulator's warp row
// halves (chunk_fold.h ChunkFold::live: rows 0-7, 8-15 and 16-23).
TEST(Sm90Serving, SplitKvInOneCtaMatchesAcrossCtasBitwise) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(data_seed() + 5);
  for (Shape s : {Shape{DType::kBFloat16, 32, 8, 128, true}, Shape{DType::kFloat16, 16, 16, 64, false},
                  Shape{DType::kBFloat16, 8, 2, 128, true, 700}}) {
    for (int64_t sq : {int64_t(1), int64_t(s.hq == 32 ? 20 : 3)}) {
      // 17 x 8 (KV or query) heads: at least 2 x 132 tiles folded; alone, 8-32.
      std::vector<Seq> seqs;
      for (int64_t sk : {int64_t(5000), int64_t(4096), int64_t(256), int64_t(257), int64_t(3)}) {
        seqs.push_back(make_seq(s, sq, sk, rng));
      }
      while (seqs.size() < 17) seqs.push_back(make_seq(s, sq, std::uniform_int_distribution<int64_t>(3, 5000)(rng), rng));
      for (int64_t page : {int64_t(0), int64_t(64)}) {
        std::vector<Result> batch = run_kvcache(s, seqs, page, 0, rng);
        for (size_t b = 0; b < seqs.size(); ++b) {
          SCOPED_TRACE("d " + std::to_string(s.d) + " sq " + std::to_string(sq) + " sk " + std::to_string(seqs[b].sk) +
                       " page " + std::to_string(page));
          expect_bitwise(batch[b], run_kvcache(s, {seqs[b]}, page, 0, rng)[0], "split-KV in one CTA", int(b));
        }
        expect_matches_float64(s, seqs[0], batch[0]);
      }
      // Plain calls of the same sequences split them the same way: alone
      // with a workspace (across CTAs) and without one (in one CTA).
      for (size_t b : {size_t(0), size_t(1), size_t(3), size_t(9)}) {
        SCOPED_TRACE("plain call, d " + std::to_string(s.d) + " sq " + std::to_string(sq) + " sk " +
                     std::to_string(seqs[b].sk));
        Result const across = run_kvcache(s, {seqs[b]}, 0, 0, rng)[0];
        expect_bitwise(run_plain(s, seqs[b], kSplitDefault, /*workspace=*/true), across, "plain, workspace", int(b));
        expect_bitwise(run_plain(s, seqs[b], kSplitDefault, /*workspace=*/false), across, "plain, none", int(b));
      }
    }
  }
}

// attention_forward with a workspace allocator (what the Python bindings
// use): asked once, for attention_workspace_size's bytes, only by a call that
// splits across CTAs or keeps a tile list (tile_list_plan.h); the same bits
// as a call given that workspace; a null allocation is a clear error.
TEST(Sm90Serving, WorkspaceAllocatorIsAskedOnlyWhenNeeded) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(data_seed() + 9);
  Shape s{DType::kBFloat16, 32, 8, 128, false};
  for (int64_t sq : {int64_t(1), int64_t(200)}) {  // decode splits; 200 rows do not
    Seq const x = make_seq(s, sq, 4096, rng);
    HostTensor out(s.dtype, 1, s.hq, sq, s.d);
    HostTensor lse = make_lse(1, s.hq, sq);
    DeviceTensor q(*x.q), k(*x.k), v(*x.v), o(out), l(lse);
    AttentionArgs a;
    a.q = q.view, a.k = k.view, a.v = v.view, a.out = o.view, a.lse = l.view;
    int64_t want_bytes = -1;
    ASSERT_TRUE(flashcore::attention_workspace_size(a, &want_bytes).ok());
    EXPECT_EQ(want_bytes > 0, sq == 1);
    CountingAlloc alloc;
    o.poison();
    l.poison();
    flashcore::Status st = flashcore::attention_forward(a, nullptr, &CountingAlloc::alloc, &alloc);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(alloc.calls, sq == 1 ? 1 : 0);
    if (sq == 1) EXPECT_EQ(alloc.bytes, want_bytes);
    Result got{o.to_vector(), l.to_vector()};
    expect_bitwise(got, run_plain(s, x, kSplitDefault, /*workspace=*/true), "allocator", 0);
    expect_matches_float64(s, x, got);
    if (sq == 1) {
      CountingAlloc failing;
      failing.fail = true;
      o.poison();
      st = flashcore::attention_forward(a, nullptr, &CountingAlloc::alloc, &failing);
      EXPECT_EQ(st.code(), flashcore::StatusCode::kInvalidArgument);
      EXPECT_NE(st.message().find("workspace allocator"), std::string::npos) << st.message();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (double x : o.to_vector()) ASSERT_TRUE(std::isnan(x)) << "written after a failed allocation";
    }
  }
  // A varlen batch of mixed lengths: its tile list's workspace (beside any
  // split partials' bytes) from the allocator, once.
  Shape const m{DType::kBFloat16, 16, 4, 128, true};
  std::vector<Seq> seqs = make_batch(m, {{900, 900}, {200, 200}, {1500, 1500}, {700, 700}}, rng);
  uint64_t const lists = flashcore::sm90::tile_list_launches();
  CountingAlloc alloc;
  std::vector<Result> got = run_varlen(m, seqs, kSplitDefault, nullptr, /*workspace=*/false, &alloc);
  EXPECT_EQ(alloc.calls, 1);
  EXPECT_GT(alloc.bytes, 0);
  EXPECT_EQ(flashcore::sm90::tile_list_launches(), lists + 1) << "no tile list in the allocated workspace";
  for (size_t b = 0; b < seqs.size(); ++b) expect_bitwise(got[b], run_plain(m, seqs[b]), "allocated list", int(b));
}

// Head dim 256's serving kernel is its 64-key tile: a serving call asked for
// 80 keys (the plain calls' long-sequence tile) gets a clear error naming
// the compiled tiles, and nothing is written.
TEST(Sm90Serving, HeadDim256ServingCallsTakeOnly64KeyBlocks) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(data_seed() + 10);
  Shape s{DType::kBFloat16, 4, 4, 256, false};
  HostTensor q(s.dtype, 1, s.hq, 4, s.d, Layout::kBSHD), k(s.dtype, 1, s.hkv, 4, s.d, Layout::kBSHD);
  HostTensor out(s.dtype, 1, s.hq, 4, s.d, Layout::kBSHD);
  q.fill_random(rng);
  k.fill_random(rng);
  DeviceTensor dq(q), dk(k), dv(k), dout(out);
  DeviceInts cu({0, 4});
  AttentionArgs a;
  a.q = dq.view, a.k = dk.view, a.v = dv.view, a.out = dout.view;
  a.cu_seqlens_q = cu.ptr, a.cu_seqlens_k = cu.ptr, a.num_seqs = 1, a.max_seqlen_q = 4, a.max_seqlen_k = 4;
  a.config.block_n = 80;
  dout.poison();
  flashcore::Status st = flashcore::attention_forward(a);
  EXPECT_EQ(st.code(), flashcore::StatusCode::kNotSupported) << st.message();
  EXPECT_NE(st.message().find("block_m=128 block_n=64"), std::string::npos) << st.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (double x : dout.to_vector()) ASSERT_TRUE(std::isnan(x)) << "written by a refused call";
  a.config.block_n = 0;  // the default: runs
  st = flashcore::attention_forward(a);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (double x : dout.to_vector()) ASSERT_TRUE(std::isfinite(x));
}

// Small serving shapes for compute-sanitizer (scripts/gpu-check runs
// memcheck, racecheck and synccheck on *SanitizerSubset*): varlen tails,
// paged pages of 16 and 64 (16- and 64-key chunks) with append, split-KV
// decode across CTAs (head dims 64, 128 and 256) and in one, causal tiles
// dealt in pairs within each sequence.
TEST(Sm90Serving, SanitizerSubset) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(data_seed() + 4);
  Shape s{DType::kBFloat16, 4, 2, 64, true};
  std::vector<Seq> seqs = make_batch(s, {{1, 600}, {17, 33}, {0, 3}, {70, 70}}, rng);
  std::vector<Result> got = run_varlen(s, seqs, kNoSplit);
  for (size_t b = 0; b < seqs.size(); ++b) expect_bitwise(got[b], run_plain(s, seqs[b]), "varlen", int(b));
  std::vector<Seq> dec = make_batch(s, {{2, 40}, {2, 530}}, rng);
  for (int64_t page : {int64_t(16), int64_t(64)}) {
    std::vector<Result> paged = run_kvcache(s, dec, page, 2, rng);  // the second one splits
    for (size_t b = 0; b < dec.size(); ++b) expect_matches_float64(s, dec[b], paged[b]);
  }
  // Head dim 128: the combine spreads each row over two warps, and a 64-key
  // chunk is two TMA boxes of K.
  Shape const s128{DType::kBFloat16, 8, 2, 128, false};
  std::vector<Seq> dec128 = make_batch(s128, {{3, 530}, {3, 1100}}, rng);  // 12 packed rows each
  std::vector<Result> paged128 = run_kvcache(s128, dec128, 64, 0, rng);  // both split
  for (size_t b = 0; b < dec128.size(); ++b) expect_matches_float64(s128, dec128[b], paged128[b]);
  // The second sequence as a plain call: its chunks in one CTA (no
  // workspace: chunk_fold.h's shared-memory merge) and across CTAs.
  Result const folded = run_plain(s, dec[1], kSplitDefault, /*workspace=*/false);
  expect_matches_float64(s, dec[1], folded);
  expect_bitwise(folded, run_plain(s, dec[1], kSplitDefault, /*workspace=*/true), "plain, in one CTA", 1);
  // Head dim 256 (128-row tiles, 64-key blocks, O in half-width slices):
  // a varlen tail, paged decode over 16-key pages with append, split
  // across CTAs (the combine over four warps a row).
  Shape const s256{DType::kBFloat16, 4, 2, 256, true};
  std::vector<Seq> var256 = make_batch(s256, {{17, 33}, {1, 70}}, rng);
  std::vector<Result> got256 = run_varlen(s256, var256, kNoSplit);
  for (size_t b = 0; b < var256.size(); ++b) {
    expect_bitwise(got256[b], run_plain(s256, var256[b]), "varlen d256", int(b));
  }
  std::vector<Seq> dec256 = make_batch(s256, {{2, 40}, {2, 530}}, rng);
  std::vector<Result> paged256 = run_kvcache(s256, dec256, 16, 2, rng);  // the second one splits
  for (size_t b = 0; b < dec256.size(); ++b) expect_matches_float64(s256, dec256[b], paged256[b]);
  // Causal varlen of equal query lengths and more tiles than SMs: each
  // sequence's blocks dealt in pairs (3 blocks of 128 rows), mixed key
  // lengths: through a tile list (consecutive entries; the builder below).
  Shape const pairs{DType::kFloat16, 16, 16, 64, true};
  uint64_t const before = flashcore::sm90::serving_pair_launches();
  std::vector<Seq> same = make_batch(pairs, {{300, 300}, {300, 301}, {300, 900}, {300, 300}, {300, 555}, {300, 300}}, rng);
  std::vector<Result> paired = run_varlen(pairs, same, kSplitDefault);  // no chunks planned (4 > 3 blocks)
  EXPECT_EQ(flashcore::sm90::serving_pair_launches(), before + 1);
  for (size_t b = 0; b < same.size(); ++b) expect_bitwise(paired[b], run_plain(pairs, same[b]), "paired", int(b));
  // Mixed query lengths: the tile-list builder (tile_list.cu: its scan over
  // the warps in shared memory) and the attention kernel dealing the list in
  // pairs, beside a short sequence split across CTAs (the list after the
  // partials in the workspace).
  uint64_t const lists = flashcore::sm90::tile_list_launches();
  std::vector<Seq> mixed = make_batch(pairs, {{300, 300}, {1, 900}, {700, 700}, {129, 555}, {0, 3}, {450, 450}}, rng);
  std::vector<Result> listed = run_varlen(pairs, mixed, kSplitDefault);
  EXPECT_EQ(flashcore::sm90::tile_list_launches(), lists + 1);
  for (size_t b = 0; b < mixed.size(); ++b) {
    if (mixed[b].sq > 64) expect_bitwise(listed[b], run_plain(pairs, mixed[b]), "listed", int(b));
  }
  expect_matches_float64(pairs, mixed[1], listed[1]);
}

}  // namespace
}  // namespace fctest
