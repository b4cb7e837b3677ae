// Host-only checks of kjit::attention::attention: which kernel a call names, the variant rules
// (an explicitly requested variant is strict and raises Unsupported; the KJIT_ATTN_VARIANT
// override and the default fall back to the next capable variant, and raise only when none is),
// and that argument errors surface before any driver call. No GPU needed.
#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/runtime.hpp>

#include "runtime/ops/attention/entry.hpp"
#include "runtime/ops/attention/variant.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>

namespace {

using kjit::DType;
using kjit::TensorRef;
using kjit::attention::AttentionArgs;
using kjit::attention::AttentionKind;
using kjit::attention::AttentionVariant;
namespace ad = kjit::attention::detail;

/// The target of a device of compute capability sm / 10 . sm % 10 (sm_90a for 90).
kjit::Target device_target(int sm) { return kjit::Target::for_compute_capability(sm / 10, sm % 10); }

void* fake_ptr(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + offset); }

AttentionArgs contiguous(int64_t q_len) {
  AttentionArgs a;
  a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {2, q_len, 8, 128}, {}, 0);
  a.k = TensorRef(fake_ptr(0x1000000), DType::kBF16, {2, 300, 2, 128}, {}, 0);
  a.v = TensorRef(fake_ptr(0x2000000), DType::kBF16, {2, 300, 2, 128}, {}, 0);
  a.out = TensorRef(fake_ptr(0x3000000), DType::kBF16, {2, q_len, 8, 128}, {}, 0);
  return a;
}

kjit::attention::PagedKVCache cache(int64_t batch) {
  kjit::attention::PagedKVCache c;
  c.k = TensorRef(fake_ptr(0x4000000), DType::kBF16, {32, 16, 2, 128}, {}, 0);
  c.v = TensorRef(fake_ptr(0x5000000), DType::kBF16, {32, 16, 2, 128}, {}, 0);
  c.indptr = TensorRef(fake_ptr(0x6000000), DType::kI32, {batch + 1}, {}, 0);
  c.page_indices = TensorRef(fake_ptr(0x6001000), DType::kI32, {32}, {}, 0);
  c.last_page_len = TensorRef(fake_ptr(0x6002000), DType::kI32, {batch}, {}, 0);
  return c;
}

TEST(AttentionEntry, ClassifiesCalls) {
  EXPECT_EQ(ad::classify_attention(contiguous(1)), AttentionKind::kDecode);
  EXPECT_EQ(kjit::attention::attention_kind(contiguous(1)), AttentionKind::kDecode);  // the public face
  EXPECT_EQ(ad::classify_attention(contiguous(7)), AttentionKind::kPrefill);
  AttentionArgs a = contiguous(1);
  a.mask = TensorRef(fake_ptr(0x7000000), DType::kBool, {2, 1, 300}, {}, 0);
  EXPECT_EQ(ad::classify_attention(a), AttentionKind::kDecode);  // a [b, 1, L] mask is decode's [b, L]
  AttentionArgs p;
  p.q = TensorRef(fake_ptr(0x0), DType::kBF16, {2, 1, 8, 128}, {}, 0);
  p.cache = cache(2);
  p.out = p.q;
  EXPECT_EQ(ad::classify_attention(p), AttentionKind::kPagedDecode);
  const std::vector<int32_t> indptr = {0, 70, 80};
  const kjit::attention::PagedPrefillPlan plan = kjit::attention::plan_paged_prefill(indptr.data(), 2, 128);
  p.q = TensorRef(fake_ptr(0x0), DType::kBF16, {80, 8, 128}, {}, 0);
  p.qo_indptr = TensorRef(fake_ptr(0x8000000), DType::kI32, {3}, {}, 0);
  p.plan = &plan;
  EXPECT_EQ(ad::classify_attention(p), AttentionKind::kPagedPrefill);
}

TEST(AttentionEntry, RejectsCallsNoKernelTakes) {
  auto expect = [](const AttentionArgs& a, const char* needle) {
    try {
      ad::classify_attention(a);
      ADD_FAILURE() << "no error (expected: " << needle << ")";
    } catch (const kjit::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("kjit::attention::attention"), std::string::npos) << e.what();
    }
    // The public entry raises the same before touching the driver.
    EXPECT_THROW(kjit::attention::attention(a, nullptr, 0, nullptr), kjit::InvalidArgument);
  };
  AttentionArgs a;
  expect(a, "q is required");
  a = contiguous(4);
  a.cache = cache(2);
  expect(a, "not both");
  a = contiguous(4);
  a.k = {};
  a.v = {};
  expect(a, "is required");
  a = contiguous(4);
  a.qo_indptr = TensorRef(fake_ptr(0x8000000), DType::kI32, {3}, {}, 0);
  expect(a, "needs a paged cache");
  AttentionArgs p;
  p.q = TensorRef(fake_ptr(0x0), DType::kBF16, {80, 8, 128}, {}, 0);
  p.cache = cache(2);
  p.qo_indptr = TensorRef(fake_ptr(0x8000000), DType::kI32, {3}, {}, 0);
  expect(p, "needs its plan");
  p.qo_indptr = {};
  p.mask = TensorRef(fake_ptr(0x7000000), DType::kBool, {2, 300}, {}, 0);
  expect(p, "contiguous k/v only");
}

TEST(AttentionEntry, ArgumentErrorsComeFromTheKernelsOpBeforeTheDriver) {
  AttentionArgs a = contiguous(7);
  a.out.shape[1] = 6;
  try {
    kjit::attention::attention(a, nullptr, 0, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("kjit::attention::prefill: out dim 1"), std::string::npos) << e.what();
  }
  a = contiguous(1);
  a.lse = TensorRef(fake_ptr(0x9000000), DType::kF32, {2, 8, 1}, {}, 0);  // [b, Hq, 1] is decode's [b, Hq]
  a.k.dtype = DType::kF16;
  try {
    kjit::attention::attention(a, nullptr, 0, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("kjit::attention::decode: k must be bf16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kjit::attention::attention_workspace_bytes(a), kjit::InvalidArgument);
}

TEST(AttentionEntry, ExplicitVariantIsStrict) {
  ad::VariantCall call;
  call.kind = AttentionKind::kPrefill;
  call.target = device_target(90);
  call.head_dim = 128;
  EXPECT_EQ(ad::resolve_variant(AttentionVariant::kMma, AttentionVariant::kAuto, call), AttentionVariant::kMma);
  // Below sm_80 and outside the head_dim space the MMA kernels cannot run: an explicit request
  // raises Unsupported naming why, whatever the environment says.
  call.target = device_target(75);
  try {
    ad::resolve_variant(AttentionVariant::kMma, AttentionVariant::kAuto, call);
    ADD_FAILURE() << "no error";
  } catch (const kjit::Unsupported& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("requested variant mma"), std::string::npos) << what;
    EXPECT_NE(what.find("sm_80"), std::string::npos) << what;
  }
  call.target = device_target(90);
  call.head_dim = 96;
  call.kind = AttentionKind::kPagedDecode;
  try {
    ad::resolve_variant(AttentionVariant::kMma, AttentionVariant::kMma, call);
    ADD_FAILURE() << "no error";
  } catch (const kjit::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim 64, 128 or 256"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("paged decode"), std::string::npos) << e.what();
  }
}

TEST(AttentionEntry, EnvironmentAndDefaultFallBack) {
  ad::VariantCall call;
  call.kind = AttentionKind::kDecode;
  call.target = device_target(80);
  call.head_dim = 64;
  EXPECT_EQ(ad::resolve_variant(AttentionVariant::kAuto, AttentionVariant::kAuto, call), AttentionVariant::kMma);
  EXPECT_EQ(ad::resolve_variant(AttentionVariant::kAuto, AttentionVariant::kMma, call), AttentionVariant::kMma);
  // With no capable variant at all the automatic choice raises, listing each variant's reason.
  call.target = device_target(70);
  for (AttentionVariant env : {AttentionVariant::kAuto, AttentionVariant::kMma}) {
    try {
      ad::resolve_variant(AttentionVariant::kAuto, env, call);
      ADD_FAILURE() << "no error";
    } catch (const kjit::Unsupported& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("no variant can run this decode call"), std::string::npos) << what;
      EXPECT_NE(what.find("mma needs sm_80+"), std::string::npos) << what;
    }
  }
  // Every variant's capability rule.
  call.target = device_target(100);
  for (int64_t hd : {64, 128, 256}) {
    call.head_dim = hd;
    EXPECT_EQ(ad::variant_rejects(AttentionVariant::kMma, call), "");
  }
  call.head_dim = 80;
  EXPECT_NE(ad::variant_rejects(AttentionVariant::kMma, call), "");
  EXPECT_NE(ad::variant_rejects(AttentionVariant::kAuto, call), "");
}

TEST(AttentionEntry, WgmmaRunsDenseHopperPrefillOnly) {
  ad::VariantCall call;
  call.kind = AttentionKind::kPrefill;
  call.target = device_target(90);
  call.head_dim = 128;
  EXPECT_EQ(ad::variant_rejects(AttentionVariant::kWgmma, call), "");
  // The automatic choice prefers it on sm_90 and falls back to mma where it cannot run.
  EXPECT_EQ(ad::resolve_variant(AttentionVariant::kAuto, AttentionVariant::kAuto, call), AttentionVariant::kWgmma);
  EXPECT_EQ(ad::resolve_variant(AttentionVariant::kAuto, AttentionVariant::kMma, call), AttentionVariant::kMma);
  auto rejects = [&](const ad::VariantCall& c, const char* why) {
    const std::string got = ad::variant_rejects(AttentionVariant::kWgmma, c);
    EXPECT_NE(got.find(why), std::string::npos) << got;
    EXPECT_EQ(ad::resolve_variant(AttentionVariant::kAuto, AttentionVariant::kWgmma, c), AttentionVariant::kMma);
    EXPECT_THROW(ad::resolve_variant(AttentionVariant::kWgmma, AttentionVariant::kAuto, c), kjit::Unsupported);
  };
  ad::VariantCall c = call;
  c.target = device_target(89);
  rejects(c, "sm_90a");
  c.target = device_target(100);
  rejects(c, "sm_90a");
  c = call;
  c.head_dim = 256;
  rejects(c, "head_dim 64 or 128");
  c = call;
  c.has_mask = true;
  rejects(c, "mask");
  c = call;
  c.has_kv_lens = true;
  rejects(c, "kv_lens");
  c = call;
  c.tma_layout = "q stride of dim 1 must be in [0, 2^39) elements";
  rejects(c, "TMA");
  for (AttentionKind kind : {AttentionKind::kDecode, AttentionKind::kPagedDecode}) {
    c = call;
    c.kind = kind;
    rejects(c, "is a prefill kernel");
  }
}

TEST(AttentionEntry, WgmmaRunsHopperPagedPrefillOf128RowTiles) {
  ad::VariantCall call;
  call.kind = AttentionKind::kPagedPrefill;
  call.target = device_target(90);
  call.tile_rows = 128;
  for (int64_t hd : {64, 128}) {
    call.head_dim = hd;
    EXPECT_TRUE(ad::variant_runs(AttentionVariant::kWgmma, call)) << hd;
    EXPECT_EQ(ad::resolve_variant(AttentionVariant::kAuto, AttentionVariant::kAuto, call), AttentionVariant::kWgmma);
  }
  // The dense kernel's other limits (mask, kv_lens, TMA layouts) do not apply: the paged
  // producer gathers rows itself.
  call.tma_layout = "q stride of dim 1 must be in [0, 2^39) elements";
  EXPECT_TRUE(ad::variant_runs(AttentionVariant::kWgmma, call));
  call.tma_layout = {};
  auto falls_back = [&](const ad::VariantCall& c, const char* why) {
    EXPECT_NE(ad::variant_rejects(AttentionVariant::kWgmma, c).find(why), std::string::npos)
        << ad::variant_rejects(AttentionVariant::kWgmma, c);
    EXPECT_EQ(ad::resolve_variant(AttentionVariant::kAuto, AttentionVariant::kAuto, c), AttentionVariant::kMma);
    EXPECT_THROW(ad::resolve_variant(AttentionVariant::kWgmma, AttentionVariant::kAuto, c), kjit::Unsupported);
  };
  ad::VariantCall c = call;
  c.tile_rows = 64;
  falls_back(c, "128-row tiles, or 192-row tiles at head_dim 64; the plan has 64 at head_dim 128");
  c = call;
  c.head_dim = 256;
  falls_back(c, "head_dim 64 or 128, not 256");
  c = call;
  c.target = device_target(89);
  falls_back(c, "sm_90a");
  // 192-row tiles: the wgmma kernel's at hd64 only, and no mma.sync kernel's, so where wgmma
  // cannot run them nothing can (never the mma.sync kernel with 192-row tiles).
  c = call;
  c.head_dim = 64;
  c.tile_rows = 192;
  EXPECT_TRUE(ad::variant_runs(AttentionVariant::kWgmma, c));
  EXPECT_EQ(ad::resolve_variant(AttentionVariant::kAuto, AttentionVariant::kMma, c), AttentionVariant::kWgmma);
  EXPECT_NE(ad::variant_rejects(AttentionVariant::kMma, c).find("mma runs paged prefill plans with tile_rows 64 or 128, "
                                                                "the plan has 192"),
            std::string::npos)
      << ad::variant_rejects(AttentionVariant::kMma, c);
  EXPECT_THROW(ad::resolve_variant(AttentionVariant::kMma, AttentionVariant::kAuto, c), kjit::Unsupported);
  c.head_dim = 128;
  EXPECT_NE(ad::variant_rejects(AttentionVariant::kWgmma, c).find("the plan has 192 at head_dim 128"), std::string::npos)
      << ad::variant_rejects(AttentionVariant::kWgmma, c);
  EXPECT_THROW(ad::resolve_variant(AttentionVariant::kAuto, AttentionVariant::kAuto, c), kjit::Unsupported);
  c.head_dim = 64;
  c.target = device_target(89);
  EXPECT_THROW(ad::resolve_variant(AttentionVariant::kAuto, AttentionVariant::kAuto, c), kjit::Unsupported);
}

TEST(AttentionEntry, ParsesTheEnvironmentValue) {
  EXPECT_EQ(ad::parse_variant(""), AttentionVariant::kAuto);
  EXPECT_EQ(ad::parse_variant("auto"), AttentionVariant::kAuto);
  EXPECT_EQ(ad::parse_variant("mma"), AttentionVariant::kMma);
  EXPECT_FALSE(ad::parse_variant("MMA").has_value());
  EXPECT_EQ(ad::parse_variant("wgmma"), AttentionVariant::kWgmma);
  EXPECT_FALSE(ad::parse_variant("hopper").has_value());
  EXPECT_STREQ(kjit::attention::variant_name(AttentionVariant::kMma), "mma");
  EXPECT_STREQ(kjit::attention::variant_name(AttentionVariant::kWgmma), "wgmma");
  EXPECT_STREQ(kjit::attention::variant_name(AttentionVariant::kAuto), "auto");
}

TEST(AttentionEntry, ReadsTheVariantFromTheRuntimeConfig) {
  ::setenv("KJIT_ATTN_VARIANT", "mma", 1);
  kjit::RuntimeConfig config = kjit::RuntimeConfig::from_env();
  ::unsetenv("KJIT_ATTN_VARIANT");
  EXPECT_EQ(config.attention_variant, "mma");
  EXPECT_EQ(ad::configured_variant(config), AttentionVariant::kMma);
  EXPECT_EQ(kjit::RuntimeConfig::from_env().attention_variant, "");
  // An unknown value reads as auto and warns once per process, through kjit's warning channel.
  config.attention_variant = "hopper";
  testing::internal::CaptureStderr();
  EXPECT_EQ(ad::configured_variant(config), AttentionVariant::kAuto);
  EXPECT_EQ(ad::configured_variant(config), AttentionVariant::kAuto);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("kjit: warning: ignoring KJIT_ATTN_VARIANT=hopper"), std::string::npos) << err;
  EXPECT_EQ(err.find("KJIT_ATTN_VARIANT", err.find("KJIT_ATTN_VARIANT") + 1), std::string::npos) << err;
}

TEST(AttentionEntry, VariantRulesBuildNoStringToSucceed) {
  ad::VariantCall call;
  call.kind = AttentionKind::kPrefill;
  call.target = device_target(90);
  call.head_dim = 64;
  EXPECT_TRUE(ad::variant_runs(AttentionVariant::kWgmma, call));
  EXPECT_TRUE(ad::variant_runs(AttentionVariant::kMma, call));
  EXPECT_FALSE(ad::variant_runs(AttentionVariant::kAuto, call));
  call.tma_layout = "out stride of dim 0 must be in [0, 2^39) elements";
  EXPECT_FALSE(ad::variant_runs(AttentionVariant::kWgmma, call));
  EXPECT_EQ(ad::variant_rejects(AttentionVariant::kWgmma, call),
            "wgmma cannot address the tensors with TMA: out stride of dim 0 must be in [0, 2^39) elements");
  EXPECT_STREQ(ad::kind_name(AttentionKind::kPagedPrefill), "paged prefill");
}

/// Converts to any field type, so T{AnyField{}, ...} counts an aggregate's fields.
struct AnyField {
  template <class T>
  operator T() const;  // NOLINT(google-explicit-constructor): only named in unevaluated contexts
};
template <class T, class... A>
constexpr auto brace_initializable(int) -> decltype(void(T{std::declval<A>()...}), true) {
  return true;
}
template <class T, class... A>
constexpr bool brace_initializable(...) {
  return false;
}
/// The number of fields of aggregate T.
template <class T, class... A>
constexpr int field_count() {
  if constexpr (brace_initializable<T, A..., AnyField>(0)) {
    return field_count<T, A..., AnyField>();
  } else {
    return static_cast<int>(sizeof...(A));
  }
}

TEST(AttentionEntry, OpArgumentsAreFilledFromEveryField) {
  // Every field of an op's own arguments is a shared one (the projection copies it), except
  // PrefillArgs::variant, which the entry resolves itself. A field added to an op's arguments
  // and to AttentionArgs but not to KJIT_ATTENTION_SHARED_FIELDS fails here.
  EXPECT_EQ(field_count<kjit::attention::DecodeArgs>(), ad::shared_field_count<kjit::attention::DecodeArgs>());
  EXPECT_EQ(field_count<kjit::attention::PagedDecodeArgs>(),
            ad::shared_field_count<kjit::attention::PagedDecodeArgs>());
  EXPECT_EQ(field_count<kjit::attention::PrefillArgs>(), ad::shared_field_count<kjit::attention::PrefillArgs>() + 1);
  EXPECT_EQ(field_count<kjit::attention::PagedPrefillArgs>(),
            ad::shared_field_count<kjit::attention::PagedPrefillArgs>());
  static_assert(field_count<kjit::attention::DecodeArgs>() == 10, "the counter counts");

  AttentionArgs a = contiguous(1);
  a.kv_lens = TensorRef(fake_ptr(0x9000000), DType::kI32, {2}, {}, 0);
  a.mask = TensorRef(fake_ptr(0x7000000), DType::kBool, {2, 1, 300}, {}, 0);
  a.lse = TensorRef(fake_ptr(0xa000000), DType::kF32, {2, 8, 1}, {}, 0);
  a.cache = cache(2);
  a.qo_indptr = TensorRef(fake_ptr(0x8000000), DType::kI32, {3}, {}, 0);
  a.causal = true;
  a.scale = 0.25f;
  a.num_splits = 3;
  a.kv_len_hint = 77;
  a.merge = kjit::attention::DecodeMerge::kCluster;
  a.block_m = 64;
  a.variant = AttentionVariant::kWgmma;

  const auto d = ad::op_args<kjit::attention::DecodeArgs>(a);
  EXPECT_EQ(d.q.data, a.q.data);
  EXPECT_EQ(d.k.data, a.k.data);
  EXPECT_EQ(d.v.data, a.v.data);
  EXPECT_EQ(d.kv_lens.data, a.kv_lens.data);
  EXPECT_EQ(d.out.data, a.out.data);
  EXPECT_EQ(d.scale, 0.25f);
  EXPECT_EQ(d.num_splits, 3);
  EXPECT_EQ(d.merge, kjit::attention::DecodeMerge::kCluster);
  // Decode reads the [batch, 1, kv_len] mask as [batch, kv_len] and the [batch, q_heads, 1] lse
  // as [batch, q_heads].
  EXPECT_EQ(d.mask.data, a.mask.data);
  EXPECT_EQ(d.mask.ndim, 2);
  EXPECT_EQ(d.mask.shape[1], 300);
  EXPECT_EQ(d.mask.strides[1], a.mask.strides[2]);
  EXPECT_EQ(d.lse.data, a.lse.data);
  EXPECT_EQ(d.lse.ndim, 2);
  EXPECT_EQ(d.lse.shape[1], 8);

  const auto pd = ad::op_args<kjit::attention::PagedDecodeArgs>(a);
  EXPECT_EQ(pd.q.data, a.q.data);
  EXPECT_EQ(pd.cache.k.data, a.cache.k.data);
  EXPECT_EQ(pd.cache.indptr.data, a.cache.indptr.data);
  EXPECT_EQ(pd.out.data, a.out.data);
  EXPECT_EQ(pd.lse.ndim, 2);
  EXPECT_EQ(pd.scale, 0.25f);
  EXPECT_EQ(pd.num_splits, 3);
  EXPECT_EQ(pd.kv_len_hint, 77);
  EXPECT_EQ(pd.merge, kjit::attention::DecodeMerge::kCluster);

  const auto p = ad::op_args<kjit::attention::PrefillArgs>(a);
  EXPECT_EQ(p.q.data, a.q.data);
  EXPECT_EQ(p.k.data, a.k.data);
  EXPECT_EQ(p.v.data, a.v.data);
  EXPECT_EQ(p.kv_lens.data, a.kv_lens.data);
  EXPECT_EQ(p.mask.ndim, 3);  // prefill takes the mask and lse as given
  EXPECT_EQ(p.lse.ndim, 3);
  EXPECT_TRUE(p.causal);
  EXPECT_EQ(p.out.data, a.out.data);
  EXPECT_EQ(p.scale, 0.25f);
  EXPECT_EQ(p.block_m, 64);
  EXPECT_EQ(p.variant, AttentionVariant::kAuto);  // resolved by the entry, not copied

  const auto pp = ad::op_args<kjit::attention::PagedPrefillArgs>(a);
  EXPECT_EQ(pp.q.data, a.q.data);
  EXPECT_EQ(pp.qo_indptr.data, a.qo_indptr.data);
  EXPECT_EQ(pp.cache.v.data, a.cache.v.data);
  EXPECT_EQ(pp.cache.page_indices.data, a.cache.page_indices.data);
  EXPECT_EQ(pp.cache.last_page_len.data, a.cache.last_page_len.data);
  EXPECT_TRUE(pp.causal);
  EXPECT_EQ(pp.out.data, a.out.data);
  EXPECT_EQ(pp.lse.ndim, 3);
  EXPECT_EQ(pp.scale, 0.25f);
}

}  // namespace
