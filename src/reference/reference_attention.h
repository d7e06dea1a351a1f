// CPU reference backend. It runs the same blocked online-softmax as the GPU
// kernel (key blocks of kBlockN, running max and sum, exp2 of log2-scaled
// scores), in fp32, so the two can be compared tightly and the reference is
// usable on its own for host tensors.
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "flashcore/attention.h"

namespace flashcore::reference {

// Keys per online-softmax step; equal to the GPU kernel's block_n so rounding
// happens at the same places.
constexpr int64_t kBlockN = 128;

// Serving calls (attention.h) run per sequence: varlen rows are addressed
// through cu_seqlens, cache keys through cache_seqlens and the block table,
// with each sequence's own lengths for the masks; k_new/v_new are copied
// into the cache before any attention row is computed. The metadata is
// checked (check_metadata_values) before anything is read through it.
//
// Computes out (and lse when problem.has_lse) for validated arguments, using
// std::thread::hardware_concurrency() threads. Results are bitwise identical
// for any thread count: each output row is produced by one thread, by the
// same sequence of float operations.
Status forward(const AttentionArgs& args, const Problem& problem);

// Same, with an explicit thread count (<= 0: hardware_concurrency). Exposed
// so tests can check that the thread count does not change results.
Status forward(const AttentionArgs& args, const Problem& problem, int num_threads);

}  // namespace flashcore::reference
