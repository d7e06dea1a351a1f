/*
 * flashcore C ABI: exact attention O = softmax(Q K^T * scale) V.
 *
 * This header is the C interface's documentation. It is plain C99 (and valid
 * C++); it needs no CUDA headers. It mirrors the C++ API in attention.h:
 * fc_attention_forward() behaves exactly like flashcore::attention_forward().
 *
 * Tensors
 *   Every tensor is described by an fc_tensor: a data pointer, a dtype, a
 *   logical rank-4 shape (batch, heads, seqlen, head_dim) and strides in
 *   ELEMENTS (not bytes). Memory layout is whatever the strides say, so BHSD,
 *   BSHD and strided views of bigger buffers are all the same call.
 *     q   (B, Hq,  Sq, D)      k, v (B, Hkv, Sk, D), Hq % Hkv == 0 (GQA/MQA)
 *     out (B, Hq,  Sq, D), same dtype as q
 *     lse (B, Hq,  Sq, 1) float32, natural log; optional (data == NULL skips it)
 *   Supported: D in {64, 96, 128, 256}; float32/float16/bfloat16 on the CPU,
 *   float16/bfloat16 on CUDA. Layout rule (both devices): strides[3] == 1,
 *   data 16-byte aligned, strides[0..2] whole multiples of 16 bytes.
 *   A problem with batch, heads, seqlen_q or head_dim equal to 0 is a valid
 *   no-op (data may then be NULL). seqlen_k == 0 gives out = 0, lse = -inf.
 *
 * Masking
 *   Causal and sliding-window masks are aligned to the bottom-right corner:
 *   query row i may attend key j iff
 *     j >= i + (Sk - Sq) - window_left    (when window_left  >= 0)
 *     j <= i + (Sk - Sq) + window_right   (when window_right >= 0)
 *   causal != 0 means window_right = 0. A row with no allowed key outputs
 *   zeros and lse = -inf.
 *
 * Errors
 *   Functions returning int return an fc_status value. On failure nothing is
 *   written to out/lse, and fc_last_error() names the offending argument.
 *
 * Threads
 *   All functions may be called from any thread concurrently. The error
 *   message is per thread.
 */
#ifndef FLASHCORE_FLASHCORE_H_
#define FLASHCORE_FLASHCORE_H_

#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define FC_API __attribute__((visibility("default")))
#else
#define FC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes; the same numbers as flashcore::StatusCode. */
typedef enum fc_status {
  FC_OK = 0,
  FC_ERR_INVALID_ARGUMENT = 1, /* a bad argument; fc_last_error() names it */
  FC_ERR_NOT_SUPPORTED = 2,    /* valid, but not implemented (head_dim, dtype on device, build without CUDA) */
  FC_ERR_CUDA = 3,             /* a CUDA runtime call failed */
  FC_ERR_INTERNAL = 4          /* a bug or out of host memory */
} fc_status;

/* Element types; the same numbers as flashcore::DType. */
typedef enum fc_dtype { FC_FLOAT32 = 0, FC_FLOAT16 = 1, FC_BFLOAT16 = 2 } fc_dtype;

/* Where a tensor's memory lives; the same numbers as flashcore::Device. */
typedef enum fc_device { FC_DEVICE_CPU = 0, FC_DEVICE_CUDA = 1 } fc_device;

/* A non-owning view of a rank-4 tensor. The enum-valued fields are int32_t
 * so the struct layout does not depend on the compiler's enum size. */
typedef struct fc_tensor {
  void* data;          /* first element; may be NULL only if the tensor has 0 elements */
  int32_t dtype;       /* an fc_dtype */
  int64_t shape[4];    /* (batch, heads, seqlen, head_dim); (batch, heads, seqlen_q, 1) for lse */
  int64_t strides[4];  /* in elements, >= 0 */
  int32_t device;      /* an fc_device */
  int32_t device_index; /* CUDA ordinal; ignored for FC_DEVICE_CPU */
} fc_tensor;

/* Arguments of fc_attention_forward(). Always start from
 * fc_attention_args_init() so fields added later get their defaults. */
typedef struct fc_attention_args {
  fc_tensor q;
  fc_tensor k;
  fc_tensor v;
  fc_tensor out;
  fc_tensor lse;          /* optional: lse.data == NULL to skip */

  float softmax_scale;    /* 0 means 1/sqrt(head_dim); must be finite */
  int32_t causal;         /* nonzero: causal (bottom-right aligned) */
  int64_t window_left;    /* -1: unbounded; else >= 0 */
  int64_t window_right;   /* -1: unbounded; else >= 0; must be -1 or 0 when causal */

  /* Overrides of the tuned kernel choice (experiments, autotuning);
   * 0 lets dispatch choose; negative values are rejected. */
  int32_t block_m;
  int32_t block_n;
  int32_t num_splits;

  /* Reserved for the variable-length and KV-cache entry points; must be NULL. */
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  const int32_t* cache_seqlens;
  const int32_t* block_table;
} fc_attention_args;

/* Sets every field of *args to its default: all tensors empty (NULL data,
 * zero shape and strides, float16, CPU), softmax_scale 0, causal 0, both
 * windows -1, kernel overrides 0, reserved pointers NULL. Does nothing when
 * args is NULL. */
FC_API void fc_attention_args_init(fc_attention_args* args);

/* Runs attention. CPU tensors run on the multi-threaded CPU reference
 * backend, synchronously, and `stream` is ignored. CUDA tensors run on the
 * sm_90a kernels, enqueued on `stream` (a cudaStream_t; NULL is the legacy
 * default stream) without host synchronization or allocation.
 * Returns FC_OK or an fc_status error code; args == NULL returns
 * FC_ERR_INVALID_ARGUMENT. Never aborts on bad input. */
FC_API int fc_attention_forward(const fc_attention_args* args, void* stream);

/* The message of the last failed fc_attention_forward() call made by the
 * calling thread, or "" if that call succeeded or none was made. The pointer
 * stays valid until this thread's next fc_attention_forward() call. */
FC_API const char* fc_last_error(void);

/* Library version, "MAJOR.MINOR.PATCH". Static storage. */
FC_API const char* fc_version(void);

/* 1 when this build contains the CUDA backend, 0 otherwise. */
FC_API int fc_built_with_cuda(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHCORE_FLASHCORE_H_ */
