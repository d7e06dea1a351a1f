#include "sm90/device_info.h"

#include <cuda_runtime.h>

#include <atomic>

namespace flashcore::sm90 {

namespace {
std::atomic<int> g_sms[kMaxDevices];   // 0 = not read yet
std::atomic<int> g_arch[kMaxDevices];  // 0 = not read yet
}  // namespace

int device_sm_count(int dev) {
  if (dev < 0 || dev >= kMaxDevices) return 1;
  int v = g_sms[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v <= 0) v = 1;
    g_sms[dev].store(v, std::memory_order_relaxed);
  }
  return v;
}

int device_arch(int dev) {
  if (dev < 0 || dev >= kMaxDevices) return -1;
  int v = g_arch[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
      return -1;
    }
    v = major * 10 + minor;
    g_arch[dev].store(v, std::memory_order_relaxed);
  }
  return v;
}

}  // namespace flashcore::sm90
