// attention_forward: validate, then hand the resolved problem to a backend.
#include <cstdint>

#include "api/validation.h"
#include "flashcore/attention.h"
#include "reference/reference_attention.h"

#if FLASHCORE_WITH_CUDA
#include "sm90/sm90_forward.h"
#endif

namespace flashcore {
namespace {

// allocate: null, or attention_forward's workspace allocator (attention.h).
Status dispatch(const AttentionArgs& args, cudaStream_t stream, WorkspaceAllocFn allocate, void* context) {
  Problem problem;
  Status status = validate(args, &problem);
  if (!status.ok()) return status;
  // The CPU backend reads the serving metadata on the host: bad metadata is
  // an error before anything runs (even when there is nothing to compute).
  if (problem.device == Device::kCPU) {
    status = check_metadata_values(problem, host_metadata(args));
    if (!status.ok()) return status;
  }
  // No rows to produce. (seqlen_k == 0 with rows is not empty: every row is
  // fully masked, and the backends write zeros and LSE = -inf.)
  if (problem.is_empty()) return Status::Ok();

  if (problem.device == Device::kCPU) return reference::forward(args, problem);
#if FLASHCORE_WITH_CUDA
  return sm90::forward(args, problem, stream, allocate, context);
#else
  (void)stream, (void)allocate, (void)context;  // validate() already refused CUDA tensors in this build
  return Status(StatusCode::kInternal, "CUDA tensor reached dispatch in a build without CUDA");
#endif
}

}  // namespace

// The public API promises never to throw (it backs a C ABI), so anything a
// backend or the standard library throws becomes kInternal.
Status attention_forward(const AttentionArgs& args, cudaStream_t stream) {
  return attention_forward(args, stream, nullptr, nullptr);
}

Status attention_forward(const AttentionArgs& args, cudaStream_t stream, WorkspaceAllocFn allocate,
                         void* context) {
  return catch_all([&] { return dispatch(args, stream, allocate, context); });
}

Status attention_workspace_size(const AttentionArgs& args, int64_t* bytes) {
  if (bytes == nullptr) return Status(StatusCode::kInvalidArgument, "bytes is null");
  *bytes = 0;
  return catch_all([&] {
    Problem problem;
    Status status = validate(args, &problem);
    if (!status.ok()) return status;
    if (problem.is_empty() || problem.device == Device::kCPU) return Status::Ok();
#if FLASHCORE_WITH_CUDA
    *bytes = sm90::workspace_size(problem);
#endif
    return Status::Ok();
  });
}

}  // namespace flashcore
