// attention_forward: validate, then hand the resolved problem to a backend.
#include <exception>
#include <string>

#include "api/validation.h"
#include "flashcore/attention.h"
#include "reference/reference_attention.h"

#if FLASHCORE_WITH_CUDA
#include "sm90/sm90_forward.h"
#endif

namespace flashcore {
namespace {

Status dispatch(const AttentionArgs& args, cudaStream_t stream) {
  Problem problem;
  Status status = validate(args, &problem);
  if (!status.ok()) return status;
  // No rows to produce. (seqlen_k == 0 with rows is not empty: every row is
  // fully masked, and the backends write zeros and LSE = -inf.)
  if (problem.is_empty()) return Status::Ok();

  if (problem.device == Device::kCPU) return reference::forward(args, problem);
#if FLASHCORE_WITH_CUDA
  return sm90::forward(args, problem, stream);
#else
  (void)stream;  // validate() already refused CUDA tensors in this build
  return Status(StatusCode::kInternal, "CUDA tensor reached dispatch in a build without CUDA");
#endif
}

}  // namespace

// The public API promises never to throw (it backs a C ABI), so anything a
// backend or the standard library throws becomes kInternal.
Status attention_forward(const AttentionArgs& args, cudaStream_t stream) {
  try {
    return dispatch(args, stream);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("internal error: ") + e.what());
  } catch (...) {
    return Status(StatusCode::kInternal, "internal error: unknown exception");
  }
}

}  // namespace flashcore
