/* Compiled as C99: proves flashcore.h is a valid C header and that the
 * library links and runs from C. Exit status 0 on success. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashcore/flashcore.h"

enum { B = 1, H = 2, S = 20, D = 64, N = B * H * S * D };

/* 16-byte aligned slice of a malloc'd block (the TMA rule applies on the CPU too). */
static float* aligned_floats(size_t n, void** block) {
  *block = malloc(n * sizeof(float) + 16);
  if (*block == NULL) return NULL;
  return (float*)(((uintptr_t)*block + 15u) & ~(uintptr_t)15u);
}

static fc_tensor bhsd(float* data, int64_t s, int64_t d) {
  fc_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = FC_FLOAT32;
  t.shape[0] = B;
  t.shape[1] = H;
  t.shape[2] = s;
  t.shape[3] = d;
  t.strides[0] = H * s * d;
  t.strides[1] = s * d;
  t.strides[2] = d;
  t.strides[3] = 1;
  t.device = FC_DEVICE_CPU;
  return t;
}

int main(void) {
  void *bq, *bk, *bv, *bo, *bl;
  float* q = aligned_floats(N, &bq);
  float* k = aligned_floats(N, &bk);
  float* v = aligned_floats(N, &bv);
  float* o = aligned_floats(N, &bo);
  float* lse = aligned_floats(B * H * S, &bl);
  fc_attention_args args;
  int i, rc, failures = 0;
  if (!q || !k || !v || !o || !lse) return 2;

  /* Every value row is the same, so every output row must equal it. */
  for (i = 0; i < N; ++i) {
    q[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    k[i] = (float)((i * 13) % 7) / 7.0f - 0.4f;
    v[i] = 0.25f + (float)(i % D) / D;
  }

  fc_attention_args_init(&args);
  args.q = bhsd(q, S, D);
  args.k = bhsd(k, S, D);
  args.v = bhsd(v, S, D);
  args.out = bhsd(o, S, D);
  args.lse = bhsd(lse, S, 1);
  args.lse.strides[2] = 1;
  args.causal = 1;

  printf("flashcore %s (cuda: %d)\n", fc_version(), fc_built_with_cuda());
  rc = fc_attention_forward(&args, NULL);
  if (rc != FC_OK) {
    fprintf(stderr, "fc_attention_forward failed (%d): %s\n", rc, fc_last_error());
    return 1;
  }
  for (i = 0; i < N; ++i) {
    if (!(fabsf(o[i] - v[i]) < 1e-5f)) ++failures;
  }
  for (i = 0; i < B * H * S; ++i) {
    if (!isfinite(lse[i])) ++failures;
  }

  /* The serving helpers link and run from C (a plain call: no metadata). */
  {
    int64_t ws = -1;
    if (fc_attention_workspace_size(&args, &ws) != FC_OK || ws != 0) ++failures;
    if (fc_check_serving_metadata(&args, NULL) != FC_OK) ++failures;
  }

  /* An error: mismatched head_dim. */
  args.k.shape[3] = 96;
  rc = fc_attention_forward(&args, NULL);
  if (rc != FC_ERR_INVALID_ARGUMENT || strlen(fc_last_error()) == 0) ++failures;
  printf("expected error: %s\n", fc_last_error());
  if (fc_attention_forward(NULL, NULL) != FC_ERR_INVALID_ARGUMENT) ++failures;

  free(bq);
  free(bk);
  free(bv);
  free(bo);
  free(bl);
  printf("%s (%d failures)\n", failures ? "FAILED" : "OK", failures);
  return failures ? 1 : 0;
}
