// Per-device facts the launchers need, read once and cached (no attribute
// queries on the hot path).
#pragma once

namespace flashcore::sm90 {

constexpr int kMaxDevices = 64;

// Number of SMs of device `dev` (cached after the first call).
int device_sm_count(int dev);

// Compute capability major*10+minor of device `dev` (cached), or -1 on error.
int device_arch(int dev);

}  // namespace flashcore::sm90
