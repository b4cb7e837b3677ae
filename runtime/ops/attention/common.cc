#include "runtime/ops/attention/common.hpp"

#include <kjit/error.hpp>

#include "runtime/ops/validate.hpp"

#include <fmt/format.h>

#include <climits>
#include <cmath>

namespace kjit::attention::detail {

void check_i32_vector(const char* op, const char* name, const TensorRef& t, int64_t length, int device) {
  kjit::detail::check_tensor(op, name, t, 1, {DType::kI32}, device);
  if (length >= 0 && t.shape[0] != length) {
    fail(op, fmt::format("{} must have {} elements, got {}", name, length, t.describe()));
  }
  kjit::detail::check_contiguous(op, name, t);
  kjit::detail::check_pointer_aligned(op, name, t, 4);
  check_not_null(op, name, t);
}

void check_f32(const char* op, const char* name, const TensorRef& t, int rank, int device) {
  kjit::detail::check_tensor(op, name, t, rank, {DType::kF32}, device);
  kjit::detail::check_pointer_aligned(op, name, t, 4);
  check_not_null(op, name, t);
}

bool check_decode_lse(const char* op, const TensorRef& lse, int64_t batch, int64_t q_heads, int device) {
  if (lse.ndim == 0) return false;
  check_f32(op, "lse", lse, 2, device);
  check_dim(op, "lse", lse, 0, batch, "batch (q dim 0)");
  check_dim(op, "lse", lse, 1, q_heads, "q_heads (q dim 2)");
  return true;
}

void check_num_splits(const char* op, int num_splits, int max_splits) {
  if (max_splits < 0 && num_splits < 0) {
    fail(op, fmt::format("num_splits must be >= 0 (0 = auto), got {}", num_splits));
  }
  if (max_splits >= 0 && (num_splits < 0 || num_splits > max_splits)) {
    fail(op, fmt::format("num_splits must be in [0, {}] (0 = auto), got {}", max_splits, num_splits));
  }
}

float resolve_scale(const char* op, float scale, int64_t head_dim, bool allow_negative) {
  kjit::detail::check_finite_scale(op, scale);
  if (!allow_negative && scale < 0) {
    fail(op, fmt::format("scale must be >= 0 (0 = 1/sqrt(head_dim)), got {}", scale));
  }
  return scale != 0.f ? scale : 1.f / std::sqrt(static_cast<float>(head_dim));
}

int check_query(const char* op, const TensorRef& q, int rank) {
  const int device = kjit::detail::check_leading(op, "q", q, rank);
  check_bf16_rows(op, "q", q, rank, device);
  return device;
}

void check_head_dim(const char* op, const char* name, const TensorRef& t) {
  if (!supported_head_dim(t.size(-1))) {
    fail(op, fmt::format("{} head_dim (dim {}) must be {}, got {}", name, t.ndim - 1, head_dims_text(), t.describe()));
  }
}

void check_query_heads(const char* op, const TensorRef& q) {
  check_head_dim(op, "q", q);
  kjit::detail::check_at_least_one(op, "q", q, q.ndim - 2, "head");
}

void check_one_query_token(const char* op, const TensorRef& q, const char* per) {
  if (q.shape[1] != 1) {
    fail(op, fmt::format("q dim 1 must be 1 (one query token per {}: [batch, 1, q_heads, head_dim]), got {}", per,
                         q.describe()));
  }
}

void check_decode_out(const char* op, const TensorRef& out, int64_t batch, int64_t q_heads, int64_t head_dim,
                      int device) {
  check_bf16_rows(op, "out", out, 4, device);
  check_dim(op, "out", out, 0, batch, "batch (q dim 0)");
  check_dim(op, "out", out, 1, 1, "1 (one query token)");
  check_dim(op, "out", out, 2, q_heads, "q_heads (q dim 2)");
  check_dim(op, "out", out, 3, head_dim, "head_dim (q dim 3)");
}

int64_t check_gqa(const char* op, const TensorRef& q, const char* kv_name, const TensorRef& kv) {
  const int64_t q_heads = q.shape[q.ndim - 2];
  const int64_t kv_heads = kv.shape[2];
  if (q_heads % kv_heads != 0) {
    fail(op, fmt::format("q_heads ({}, q dim {}) must be a multiple of kv_heads ({}, {} dim 2), got q {} and {} {}",
                         q_heads, q.ndim - 2, kv_heads, kv_name, q.describe(), kv_name, kv.describe()));
  }
  return q_heads / kv_heads;
}

ContiguousKvDims check_contiguous_kv(const char* op, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                                     int64_t batch, int64_t head_dim, int device) {
  ContiguousKvDims d;
  check_bf16_rows(op, "k", k, 4, device);
  check_dim(op, "k", k, 0, batch, "batch (q dim 0)");
  check_dim(op, "k", k, 3, head_dim, "head_dim (q dim 3)");
  d.max_kv_len = k.shape[1];
  d.kv_heads = k.shape[2];
  kjit::detail::check_at_least_one(op, "k", k, 2, "kv head");
  d.group = check_gqa(op, q, "k", k);
  check_bf16_rows(op, "v", v, 4, device);
  check_dim(op, "v", v, 0, batch, "batch (q dim 0)");
  check_dim(op, "v", v, 1, d.max_kv_len, "max_kv_len (k dim 1)");
  check_dim(op, "v", v, 2, d.kv_heads, "kv_heads (k dim 2)");
  check_dim(op, "v", v, 3, head_dim, "head_dim (q dim 3)");
  return d;
}

PagedCacheDims validate_paged_cache(const char* op, const PagedKVCache& c, int device, int64_t batch,
                                    int64_t head_dim) {
  PagedCacheDims d;
  check_bf16_rows(op, "cache.k", c.k, 4, device);
  check_bf16_rows(op, "cache.v", c.v, 4, device);
  d.num_pages = c.k.shape[0];
  d.page_size = c.k.shape[1];
  d.kv_heads = c.k.shape[2];
  d.head_dim = c.k.shape[3];
  if (head_dim > 0 && d.head_dim != head_dim) {
    fail(op, fmt::format("cache.k dim 3 must be head_dim = {} (q dim -1), got {}", head_dim, c.k.describe()));
  }
  if (d.page_size < 1) fail(op, fmt::format("cache.k page_size (dim 1) must be >= 1, got {}", c.k.describe()));
  kjit::detail::check_at_least_one(op, "cache.k", c.k, 2, "kv head");
  kjit::detail::check_same_shape(op, "cache.v", c.v, "cache.k", c.k);
  for (int i = 0; i < 3; ++i) {
    if (c.v.strides[i] != c.k.strides[i] && c.k.shape[i] > 1) {
      fail(op, fmt::format("cache.v must have the strides of cache.k (one pool layout), got cache.k {} and cache.v {}",
                           c.k.describe(), c.v.describe()));
    }
  }
  // The kernels address pool row r = page · page_rows + slot at r · slot_stride. With one slot
  // per page the page stride is the row stride.
  const int64_t page_stride = c.k.strides[0];
  int64_t slot_stride = c.k.strides[1];
  int64_t page_rows = d.page_size;
  if (d.page_size == 1) {
    slot_stride = d.num_pages > 1 ? page_stride : c.k.strides[2] * d.kv_heads;
    page_rows = 1;
  } else if (d.num_pages > 1) {
    if (slot_stride <= 0 || page_stride <= 0 || page_stride % slot_stride != 0) {
      fail(op, fmt::format("cache.k page stride ({}) must be a positive multiple of its slot stride ({}), got {}",
                           page_stride, slot_stride, c.k.describe()));
    }
    page_rows = page_stride / slot_stride;
  }
  if (slot_stride <= 0) slot_stride = d.head_dim;  // a single row: any stride addresses it
  if (d.num_pages * page_rows >= INT32_MAX || slot_stride * 2 >= INT32_MAX || d.page_size >= INT32_MAX / 2) {
    fail(op, fmt::format("cache.k is too large: num_pages · (page stride / slot stride) and the slot stride in bytes "
                         "must stay below 2^31, got {}",
                         c.k.describe()));
  }
  d.slot_stride = slot_stride;
  d.page_rows = static_cast<int>(page_rows);
  d.page_div = fast_div_of(static_cast<uint32_t>(d.page_size));

  check_i32_vector(op, "cache.indptr", c.indptr, -1, device);
  if (c.indptr.shape[0] < 1) fail(op, fmt::format("cache.indptr must have batch + 1 >= 1 elements, got {}", c.indptr.describe()));
  d.batch = c.indptr.shape[0] - 1;
  if (batch >= 0 && d.batch != batch) {
    fail(op, fmt::format("cache.indptr must have batch + 1 = {} elements, got {}", batch + 1, c.indptr.describe()));
  }
  check_i32_vector(op, "cache.page_indices", c.page_indices, -1, device);
  d.nnz = c.page_indices.shape[0];
  check_i32_vector(op, "cache.last_page_len", c.last_page_len, d.batch, device);
  return d;
}

}  // namespace kjit::attention::detail
