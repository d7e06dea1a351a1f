// Argument checking for attention_forward, kept apart from the dispatch so it
// can be unit-tested on a machine without a GPU.
#pragma once

#include <cstdint>
#include <exception>
#include <sstream>
#include <string>

#include "common/problem.h"
#include "flashcore/attention.h"

namespace flashcore {

// Concatenates anything streamable: messages.
template <class... Ts>
std::string str_cat(const Ts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

// Runs f() -> Status, turning any exception into kInternal: the public API
// backs a C ABI and never throws.
template <class F>
Status catch_all(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("internal error: ") + e.what());
  } catch (...) {
    return Status(StatusCode::kInternal, "internal error: unknown exception");
  }
}

// Checks every field of `args` and, on success, fills *out with the resolved
// problem (default scale, windows, GQA group, ...). Structural checks (enum
// values, sizes, dtypes, shapes, strides, alignment, devices agreeing) run
// first and touch no memory, so they behave the same with or without a GPU.
// Only then, for CUDA tensors, the pointers are checked against the CUDA
// runtime. On error the message names the offending argument and says what
// was expected; *out is then unspecified.
Status validate(const AttentionArgs& args, Problem* out);

// The serving metadata as host arrays: for the CPU backend the caller's own
// pointers (host_metadata), for CUDA a host copy. block_table_stride is the
// row stride of block_table as given here (a copy may be packed tighter).
struct HostMetadata {
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  const int32_t* cache_seqlens = nullptr;
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
};
HostMetadata host_metadata(const AttentionArgs& args);

// The value checks of check_serving_metadata (attention.h) on host arrays,
// for a problem validate() accepted: reads only the entries the problem
// uses, so it is safe on any metadata that has the documented sizes. The
// CPU backend runs it before reading anything through the metadata.
Status check_metadata_values(const Problem& problem, const HostMetadata& metadata);

// The cache capacity for messages: "64 (k.shape[2])" or
// "64 (max_pages_per_seq * page_size = 4 * 16)".
std::string capacity_str(int64_t capacity, bool paged, int64_t max_pages_per_seq, int64_t cache_dim);

// Head dims with kernels (and accepted by the CPU reference, to keep the two
// backends interchangeable).
bool is_supported_head_dim(int64_t head_dim);

}  // namespace flashcore
