#pragma once
/// \file runtime/ops/attention/common.hpp
/// Validation helpers the attention ops share (decode, paged decode, append, prefill, paged
/// prefill, the entry): each throws InvalidArgument "<op>: <tensor> <rule>, got <shape
/// dtype>" and builds strings only when it throws.

#include <kjit/device.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/tensor.hpp>

#include "runtime/families/attention.hpp"
#include "runtime/ops/validate.hpp"
#include "kjit/fast_div.h"

#include <cstdint>
#include <string>

namespace kjit::attention::detail {

using kjit::detail::ceil_div;
using kjit::detail::check_dim;
using kjit::detail::check_rank;
using kjit::detail::fail;
using kjit::detail::check_not_null;
using kjit::detail::check_rows_aligned;
using kjit::detail::check_sizes;

using kjit::detail::check_bf16_rows;
/// A contiguous, 4-byte aligned int32 vector of `length` elements (−1: any) on `device`.
void check_i32_vector(const char* op, const char* name, const TensorRef& t, int64_t length, int device);
/// An f32 tensor of rank `rank`, 4-byte aligned, with a data pointer, on `device`.
void check_f32(const char* op, const char* name, const TensorRef& t, int rank, int device);
/// A decode's optional lse: none (false) when lse.ndim is 0, else f32 [batch, q_heads] on
/// `device` (check_f32; true).
bool check_decode_lse(const char* op, const TensorRef& lse, int64_t batch, int64_t q_heads, int device);
/// A split-KV count: 0 (the planner chooses) up to `max_splits`; max_splits < 0 sets no upper
/// bound.
void check_num_splits(const char* op, int num_splits, int max_splits);
/// The resolved softmax scale: `scale`, or 1 / sqrt(head_dim) when 0. Throws unless finite and
/// (when !allow_negative) ≥ 0.
float resolve_scale(const char* op, float scale, int64_t head_dim, bool allow_negative);
// The ops' shared device and workspace checks (runtime/ops/validate.hpp).
using kjit::detail::check_arch;
using kjit::detail::check_workspace;

/// The K/V side of a validated contiguous (BLHD) K/V pair.
struct ContiguousKvDims {
  int64_t max_kv_len = 0;  ///< k dim 1
  int64_t kv_heads = 0;    ///< k dim 2
  int64_t group = 0;       ///< q_heads / kv_heads
};

/// Checks the contiguous K/V of a decode or prefill whose 4-D query `q` has `batch` requests of
/// `head_dim`: k bf16 [batch, max_kv_len, kv_heads, head_dim] with 16-byte aligned rows on
/// `device`, at least one kv head dividing q's heads (check_gqa), and v shaped as k.
ContiguousKvDims check_contiguous_kv(const char* op, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                                     int64_t batch, int64_t head_dim, int device);

/// The shape of a validated PagedKVCache.
struct PagedCacheDims {
  int64_t batch = 0;      ///< indptr.size(0) − 1
  int64_t num_pages = 0;
  int64_t page_size = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t nnz = 0;        ///< page_indices.size(0)
  int page_rows = 0;      ///< page stride / slot stride
  int64_t slot_stride = 0;  ///< elements between consecutive pool rows (the kernels' k_stride_l)
  FastDiv page_div{};     ///< page_size for the kernels' division (kjit/fast_div.h)
};

/// Checks a PagedKVCache (see include/kjit/ops/attention.hpp): pools of equal shape and strides,
/// head_dim `head_dim` (when > 0), the CSR table on `device`, batch = `batch` (when ≥ 0).
PagedCacheDims validate_paged_cache(const char* op, const PagedKVCache& cache, int device, int64_t batch,
                                    int64_t head_dim);

/// Whether the mma.sync attention families declare head_dim `d` (attention::kHeadDims).
inline bool supported_head_dim(int64_t d) noexcept { return kjit::detail::is_one_of(d, kHeadDims); }
/// kHeadDims as "64, 128 or 256", for an error message.
inline std::string head_dims_text() { return kjit::detail::one_of_text(kHeadDims); }

/// The query every attention op starts from: rank `rank`, on a CUDA device, bf16 with 16-byte
/// aligned rows (check_bf16_rows). Returns its device.
int check_query(const char* op, const TensorRef& q, int rank);
/// The last dim (head_dim) of tensor `name` is one of supported_head_dim's.
void check_head_dim(const char* op, const char* name, const TensorRef& t);
/// q's last dim (head_dim) is one of supported_head_dim's (check_head_dim) and q has at least
/// one head (the dim before it).
void check_query_heads(const char* op, const TensorRef& q);

/// A decode query holds one token per `per` ("sequence", "request"): q dim 1 is 1.
void check_one_query_token(const char* op, const TensorRef& q, const char* per);
/// The query of a decode (contiguous or paged): bf16 [batch, 1, q_heads, head_dim] on a device
/// (check_query), one token per `per` (check_one_query_token), a supported head_dim and at least
/// one head (check_query_heads). Sets dims.device, batch, q_heads and head_dim (`Dims`: any
/// dims with those fields).
template <class Dims>
void check_decode_query(const char* op, const TensorRef& q, const char* per, Dims& dims) {
  dims.device = check_query(op, q, 4);
  check_one_query_token(op, q, per);
  check_query_heads(op, q);
  dims.batch = q.shape[0];
  dims.q_heads = q.shape[2];
  dims.head_dim = q.shape[3];
}
/// A decode output: bf16 [batch, 1, q_heads, head_dim] on `device`, rows as q's.
void check_decode_out(const char* op, const TensorRef& out, int64_t batch, int64_t q_heads, int64_t head_dim,
                      int device);

/// q_heads / kv_heads (grouped-query attention): q's heads (the dim before its last) against the
/// heads (dim 2) of K/V tensor `kv_name`, which has at least one. Throws unless they divide.
int64_t check_gqa(const char* op, const TensorRef& q, const char* kv_name, const TensorRef& kv);

}  // namespace kjit::attention::detail
