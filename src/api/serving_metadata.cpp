// check_serving_metadata: the value checks of the serving metadata
// (attention.h), on host arrays; for CUDA tensors after a copy to the host.
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "api/validation.h"
#include "common/problem.h"
#include "flashcore/attention.h"

#if FLASHCORE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace flashcore {
namespace {

Status invalid(std::string message) { return Status(StatusCode::kInvalidArgument, std::move(message)); }

// num_seqs + 1 prefix sums: start at 0, never decrease, every length within
// max_len, last entry = the packed rows.
Status check_cu_seqlens(const char* name, const int32_t* cu, int64_t num_seqs, int64_t total,
                        const char* total_name, int64_t max_len, const char* max_name) {
  if (cu[0] != 0) return invalid(str_cat(name, "[0] = ", cu[0], " must be 0"));
  for (int64_t b = 0; b < num_seqs; ++b) {
    const int64_t len = int64_t(cu[b + 1]) - cu[b];
    if (len < 0) {
      return invalid(str_cat(name, " must be non-decreasing: ", name, "[", b + 1, "] = ", cu[b + 1], " < ", name,
                             "[", b, "] = ", cu[b], " (sequence ", b, " would have length ", len, ")"));
    }
    if (len > max_len) {
      return invalid(str_cat("sequence ", b, " has ", len, " rows (", name, "[", b + 1, "] - ", name, "[", b,
                             "] = ", cu[b + 1], " - ", cu[b], "), more than ", max_name, " = ", max_len));
    }
  }
  if (cu[num_seqs] != total) {
    return invalid(str_cat(name, "[num_seqs] = ", name, "[", num_seqs, "] = ", cu[num_seqs], " must equal ",
                           total_name, " = ", total));
  }
  return Status::Ok();
}

// Cache lengths within the capacity (room for the appended tokens
// included); for a paged cache, the pages those keys occupy inside the pool.
Status check_cache(const Problem& p, const HostMetadata& m) {
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t cached = m.cache_seqlens[b];
    if (cached < 0) return invalid(str_cat("cache_seqlens[", b, "] = ", cached, " must be >= 0"));
    const int64_t keys = cached + p.seqlen_new;
    if (keys > p.seqlen_k) {
      const std::string appended =
          p.seqlen_new > 0 ? str_cat(" + ", p.seqlen_new, " new tokens (k_new.shape[2]) = ", keys) : "";
      return invalid(str_cat("sequence ", b, ": cache_seqlens[", b, "] = ", cached, appended,
                             " exceeds the cache capacity ",
                             capacity_str(p.seqlen_k, p.paged, p.max_pages_per_seq, p.page_size)));
    }
    if (!p.paged) continue;
    const int64_t pages = (keys + p.page_size - 1) / p.page_size;
    const int32_t* row = m.block_table + b * m.block_table_stride;
    for (int64_t pg = 0; pg < pages; ++pg) {
      if (row[pg] < 0 || row[pg] >= p.num_pages) {
        return invalid(str_cat("block_table[", b, "][", pg, "] = ", row[pg], " (sequence ", b, ", page ", pg, " of the ",
                               pages, " its ", keys, " keys use) is outside the page pool [0, ", p.num_pages,
                               ") (k.shape[0] pages)"));
      }
    }
  }
  return Status::Ok();
}

#if FLASHCORE_WITH_CUDA
Status cuda_check(const char* what, cudaError_t err) {
  if (err == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();  // ours, not the caller's
  return Status(StatusCode::kCudaError,
                str_cat(what, " failed: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

// Makes `device` current for the scope (the legacy default stream and the
// copies belong to it), restoring the caller's device after.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    int current = 0;
    status_ = cuda_check("cudaGetDevice", cudaGetDevice(&current));
    if (status_.ok() && current != device) {
      status_ = cuda_check("cudaSetDevice", cudaSetDevice(device));
      if (status_.ok()) previous_ = current;
    }
  }
  ~DeviceScope() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  Status status_;
};

// Copies the metadata the problem uses to the host (stream-ordered after the
// caller's work on `stream`), waits for it, then checks it there.
Status check_device_metadata(const AttentionArgs& a, const Problem& p, cudaStream_t stream) {
  DeviceScope scope(p.device_index);
  if (!scope.status().ok()) return scope.status();
  std::vector<int32_t> cu_q, cu_k, cache, table;
  HostMetadata host;
  Status status;
  auto copy = [&](const char* what, const int32_t* src, int64_t count, std::vector<int32_t>& dst,
                  const int32_t** host_ptr) {
    dst.resize(static_cast<size_t>(count));
    *host_ptr = dst.data();
    if (status.ok() && count > 0) {
      status = cuda_check(what, cudaMemcpyAsync(dst.data(), src, count * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                                stream));
    }
  };
  if (p.varlen_q) copy("cudaMemcpyAsync(cu_seqlens_q)", a.cu_seqlens_q, p.batch + 1, cu_q, &host.cu_seqlens_q);
  if (p.varlen_k) copy("cudaMemcpyAsync(cu_seqlens_k)", a.cu_seqlens_k, p.batch + 1, cu_k, &host.cu_seqlens_k);
  if (p.kv_cache) copy("cudaMemcpyAsync(cache_seqlens)", a.cache_seqlens, p.batch, cache, &host.cache_seqlens);
  if (p.paged) {
    // Only the first max_pages_per_seq entries of each row: packed rows here.
    table.resize(static_cast<size_t>(p.batch * p.max_pages_per_seq));
    host.block_table = table.data();
    host.block_table_stride = p.max_pages_per_seq;
    const size_t width = p.max_pages_per_seq * sizeof(int32_t);
    if (status.ok() && p.batch > 0) {
      status = cuda_check("cudaMemcpy2DAsync(block_table)",
                          cudaMemcpy2DAsync(table.data(), width, a.block_table,
                                            p.block_table_stride * sizeof(int32_t), width, p.batch,
                                            cudaMemcpyDeviceToHost, stream));
    }
  }
  // Always wait: no copy may still target the vectors when they go away.
  const Status synced = cuda_check("cudaStreamSynchronize", cudaStreamSynchronize(stream));
  if (!status.ok()) return status;
  if (!synced.ok()) return synced;
  return check_metadata_values(p, host);
}
#endif

}  // namespace

HostMetadata host_metadata(const AttentionArgs& args) {
  HostMetadata m;
  m.cu_seqlens_q = args.cu_seqlens_q;
  m.cu_seqlens_k = args.cu_seqlens_k;
  m.cache_seqlens = args.cache_seqlens;
  m.block_table = args.block_table;
  m.block_table_stride = args.block_table_stride;
  return m;
}

Status check_metadata_values(const Problem& p, const HostMetadata& m) {
  if (p.varlen_q) {
    Status s = check_cu_seqlens("cu_seqlens_q", m.cu_seqlens_q, p.batch, p.total_q, "total_q (q.shape[2])",
                                p.seqlen_q, "max_seqlen_q");
    if (!s.ok()) return s;
  }
  if (p.varlen_k) {
    Status s = check_cu_seqlens("cu_seqlens_k", m.cu_seqlens_k, p.batch, p.total_k, "total_k (k.shape[2])",
                                p.seqlen_k, "max_seqlen_k");
    if (!s.ok()) return s;
  }
  if (p.kv_cache) return check_cache(p, m);
  return Status::Ok();
}

Status check_serving_metadata(const AttentionArgs& args, cudaStream_t stream) {
  return catch_all([&]() -> Status {
    Problem problem;
    Status status = validate(args, &problem);
    if (!status.ok() || !problem.has_per_seq_lengths()) return status;
    if (problem.device == Device::kCPU) return check_metadata_values(problem, host_metadata(args));
#if FLASHCORE_WITH_CUDA
    try {
      return check_device_metadata(args, problem, stream);
    } catch (const std::bad_alloc&) {
      return Status(StatusCode::kInternal, "check_serving_metadata: out of host memory for the metadata copy");
    }
#else
    (void)stream;  // validate() refused CUDA tensors in this build
    return Status(StatusCode::kInternal, "CUDA tensor reached check_serving_metadata in a build without CUDA");
#endif
  });
}

}  // namespace flashcore
