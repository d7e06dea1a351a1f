#include "api/device_memory.h"

#if FLASHCORE_WITH_CUDA
#include <cuda.h>  // the driver's pointer-attribute types; the function is looked up at run time
#include <cuda_runtime_api.h>
#endif

namespace flashcore {

#if FLASHCORE_WITH_CUDA
namespace {

using GetAttributes = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);

// cuPointerGetAttributes, looked up through the runtime so that the library
// does not need libcuda.so.1 to load (as for CuTe's TMA descriptors,
// CMakeLists.txt). Null where the driver does not offer it.
GetAttributes driver_get_attributes() {
  static const GetAttributes fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &f, 12000, cudaEnableDefault, &found);
    if (err != cudaSuccess) (void)cudaGetLastError();  // ours, not the caller's
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess) f = nullptr;
    return reinterpret_cast<GetAttributes>(f);
  }();
  return fn;
}

// One driver call: kind, device and the allocation's range. False when the
// driver cannot answer here (for instance no context is current on this
// thread yet); the runtime's query then answers instead.
bool query_driver(const void* ptr, MemoryRange* r, int* queries) {
  const GetAttributes get = driver_get_attributes();
  if (get == nullptr) return false;
  unsigned int type = 0;
  int device = -1;
  unsigned int managed = 0, plain_allocation = 0;  // bools as the driver writes them; zero-filled first
  CUdeviceptr start = 0;
  size_t size = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[] = {&type, &device, &managed, &plain_allocation, &start, &size};
  ++*queries;
  if (get(6, attrs, data, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) return false;
  // Memory CUDA does not know comes back as type 0 with CUDA_SUCCESS.
  r->kind = managed != 0                ? MemoryKind::kManaged
            : type == CU_MEMORYTYPE_DEVICE ? MemoryKind::kDevice
            : type == CU_MEMORYTYPE_HOST   ? MemoryKind::kPinnedHost
                                           : MemoryKind::kUnknownToCuda;
  r->device = device;
  // The range is one allocation, all of it mapped on one device, only for
  // cudaMalloc/cuMemAlloc memory (the kind cudaIpcGetMemHandle takes). For
  // virtual-memory mappings (PyTorch's expandable segments) and stream-
  // ordered pools it is the whole address reservation, parts of which may be
  // unmapped or on another device: those pointers are asked about one by one.
  r->begin = r->end = 0;
  if (r->kind == MemoryKind::kDevice && plain_allocation != 0 && size > 0) {
    r->begin = uintptr_t(start);
    r->end = uintptr_t(start) + size;
  }
  return true;
}

// The runtime's answer (no range).
bool query_runtime(const void* ptr, MemoryRange* r, std::string* error, int* queries) {
  cudaPointerAttributes attr{};
  ++*queries;
  const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    *error = std::string("cudaPointerGetAttributes: ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
    return false;
  }
  r->kind = attr.type == cudaMemoryTypeManaged  ? MemoryKind::kManaged
            : attr.type == cudaMemoryTypeDevice ? MemoryKind::kDevice
            : attr.type == cudaMemoryTypeHost   ? MemoryKind::kPinnedHost
                                                : MemoryKind::kUnknownToCuda;
  r->device = attr.device;
  r->begin = r->end = 0;
  return true;
}

}  // namespace
#endif

bool MemoryQueries::find(const void* ptr, MemoryRange* out, std::string* error) {
  for (int i = 0; i < count_; ++i) {
    if (known_[i].contains(ptr)) {
      *out = known_[i];
      return true;
    }
  }
#if FLASHCORE_WITH_CUDA
  // The driver's answer is taken when it finds the memory; "unknown to CUDA"
  // (an error for the caller) is confirmed by the runtime, which also makes
  // this thread's context current if nothing has yet.
  if (query_driver(ptr, out, &queries_) && out->kind != MemoryKind::kUnknownToCuda) {
    if (out->end > out->begin && count_ < int(sizeof(known_) / sizeof(known_[0]))) known_[count_++] = *out;
    return true;
  }
  return query_runtime(ptr, out, error, &queries_);
#else
  (void)ptr;
  *out = MemoryRange{};
  *error = "flashcore was built without CUDA";
  return false;
#endif
}

}  // namespace flashcore
