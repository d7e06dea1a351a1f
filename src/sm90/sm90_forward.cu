// Dispatch into the sm90 kernels: check the device can run them, pick the tile
// shape from the tuning table (or the caller's override), find the compiled
// instantiation and launch it. A shape with no compiled kernel is an error,
// never a silent fallback to something slower.
#include "sm90/sm90_forward.h"

#include <cuda_runtime.h>

#include <atomic>
#include <string>

#include "sm90/dense_varlen.h"
#include "sm90/device_info.h"
#include "sm90/gqa_pack.h"
#include "sm90/kernel_registry.h"
#include "sm90/kv_append.h"
#include "sm90/splitkv_combine.h"
#include "sm90/split_calls.h"
#include "sm90/splitkv_plan.h"
#include "sm90/tile_list_plan.h"
#include "sm90/tuning_table.h"

namespace flashcore::sm90 {

#include "sm90/instantiations/registry.inc"

namespace {
std::atomic<uint64_t> g_tail_plan_launches{0};
std::atomic<uint64_t> g_two_cta_launches{0};
std::atomic<uint64_t> g_serving_pair_launches{0};
std::atomic<uint64_t> g_dense_varlen_calls{0};
std::atomic<uint64_t> g_tile_list_launches{0};
}  // namespace

uint64_t tail_plan_launches() { return g_tail_plan_launches.load(std::memory_order_relaxed); }
void count_tail_plan_launch() { g_tail_plan_launches.fetch_add(1, std::memory_order_relaxed); }
uint64_t two_cta_launches() { return g_two_cta_launches.load(std::memory_order_relaxed); }
void count_two_cta_launch() { g_two_cta_launches.fetch_add(1, std::memory_order_relaxed); }
uint64_t serving_pair_launches() { return g_serving_pair_launches.load(std::memory_order_relaxed); }
void count_serving_pair_launch() { g_serving_pair_launches.fetch_add(1, std::memory_order_relaxed); }
uint64_t tile_list_launches() { return g_tile_list_launches.load(std::memory_order_relaxed); }
void count_tile_list_launch() { g_tile_list_launches.fetch_add(1, std::memory_order_relaxed); }
uint64_t dense_varlen_calls() { return g_dense_varlen_calls.load(std::memory_order_relaxed); }

const KernelEntry* kernel_table(int* count) {
  *count = int(sizeof(kKernelTable) / sizeof(kKernelTable[0]));
  return kKernelTable;
}

const KernelEntry* find_kernel(DType dtype, int head_dim, int block_m, int block_n, bool serving, int cluster_m,
                               bool fold, bool no_turns, int ctas_per_sm) {
  for (const KernelEntry& e : kKernelTable) {
    if (e.dtype == dtype && e.head_dim == head_dim && e.block_m == block_m && e.block_n == block_n &&
        e.serving == serving && e.cluster_m == cluster_m && e.fold == fold && e.no_turns == no_turns &&
        e.ctas_per_sm == ctas_per_sm) {
      return &e;
    }
  }
  return nullptr;
}

Status launch_plain(const KernelEntry& e, const AttentionArgs& args, const Problem& p, cudaStream_t stream) {
  if (p.has_per_seq_lengths() != e.serving) {
    return Status(StatusCode::kInvalidArgument, std::string(e.name) + ": serving kernels take serving calls only");
  }
  return e.launch(args, p, LaunchPlan{}, stream);
}

std::string available_tiles(DType dtype, int head_dim, bool serving) {
  std::string s;
  for (const KernelEntry& e : kKernelTable) {
    if (e.dtype != dtype || e.head_dim != head_dim || e.serving != serving || e.cluster_m != 1 || e.fold ||
        e.no_turns || e.ctas_per_sm != 1) {
      continue;
    }
    if (!s.empty()) s += ", ";
    s += "block_m=" + std::to_string(e.block_m) + " block_n=" + std::to_string(e.block_n);
  }
  return s.empty() ? "none" : s;
}

namespace {

// The tile dispatch runs a call with: the tuning table's, or the caller's.
TileChoice choose_tile(const Problem& p) {
  TileChoice tile = tuned_tile(p.dtype, int(p.head_dim), call_shape(p), device_sm_count(p.device_index));
  if (p.config.block_m > 0) tile.block_m = p.config.block_m;
  if (p.config.block_n > 0) tile.block_n = p.config.block_n;
  return tile;
}

// The split-KV plan of a call that runs `tile`, with its schedule
// (splitkv_plan.h fold_splits): workspace_size and forward agree on it.
SplitPlan plan_for(const Problem& p, const TileChoice& tile) {
  return fold_splits(plan_split(p), p, tile.block_m, device_sm_count(p.device_index));
}

// The tile list a call with that split plan runs with (tile_list_plan.h):
// serving kernels run one CTA an SM.
TileListPlan list_for(const Problem& p, const TileChoice& tile, const SplitPlan& split) {
  return plan_tile_list(p, tile.block_m, split.fold ? 1 : split.max_splits, device_sm_count(p.device_index));
}

// The workspace: the split partials, then the tile list.
int64_t workspace_bytes(const SplitPlan& split, const TileListPlan& list) { return split.bytes + list.bytes; }

// The call dispatch runs: a varlen call that is a dense batch as that batch
// (dense_varlen.h), any other as it is.
bool runs_dense(const Problem& p) { return varlen_is_dense_batch(p) && dense_varlen_allowed(); }

}  // namespace

int64_t workspace_size(const Problem& p) {
  if (p.is_empty()) return 0;
  Problem const d = runs_dense(p) ? dense_problem(p) : p;
  TileChoice const tile = choose_tile(d);
  SplitPlan const split = plan_for(d, tile);
  return workspace_bytes(split, list_for(d, tile, split));
}

namespace {

Status append_new_kv(const AttentionArgs& args, const Problem& p, cudaStream_t stream) {
  AppendParams a;
  a.k_new = args.k_new.data;
  a.v_new = args.v_new.data;
  a.k_cache = args.k.data;
  a.v_cache = args.v.data;
  for (int i = 0; i < 3; ++i) {
    a.new_stride[i] = args.k_new.stride[i];
    a.v_new_stride[i] = args.v_new.stride[i];
    a.cache_stride[i] = args.k.stride[i];
    a.v_cache_stride[i] = args.v.stride[i];
  }
  a.cache_seqlens = args.cache_seqlens;
  if (p.paged) {
    a.block_table = args.block_table;
    a.block_table_stride = p.block_table_stride;
    a.max_pages_per_seq = int32_t(p.max_pages_per_seq);
    a.page_size = int32_t(p.page_size);
    a.num_pages = int32_t(p.num_pages);
  }
  a.batch = int32_t(p.batch);
  a.heads_kv = int32_t(p.heads_kv);
  a.seqlen_new = int32_t(p.seqlen_new);
  a.head_dim = int32_t(p.head_dim);
  a.capacity = int32_t(p.seqlen_k);
  a.element_bytes = int32_t(dtype_size(p.dtype));
  return launch_kv_append(a, stream);
}

Status combine_splits(const AttentionArgs& args, const Problem& p, const LaunchPlan& plan, cudaStream_t stream) {
  CombineParams c;
  c.seq = seq_params(args, p, plan.split);
  c.batch = int32_t(p.batch);
  c.heads = int32_t(plan.split.heads);
  c.head_dim = int32_t(p.head_dim);
  c.partial_o = static_cast<const float*>(plan.workspace);
  c.partial_lse = reinterpret_cast<const float*>(static_cast<const char*>(plan.workspace) + plan.split.partial_o_bytes);
  c.partial_rows = plan.split.partial_rows;
  c.out = args.out.data;
  int64_t st[3];
  row_strides(args.out, p, st);
  c.o_stride_b = st[0], c.o_stride_h = st[1], c.o_stride_s = st[2];
  if (p.has_lse) {
    c.lse = static_cast<float*>(args.lse.data);
    row_strides(args.lse, p, st);
    c.lse_stride_b = st[0], c.lse_stride_h = st[1], c.lse_stride_s = st[2];
  }
  return launch_splitkv_combine(c, p.dtype, stream);
}

}  // namespace

Status forward(const AttentionArgs& args, const Problem& p, cudaStream_t stream, WorkspaceAllocFn allocate,
               void* context) {
  if (p.is_empty()) return Status::Ok();
  if (runs_dense(p)) {
    g_dense_varlen_calls.fetch_add(1, std::memory_order_relaxed);
    return forward(dense_args(args, p), dense_problem(p), stream, allocate, context);
  }
  int const arch = device_arch(p.device_index);
  if (arch != 90) {
    return Status(StatusCode::kNotSupported,
                  "flashcore's CUDA kernels need an sm_90 GPU (H100/H200); device " +
                      std::to_string(p.device_index) + " is sm_" + std::to_string(arch));
  }
  if (p.seqlen_q >= (int64_t(1) << 30) || p.seqlen_k >= (int64_t(1) << 30)) {
    return Status(StatusCode::kNotSupported, "sequence lengths must be below 2^30 on the GPU");
  }
  TileChoice tile = choose_tile(p);
  bool const per_seq = p.has_per_seq_lengths();
  if (!per_seq && p.config.num_splits > 1 && !may_split_keys(p)) {
    return Status(StatusCode::kNotSupported,
                  "config.num_splits > 1 applies to calls that split their keys (split-KV): variable-length and "
                  "KV-cache calls, and plain calls of at most 64 query rows (after GQA packing) at head dims 64 "
                  "and 128");
  }
  LaunchPlan plan;
  plan.split = plan_for(p, tile);
  // A plain call without workspace runs its chunks in one CTA (the same
  // bits: chunk_merge.h), as fast as before plain calls split; a workspace
  // lets small batches spread over the GPU. Serving calls have always
  // needed one: for them its absence is an error.
  bool const can_allocate = allocate != nullptr && args.workspace == nullptr;
  bool const has_workspace = can_allocate || (args.workspace != nullptr && args.workspace_bytes >= plan.split.bytes);
  if (plan.split.bytes > 0 && !has_workspace && !per_seq && tile.block_m == kSplitMaxRows) {
    plan.split = folded(plan.split);
  }
  // Calls that split, and serving calls, run the serving variant of the tile
  // (kernel_traits.h); the rest keep the lean kernel.
  bool const serving = per_seq || plan.split.split_keys > 0;
  if (plan.split.bytes > 0) {
    if (!has_workspace) {
      return Status(StatusCode::kInvalidArgument,
                    "this call splits its keys across CTAs (split-KV) and needs " + std::to_string(plan.split.bytes) +
                        " bytes of workspace; args.workspace " +
                        (args.workspace == nullptr ? std::string("is null")
                                                   : "has only " + std::to_string(args.workspace_bytes) + " bytes") +
                        " (attention_workspace_size() gives the size)");
    }
  }
  // The tile list (tile_list_plan.h) where there is workspace for it too;
  // without, the call runs the launch's own deal (the same bits).
  TileListPlan list = list_for(p, tile, plan.split);
  if (list.used() && !can_allocate &&
      (args.workspace == nullptr || args.workspace_bytes < workspace_bytes(plan.split, list))) {
    list = TileListPlan{};
  }
  int64_t const bytes = workspace_bytes(plan.split, list);
  tile.cluster_m = serving ? 1 : tuned_cluster(p, tile.block_m, tile.block_n);
  // Serving calls too, unless they split their keys (serving kernels of
  // 128-row tiles without turns: tools/gen_sm90_kernels.py SERVING_NO_TURNS_TILES).
  bool const no_turns = plan.split.split_keys == 0 && tuned_no_turns(p, tile.block_m, tile.block_n);
  int const ctas_per_sm =
      serving ? 1 : tuned_two_ctas(p, tile.block_m, tile.block_n, device_sm_count(p.device_index)) ? 2 : 1;
  // Only a call that runs its chunks in one CTA takes the kernel with the fold.
  const KernelEntry* k = find_kernel(p.dtype, int(p.head_dim), tile.block_m, tile.block_n, serving, tile.cluster_m,
                                     plan.split.fold, no_turns, ctas_per_sm);
  if (k == nullptr) {
    return Status(StatusCode::kNotSupported,
                  "no sm90 kernel compiled for " + std::string(dtype_name(p.dtype)) + " head_dim " +
                      std::to_string(p.head_dim) + " with block_m=" + std::to_string(tile.block_m) +
                      " block_n=" + std::to_string(tile.block_n) +
                      " (compiled" + (serving ? " for variable-length and KV-cache calls" : "") + ": " +
                      available_tiles(p.dtype, int(p.head_dim), serving) + ")");
  }
  // The workspace, allocated only now that the call runs, before anything
  // is enqueued.
  if (bytes > 0) {
    void* workspace = args.workspace;
    if (can_allocate) {
      workspace = allocate(context, bytes);
      if (workspace == nullptr) {
        return Status(StatusCode::kInvalidArgument,
                      "the workspace allocator returned null for " + std::to_string(bytes) + " bytes");
      }
    }
    if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0) {
      return Status(StatusCode::kInvalidArgument, can_allocate
                                                      ? "the workspace allocator returned a pointer not 16-byte aligned"
                                                      : "args.workspace must be 16-byte aligned");
    }
    plan.workspace = workspace;
    if (list.used()) {  // after the partials (256-byte multiples)
      plan.tile_list = reinterpret_cast<int32_t*>(static_cast<char*>(workspace) + plan.split.bytes);
      plan.list = list;
    }
  }
  if (p.seqlen_new > 0) {
    Status st = append_new_kv(args, p, stream);
    if (!st.ok()) return st;
  }
  Status st = k->launch(args, p, plan, stream);
  if (!st.ok() || !plan.split.across_ctas()) return st;
  return combine_splits(args, p, plan, stream);
}

}  // namespace flashcore::sm90
