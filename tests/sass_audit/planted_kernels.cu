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
