// Entry from the API layer into the Hopper (sm_90a) backend. The arguments
// have been validated and resolved into `problem` already.
#pragma once

#include "common/problem.h"
#include "flashcore/attention.h"

namespace flashcore::sm90 {

// allocate (may be null): the split-KV workspace's allocator when
// args.workspace is null (attention.h), called once the call is known to
// run and before anything is enqueued.
Status forward(const AttentionArgs& args, const Problem& problem, cudaStream_t stream, WorkspaceAllocFn allocate,
               void* context);

// Bytes of split-KV workspace forward() needs for `problem` (0: none).
int64_t workspace_size(const Problem& problem);

}  // namespace flashcore::sm90
