// flashcore-host-overhead: CPU time per call of flashcore's C++ entry point
// and of the pieces a call is made of, on the current GPU. The number the
// latency issue asks for: attention_forward must cost <= 2 us of CPU time.
//
// Each row issues `calls` calls back to back and divides the wall time of
// that loop by `calls` (the device is synchronized between repetitions,
// outside the timed loop); the table gives the median and the minimum over
// `reps` repetitions. The shapes are tiny so that the GPU keeps up and the
// CPU is what is timed: every launch still runs, the launch queue never fills.
//
//   flashcore-host-overhead [--calls N] [--reps R] [--csv FILE]
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "api/validation.h"
#include "flashcore/attention.h"
#include "flashcore/flashcore.h"
#include "tool_check_cuda.h"

using flashcore::DType;

namespace {

void check(const flashcore::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
    std::exit(1);
  }
}

// The launch floor: kernels that do nothing, with no parameters and with a
// parameter block the size of the attention kernel's (TMA descriptors are
// 128 bytes each and travel in the parameters).
template <int kBytes>
struct Blob {
  alignas(64) unsigned char b[kBytes];
};
__global__ void empty_kernel() {}
template <int kBytes>
__global__ void empty_kernel_params(const __grid_constant__ Blob<kBytes> p) {
  if (p.b[0] == 1 && threadIdx.x == 1000) asm volatile("trap;");
}

struct Row {
  std::string name;
  double median_us, min_us;
};

struct Timer {
  int calls, reps;
  std::vector<Row> rows;

  void time(const std::string& name, const std::function<void()>& fn) {
    for (int i = 0; i < 50; ++i) fn();  // warm-up: first-call setup, caches
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<double> us;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) fn();
      auto t1 = std::chrono::steady_clock::now();
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
      CHECK_CUDA(cudaDeviceSynchronize());
    }
    CHECK_CUDA(cudaGetLastError());
    std::sort(us.begin(), us.end());
    rows.push_back({name, us[us.size() / 2], us.front()});
    std::printf("%-72s %8.3f %8.3f\n", name.c_str(), rows.back().median_us, rows.back().min_us);
    std::fflush(stdout);
  }
};

struct DeviceTensor {
  void* ptr = nullptr;
  explicit DeviceTensor(size_t bytes) {
    CHECK_CUDA(cudaMalloc(&ptr, bytes));
    CHECK_CUDA(cudaMemset(ptr, 0x3c, bytes));  // fp16/bf16 ~1.0 / 0.011: finite, not zero
  }
  ~DeviceTensor() { cudaFree(ptr); }
};

}  // namespace

int main(int argc, char** argv) {
  int calls = 200, reps = 31;
  const char* csv = nullptr;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--calls" && i + 1 < argc) calls = std::atoi(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--csv" && i + 1 < argc) csv = argv[++i];
    else {
      std::fprintf(stderr, "usage: flashcore-host-overhead [--calls N] [--reps R] [--csv FILE]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  if (!tool_device("flashcore-host-overhead", &prop)) return 0;
  std::printf("# %s, %d calls a repetition, %d repetitions; CPU microseconds per call\n", prop.name, calls, reps);
  std::printf("%-72s %8s %8s\n", "what", "median", "min");
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Timer t{calls, reps, {}};

  // ------------------------------------------------------------ the floor
  Blob<1024> blob{};
  auto floor_rows = [&](const char* when) {
    for (bool legacy : {false, true}) {
      std::string const on = legacy ? "legacy default stream" : "own stream";
      t.time(std::string("cudaLaunchKernelEx: empty kernel, no parameters, ") + on + when, [&] {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(1);
        cfg.blockDim = dim3(32);
        cfg.stream = legacy ? nullptr : stream;
        CHECK_CUDA(cudaLaunchKernelEx(&cfg, empty_kernel));
      });
      t.time(std::string("cudaLaunchKernelEx: empty kernel, 1 KiB parameters, PDL, ") + on + when, [&] {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1] = {};
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = dim3(132);
        cfg.blockDim = dim3(384);
        cfg.stream = legacy ? nullptr : stream;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        CHECK_CUDA(cudaLaunchKernelEx(&cfg, empty_kernel_params<1024>, blob));
      });
    }
  };
  floor_rows("");

  // ------------------------------------------------------------ pieces
  const int64_t B = 1, H = 16, S = 128, D = 64;
  DeviceTensor q(B * H * S * D * 2), k(B * H * S * D * 2), v(B * H * S * D * 2), o(B * H * S * D * 2),
      lse(B * H * S * 4);
  t.time("cudaPointerGetAttributes (one pointer)", [&] {
    cudaPointerAttributes attr{};
    CHECK_CUDA(cudaPointerGetAttributes(&attr, k.ptr));
  });
  CUtensorMap map;
  cuuint64_t dims[4] = {cuuint64_t(D), cuuint64_t(S), cuuint64_t(H), cuuint64_t(B)};
  cuuint64_t strides[3] = {cuuint64_t(D * 2), cuuint64_t(S * D * 2), cuuint64_t(H * S * D * 2)};
  cuuint32_t box[4] = {64, 128, 1, 1}, estr[4] = {1, 1, 1, 1};
  auto encode = [&](PFN_cuTensorMapEncodeTiled_v12000 fn) {
    CUresult r = fn(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, k.ptr, dims, strides, box, estr,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
      std::fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", int(r));
      std::exit(1);
    }
  };
  // The driver entry point is looked up through the runtime, as CuTe does:
  // this binary does not link libcuda (it loads on machines without a GPU).
  auto lookup = [] {
    void* pfn = nullptr;
    cudaDriverEntryPointQueryResult qr;
    CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pfn, 12000, cudaEnableDefault, &qr));
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(pfn);
  };
  PFN_cuTensorMapEncodeTiled_v12000 const encode_fn = lookup();
  t.time("cuTensorMapEncodeTiled (one TMA descriptor, function pointer looked up once)",
         [&] { encode(encode_fn); });
  t.time("cudaGetDriverEntryPointByVersion + cuTensorMapEncodeTiled (CuTe's make_tma_copy)",
         [&] { encode(lookup()); });

  // ------------------------------------------------------------ the entry points
  auto view = [&](DeviceTensor& x, int64_t s) {
    return flashcore::make_bhsd(x.ptr, DType::kFloat16, B, H, s, D, flashcore::Device::kCUDA, 0);
  };
  flashcore::AttentionArgs args;
  args.q = view(q, S);
  args.k = view(k, S);
  args.v = view(v, S);
  args.out = view(o, S);
  flashcore::Problem problem;
  t.time("validate(): 4 CUDA tensors (pointer checks included)",
         [&] { check(flashcore::validate(args, &problem), "validate"); });
  t.time("attention_forward: fp16 B1 H16 S128 D64, BHSD",
         [&] { check(flashcore::attention_forward(args, stream), "attention_forward"); });
  t.time("attention_forward: as above, on the legacy default stream (PyTorch's default)",
         [&] { check(flashcore::attention_forward(args, nullptr), "attention_forward"); });
  flashcore::AttentionArgs bshd = args;
  for (auto* tv : {&bshd.q, &bshd.k, &bshd.v, &bshd.out}) {
    *tv = flashcore::make_bshd(tv->data, DType::kFloat16, B, H, S, D, flashcore::Device::kCUDA, 0);
  }
  bshd.lse = flashcore::make_bhsd(lse.ptr, DType::kFloat32, B, H, S, 1, flashcore::Device::kCUDA, 0);
  bshd.causal = true;
  t.time("attention_forward: fp16 B1 H16 S128 D64, BSHD, causal, with LSE",
         [&] { check(flashcore::attention_forward(bshd, stream), "attention_forward"); });
  // Alternating between two sets of tensors (a model's layers): nothing is
  // reused from the previous call.
  DeviceTensor q2(B * H * S * D * 2), o2(B * H * S * D * 2);
  flashcore::AttentionArgs other = args;
  other.q = view(q2, S);
  other.out = view(o2, S);
  bool flip = false;
  t.time("attention_forward: as above, alternating between two sets of tensors", [&] {
    flip = !flip;
    check(flashcore::attention_forward(flip ? other : args, stream), "attention_forward");
  });

  // q, k, v and out as slices of one allocation, as PyTorch's caching
  // allocator or a packed QKV projection hands them: validation asks CUDA
  // once per allocation (src/api/device_memory.h).
  DeviceTensor packed(4 * B * H * S * D * 2);
  flashcore::AttentionArgs one = args;
  {
    char* base = static_cast<char*>(packed.ptr);
    for (auto* tv : {&one.q, &one.k, &one.v, &one.out}) {
      tv->data = base;
      base += B * H * S * D * 2;
    }
  }
  t.time("validate(): 4 CUDA tensors in one allocation",
         [&] { check(flashcore::validate(one, &problem), "validate"); });
  t.time("attention_forward: fp16 B1 H16 S128 D64, BHSD, tensors in one allocation",
         [&] { check(flashcore::attention_forward(one, stream), "attention_forward"); });

  fc_attention_args c;
  fc_attention_args_init(&c);
  auto cview = [&](DeviceTensor& x) {
    fc_tensor tv = {};
    tv.data = x.ptr;
    tv.dtype = FC_FLOAT16;
    tv.device = FC_DEVICE_CUDA;
    int64_t shape[4] = {B, H, S, D}, st[4] = {H * S * D, S * D, D, 1};
    std::memcpy(tv.shape, shape, sizeof(shape));
    std::memcpy(tv.strides, st, sizeof(st));
    return tv;
  };
  c.q = cview(q);
  c.k = cview(k);
  c.v = cview(v);
  c.out = cview(o);
  t.time("fc_attention_forward (C ABI): fp16 B1 H16 S128 D64, BHSD", [&] {
    if (fc_attention_forward(&c, stream) != FC_OK) {
      std::fprintf(stderr, "fc_attention_forward: %s\n", fc_last_error());
      std::exit(1);
    }
  });

  floor_rows(" (again, at the end)");
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUDA(cudaStreamDestroy(stream));
  if (csv != nullptr) {
    FILE* f = std::fopen(csv, "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", csv);
      return 1;
    }
    std::fprintf(f, "gpu,what,median_us,min_us,calls,reps\n");
    for (const Row& r : t.rows) {
      std::fprintf(f, "\"%s\",\"%s\",%.4f,%.4f,%d,%d\n", prop.name, r.name.c_str(), r.median_us, r.min_us, calls,
                   reps);
    }
    std::fclose(f);
  }
  return 0;
}
