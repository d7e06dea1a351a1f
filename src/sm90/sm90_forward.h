// Entry from the API layer into the Hopper (sm_90a) backend. The arguments
// have been validated and resolved into `problem` already.
#pragma once

#include "common/problem.h"
#include "flashcore/attention.h"

namespace flashcore::sm90 {

Status forward(const AttentionArgs& args, const Problem& problem, cudaStream_t stream);

}  // namespace flashcore::sm90
