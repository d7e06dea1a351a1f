// Argument checking for attention_forward, kept apart from the dispatch so it
// can be unit-tested on a machine without a GPU.
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "flashcore/attention.h"

namespace flashcore {

// Checks every field of `args` and, on success, fills *out with the resolved
// problem (default scale, windows, GQA group, ...). Structural checks (enum
// values, sizes, dtypes, shapes, strides, alignment, devices agreeing) run
// first and touch no memory, so they behave the same with or without a GPU.
// Only then, for CUDA tensors, the pointers are checked against the CUDA
// runtime. On error the message names the offending argument and says what
// was expected; *out is then unspecified.
Status validate(const AttentionArgs& args, Problem* out);

// Head dims with kernels (and accepted by the CPU reference, to keep the two
// backends interchangeable).
bool is_supported_head_dim(int64_t head_dim);

}  // namespace flashcore
