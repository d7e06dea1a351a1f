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
 * Serving (the same rules as attention.h's AttentionArgs)
 *   Variable-length batch: set cu_seqlens_q and cu_seqlens_k (int32 prefix
 *   sums, num_seqs + 1 entries each, starting at 0). q/out are then packed
 *   (1, Hq, total_q, D), lse (1, Hq, total_q, 1), k/v (1, Hkv, total_k, D);
 *   sequence b owns q rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) and key rows
 *   [cu_seqlens_k[b], cu_seqlens_k[b+1]). max_seqlen_q/max_seqlen_k bound
 *   every sequence's length. Masks are bottom-right aligned per sequence.
 *   KV cache: set cache_seqlens (int32, B entries). q is (B, Hq, Sq, D) and
 *   sequence b attends to the first cache_seqlens[b] + S_new keys of its
 *   cache: contiguous k/v (B, Hkv, capacity, D), or, with block_table, a
 *   page pool k/v (num_pages, Hkv, page_size, D), page_size a multiple of
 *   16, and block_table (B, max_pages_per_seq) int32 with row stride
 *   block_table_stride: key j of sequence b is row j % page_size of page
 *   block_table[b * block_table_stride + j / page_size]. Optional k_new/v_new
 *   (B, Hkv, S_new, D) are written into the cache at
 *   [cache_seqlens[b], cache_seqlens[b] + S_new) before attention runs
 *   (cache_seqlens itself is not updated). cu_seqlens_q with cache_seqlens
 *   is FC_ERR_NOT_SUPPORTED for now.
 *   Metadata arrays live where the tensors live (device memory of the same
 *   GPU for CUDA tensors). fc_attention_forward() checks their shapes and
 *   combinations, never their contents, on CUDA (the kernels clip every
 *   index); fc_check_serving_metadata() checks the contents. The CPU backend
 *   always checks the contents. On CUDA, serving calls support head dims
 *   64, 96, 128 and 256 (at 256 in 64-key blocks at every length, so a
 *   sequence of 2k+ keys, 4k+ with a mask, matches a plain call bit for bit
 *   only when that call sets block_n = 64).
 *   A sequence with no keys outputs zeros and lse = -inf.
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

  float softmax_scale;    /* 0 means 1/sqrt(head_dim); finite, >= 0 */
  int32_t causal;         /* nonzero: causal (bottom-right aligned) */
  int64_t window_left;    /* -1: unbounded; else >= 0 */
  int64_t window_right;   /* -1: unbounded; else >= 0; must be -1 or 0 when causal */

  /* Overrides of the tuned kernel choice (experiments, autotuning);
   * 0 lets dispatch choose; negative values are rejected. */
  int32_t block_m;
  int32_t block_n;
  int32_t num_splits;

  /* Serving metadata (see "Serving" above); NULL for a plain call. int32
   * arrays on the tensors' device, 4-byte aligned. */
  const int32_t* cu_seqlens_q;  /* num_seqs + 1 prefix sums of the q rows */
  const int32_t* cu_seqlens_k;  /* num_seqs + 1 prefix sums of the k/v rows */
  const int32_t* cache_seqlens; /* B tokens already in each sequence's cache */
  const int32_t* block_table;   /* (B, max_pages_per_seq), row stride block_table_stride */

  /* Fields below were added after the first release; fc_attention_args_init
   * sets them to "not used". */
  int64_t num_seqs;             /* with cu_seqlens_q: the batch; else 0 */
  int64_t max_seqlen_q;         /* with cu_seqlens_q: bound on every q length; else 0 */
  int64_t max_seqlen_k;         /* with cu_seqlens_q: bound on every k length; else 0 */
  int64_t block_table_stride;   /* with block_table: >= max_pages_per_seq; else 0 */
  int64_t max_pages_per_seq;    /* with block_table: > 0; else 0 */
  fc_tensor k_new;              /* optional (k_new.data == NULL: none): (B, Hkv, S_new, D) */
  fc_tensor v_new;              /* with k_new: same shape and dtype */
  void* workspace;              /* split-KV workspace and varlen tile list (CUDA): fc_attention_workspace_size() bytes, 16-byte aligned */
  int64_t workspace_bytes;      /* size of workspace in bytes */
} fc_attention_args;

/* Sets every field of *args to its default: all tensors (k_new and v_new
 * included) empty (NULL data, zero shape and strides, float16, CPU),
 * softmax_scale 0, causal 0, both windows -1, kernel overrides 0, serving
 * pointers NULL and their sizes 0, no workspace. Does nothing when args is
 * NULL. */
FC_API void fc_attention_args_init(fc_attention_args* args);

/* Runs attention. CPU tensors run on the multi-threaded CPU reference
 * backend, synchronously, and `stream` is ignored. CUDA tensors run on the
 * sm_90a kernels, enqueued on `stream` (a cudaStream_t; NULL is the legacy
 * default stream) without host synchronization or allocation.
 * Returns FC_OK or an fc_status error code; args == NULL returns
 * FC_ERR_INVALID_ARGUMENT. Never aborts on bad input. */
FC_API int fc_attention_forward(const fc_attention_args* args, void* stream);

/* fc_attention_forward with the split-KV workspace allocated on demand:
 * when args->workspace is NULL and the call needs one, allocate(context,
 * bytes) is called once, on this thread, before anything is enqueued. It
 * returns at least `bytes` bytes of device memory, 16-byte aligned, usable
 * by work enqueued on `stream`, or NULL (the call then returns
 * FC_ERR_INVALID_ARGUMENT). The arguments are validated once, instead of
 * twice for fc_attention_workspace_size followed by fc_attention_forward.
 * allocate == NULL is fc_attention_forward. The allocation stays the
 * caller's, also when the call then fails. */
typedef void* (*fc_workspace_alloc_fn)(void* context, int64_t bytes);
FC_API int fc_attention_forward_alloc(const fc_attention_args* args, void* stream, fc_workspace_alloc_fn allocate,
                                      void* context);

/* Stores in *bytes the workspace fc_attention_forward(args) needs (0 when
 * none; always 0 for CPU tensors). Reads only shapes and flags, never
 * tensor or metadata contents. Validates args like fc_attention_forward();
 * returns FC_OK or an error code (args or bytes NULL: FC_ERR_INVALID_ARGUMENT). */
FC_API int fc_attention_workspace_size(const fc_attention_args* args, int64_t* bytes);

/* Checks the serving metadata's contents: cu_seqlens start at 0, never
 * decrease, end at the packed row counts, every length within
 * max_seqlen_q/k; cache_seqlens[b] >= 0 and cache_seqlens[b] + S_new within
 * the capacity; the block-table entries of the pages in use inside
 * [0, num_pages). For CUDA tensors it copies the metadata to the host on
 * `stream` and synchronizes it: an API-boundary or debugging check, not for
 * the hot path or CUDA-graph capture. FC_OK when args is valid (a plain call
 * has no metadata and passes); else an error code and fc_last_error(). */
FC_API int fc_check_serving_metadata(const fc_attention_args* args, void* stream);

/* The message of the last failed flashcore call (any function above that
 * returns an fc_status) made by the calling thread, or "" if that call
 * succeeded or none was made. The pointer stays valid until this thread's
 * next such call. */
FC_API const char* fc_last_error(void);

/* Library version, "MAJOR.MINOR.PATCH". Static storage. */
FC_API const char* fc_version(void);

/* 1 when this build contains the CUDA backend, 0 otherwise. */
FC_API int fc_built_with_cuda(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHCORE_FLASHCORE_H_ */
