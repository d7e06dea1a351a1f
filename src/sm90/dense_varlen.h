// A variable-length call whose sequences all have the same query length and
// the same key length is a dense batch, and dispatch runs it as one: on the
// plain kernels, with every variant they have (192-row tiles, K/V multicast,
// the tail plan, issue-ahead, Q's loader thread), instead of the serving
// kernels.
//
// When it is one: validated metadata (check_serving_metadata) has
// cu_seqlens[0] = 0, lengths of at most max_seqlen and cu_seqlens[num_seqs]
// = the packed rows, so packed rows of num_seqs * max_seqlen leave every
// sequence exactly max_seqlen rows, sequence b starting at row
// b * max_seqlen. That needs only shapes, never the metadata's contents: the
// choice is made on the host with no copy or synchronization, and holds in
// graph capture. (Bad metadata that claims it gives wrong numbers, as it
// does on the serving kernels, never an access outside the tensors: the
// dense views cover exactly the packed rows.)
//
// Why the bits stay: a plain call gives a sequence the bits of that sequence
// alone (batch invariance), and a varlen call gives it the same bits (GPU
// test VarlenMatchesPlainCallsBitwise) provided both take the same key block
// and neither splits its keys. So: at head dim 256 the key block of the
// serving kernels (64 keys; a plain call takes 80 from 2k keys), and only
// calls that may not split their keys (split_calls.h may_split_keys:
// sequences of more than 64 query rows, which split on neither path). GPU test
// UniformVarlenRunsAsADenseBatch checks the bits and that dispatch took it.
//
// Host-only and CUDA-free: the CPU tests read it.
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "flashcore/attention.h"
#include "sm90/split_calls.h"
#include "sm90/tuning_table.h"

namespace flashcore::sm90 {

// FLASHCORE_DENSE_VARLEN=0 in the environment keeps such calls on the
// serving kernels (the A/B baseline).
inline bool dense_varlen_allowed() {
  static const bool allowed = env_switch_on("FLASHCORE_DENSE_VARLEN");
  return allowed;
}

// Whether a varlen call is a dense batch dispatch may run as one (above).
inline bool varlen_is_dense_batch(const Problem& p) {
  return p.varlen_q && p.varlen_k && !p.kv_cache && p.batch > 0 && p.seqlen_k > 0 && !may_split_keys(p) &&
         p.total_q == p.batch * p.seqlen_q && p.total_k == p.batch * p.seqlen_k;
}

// A packed (1, H, total, D) view as (num_seqs, H, rows, D): sequence b's rows
// start `rows` packed rows after sequence b - 1's.
inline TensorView packed_as_batch(TensorView t, int64_t batch, int64_t rows) {
  t.shape[0] = batch;
  t.shape[2] = rows;
  t.stride[0] = rows * t.stride[2];
  return t;
}

// The dense problem of a varlen call varlen_is_dense_batch accepts: no
// per-sequence lengths, and at head dim 256 the serving kernels' key block
// unless the caller picked one. num_splits is dropped: such a call splits on
// neither path, and a plain call would reject the override.
inline Problem dense_problem(Problem p) {
  p.varlen_q = p.varlen_k = false;
  p.total_q = p.total_k = 0;
  if (p.config.block_n == 0) p.config.block_n = tuned_block_n(int(p.head_dim), p.seqlen_k, !p.has_mask(), true);
  p.config.num_splits = 0;
  return p;
}

// Its arguments: the same tensors as (num_seqs, H, max_seqlen, D) views.
inline AttentionArgs dense_args(AttentionArgs a, const Problem& p) {
  a.q = packed_as_batch(a.q, p.batch, p.seqlen_q);
  a.out = packed_as_batch(a.out, p.batch, p.seqlen_q);
  if (a.lse.data != nullptr) a.lse = packed_as_batch(a.lse, p.batch, p.seqlen_q);
  a.k = packed_as_batch(a.k, p.batch, p.seqlen_k);
  a.v = packed_as_batch(a.v, p.batch, p.seqlen_k);
  a.cu_seqlens_q = a.cu_seqlens_k = nullptr;
  a.num_seqs = a.max_seqlen_q = a.max_seqlen_k = 0;
  return a;
}

}  // namespace flashcore::sm90
