// Where a pointer's memory lives, for validation's device-memory checks.
#pragma once

#include <cstdint>

#include <string>

namespace flashcore {

enum class MemoryKind { kUnknownToCuda, kPinnedHost, kDevice, kManaged };

// The allocation a pointer lies in: its kind, its device, and (for plain
// device allocations, device_memory.cpp) its address range [begin, end).
struct MemoryRange {
  MemoryKind kind = MemoryKind::kUnknownToCuda;
  int device = -1;
  uintptr_t begin = 0, end = 0;  // end == begin: range not known
  bool contains(const void* p) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return a >= begin && a < end;
  }
};

// Checks the pointers of one call against device memory, asking CUDA once
// per allocation: pointers that lie in an allocation already asked about
// reuse its answer. Each query costs ~0.16 us of host time, and the tensors
// of one call often share an allocation (PyTorch's caching allocator carves
// small tensors out of 2 MiB segments; a packed QKV projection is one
// tensor). The ranges are valid for this call only: memory may be freed and
// reused between calls, so nothing is kept across calls.
class MemoryQueries {
 public:
  // The memory `ptr` lies in. False when CUDA's query fails: *error then
  // says why, and the error is cleared from CUDA's last-error state (it is
  // ours, not the caller's).
  bool find(const void* ptr, MemoryRange* out, std::string* error);

  // CUDA queries made so far (driver and runtime), for tests.
  int queries() const { return queries_; }

 private:
  MemoryRange known_[8];
  int count_ = 0;
  int queries_ = 0;
};

}  // namespace flashcore
