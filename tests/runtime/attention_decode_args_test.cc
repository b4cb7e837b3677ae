// Host-only checks of kjit::attention::decode: every validation rule fires with a message naming
// the tensor (before any driver call), the split planner's partitions, the workspace check, and
// that every specialization of the family compiles without spills. No GPU needed.
#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/runtime.hpp>

#include "attention/decode_params.h"
#include "attention/prefill_params.h"
#include "attention/prefill_sm90_params.h"
#include "runtime/families/attention.hpp"
#include "tests/runtime/decode_dims.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/paged_decode.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>

namespace {

using kjit::DType;
using kjit::TensorRef;
using kjit::attention::DecodeArgs;
namespace ad = kjit::attention::detail;

constexpr int64_t kB = 3, kL = 100, kHq = 8, kHkv = 2, kD = 128;

void* fake_ptr(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + offset); }

DecodeArgs valid_args() {
  DecodeArgs a;
  a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {kB, 1, kHq, kD}, {}, 0);
  a.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kB, kL, kHkv, kD}, {}, 0);
  a.v = TensorRef(fake_ptr(0x200000), DType::kBF16, {kB, kL, kHkv, kD}, {}, 0);
  a.kv_lens = TensorRef(fake_ptr(0x300000), DType::kI32, {kB}, {}, 0);
  a.mask = TensorRef(fake_ptr(0x310000), DType::kBool, {kB, kL}, {}, 0);
  a.out = TensorRef(fake_ptr(0x400000), DType::kBF16, {kB, 1, kHq, kD}, {}, 0);
  a.lse = TensorRef(fake_ptr(0x500000), DType::kF32, {kB, kHq}, {}, 0);
  return a;
}

/// Applies `edit` to valid args and expects validate_decode — and the public decode() and
/// decode_workspace_bytes(), which must validate before touching the driver — to throw
/// InvalidArgument naming the op (the query: itself) and mentioning every `needles`.
void expect_invalid(const std::function<void(DecodeArgs&)>& edit, std::initializer_list<const char*> needles) {
  DecodeArgs a = valid_args();
  edit(a);
  for (int via = 0; via < 3; ++via) {
    try {
      if (via == 0) {
        ad::validate_decode(a);
      } else if (via == 1) {
        kjit::attention::decode(a, nullptr, 0, nullptr);
      } else {
        kjit::attention::decode_workspace_bytes(a);
      }
      ADD_FAILURE() << "no error for an invalid argument (expected: " << *needles.begin() << ")";
    } catch (const kjit::InvalidArgument& e) {
      const std::string what = e.what();
      const std::string named = via == 2 ? "kjit::attention::decode_workspace_bytes: " : "kjit::attention::decode: ";
      EXPECT_EQ(what.rfind(named, 0), 0u) << what;
      for (const char* n : needles) EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in: " << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong exception type: " << e.what();
    }
  }
}

TEST(AttentionDecodeArgs, ValidArgsPass) {
  const ad::DecodeDims d = ad::validate_decode(valid_args());
  EXPECT_EQ(d.batch, kB);
  EXPECT_EQ(d.max_kv_len, kL);
  EXPECT_EQ(d.q_heads, kHq);
  EXPECT_EQ(d.kv_heads, kHkv);
  EXPECT_EQ(d.head_dim, kD);
  EXPECT_EQ(d.group, kHq / kHkv);
  EXPECT_TRUE(d.has_kv_lens && d.has_mask && d.has_lse);
  DecodeArgs a = valid_args();
  a.kv_lens = {};
  a.mask = {};
  a.lse = {};
  const ad::DecodeDims e = ad::validate_decode(a);
  EXPECT_FALSE(e.has_kv_lens || e.has_mask || e.has_lse);
  // A u8 mask and an empty cache are fine too.
  a = valid_args();
  a.mask.dtype = DType::kU8;
  EXPECT_NO_THROW(ad::validate_decode(a));
  a = valid_args();
  a.k = TensorRef(nullptr, DType::kBF16, {kB, 0, kHkv, kD}, {}, 0);
  a.v = TensorRef(nullptr, DType::kBF16, {kB, 0, kHkv, kD}, {}, 0);
  a.mask = TensorRef(nullptr, DType::kBool, {kB, 0}, {}, 0);
  EXPECT_NO_THROW(ad::validate_decode(a));
}

// One fact, one place: every attention family declares its head_dim set once, the validators
// accept exactly that set, and every declared value has a launch shape for each kernel. Adding a
// head_dim to a declaration without teaching a consumer fails here.
std::set<int64_t> declared(const kjit::Family& f, const char* param) {
  std::set<int64_t> out;
  for (const kjit::ParamValue& v : f.params[f.param_index(param)].values) out.insert(v.code);
  return out;
}

TEST(AttentionFamilies, ValidatorsAndKernelsFollowTheDeclaredHeadDims) {
  namespace at = kjit::attention;
  const std::set<int64_t> mma(std::begin(at::kHeadDims), std::end(at::kHeadDims));
  for (const kjit::Family* f : {&at::decode_family(), &at::paged_decode_family(), &at::decode_merge_family(),
                                &at::paged_append_family(), &at::prefill_family(), &at::paged_prefill_family()}) {
    EXPECT_EQ(declared(*f, "head_dim"), mma) << f->name;
    EXPECT_EQ(f->min_sm, at::kMinSm) << f->name;
  }
  const std::set<int64_t> sm90 = declared(at::prefill_sm90_family(), "head_dim");
  EXPECT_EQ(sm90, std::set<int64_t>(std::begin(at::kSm90HeadDims), std::end(at::kSm90HeadDims)));
  EXPECT_EQ(declared(at::paged_prefill_sm90_family(), "head_dim"), sm90);
  const std::set<int64_t> block_ms(std::begin(at::kBlockMs), std::end(at::kBlockMs));
  EXPECT_EQ(declared(at::prefill_family(), "block_m"), block_ms);
  EXPECT_EQ(declared(at::paged_prefill_family(), "block_m"), block_ms);
  for (int m = 0; m <= 512; ++m) {  // the paged prefill planner takes the declared tile rows (0: choose)
    const int32_t qo_indptr[] = {0, 100};
    bool accepted = true;
    try {
      kjit::attention::plan_paged_prefill(qo_indptr, 1, 128, m);
    } catch (const kjit::InvalidArgument&) {
      accepted = false;
    }
    EXPECT_EQ(accepted, m == 0 || block_ms.count(m) == 1) << "tile_rows " << m;
  }
  for (int64_t d = 8; d <= 1024; d += 8) {  // bf16 rows stay 16-byte aligned
    DecodeArgs a = valid_args();
    a.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kB, kL, kHkv, d}, {}, 0);
    a.v = TensorRef(fake_ptr(0x200000), DType::kBF16, {kB, kL, kHkv, d}, {}, 0);
    a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {kB, 1, kHq, d}, {}, 0);
    a.out = TensorRef(fake_ptr(0x400000), DType::kBF16, {kB, 1, kHq, d}, {}, 0);
    bool accepted = true;
    try {
      ad::validate_decode(a);
    } catch (const kjit::InvalidArgument& e) {
      accepted = false;
      if (!mma.count(d)) {
        for (int64_t v : mma) EXPECT_NE(std::string(e.what()).find(std::to_string(v)), std::string::npos) << e.what();
      }
    }
    EXPECT_EQ(accepted, mma.count(d) == 1) << "head_dim " << d;
    EXPECT_EQ(ad::supported_head_dim(d), mma.count(d) == 1) << "head_dim " << d;
  }
  for (int64_t d : mma) {
    EXPECT_GT(kjit::attention::decode_launch_shape(static_cast<int>(d)).threads, 0) << d;
    for (int64_t bm : declared(at::prefill_family(), "block_m")) {
      EXPECT_GT(kjit::attention::prefill_launch_shape(static_cast<int>(d), static_cast<int>(bm)).threads, 0) << d;
    }
  }
  for (int64_t d : sm90) EXPECT_GT(kjit::attention::prefill_sm90_launch_shape(static_cast<int>(d)).threads, 0) << d;
}

TEST(AttentionDecodeArgs, QRules) {
  expect_invalid([](DecodeArgs& a) { a.q = {}; }, {"q is required"});
  expect_invalid([](DecodeArgs& a) { a.q.dtype = DType::kF16; }, {"q must be bf16"});
  expect_invalid([](DecodeArgs& a) { a.q = TensorRef(fake_ptr(), DType::kBF16, {kB, kHq, kD}, {}, 0); }, {"q must be 4-d"});
  expect_invalid([](DecodeArgs& a) { a.q = TensorRef(fake_ptr(), DType::kBF16, {kB, 2, kHq, kD}, {}, 0); },
                 {"q dim 1 must be 1"});
  expect_invalid(
      [](DecodeArgs& a) {
        a.q = TensorRef(fake_ptr(), DType::kBF16, {kB, 1, kHq, 96}, {}, 0);
        a.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kB, kL, kHkv, 96}, {}, 0);
      },
      {"head_dim", "64, 128 or 256"});
  expect_invalid([](DecodeArgs& a) { a.q.device = -1; }, {"q must be on a CUDA device"});
  expect_invalid([](DecodeArgs& a) { a.q.data = fake_ptr(8); }, {"q data pointer", "16-byte aligned"});
  expect_invalid([](DecodeArgs& a) { a.q.strides[3] = 2; a.q.strides[2] = 2 * kD; }, {"q must have a contiguous last dimension"});
  expect_invalid([](DecodeArgs& a) { a.q.data = nullptr; }, {"q has a null data pointer"});
  expect_invalid([](DecodeArgs& a) { a.q = TensorRef(fake_ptr(), DType::kBF16, {kB, 1, 0, kD}, {}, 0); },
                 {"q must have at least one head (dim 2)"});
}

TEST(AttentionDecodeArgs, KvRules) {
  expect_invalid([](DecodeArgs& a) { a.k.dtype = DType::kF16; }, {"k must be bf16"});
  expect_invalid([](DecodeArgs& a) { a.v.dtype = DType::kF32; }, {"v must be bf16"});
  expect_invalid([](DecodeArgs& a) { a.k = {}; }, {"k is required"});
  expect_invalid([](DecodeArgs& a) { a.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kB, kL, kHkv * kD}, {}, 0); },
                 {"k must be 4-d"});
  expect_invalid([](DecodeArgs& a) { a.k.shape[0] = kB + 1; }, {"k dim 0", "batch"});
  expect_invalid([](DecodeArgs& a) { a.k.shape[3] = 64; }, {"k dim 3", "head_dim"});
  expect_invalid([](DecodeArgs& a) { a.v.shape[1] = kL - 1; }, {"v dim 1", "max_kv_len"});
  expect_invalid([](DecodeArgs& a) { a.v.shape[2] = kHkv * 2; }, {"v dim 2", "kv_heads"});
  expect_invalid([](DecodeArgs& a) { a.v.shape[0] = 1; }, {"v dim 0"});
  expect_invalid(
      [](DecodeArgs& a) {
        a.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kB, kL, 3, kD}, {}, 0);
        a.v = TensorRef(fake_ptr(0x200000), DType::kBF16, {kB, kL, 3, kD}, {}, 0);
      },
      {"q_heads (8", "multiple of kv_heads (3"});
  expect_invalid([](DecodeArgs& a) { a.k.strides[3] = 2; }, {"k must have a contiguous last dimension"});
  expect_invalid([](DecodeArgs& a) { a.v.data = fake_ptr(0x200000 + 2); }, {"v data pointer", "16-byte aligned"});
  // A token stride of kHkv·kD + 4 elements = 8-byte aligned rows.
  expect_invalid([](DecodeArgs& a) { a.k.strides[1] = kHkv * kD + 4; a.k.strides[0] = kL * a.k.strides[1]; },
                 {"k stride of dim 1", "multiple of 16 bytes"});
  expect_invalid([](DecodeArgs& a) { a.v.device = 1; }, {"v is on CUDA device 1"});
  expect_invalid([](DecodeArgs& a) { a.k.device = -1; }, {"k is on the host"});
  expect_invalid([](DecodeArgs& a) { a.k.data = nullptr; }, {"k has a null data pointer"});
  expect_invalid(
      [](DecodeArgs& a) {
        a.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kB, kL, 0, kD}, {}, 0);
        a.v = TensorRef(fake_ptr(0x200000), DType::kBF16, {kB, kL, 0, kD}, {}, 0);
      },
      {"k must have at least one kv head (dim 2)"});
}

TEST(AttentionDecodeArgs, OutputRules) {
  expect_invalid([](DecodeArgs& a) { a.out = {}; }, {"out is required"});
  expect_invalid([](DecodeArgs& a) { a.out.dtype = DType::kF32; }, {"out must be bf16"});
  expect_invalid([](DecodeArgs& a) { a.out.shape[2] = kHq / 2; }, {"out dim 2", "q_heads"});
  expect_invalid([](DecodeArgs& a) { a.out.shape[0] = 1; }, {"out dim 0"});
  expect_invalid([](DecodeArgs& a) { a.out.device = 2; }, {"out is on CUDA device 2"});
  expect_invalid([](DecodeArgs& a) { a.out.data = fake_ptr(0x400000 + 4); }, {"out data pointer"});
  expect_invalid([](DecodeArgs& a) { a.lse.dtype = DType::kBF16; }, {"lse must be f32"});
  expect_invalid([](DecodeArgs& a) { a.lse.shape[1] = kHq + 1; }, {"lse dim 1", "q_heads"});
  expect_invalid([](DecodeArgs& a) { a.lse = TensorRef(fake_ptr(0x500000), DType::kF32, {kB * kHq}, {}, 0); },
                 {"lse must be 2-d"});
  expect_invalid([](DecodeArgs& a) { a.lse.device = 1; }, {"lse is on CUDA device 1"});
  expect_invalid([](DecodeArgs& a) { a.lse.data = fake_ptr(0x500000 + 2); }, {"lse data pointer", "4-byte aligned"});
  expect_invalid([](DecodeArgs& a) { a.lse.data = nullptr; }, {"lse has a null data pointer"});
}

TEST(AttentionDecodeArgs, LensMaskAndScalars) {
  expect_invalid([](DecodeArgs& a) { a.kv_lens.dtype = DType::kI64; }, {"kv_lens must be i32"});
  expect_invalid([](DecodeArgs& a) { a.kv_lens.shape[0] = kB + 1; }, {"kv_lens dim 0", "batch"});
  expect_invalid([](DecodeArgs& a) { a.kv_lens = TensorRef(fake_ptr(0x300000), DType::kI32, {kB, 1}, {}, 0); },
                 {"kv_lens must be 1-d"});
  expect_invalid([](DecodeArgs& a) { a.kv_lens.strides[0] = 2; }, {"kv_lens must be contiguous"});
  expect_invalid([](DecodeArgs& a) { a.kv_lens.device = 3; }, {"kv_lens is on CUDA device 3"});
  expect_invalid([](DecodeArgs& a) { a.kv_lens.data = fake_ptr(0x300000 + 2); },
                 {"kv_lens data pointer", "4-byte aligned"});
  expect_invalid([](DecodeArgs& a) { a.mask.shape[0] = -1; }, {"mask has a negative size"});
  expect_invalid([](DecodeArgs& a) { a.mask.data = nullptr; }, {"mask has a null data pointer"});
  expect_invalid([](DecodeArgs& a) { a.mask.dtype = DType::kF32; }, {"mask must be bool or u8"});
  expect_invalid([](DecodeArgs& a) { a.mask.shape[1] = kL + 1; }, {"mask dim 1", "max_kv_len"});
  expect_invalid([](DecodeArgs& a) { a.mask = TensorRef(fake_ptr(0x310000), DType::kBool, {kB, 1, kL}, {}, 0); },
                 {"mask must be 2-d"});
  expect_invalid([](DecodeArgs& a) { a.mask.device = -1; }, {"mask is on the host"});
  expect_invalid([](DecodeArgs& a) { a.scale = NAN; }, {"scale must be finite"});
  expect_invalid([](DecodeArgs& a) { a.scale = INFINITY; }, {"scale must be finite"});
  expect_invalid([](DecodeArgs& a) { a.num_splits = -1; }, {"num_splits must be >= 0"});
}

constexpr int kH200Sms = 132;
constexpr int kH200SmemPerSm = 233472;

ad::DecodePlan h200_plan(const ad::DecodeDims& d, int splits = 0) {
  return ad::plan_decode(d, splits, kH200Sms, ad::decode_ctas_per_sm(d.head_dim, kH200SmemPerSm));
}

TEST(AttentionDecodePlan, OnePlannedCtaPerSmOnH200) {
  for (int hd : {64, 128, 256}) EXPECT_EQ(ad::decode_ctas_per_sm(hd, kH200SmemPerSm), 1) << hd;
  EXPECT_EQ(ad::decode_ctas_per_sm(128, 10 * 1024), 1);  // never zero, even when nothing fits
  // Every shape's ring fits the 227 KiB a CTA may opt into, with its 32 KiB stages.
  for (int hd : {64, 128, 256}) {
    const auto s = kjit::attention::decode_launch_shape(hd);
    EXPECT_EQ(s.smem_bytes, 3 * 32 * 1024) << hd;
    EXPECT_EQ(s.smem_bytes, 3 * s.tile_tokens * hd * 4) << hd;
    EXPECT_EQ(s.threads, 128) << hd;
  }
}

TEST(AttentionDecodePlan, PeerShapesTakeTheMeasuredBestSplits) {
  // The split counts a sweep of every forced count found fastest on the H200 (2026-11-30).
  EXPECT_EQ(h200_plan(decode_dims(16, 4096, 32, 8, 128)).num_splits, 1);  // 128 CTAs
  ad::DecodePlan p = h200_plan(decode_dims(64, 4096, 32, 8, 128));
  EXPECT_EQ(p.num_splits, 1);
  EXPECT_EQ(p.workspace_bytes, 0u);
  EXPECT_EQ(h200_plan(decode_dims(1, 8192, 32, 8, 128)).num_splits, 16);
  EXPECT_EQ(h200_plan(decode_dims(1, 512, 32, 8, 128)).num_splits, 8);  // one 64-token tile a split
  EXPECT_EQ(h200_plan(decode_dims(32, 4096, 32, 8, 64)).num_splits, 1);
  EXPECT_EQ(h200_plan(decode_dims(16, 4096, 16, 4, 256)).num_splits, 2);
}

TEST(AttentionDecodePlan, RowsAndMTiles) {
  EXPECT_EQ(h200_plan(decode_dims(2, 64, 8, 8, 128)).heads_per_cta, 8);    // group 1
  EXPECT_EQ(h200_plan(decode_dims(2, 64, 64, 8, 128)).heads_per_cta, 8);   // group 8
  ad::DecodePlan p = h200_plan(decode_dims(2, 64, 96, 8, 128));   // group 12
  EXPECT_EQ(p.heads_per_cta, 16);
  EXPECT_EQ(p.m_tiles, 1);
  p = h200_plan(decode_dims(2, 64, 32, 1, 128));                  // group 32
  EXPECT_EQ(p.heads_per_cta, 16);
  EXPECT_EQ(p.m_tiles, 2);
  EXPECT_EQ(p.ctas, 2 * 1 * p.num_splits * 2);
}

// The kernel splits blockIdx.x = ((b · kv_heads + kv_head) · num_splits + split) · m_tiles + m_tile
// with the Params' FastDivs (decode.cu): every CTA of a launch gets its own coordinates back.
TEST(AttentionDecodePlan, GridDivisorsSplitEveryCtaIndex) {
  for (int64_t hkv : {1, 3, 8}) {
    for (int64_t group : {1, 5, 16, 40}) {
      for (int req : {0, 1, 7}) {
        const int64_t batch = 3;
        const ad::DecodeDims d = decode_dims(batch, 300, hkv * group, hkv, 128);
        const ad::DecodePlan plan = h200_plan(d, req);
        DecodeArgs a = valid_args();
        a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {batch, 1, hkv * group, 128}, {}, 0);
        a.out = a.q;
        a.k = a.v = TensorRef(fake_ptr(0x100000), DType::kBF16, {batch, 300, hkv, 128}, {}, 0);
        const kjit::attention::DecodeParams p = ad::DecodeOp::params(a, d, plan, fake_ptr());
        SCOPED_TRACE(testing::Message() << "Hkv " << hkv << " group " << group << " splits " << p.num_splits);
        uint32_t cta = 0;
        for (int b = 0; b < batch; ++b)
          for (int h = 0; h < hkv; ++h)
            for (int s = 0; s < p.num_splits; ++s)
              for (int m = 0; m < p.m_tiles; ++m, ++cta) {
                uint32_t q = kjit::fast_quotient(cta, p.m_tiles_div);
                ASSERT_EQ(cta - q * p.m_tiles, static_cast<uint32_t>(m)) << cta;
                const uint32_t idx = q;
                q = kjit::fast_quotient(idx, p.num_splits_div);
                ASSERT_EQ(idx - q * p.num_splits, static_cast<uint32_t>(s)) << cta;
                const uint32_t bh = q;
                q = kjit::fast_quotient(bh, p.kv_heads_div);
                ASSERT_EQ(bh - q * p.kv_heads, static_cast<uint32_t>(h)) << cta;
                ASSERT_EQ(q, static_cast<uint32_t>(b)) << cta;
              }
        EXPECT_EQ(cta, static_cast<uint32_t>(plan.ctas));
      }
    }
  }
}

TEST(AttentionDecodePlan, PartitionsCoverEveryTokenWithoutEmptySplits) {
  for (int64_t batch : {1, 3, 16, 200}) {
    for (int64_t len : {0, 1, 2, 63, 64, 65, 1000, 4097, 32768}) {
      for (int hd : {64, 128, 256}) {
        for (int req : {0, 1, 3, 7, 1000}) {
          const ad::DecodePlan p = h200_plan(decode_dims(batch, len, 32, 8, hd), req);
          const int64_t n = std::max<int64_t>(len, 1);
          SCOPED_TRACE(testing::Message() << "B" << batch << " L" << len << " D" << hd << " req " << req);
          EXPECT_GE(p.num_splits, 1);
          EXPECT_GE(int64_t{p.split_tokens} * p.num_splits, n);
          EXPECT_LT(int64_t{p.split_tokens} * (p.num_splits - 1), n);  // no empty trailing split
          if (req > 0) EXPECT_LE(p.num_splits, req);
          EXPECT_EQ(p.ctas, batch * 8 * p.num_splits);
          const size_t rows = static_cast<size_t>(batch * 32 * p.num_splits);
          if (p.num_splits == 1) {
            EXPECT_EQ(p.workspace_bytes, 0u);
          } else {
            EXPECT_EQ(p.o_part_bytes, rows * hd * 4);
            EXPECT_GE(p.workspace_bytes, p.o_part_bytes + rows * 4);
            EXPECT_EQ(p.o_part_bytes % 16, 0u);
          }
        }
      }
    }
  }
  // A forced split count is honoured exactly when the cache is long enough.
  const ad::DecodePlan p = h200_plan(decode_dims(3, 65, 32, 8, 128), 3);
  EXPECT_EQ(p.num_splits, 3);
  EXPECT_EQ(p.split_tokens, 22);
}

TEST(AttentionDecodePlan, WorkspaceCheckNamesTheBytes) {
  const ad::DecodePlan p = h200_plan(decode_dims(1, 8192, 32, 8, 128));  // 16 splits
  ASSERT_GT(p.workspace_bytes, 0u);
  const std::string needed = std::to_string(p.workspace_bytes);
  try {
    ad::check_decode_workspace(p, fake_ptr(), p.workspace_bytes - 1);
    ADD_FAILURE() << "no error for a short workspace";
  } catch (const kjit::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("workspace too small"), std::string::npos) << what;
    EXPECT_NE(what.find("needs " + needed + " bytes"), std::string::npos) << what;
  }
  EXPECT_THROW(ad::check_decode_workspace(p, nullptr, p.workspace_bytes), kjit::InvalidArgument);
  EXPECT_THROW(ad::check_decode_workspace(p, fake_ptr(8), p.workspace_bytes), kjit::InvalidArgument);
  EXPECT_NO_THROW(ad::check_decode_workspace(p, fake_ptr(), p.workspace_bytes));
  // One split needs no workspace at all.
  EXPECT_NO_THROW(ad::check_decode_workspace(h200_plan(decode_dims(64, 4096, 32, 8, 128)), nullptr, 0));
}

TEST(AttentionDecodeFamily, SpaceAndSpecs) {
  const kjit::Family& f = kjit::attention::decode_family();
  EXPECT_EQ(f.name, "attention.decode");
  EXPECT_EQ(f.min_sm, 80);
  EXPECT_FALSE(f.defaults.empty());
  const kjit::ProgramSpec spec = f.spec({{"head_dim", "256"}, {"rows", "16"}});
  // The decode kernel alone: the merge is attention.decode_merge's program.
  ASSERT_EQ(spec.name_expressions.size(), 1u);
  EXPECT_EQ(spec.name_expressions[0], "kjit::attention::decode_kernel<256, 16>");
  EXPECT_EQ(spec.source_name, "attention/decode.cu");
  EXPECT_THROW(f.spec({{"head_dim", "96"}, {"rows", "8"}}), kjit::InvalidArgument);
  EXPECT_THROW(f.spec({{"head_dim", "128"}}), kjit::InvalidArgument);
}

TEST(AttentionDecodeFamily, MergeIsItsOwnProgram) {
  const kjit::Family& m = kjit::attention::decode_merge_family();
  EXPECT_EQ(m.name, "attention.decode_merge");
  EXPECT_EQ(&kjit::family("attention.decode_merge"), &m);
  EXPECT_EQ(m.min_sm, kjit::attention::decode_family().min_sm);
  ASSERT_EQ(m.params.size(), 1u);
  // Every head_dim decode takes, each a default: a precompiled cache serves split plans.
  EXPECT_EQ(m.params[0].texts(), kjit::attention::decode_family().params[0].texts());
  EXPECT_EQ(m.default_points().size(), m.params[0].values.size());
  const kjit::ProgramSpec spec = m.spec({{"head_dim", "128"}});
  EXPECT_EQ(spec.family, "attention.decode_merge");
  EXPECT_EQ(spec.template_args, "head_dim=128");
  EXPECT_EQ(spec.source_name, "attention/decode_merge.cu");
  ASSERT_EQ(spec.name_expressions.size(), 1u);
  EXPECT_EQ(spec.name_expressions[0], "kjit::attention::decode_merge_kernel<128>");
  // Neither program's text holds the other kernel or its params header.
  const kjit::detail::KernelSources sources("");
  const std::optional<std::string> merge_text = sources.read(spec.source_name);
  const std::optional<std::string> decode_text =
      sources.read(kjit::attention::decode_family().spec({{"head_dim", "128"}, {"rows", "8"}}).source_name);
  ASSERT_TRUE(merge_text && decode_text);
  EXPECT_EQ(merge_text->find("decode_kernel("), std::string::npos);
  EXPECT_EQ(merge_text->find("attention/decode_params.h"), std::string::npos);
  EXPECT_NE(merge_text->find("decode_merge_kernel("), std::string::npos);
  EXPECT_EQ(decode_text->find("decode_merge_kernel("), std::string::npos);
  EXPECT_EQ(decode_text->find("attention/decode_merge_params.h"), std::string::npos);
  EXPECT_NE(decode_text->find("decode_kernel("), std::string::npos);
  EXPECT_EQ(sources.read("attention/decode_params.h")->find("DecodeMergeParams"), std::string::npos);
  EXPECT_THROW(m.spec({{"head_dim", "96"}}), kjit::InvalidArgument);
}

// The merge program is the ops' second program, only when the plan splits, at the call's
// head_dim, the same point for the contiguous and the paged op (one cached cubin for both).
TEST(AttentionDecodeFamily, MergeChoiceOnlyWhenSplit) {
  static_assert(kjit::detail::HasSecondProgram<ad::DecodeOp>::value);
  static_assert(kjit::detail::HasSecondProgram<ad::PagedDecodeOp>::value);
  const ad::DecodeDims d = decode_dims(1, 8192, 32, 8, 256);
  const ad::DecodePlan one = ad::plan_decode(d, 1, kH200Sms, 1);
  ASSERT_EQ(one.num_splits, 1);
  EXPECT_EQ(ad::DecodeOp::second_choice(d, one).family, nullptr);
  const ad::DecodePlan split = ad::plan_decode(d, 4, kH200Sms, 1);
  ASSERT_EQ(split.num_splits, 4);
  const kjit::detail::Choice c = ad::DecodeOp::second_choice(d, split);
  ASSERT_EQ(c.family, &kjit::attention::decode_merge_family());
  EXPECT_EQ(c.family->describe(c.point), "head_dim=256");
  ad::PagedDecodeDims pd;
  pd.head_dim = 256;
  const kjit::detail::Choice pc = ad::PagedDecodeOp::second_choice(pd, split);
  EXPECT_EQ(pc.family, c.family);
  EXPECT_EQ(pc.point, c.point);
}

// Every specialization compiles for the oldest and the H200 arch, and ptxas reports no spills.
TEST(AttentionDecodeFamily, EverySpecializationCompilesWithoutSpills) {
  kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
  c.disk_cache = false;
  kjit::Runtime rt(c);
  const kjit::Family& f = kjit::attention::decode_family();
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (const char* hd : {"64", "128", "256"}) {
      for (const char* rows : {"8", "16"}) {
        SCOPED_TRACE(testing::Message() << arch << " head_dim=" << hd << " rows=" << rows);
        const auto prog = rt.compile(f.spec({{"head_dim", hd}, {"rows", rows}}), kjit::Target::parse(arch));
        ASSERT_EQ(prog->kernels.size(), 1u);
        for (const auto& k : prog->kernels) {
          std::printf("%s %s: %d registers, %d spill bytes\n", arch, k.name_expression.c_str(), k.registers,
                      k.spill_bytes);
          EXPECT_LE(k.spill_bytes, 0) << k.name_expression;
          EXPECT_LE(k.registers, 255) << k.name_expression;
        }
      }
      SCOPED_TRACE(testing::Message() << arch << " attention.decode_merge head_dim=" << hd);
      const auto merge = rt.compile(kjit::attention::decode_merge_family().spec({{"head_dim", hd}}),
                                    kjit::Target::parse(arch));
      ASSERT_EQ(merge->kernels.size(), 1u);
      std::printf("%s %s: %d registers, %d spill bytes\n", arch, merge->kernels[0].name_expression.c_str(),
                  merge->kernels[0].registers, merge->kernels[0].spill_bytes);
      EXPECT_LE(merge->kernels[0].spill_bytes, 0);
    }
  }
}

}  // namespace
