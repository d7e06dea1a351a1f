// The split-KV policy, in one place and free of CUDA headers so that the CPU
// tests check it (tests/cpp/test_split_policy.cpp).
//
// Batch invariance: how a sequence is cut depends only on its own length and
// on constants of the call's shape (head count, the num_splits override),
// never on the batch it is in.
//
// Auto mode: a sequence of L keys is cut into chunks of the smallest multiple
// of kSplitMinKeys keys that needs at most max_chunks of them, max_chunks =
// ceil(kSplitTargetTiles / KV heads): one decode sequence alone (its query
// heads packed per KV head) spreads over about kSplitTargetTiles tiles,
// which fills an H100's 132 SMs, and no more, because every chunk costs a
// tile prologue and a partial result. KV heads, not the heads a kernel sees,
// so that varlen and KV-cache calls cut a sequence the same way.
// Measured on an H100 (tools/decode-sweep; bf16, 32 query / 8 KV heads, d128):
// batch 1, 32k keys: 16 chunks of 2048 keys 52 us, 128 chunks of 256 keys
// 61 us; batch 64, 4k keys: no split 354 us, 4 chunks 371, 16 chunks 388.
// A sequence of at most kSplitMinKeys keys (kSplitMinKeysWide at head dim
// 256) never splits.
// Head dim 256 cuts in multiples of kSplitMinKeysWide: it has no 64-row
// tile to run a split sequence's chunks in one CTA (chunk_fold.h), so every
// chunk is a tile of its own, which large batches pay for, and a 256-key
// chunk is only four 64-key blocks. Measured on an H200 (bench/results/
// 2026-11-29l-h200/call3-* to call6-*; bf16, 16 query / 8 KV heads, d256,
// contiguous cache), cuDNN's time over flashcore's: 4k keys, 16 chunks of
// 256: 1.25x at batch 1, 1.00x at 16, 0.98x at 64; 8 of 512: 1.08-1.10x,
// 1.09-1.14x, 1.06-1.09x (a paged cache of 64-key pages at batch 1: 0.94x,
// against 1.19x). At 32k keys the 16 chunks (of 2048) stay: 1.28-1.31x at
// batch 1, where 8 of 4096 (a lower chunk limit instead) gave 0.98x.
//
// Override (num_splits = n > 1): chunks of one size for the whole call, n of
// them for its longest sequence (which makes it depend on the batch).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FLASHCORE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FLASHCORE_HOST_DEVICE inline
#endif

namespace flashcore::sm90 {

constexpr int64_t kSplitMinKeys = 256;  // 2 key blocks of 128: a multiple of every block_n
constexpr int64_t kSplitMinKeysWide = 512;  // head dim 256 (64-key blocks)
constexpr int64_t kSplitOverrideUnit = 128;  // chunk sizes of the num_splits override are multiples of this
constexpr int64_t kSplitTargetTiles = 128;
// Query rows a sequence may have (after GQA packing) and still split: the
// smallest block_m, so the choice never depends on the tile dispatch picked,
// and the only tiles that can also run the chunks in one CTA (chunk_fold.h).
constexpr int kSplitMaxRows = 64;

// The unit chunks are multiples of, for a call of head dim `head_dim`.
constexpr FLASHCORE_HOST_DEVICE int64_t split_min_keys(int64_t head_dim) {
  return head_dim > 128 ? kSplitMinKeysWide : kSplitMinKeys;
}

// Chunk limit of auto mode for a call with `heads` KV heads.
FLASHCORE_HOST_DEVICE int64_t split_max_chunks_for_heads(int64_t heads) {
  return heads >= kSplitTargetTiles ? 1 : (kSplitTargetTiles + heads - 1) / heads;
}

// The functions below are templates on the integer type: the host sizes
// plans in int64_t, the kernels use int32_t (lengths are below 2^30 on the
// GPU), which keeps 64-bit divisions, and the branches of their slow path,
// out of the kernels.

// Keys per chunk of a sequence of `keys` keys. max_chunks = 0: every chunk
// has split_keys keys (the override).
template <class Int>
FLASHCORE_HOST_DEVICE Int split_keys_for(Int split_keys, Int max_chunks, Int keys) {
  if (max_chunks <= 0) return split_keys;
  Int const per_chunk = (keys + max_chunks - 1) / max_chunks;
  Int const units = (per_chunk + split_keys - 1) / split_keys;
  return (units > 1 ? units : 1) * split_keys;
}

// Chunks of a sequence whose last key to attend to is key `last` (>= 0).
template <class Int>
FLASHCORE_HOST_DEVICE Int split_chunks_for(Int split_keys, Int max_chunks, Int keys, Int last) {
  return last / split_keys_for(split_keys, max_chunks, keys) + 1;
}

// The most chunks any sequence of at most `keys` keys has: the grid and
// workspace size. Not simply the count of the longest sequence: the count is
// not monotonic in the length (4096 keys: 16 chunks of 256; 4097: 9 of 512).
template <class Int>
FLASHCORE_HOST_DEVICE Int split_chunks_bound(Int split_keys, Int max_chunks, Int keys) {
  Int n = (keys + split_keys - 1) / split_keys;
  if (max_chunks > 0 && max_chunks < n) n = max_chunks;
  return n > 1 ? n : 1;
}

}  // namespace flashcore::sm90
