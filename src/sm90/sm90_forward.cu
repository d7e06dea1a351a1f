// Dispatch into the sm90 kernels: check the device can run them, pick the tile
// shape from the tuning table (or the caller's override), find the compiled
// instantiation and launch it. A shape with no compiled kernel is an error,
// never a silent fallback to something slower.
#include "sm90/sm90_forward.h"

#include <cuda_runtime.h>

#include <string>

#include "sm90/device_info.h"
#include "sm90/gqa_pack.h"
#include "sm90/kernel_registry.h"
#include "sm90/tuning_table.h"

namespace flashcore::sm90 {

#include "sm90/instantiations/registry.inc"

const KernelEntry* kernel_table(int* count) {
  *count = int(sizeof(kKernelTable) / sizeof(kKernelTable[0]));
  return kKernelTable;
}

const KernelEntry* find_kernel(DType dtype, int head_dim, int block_m, int block_n) {
  for (const KernelEntry& e : kKernelTable) {
    if (e.dtype == dtype && e.head_dim == head_dim && e.block_m == block_m && e.block_n == block_n) return &e;
  }
  return nullptr;
}

std::string available_tiles(DType dtype, int head_dim) {
  std::string s;
  for (const KernelEntry& e : kKernelTable) {
    if (e.dtype != dtype || e.head_dim != head_dim) continue;
    if (!s.empty()) s += ", ";
    s += "block_m=" + std::to_string(e.block_m) + " block_n=" + std::to_string(e.block_n);
  }
  return s.empty() ? "none" : s;
}

// Split-KV is not in the shipped kernels yet: no call needs workspace.
int64_t workspace_size(const Problem& /*p*/) { return 0; }

Status forward(const AttentionArgs& args, const Problem& p, cudaStream_t stream) {
  if (p.is_empty()) return Status::Ok();
  // The serving paths (varlen, KV cache, paged KV, append) run on the CPU
  // reference backend; their sm90 kernels are not in this release.
  if (p.has_per_seq_lengths()) {
    return Status(StatusCode::kNotSupported,
                  "variable-length and KV-cache calls are not supported on CUDA yet (the CPU backend runs them)");
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
  bool const packed = packs_gqa(p);
  int64_t const tiles_128 = packed ? p.heads_kv * p.batch  // decode: one tile per KV head
                                   : (p.seqlen_q + 127) / 128 * p.heads_q * p.batch;
  TileChoice tile = tuned_tile(p.dtype, int(p.head_dim), tiles_128, device_sm_count(p.device_index), packed);
  if (p.config.block_m > 0) tile.block_m = p.config.block_m;
  if (p.config.block_n > 0) tile.block_n = p.config.block_n;
  if (p.config.num_splits > 1) {
    return Status(StatusCode::kNotSupported, "config.num_splits > 1 is not implemented yet");
  }
  const KernelEntry* k = find_kernel(p.dtype, int(p.head_dim), tile.block_m, tile.block_n);
  if (k == nullptr) {
    return Status(StatusCode::kNotSupported,
                  "no sm90 kernel compiled for " + std::string(dtype_name(p.dtype)) + " head_dim " +
                      std::to_string(p.head_dim) + " with block_m=" + std::to_string(tile.block_m) +
                      " block_n=" + std::to_string(tile.block_n) +
                      " (compiled: " + available_tiles(p.dtype, int(p.head_dim)) + ")");
  }
  return k->launch(args, p, stream);
}

}  // namespace flashcore::sm90
