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
//      launch's own order;
//   5. with a tail (tile_list_plan.h): each entry's cost (its key blocks and
//      a tile's overhead, in half blocks) added to the CTA the round robin
//      deals it to, and the tail's entries sorted costliest first (a bitonic
//      sort, one entry a thread); where the round robin would leave the
//      busiest CTA more than tail_min_excess / 64 over the mean, the tail's
//      rounds dealt
//      tile by tile, each round's costliest tile to the least-loaded CTA,
//      kept where that finishes earlier.
// Every step is a count, a sort or an integer sum: the same list and tail
// every call. The lengths are metadata (seq_info.h load_index), never
// tensor values.
#include "sm90/tile_list.h"

#include <string>

#include "sm90/launch_attrs.h"
#include "sm90/tile_list_plan.h"

namespace flashcore::sm90 {
namespace {

constexpr int kThreads = 1024;
static_assert(kTileListMaxSeqs <= kThreads, "one sequence a thread in the prefix");
static_assert(2 * kTileListTailMaxRounds * kTileListTailMaxCtas <= kThreads, "one tail entry a thread in the sort");
// A tile's cost in half key blocks: its key blocks + 1.5 (what a tile spends
// outside its key loop; tools/tile-deal-sim), clamped so that a sort key
// holds it and a tail position (< 1024) in 30 bits.
constexpr uint32_t kMaxCost = (1u << 20) - 1;
constexpr int kTileOverheadHalfBlocks = 3;

using u64 = unsigned long long;

CUTE_DEVICE u64 warp_max(u64 v) {
  for (int d = 16; d > 0; d /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}
CUTE_DEVICE u64 warp_sum(u64 v) {
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

// Sorts one key a thread over the block, ascending (a bitonic network:
// partners within a warp by shuffles, farther ones through shared memory).
CUTE_DEVICE uint32_t block_sort(uint32_t v, uint32_t* s_key, int tid) {
  for (int k = 2; k <= kThreads; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      uint32_t other;
      if (j >= 32) {
        s_key[tid] = v;
        __syncthreads();
        other = s_key[tid ^ j];
        __syncthreads();
      } else {
        other = __shfl_xor_sync(0xffffffffu, v, j);
      }
      bool const keep_min = ((tid & j) == 0) == ((tid & k) == 0);
      v = keep_min ? min(v, other) : max(v, other);
    }
  }
  return v;
}

// The tail (step 5): deals the sorted tail entries (s_key, costliest first)
// in rounds of `g`, each round's i-th costliest to the CTA with the i-th
// least work (ties: the lower index), and writes the tail when it ends
// earlier than the round robin's `end_rr`.
CUTE_DEVICE void deal_tail(TileListParams const& p, u64* s_load, int32_t* s_rank, uint32_t const* s_key,
                           int tail_begin, int tail_tiles, int first_k, u64 end_rr, int tid) {
  int const g = p.grid, lane = tid % 32, warp = tid / 32;
  int const rows = (tail_tiles + g - 1) / g;
  for (int q = 0; q < rows; ++q) {
    for (int c = warp; c < g; c += kThreads / 32) {
      u64 const mine = s_load[c];
      int r = 0;
      for (int j = lane; j < g; j += 32) {
        u64 const l = s_load[j];
        r += l < mine || (l == mine && j < c);
      }
      r = __reduce_add_sync(0xffffffffu, r);
      if (lane == 0) s_rank[c] = r;
    }
    __syncthreads();
    if (tid < g) {
      int const i = q * g + s_rank[tid];
      int32_t pos = kTileListNoTail;
      if (i < tail_tiles) {
        uint32_t const key = s_key[i];
        pos = tail_begin + int(key & 1023u);
        s_load[tid] += kMaxCost - (key >> 10);
      }
      p.tail[2 + q * g + tid] = pos;
    }
    __syncthreads();
  }
  if (warp == 0) {
    u64 end = 0;
    for (int c = lane; c < g; c += 32) end = max(end, s_load[c]);
    end = warp_max(end);
    if (lane == 0) {
      p.tail[1] = rows;
      p.tail[0] = end < end_rr ? first_k : kTileListNoTail;
    }
  }
}

template <int kBlockM, int kBlockN>
__global__ void __launch_bounds__(kThreads) tile_list_kernel(const TileListParams p) {
  __shared__ int32_t s_units[kTileListMaxSeqs], s_cost[kTileListMaxSeqs], s_order[kTileListMaxSeqs];
  __shared__ int32_t s_start[kTileListMaxSeqs + 1];
  __shared__ int32_t s_warp[kThreads / 32];
  // The tail: each sequence's lengths (a tile's cost), each CTA's work in
  // the round-robin rounds (s_load) and in the tail's (s_rest), the tail's
  // sort keys, the CTAs' ranks by work, and the round robin's finish and sum.
  __shared__ int32_t s_rows_q[kTileListMaxSeqs], s_rows_k[kTileListMaxSeqs];
  __shared__ u64 s_load[kTileListTailMaxCtas], s_rest[kTileListTailMaxCtas], s_max[2];
  __shared__ uint32_t s_key[kThreads];
  __shared__ int32_t s_rank[kTileListTailMaxCtas];
  // Lengths may come from the kernel before; the attention kernel after this
  // one may launch now (its prologue overlaps), its own wait holds it until
  // the list is written (launch_attrs.h).
  pdl_wait_for_previous_kernel();
  if (p.trigger_dependents_early) pdl_launch_dependents();
  int const tid = threadIdx.x, batch = p.batch;
  for (int c = tid; c < kTileListTailMaxCtas; c += kThreads) s_load[c] = s_rest[c] = 0;
  s_key[tid] = ~0u;  // past every real key: sorts last
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
    s_rows_q[b] = s.seqlen_q;
    s_rows_k[b] = s.seqlen_k;
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
  // The tail: the deal's last tail_rounds rounds (of pairs, or single
  // tiles), at most 2 x tail_rounds x grid <= kThreads entries.
  int const g = p.grid, step = p.paired ? 2 : 1;
  bool const tail_on = p.tail != nullptr && p.tail_rounds > 0 && g > 0 && g <= kTileListTailMaxCtas;
  int tail_begin = count, first_k = 0;
  if (tail_on) {
    int const deals = (count + step - 1) / step, rounds = (deals + g - 1) / g;
    int const keep = max(0, rounds - min(p.tail_rounds, kTileListTailMaxRounds));
    first_k = step * keep;
    tail_begin = min(count, first_k * g);
  }
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
    // Units n-1, 0, n-2, 1, ... of a head (seq_info.h pair_blocks) pair up
    // to about n+1 key blocks when the head's first entry is even; with an
    // odd n the next head's entries start odd and would pair its first unit
    // (block n-1) with the middle block. Listed last first there, the
    // straddling pair is middle + middle and the rest pair as before.
    bool const flip = p.paired && ((s_start[lo] + head * units) & 1);
    int const u = flip ? units - 1 - unit : unit;
    p.list[1 + i] = (b * p.heads + head) * p.num_units + u;
    if (tail_on) {
      SeqInfo s;
      s.seqlen_q = s_rows_q[b];
      s.seqlen_k = s_rows_k[b];
      TileWork const w = tile_work<kBlockM, kBlockN>(p.seq, s, u, 0, p.paired);
      uint32_t const cost = min(uint32_t(2 * max(w.n_end - w.n_begin, 0) + kTileOverheadHalfBlocks), kMaxCost);
      int const deal = i / step, r = deal / g, slot = deal - r * g;  // tile_decode.h listed_tile_at
      int const cta = (r & 1) ? g - 1 - slot : slot;
      if (i < tail_begin) {
        atomicAdd(&s_load[cta], u64(cost));
      } else {
        atomicAdd(&s_rest[cta], u64(cost));
        s_key[i - tail_begin] = ((kMaxCost - cost) << 10) | uint32_t(i - tail_begin);
      }
    }
  }
  if (tid == 0) p.list[0] = count;
  if (!tail_on) {
    // A tail the launch asked for but this call cannot deal: none, so that
    // the attention kernel never reads its table.
    if (tid == 0 && p.tail != nullptr) p.tail[0] = kTileListNoTail;
    return;
  }
  __syncthreads();
  if (warp == 0) {
    u64 end = 0, sum = 0;
    for (int c = lane; c < g; c += 32) {
      end = max(end, s_load[c] + s_rest[c]);
      sum += s_load[c] + s_rest[c];
    }
    end = warp_max(end);
    sum = warp_sum(sum);
    if (lane == 0) {
      s_max[0] = end;
      s_max[1] = sum;
    }
  }
  __syncthreads();
  u64 const end_rr = s_max[0], sum = s_max[1];
  if (end_rr * 64 * u64(g) <= sum * u64(64 + p.tail_min_excess)) {  // close enough to the mean: the round robin
    if (tid == 0) p.tail[0] = kTileListNoTail;
    return;
  }
  uint32_t const key = block_sort(s_key[tid], s_key, tid);
  s_key[tid] = key;
  __syncthreads();
  deal_tail(p, s_load, s_rank, s_key, tail_begin, count - tail_begin, first_k, end_rr, tid);
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
