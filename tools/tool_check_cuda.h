// Shared by the command-line tools (flashcore-tune, flashcore-host-overhead):
// CHECK_CUDA (a failed CUDA call prints where and why, and the tool exits
// with status 1) and the device they measure.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(expr)                                                                         \
  do {                                                                                           \
    cudaError_t e_ = (expr);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// Device 0's properties, or false (after saying so on stdout) when this
// machine has no CUDA device: the tools then have nothing to measure and
// exit with status 0.
inline bool tool_device(const char* tool, cudaDeviceProp* prop) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("%s: no CUDA device; nothing to measure\n", tool);
    return false;
  }
  CHECK_CUDA(cudaGetDeviceProperties(prop, 0));
  return true;
}
