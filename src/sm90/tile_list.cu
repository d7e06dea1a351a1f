// The tile-list builder (tile_list.h, tile_list_plan.h). One CTA of 1024
// threads, at most kTileListMaxSeqs sequences:
//   1. each sequence's active units (seq_info.h active_units: the tiles the
//      attention kernel would find active) and its cost, the key blocks of
//      its last and first units (a causal pair's cost; twice a tile's
//      without a mask);
//   2. its rank: costlier first, then batch order (a count over all
//      sequences: no atomics, so the list is the same every call);
//   3. the exclusive prefix of heads x units over the ranks;
//   4. entry i (i < the count): the rank holding it by binary search, then
//      its head and unit within that sequence, heads outermost as in the
//      launch's own order.
// The lengths are metadata (seq_info.h load_index), never tensor values.
#include "sm90/tile_list.h"

#include <string>

#include "sm90/launch_attrs.h"
#include "sm90/tile_list_plan.h"

namespace flashcore::sm90 {
namespace {

constexpr int kThreads = 1024;
static_assert(kTileListMaxSeqs <= kThreads, "one sequence a thread in the prefix");

template <int kBlockM, int kBlockN>
__global__ void __launch_bounds__(kThreads) tile_list_kernel(const TileListParams p) {
  __shared__ int32_t s_units[kTileListMaxSeqs], s_cost[kTileListMaxSeqs], s_order[kTileListMaxSeqs];
  __shared__ int32_t s_start[kTileListMaxSeqs + 1];
  __shared__ int32_t s_warp[kThreads / 32];
  // Lengths may come from the kernel before; the attention kernel after this
  // one may launch now (its prologue overlaps), its own wait holds it until
  // the list is written (launch_attrs.h).
  pdl_wait_for_previous_kernel();
  if (p.trigger_dependents_early) pdl_launch_dependents();
  int const tid = threadIdx.x, batch = p.batch;
  for (int b = tid; b < batch; b += kThreads) {
    SeqInfo const s = seq_info<true>(p.seq, b);
    int const units = min(active_units<kBlockM>(p.seq, s), p.num_units);
    int cost = 0;
    if (units > 0) {
      TileWork const last = tile_work<kBlockM, kBlockN>(p.seq, s, units - 1);
      TileWork const first = tile_work<kBlockM, kBlockN>(p.seq, s, 0);
      cost = (last.n_end - last.n_begin) + (first.n_end - first.n_begin);
    }
    s_units[b] = units;
    s_cost[b] = cost;
  }
  __syncthreads();
  for (int b = tid; b < batch; b += kThreads) {
    int const cost = s_cost[b];
    int rank = 0;
    for (int j = 0; j < batch; ++j) {
      int const c = s_cost[j];
      rank += c > cost || (c == cost && j < b);
    }
    s_order[rank] = b;
  }
  __syncthreads();
  // Inclusive scan of heads x units over the ranks, one rank a thread: within
  // each warp, then over the warps' totals. (At most heads x num_units x
  // batch: the launch's tile count, below 2^31.)
  int const lane = tid % 32, warp = tid / 32;
  int v = tid < batch ? p.heads * s_units[s_order[tid]] : 0;
  for (int d = 1; d < 32; d *= 2) {
    int const up = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += up;
  }
  if (lane == 31) s_warp[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int w = s_warp[lane];
    for (int d = 1; d < 32; d *= 2) {
      int const up = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += up;
    }
    s_warp[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v += s_warp[warp - 1];
  if (tid < batch) s_start[tid + 1] = v;
  if (tid == 0) s_start[0] = 0;
  __syncthreads();
  int const count = min(s_start[batch], p.capacity);
  for (int i = tid; i < count; i += kThreads) {
    // The last rank whose entries start at or before i: it has units (a rank
    // without any starts where the next one does, and the last rank's start
    // is past every entry), and i lies in its entries.
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
      int const mid = (lo + hi + 1) >> 1;
      if (s_start[mid] <= i) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    int const b = s_order[lo], units = s_units[b], within = i - s_start[lo];
    int const head = within / units, unit = within - head * units;
    p.list[1 + i] = (b * p.heads + head) * p.num_units + unit;
  }
  if (tid == 0) p.list[0] = count;
}

template <int kBlockM, int kBlockN>
Status launch(const TileListParams& params, cudaStream_t stream) {
  PdlLaunch launch(dim3(1), dim3(kThreads), 0, stream);
  cudaError_t const err = cudaLaunchKernelEx(&launch.config, tile_list_kernel<kBlockM, kBlockN>, params);
  if (err != cudaSuccess) {
    return Status(StatusCode::kCudaError, std::string("tile-list launch failed: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

}  // namespace

Status launch_tile_list(const TileListParams& params, int block_m, int block_n, cudaStream_t stream) {
  if (params.batch < 1 || params.batch > kTileListMaxSeqs || params.capacity < 1 || params.list == nullptr) {
    return Status(StatusCode::kInternal, "tile list: " + std::to_string(params.batch) + " sequences, capacity " +
                                             std::to_string(params.capacity));
  }
  if (block_m == 64 && block_n == 128) return launch<64, 128>(params, stream);
  if (block_m == 128 && block_n == 128) return launch<128, 128>(params, stream);
  if (block_m == 128 && block_n == 64) return launch<128, 64>(params, stream);
  return Status(StatusCode::kInternal, "tile list: no builder for block_m " + std::to_string(block_m) +
                                           " block_n " + std::to_string(block_n));
}

}  // namespace flashcore::sm90
