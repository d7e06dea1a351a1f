// How flashcore's kernels are launched: as programmatic dependents of the
// previous kernel in the stream (PDL, sm90), so that a launch and the
// kernel's prologue overlap the tail of the kernel before it; every kernel
// waits (griddepcontrol.wait) before touching global memory.
//
// The kernel lets the next one launch (griddepcontrol.launch_dependents)
// right after its own wait, so the next kernel's CTAs take SMs as soon as
// they free up and wait there. Measured on an H100 (graph mode, 20 calls a
// graph; FLASHCORE_PDL A/B, two repetitions, bench/results/2026-11-22-h100):
// fp16 d64 16 heads, B1 S128 3.60 us without PDL, 3.35 with the trigger at
// CTA exit, 3.04 with the early trigger; B8 S128 5.42 / 4.89 / 4.70; B32
// S128 12.70 / 12.37 / 11.75; large shapes (B4 S4096 d128, B32 S512 d256,
// causal d128) within noise of each other in all three modes.
//
// One exception: a forward kernel followed by the split-KV combine triggers
// at CTA exit. The likely reason (not profiled): triggered early, the
// combine's CTAs are placed on the few SMs the forward grid leaves free and
// read all the partials through them; at exit they spread over the GPU. The
// combine itself triggers early. Same-run A/B,
// bf16 decode 32/8 heads d128, batch 1 (bench/results/2026-11-26c-h100/
// ab2-trigger-table.txt): 4k keys 13.2 -> 12.0 us (cache entry and plain
// call), 32k keys 52.1 -> 51.0.
//
// FLASHCORE_PDL in the environment (read once per process) overrides this
// for A/B measurements: 0 no PDL, 2 trigger at CTA exit everywhere; unset or
// 1: as above.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

namespace flashcore::sm90 {

enum class PdlMode { kOff = 0, kEarly = 1, kAtExit = 2 };

inline PdlMode pdl_mode() {
  static const PdlMode mode = [] {
    const char* v = std::getenv("FLASHCORE_PDL");
    if (v != nullptr && std::strcmp(v, "0") == 0) return PdlMode::kOff;
    if (v != nullptr && std::strcmp(v, "2") == 0) return PdlMode::kAtExit;
    return PdlMode::kEarly;
  }();
  return mode;
}

inline bool pdl_enabled() { return pdl_mode() != PdlMode::kOff; }
inline bool pdl_trigger_early() { return pdl_mode() == PdlMode::kEarly; }

// A launch configuration on `stream` with the PDL attribute (when enabled)
// and, for cluster_x > 1, clusters of (cluster_x, 1, 1) CTAs. The attribute
// storage lives in the returned object.
struct PdlLaunch {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attr[2] = {};

  PdlLaunch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, int cluster_x = 1) {
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 0;
    if (cluster_x > 1) {
      cudaLaunchAttribute& a = attr[config.numAttrs++];
      a.id = cudaLaunchAttributeClusterDimension;
      a.val.clusterDim.x = unsigned(cluster_x);
      a.val.clusterDim.y = 1;
      a.val.clusterDim.z = 1;
    }
    if (pdl_enabled()) {
      cudaLaunchAttribute& a = attr[config.numAttrs++];
      a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a.val.programmaticStreamSerializationAllowed = 1;
    }
  }
  PdlLaunch(const PdlLaunch&) = delete;
  PdlLaunch& operator=(const PdlLaunch&) = delete;
};

#if defined(__CUDACC__)
// Device side. Waits until the kernel this one depends on has finished and
// its writes are visible; returns at once for a launch without the PDL
// attribute. Call it before the first global memory access.
__device__ __forceinline__ void pdl_wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Lets the next kernel in the stream be scheduled now (it waits the same way).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
#endif

}  // namespace flashcore::sm90
