// The compiled sm90 kernels, as a table dispatch can search. The table itself
// is generated from the one list in tools/gen_sm90_kernels.py.
#pragma once

#include <cstdint>
#include <string>

#include "common/problem.h"
#include "flashcore/attention.h"

namespace flashcore::sm90 {

struct LaunchPlan;  // splitkv_plan.h (CUDA-side header)
using LaunchFn = Status (*)(const AttentionArgs&, const Problem&, const LaunchPlan&, cudaStream_t);

struct KernelEntry {
  DType dtype;
  int head_dim, block_m, block_n, stages;
  bool serving;   // the serving variant (varlen, KV cache, paged, split-KV)
  int cluster_m;  // 2: K/V multicast over pairs of CTAs (kernel_traits.h kClusterM)
  bool fold;      // serving, 64 rows: also runs split chunks in one CTA (kernel_traits.h kFold_)
  bool no_turns;  // two warpgroups without ping-pong turns (kernel_traits.h kNoTurns_)
  int ctas_per_sm;  // 2: two one-warpgroup CTAs share an SM (kernel_traits.h kCtasPerSm_)
  LaunchFn launch;
  const char* name;
};

// Every compiled kernel (for the autotuner and diagnostics).
const KernelEntry* kernel_table(int* count);

// The kernel compiled for exactly this configuration, or nullptr. Each tile
// has one stage count a variant (tools/gen_sm90_kernels.py asserts it), so
// the tile and its variant (serving, cluster_m, fold, no_turns, ctas_per_sm)
// name the kernel.
const KernelEntry* find_kernel(DType dtype, int head_dim, int block_m, int block_n, bool serving,
                               int cluster_m = 1, bool fold = false, bool no_turns = false, int ctas_per_sm = 1);

// Launches kernel `e` for a plain (unsplit) call on a validated problem,
// bypassing dispatch: how tests run every compiled variant.
Status launch_plain(const KernelEntry& e, const AttentionArgs& args, const Problem& p, cudaStream_t stream);

// Launches that ran with a tail plan (tail_plan.h) since the process
// started. A call's bits are the same with and without one, so this is how
// tests see that a call took one; the launcher counts them
// (count_tail_plan_launch, flash_fwd_launch.h).
uint64_t tail_plan_launches();
void count_tail_plan_launch();
// Launches of the kernels that run two CTAs an SM (kernel_traits.h
// kCtasPerSm_), counted the same way: how tests see that dispatch took one.
uint64_t two_cta_launches();
void count_two_cta_launch();
// Launches of serving kernels whose tiles were dealt in pairs within each
// sequence (tile_scheduler.h; same bits as round robin), counted the same way.
uint64_t serving_pair_launches();
void count_serving_pair_launch();
// Launches of serving kernels that dealt a tile list (tile_list_plan.h;
// same bits as the launch's own deal), counted the same way.
uint64_t tile_list_launches();
void count_tile_list_launch();
// Varlen calls dispatch ran as a dense batch on the plain kernels
// (dense_varlen.h; same bits): how tests see that it did.
uint64_t dense_varlen_calls();

// "block_m=128 block_n=128, ..." for error messages: the tile shapes
// compiled for (dtype, head_dim), plain or serving.
std::string available_tiles(DType dtype, int head_dim, bool serving);

}  // namespace flashcore::sm90
