// Kernels for the sass-audit self-test (tests/python/test_sass_audit.py).
// Each name says what the audit must conclude about it.

// Leaky: the trip count of a loop comes from a value loaded from global memory.
extern "C" __global__ void leaky_global_loop(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;  // an index branch: allowed
  float v = x[i];
  float acc = 0.f;
  for (int t = 0; t < int(v); ++t) acc += __sinf(acc + float(t));
  y[i] = acc;
}

// Leaky: a branch on a value read from shared memory, big enough that the
// compiler keeps it a branch instead of predicating it.
extern "C" __global__ void leaky_shared_branch(const float* x, float* y) {
  __shared__ float s[256];
  s[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
  __syncthreads();
  float v = s[(threadIdx.x + 1) & 255];
  if (v > 0.5f) {
    for (int t = 0; t < 64; ++t) v = __sinf(v) * __cosf(v + float(t));
  }
  y[blockIdx.x * 256 + threadIdx.x] = v;
}

// Clean: branches only on indices and loop counters; the data only flows
// through arithmetic and selects.
extern "C" __global__ void clean_select(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  float acc = 0.f;
  for (int t = 0; t < 16; ++t) acc += v > 0.f ? __sinf(v + float(t)) : 0.5f * v;
  y[i] = acc;
}

// Metadata (lengths, offsets) read the one way flashcore's kernels read it
// (load_index in src/sm90/seq_info.h): branches on it are allowed.
__device__ __forceinline__ int load_index(const int* p) {
  int v;
  asm volatile("ld.global.nc.L2::256B.s32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// Clean: the loop bound is a sequence length from metadata.
extern "C" __global__ void clean_metadata_loop(const int* lengths, const float* x, float* y) {
  int n = load_index(lengths + blockIdx.x);
  float acc = 0.f;
  for (int t = 0; t < n; ++t) acc += __sinf(x[t] + acc);
  y[blockIdx.x] = acc;
}

// Leaky: a metadata-style load whose address comes from tensor data is
// still tainted (the index itself leaks the data).
extern "C" __global__ void leaky_metadata_address(const int* lengths, const float* x, float* y) {
  int idx = int(x[blockIdx.x]);
  int n = load_index(lengths + idx);
  float acc = 0.f;
  for (int t = 0; t < n; ++t) acc += __sinf(acc + float(t));
  y[blockIdx.x] = acc;
}
