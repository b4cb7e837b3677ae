// Host-only checks of kjit::mla::swa_decode: every validation rule fires with a message naming
// the tensor (before any driver call, through the public op too), the planner's choices and
// partitions, the workspace check, the family's space, and that the family compiles with NVRTC
// for every CI arch without spills. No GPU needed.
#include <kjit/error.hpp>
#include <kjit/ops/swa_decode.hpp>
#include <kjit/runtime.hpp>

#include "mla/swa_decode_params.h"
#include "runtime/ops/mla/swa_decode.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <set>
#include <string>

namespace {

using kjit::DType;
using kjit::TensorRef;
using kjit::mla::SwaDecodeArgs;
namespace md = kjit::mla::detail;

constexpr int64_t kT = 5, kNH = 32, kHD = 512, kW = 128, kBlocks = 7, kBlockSize = 64;

void* fake_ptr(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + offset); }

SwaDecodeArgs valid_args() {
  SwaDecodeArgs a;
  a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {kT, kNH, kHD}, {}, 0);
  a.kv_cache = TensorRef(fake_ptr(0x1000000), DType::kU8, {kBlocks, kBlockSize, kHD}, {}, 0);
  a.inv_scale = TensorRef(fake_ptr(0x2000000), DType::kBF16, {kBlocks * kBlockSize, 1}, {}, 0);
  a.indices = TensorRef(fake_ptr(0x3000000), DType::kI64, {kT, kW}, {}, 0);
  a.lens = TensorRef(fake_ptr(0x4000000), DType::kI64, {kT}, {}, 0);
  a.out = TensorRef(fake_ptr(0x5000000), DType::kBF16, {kT, kNH, kHD}, {}, 0);
  a.lse = TensorRef(fake_ptr(0x6000000), DType::kF32, {kT, kNH}, {}, 0);
  return a;
}

/// valid_args with `heads` query heads and no LSE.
void with_heads(SwaDecodeArgs& a, int64_t heads) {
  a.q = TensorRef(fake_ptr(), DType::kBF16, {kT, heads, kHD}, {}, 0);
  a.out = TensorRef(fake_ptr(0x5000000), DType::kBF16, {kT, heads, kHD}, {}, 0);
  a.lse = {};
}

/// Applies `edit` to valid args and expects validate_swa_decode — and the public op and its
/// workspace query, which must validate before touching the driver — to throw InvalidArgument
/// naming the op (the query: itself) and mentioning every `needles`.
void expect_invalid(const std::function<void(SwaDecodeArgs&)>& edit, std::initializer_list<const char*> needles) {
  SwaDecodeArgs a = valid_args();
  edit(a);
  for (int via = 0; via < 3; ++via) {
    try {
      if (via == 0) {
        md::validate_swa_decode(a);
      } else if (via == 1) {
        kjit::mla::swa_decode(a, nullptr, 0, nullptr);
      } else {
        kjit::mla::swa_decode_workspace_bytes(a);
      }
      ADD_FAILURE() << "no error for an invalid argument (expected: " << *needles.begin() << ")";
    } catch (const kjit::InvalidArgument& e) {
      const std::string what = e.what();
      const std::string named = via == 2 ? "kjit::mla::swa_decode_workspace_bytes: " : "kjit::mla::swa_decode: ";
      EXPECT_EQ(what.rfind(named, 0), 0u) << what;
      for (const char* n : needles) EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in: " << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong exception type (via " << via << "): " << e.what();
    }
  }
}

TEST(SwaDecodeArgs, ValidArgsPass) {
  md::SwaDims d = md::validate_swa_decode(valid_args());
  EXPECT_EQ(d.tokens, kT);
  EXPECT_EQ(d.heads, kNH);
  EXPECT_EQ(d.head_dim, kHD);
  EXPECT_EQ(d.window, kW);
  EXPECT_EQ(d.num_blocks, kBlocks);
  EXPECT_EQ(d.block_size, kBlockSize);
  EXPECT_EQ(d.cache, kjit::mla::kSwaCacheE4M3);
  EXPECT_TRUE(d.lens_i64 && d.has_lse && d.kv_compact);

  SwaDecodeArgs a = valid_args();
  a.lse = {};
  a.lens.dtype = DType::kI32;
  a.kv_cache.dtype = DType::kE5M2;
  d = md::validate_swa_decode(a);
  EXPECT_FALSE(d.has_lse || d.lens_i64);
  EXPECT_EQ(d.cache, kjit::mla::kSwaCacheE5M2);
  a.kv_cache.dtype = DType::kE4M3;
  EXPECT_EQ(md::validate_swa_decode(a).cache, kjit::mla::kSwaCacheE4M3);

  // Accepted forms beyond [T, W]: [1, T, W] indices, and more index / lens rows than tokens.
  a = valid_args();
  a.indices = TensorRef(fake_ptr(0x3000000), DType::kI64, {1, kT + 3, kW}, {}, 0);
  a.lens = TensorRef(fake_ptr(0x4000000), DType::kI64, {kT + 3}, {}, 0);
  EXPECT_NO_THROW(md::validate_swa_decode(a));
  // A padded cache (block stride larger than block_size rows) is fine but not compact.
  a = valid_args();
  a.kv_cache = TensorRef(fake_ptr(0x1000000), DType::kU8, {kBlocks, kBlockSize, kHD},
                         {(kBlockSize + 2) * kHD, kHD, 1}, 0);
  EXPECT_FALSE(md::validate_swa_decode(a).kv_compact);
  // Strided q/out views (a padded head stride) and T = 0 are fine.
  a = valid_args();
  a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {kT, kNH, kHD}, {kNH * 2 * kHD, 2 * kHD, 1}, 0);
  EXPECT_NO_THROW(md::validate_swa_decode(a));
  a = valid_args();
  a.q.shape[0] = 0;
  a.out.shape[0] = 0;
  a.lse.shape[0] = 0;
  EXPECT_EQ(md::validate_swa_decode(a).tokens, 0);
  // Every window of the space.
  for (int w : kjit::mla::kSwaWindows) {
    a = valid_args();
    a.indices = TensorRef(fake_ptr(0x3000000), DType::kI64, {kT, w}, {}, 0);
    EXPECT_EQ(md::validate_swa_decode(a).window, w);
  }
}

// One fact, one place: the validator accepts exactly the windows and head groups the family
// declares, and the declared sets are the constants the planner and the tuner read. Adding a value
// to the declaration without teaching a consumer fails here.
TEST(SwaDecodeArgs, AcceptsExactlyTheDeclaredWindowsAndGroups) {
  const kjit::Family& f = kjit::mla::swa_decode_family();
  std::set<int64_t> windows, groups, clusters;
  for (const kjit::ParamValue& v : f.params[f.param_index("window")].values) windows.insert(v.code);
  for (const kjit::ParamValue& v : f.params[f.param_index("group")].values) groups.insert(v.code);
  for (const kjit::ParamValue& v : f.params[f.param_index("cluster_split")].values) clusters.insert(v.code);
  EXPECT_EQ(windows, std::set<int64_t>(std::begin(kjit::mla::kSwaWindows), std::end(kjit::mla::kSwaWindows)));
  EXPECT_EQ(groups, std::set<int64_t>(std::begin(kjit::mla::kSwaGroups), std::end(kjit::mla::kSwaGroups)));
  EXPECT_EQ(clusters,
            std::set<int64_t>(std::begin(kjit::mla::kSwaClusterSplits), std::end(kjit::mla::kSwaClusterSplits)));
  for (int c = -1; c <= 16; ++c) {
    SwaDecodeArgs a = valid_args();
    a.cluster_split = c;
    bool accepted = true;
    try {
      md::validate_swa_decode(a);
    } catch (const kjit::InvalidArgument&) {
      accepted = false;
    }
    EXPECT_EQ(accepted, c == 0 || clusters.count(c) == 1) << "cluster_split " << c;
  }
  for (int64_t w = 1; w <= 2048; ++w) {
    SwaDecodeArgs a = valid_args();
    a.indices = TensorRef(fake_ptr(0x3000000), DType::kI64, {kT, w}, {}, 0);
    bool accepted = true;
    try {
      md::validate_swa_decode(a);
    } catch (const kjit::InvalidArgument&) {
      accepted = false;
    }
    EXPECT_EQ(accepted, windows.count(w) == 1) << "window " << w;
    if (windows.count(w)) {
      EXPECT_GE(md::swa_max_splits(w), 1) << w;
      EXPECT_EQ(md::validate_swa_decode(a).window, w);
    }
  }
  for (int g = 0; g <= 256; ++g) {
    SwaDecodeArgs a = valid_args();
    a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {kT, 256, kHD}, {}, 0);
    a.out = TensorRef(fake_ptr(0x5000000), DType::kBF16, {kT, 256, kHD}, {}, 0);
    a.lse = TensorRef(fake_ptr(0x6000000), DType::kF32, {kT, 256}, {}, 0);
    a.head_group = g;
    bool accepted = true;
    try {
      md::validate_swa_decode(a);
    } catch (const kjit::InvalidArgument&) {
      accepted = false;
    }
    EXPECT_EQ(accepted, g == 0 || groups.count(g) == 1) << "head_group " << g;
  }
  // Every declared (group, kv_tile, cluster_split) the constraint admits has a launch shape; a
  // cluster split's tile is the one its requests plan (swa_cluster_tile).
  for (const kjit::Point& pt : f.enumerate()) {
    const int group = static_cast<int>(f.value(pt, "group").code);
    const int tile = static_cast<int>(f.value(pt, "kv_tile").code);
    const int cluster = static_cast<int>(f.value(pt, "cluster_split").code);
    EXPECT_GT(kjit::mla::swa_launch_shape(group, tile, cluster).threads, 0) << f.describe(pt);
    if (cluster > 1) EXPECT_EQ(tile, kjit::mla::swa_cluster_tile(f.value(pt, "window").code, cluster)) << f.describe(pt);
  }
}

TEST(SwaDecodeArgs, QRules) {
  expect_invalid([](SwaDecodeArgs& a) { a.q = {}; }, {"q is required"});
  expect_invalid([](SwaDecodeArgs& a) { a.q.dtype = DType::kF16; }, {"q must be bf16"});
  expect_invalid([](SwaDecodeArgs& a) { a.q = TensorRef(fake_ptr(), DType::kBF16, {kT, 1, kNH, kHD}, {}, 0); },
                 {"q must be 3-d"});
  expect_invalid(
      [](SwaDecodeArgs& a) {
        a.q = TensorRef(fake_ptr(), DType::kBF16, {kT, kNH, 256}, {}, 0);
        a.out = TensorRef(fake_ptr(0x5000000), DType::kBF16, {kT, kNH, 256}, {}, 0);
      },
      {"q head_dim", "must be 512"});
  expect_invalid(
      [](SwaDecodeArgs& a) {
        a.q = TensorRef(fake_ptr(), DType::kBF16, {kT, 24, kHD}, {}, 0);
        a.out = TensorRef(fake_ptr(0x5000000), DType::kBF16, {kT, 24, kHD}, {}, 0);
      },
      {"q heads", "multiple of 16"});
  expect_invalid([](SwaDecodeArgs& a) { a.q.shape[1] = 0; }, {"q heads"});
  expect_invalid([](SwaDecodeArgs& a) { a.q.device = -1; }, {"q must be on a CUDA device"});
  expect_invalid([](SwaDecodeArgs& a) { a.q.data = fake_ptr(8); }, {"q data pointer", "16-byte aligned"});
  expect_invalid([](SwaDecodeArgs& a) { a.q.strides[2] = 2; }, {"q must have a contiguous last dimension"});
  expect_invalid([](SwaDecodeArgs& a) { a.q.strides[1] = kHD + 4; }, {"q stride of dim 1", "16 bytes"});
  expect_invalid([](SwaDecodeArgs& a) { a.q.data = nullptr; }, {"q has a null data pointer"});
  expect_invalid([](SwaDecodeArgs& a) { a.q.shape[0] = -1; }, {"q has a negative size"});
}

TEST(SwaDecodeArgs, CacheRules) {
  expect_invalid([](SwaDecodeArgs& a) { a.kv_cache = {}; }, {"kv_cache is required"});
  expect_invalid([](SwaDecodeArgs& a) { a.kv_cache.dtype = DType::kBF16; }, {"kv_cache must be u8 or e4m3 or e5m2"});
  expect_invalid(
      [](SwaDecodeArgs& a) { a.kv_cache = TensorRef(fake_ptr(0x1000000), DType::kU8, {kBlocks * kBlockSize, kHD}, {}, 0); },
      {"kv_cache must be 3-d"});
  expect_invalid([](SwaDecodeArgs& a) { a.kv_cache.shape[2] = 576; }, {"kv_cache dim 2", "head_dim"});
  expect_invalid([](SwaDecodeArgs& a) { a.kv_cache.strides[2] = 2; }, {"kv_cache must have a contiguous last dimension"});
  expect_invalid([](SwaDecodeArgs& a) { a.kv_cache.data = fake_ptr(0x1000000 + 8); }, {"kv_cache data pointer", "16-byte"});
  // A row stride of HD + 8 bytes: rows only 8-byte aligned.
  expect_invalid(
      [](SwaDecodeArgs& a) {
        a.kv_cache.strides[1] = kHD + 8;
        a.kv_cache.strides[0] = kBlockSize * (kHD + 8);
      },
      {"kv_cache stride of dim 1", "multiple of 16 bytes"});
  expect_invalid([](SwaDecodeArgs& a) { a.kv_cache.strides[0] = kBlockSize * kHD + 4; }, {"kv_cache stride of dim 0"});
  expect_invalid([](SwaDecodeArgs& a) { a.kv_cache.shape[1] = 0; }, {"kv_cache block_size", "at least 1"});
  expect_invalid([](SwaDecodeArgs& a) { a.kv_cache.device = 1; }, {"kv_cache is on CUDA device 1"});
  expect_invalid([](SwaDecodeArgs& a) { a.kv_cache.data = nullptr; }, {"kv_cache has a null data pointer"});
}

TEST(SwaDecodeArgs, ScaleIndicesLensRules) {
  expect_invalid([](SwaDecodeArgs& a) { a.inv_scale = {}; }, {"inv_scale is required"});
  expect_invalid([](SwaDecodeArgs& a) { a.inv_scale.dtype = DType::kF32; }, {"inv_scale must be bf16"});
  expect_invalid(
      [](SwaDecodeArgs& a) { a.inv_scale = TensorRef(fake_ptr(0x2000000), DType::kBF16, {kBlocks * kBlockSize}, {}, 0); },
      {"inv_scale must be 2-d"});
  expect_invalid([](SwaDecodeArgs& a) { a.inv_scale.shape[1] = 2; }, {"inv_scale dim 1", "[max_slots, 1]"});
  expect_invalid([](SwaDecodeArgs& a) { a.inv_scale.data = fake_ptr(0x2000000 + 1); }, {"inv_scale data pointer"});
  expect_invalid([](SwaDecodeArgs& a) { a.inv_scale.device = 2; }, {"inv_scale is on CUDA device 2"});

  expect_invalid([](SwaDecodeArgs& a) { a.indices = {}; }, {"indices is required"});
  expect_invalid([](SwaDecodeArgs& a) { a.indices.dtype = DType::kI32; }, {"indices must be i64"});
  expect_invalid([](SwaDecodeArgs& a) { a.indices = TensorRef(fake_ptr(0x3000000), DType::kI64, {kT * kW}, {}, 0); },
                 {"indices must be 2-d"});
  expect_invalid([](SwaDecodeArgs& a) { a.indices = TensorRef(fake_ptr(0x3000000), DType::kI64, {2, kT, kW}, {}, 0); },
                 {"leading dim of 1"});
  expect_invalid([](SwaDecodeArgs& a) { a.indices = TensorRef(fake_ptr(0x3000000), DType::kI64, {kT, 100}, {}, 0); },
                 {"indices window W", "64, 128, 256 or 512"});
  expect_invalid([](SwaDecodeArgs& a) { a.indices = TensorRef(fake_ptr(0x3000000), DType::kI64, {kT, 1024}, {}, 0); },
                 {"indices window W"});
  expect_invalid([](SwaDecodeArgs& a) { a.indices.shape[0] = kT - 1; }, {"indices must have at least T = 5 rows"});
  expect_invalid([](SwaDecodeArgs& a) { a.indices.strides[0] = 2 * kW; }, {"indices must be contiguous"});
  expect_invalid([](SwaDecodeArgs& a) { a.indices.data = fake_ptr(0x3000000 + 4); }, {"indices data pointer", "8-byte"});
  expect_invalid([](SwaDecodeArgs& a) { a.indices.device = -1; }, {"indices is on the host"});

  expect_invalid([](SwaDecodeArgs& a) { a.lens = {}; }, {"lens is required"});
  expect_invalid([](SwaDecodeArgs& a) { a.lens.dtype = DType::kF32; }, {"lens must be i64 or i32"});
  expect_invalid([](SwaDecodeArgs& a) { a.lens.shape[0] = kT - 1; }, {"lens must have at least T = 5 entries"});
  expect_invalid([](SwaDecodeArgs& a) { a.lens.strides[0] = 2; }, {"lens must be contiguous"});
  expect_invalid([](SwaDecodeArgs& a) { a.lens = TensorRef(fake_ptr(0x4000000), DType::kI64, {kT, 1}, {}, 0); },
                 {"lens must be 1-d"});
  expect_invalid([](SwaDecodeArgs& a) { a.lens.data = fake_ptr(0x4000000 + 4); }, {"lens data pointer", "8-byte"});
  expect_invalid([](SwaDecodeArgs& a) { a.lens.device = 3; }, {"lens is on CUDA device 3"});
}

TEST(SwaDecodeArgs, OutputAndScalarRules) {
  expect_invalid([](SwaDecodeArgs& a) { a.out = {}; }, {"out is required"});
  expect_invalid([](SwaDecodeArgs& a) { a.out.dtype = DType::kF32; }, {"out must be bf16"});
  expect_invalid([](SwaDecodeArgs& a) { a.out.shape[0] = kT + 1; }, {"out dim 0", "T (q dim 0)"});
  expect_invalid([](SwaDecodeArgs& a) { a.out.shape[1] = kNH / 2; }, {"out dim 1", "NH"});
  expect_invalid([](SwaDecodeArgs& a) { a.out.data = fake_ptr(0x5000000 + 4); }, {"out data pointer"});
  expect_invalid([](SwaDecodeArgs& a) { a.out.device = 2; }, {"out is on CUDA device 2"});
  expect_invalid([](SwaDecodeArgs& a) { a.lse.dtype = DType::kBF16; }, {"lse must be f32"});
  expect_invalid([](SwaDecodeArgs& a) { a.lse.shape[1] = kNH + 1; }, {"lse dim 1", "NH"});
  expect_invalid([](SwaDecodeArgs& a) { a.lse = TensorRef(fake_ptr(0x6000000), DType::kF32, {kT * kNH}, {}, 0); },
                 {"lse must be 2-d"});
  expect_invalid([](SwaDecodeArgs& a) { a.lse.device = 1; }, {"lse is on CUDA device 1"});
  expect_invalid([](SwaDecodeArgs& a) { a.scale = NAN; }, {"scale must be finite"});
  expect_invalid([](SwaDecodeArgs& a) { a.scale = -INFINITY; }, {"scale must be finite"});
  expect_invalid([](SwaDecodeArgs& a) { a.num_splits = -1; }, {"num_splits must be in [0, 8]"});
  expect_invalid([](SwaDecodeArgs& a) { a.num_splits = 9; }, {"num_splits must be in [0, 8]"});
  expect_invalid([](SwaDecodeArgs& a) { a.head_group = 8; }, {"head_group must be 0 (auto), 16, 32 or 64"});
  expect_invalid(
      [](SwaDecodeArgs& a) {
        a.head_group = 64;
        a.num_splits = 2;
      },
      {"head_group 64", "does not split the window"});
  expect_invalid(
      [](SwaDecodeArgs& a) {
        with_heads(a, 48);
        a.head_group = 32;
      },
      {"head_group 32 must divide", "NH = 48"});
  expect_invalid([](SwaDecodeArgs& a) { a.cluster_split = 3; }, {"cluster_split must be 0 (auto) or 1, 2, 4 or 8, got 3"});
  expect_invalid([](SwaDecodeArgs& a) { a.cluster_split = -1; }, {"cluster_split must be 0 (auto)"});
  expect_invalid(
      [](SwaDecodeArgs& a) {
        a.cluster_split = 2;
        a.num_splits = 3;
      },
      {"cluster_split 2 merges the window inside its cluster", "num_splits must be 0 or 1, got 3"});
  expect_invalid(
      [](SwaDecodeArgs& a) {
        with_heads(a, 64);
        a.cluster_split = 4;
        a.head_group = 64;
      },
      {"cluster_split 4 cannot run head_group 64", "runs the mma.sync kernel (group 16 or 32)"});
  expect_invalid(
      [](SwaDecodeArgs& a) {
        a.cluster_split = 8;
        a.indices = TensorRef(fake_ptr(0x3000000), DType::kI64, {kT, 64}, {}, 0);
      },
      {"cluster_split 8 cannot run", "indices [5, 64] i64", "whole 16-position steps per CTA (window a multiple of 128)"});
  expect_invalid(
      [](SwaDecodeArgs& a) {
        a.cluster_split = 2;
        a.indices = TensorRef(fake_ptr(0x3000000), DType::kI64, {kT, 512}, {}, 0);
      },
      {"cluster_split 2 cannot run", "leaves 256 window positions per CTA, more than a tile holds (128)"});
  // Accepted: with head_group 16 or 32, num_splits 0 or 1, and as 1 (no cluster) with anything.
  for (int group : {0, 16, 32}) {
    for (int splits : {0, 1}) {
      SwaDecodeArgs a = valid_args();
      a.cluster_split = 8;
      a.head_group = group;
      a.num_splits = splits;
      EXPECT_NO_THROW(md::validate_swa_decode(a)) << group << " " << splits;
    }
  }
  SwaDecodeArgs one = valid_args();
  with_heads(one, 64);
  one.cluster_split = 1;
  one.head_group = 64;
  one.num_splits = 1;
  EXPECT_NO_THROW(md::validate_swa_decode(one));
}

md::SwaDims dims(int64_t tokens, int64_t heads = 128, int64_t window = 128) {
  md::SwaDims d;
  d.tokens = tokens;
  d.heads = heads;
  d.head_dim = 512;
  d.window = window;
  d.num_blocks = 1000;
  d.block_size = 256;
  return d;
}

constexpr int kH200Sms = 132;
constexpr int kH200Smem = 232448;  // opt-in shared memory per CTA
constexpr int kAdaSmem = 101376;   // sm_86 / sm_89: 99 KiB

/// A device the planner sees: `sms` SMs, `smem` bytes of opt-in shared memory per CTA (0 = no
/// limit) and compute capability `sm` / 10 . `sm` % 10. The default, sm_80 with an H200's SMs
/// and shared memory, plans the mma.sync kernel at H200 sizes (no wgmma).
kjit::DeviceInfo device(int sms = kH200Sms, int smem = kH200Smem, int sm = 80) {
  kjit::DeviceInfo info;
  info.name = "planner test device";
  info.cc_major = sm / 10;
  info.cc_minor = sm % 10;
  info.sm_count = sms;
  info.max_smem_per_block_optin = smem;
  info.max_smem_per_sm = 233472;
  return info;
}

/// plan_swa_decode of `d` with the args' num_splits / head_group / cluster_split `splits` /
/// `group` / `cluster` on `info`.
md::SwaPlan plan(md::SwaDims d, int splits, int group, const kjit::DeviceInfo& info = device(), int cluster = 0) {
  d.requested_splits = splits;
  d.requested_heads_per_cta = group;
  d.requested_cluster_split = cluster;
  return md::plan_swa_decode(d, info);
}

TEST(SwaDecodePlan, BenchmarkShapesOnH200) {
  // The mma.sync kernel's plans (device() has no wgmma; the next test plans for sm_90a).
  // T = 1: 8 head groups, one CTA each, unsplit: no merge launch, no workspace (the H200
  // sweep: 14.0 µs unsplit against 18.2 µs in 8 splits of 16).
  md::SwaPlan p = plan(dims(1), 0, 0);
  EXPECT_EQ(p.heads_per_cta, 16);
  EXPECT_EQ(p.tile, 128);
  EXPECT_EQ(p.num_splits, 1);
  EXPECT_EQ(p.split_len, 128);
  EXPECT_EQ(p.ctas, 8);
  EXPECT_EQ(p.workspace_bytes, 0u);
  // A forced count still reaches one 16-position step per split.
  EXPECT_EQ(plan(dims(1), 8, 0).num_splits, 8);
  EXPECT_EQ(plan(dims(1), 8, 0).split_len, 16);
  EXPECT_GT(plan(dims(1), 8, 0).workspace_bytes, 0u);
  // W = 512 at T = 1: the 128-position tile needs 4 splits, and auto adds none.
  EXPECT_EQ(plan(dims(1, 128, 512), 0, 0).num_splits, 4);
  // T = 8: 64 CTAs, unsplit (15.1 µs against 22.6 µs in 3 splits of 48).
  p = plan(dims(8), 0, 0);
  EXPECT_EQ(p.heads_per_cta, 16);
  EXPECT_EQ(p.num_splits, 1);
  EXPECT_EQ(p.split_len, 128);
  // T = 64 and 512: groups of 32 heads fill the machine without splitting.
  for (int64_t t : {64, 512}) {
    p = plan(dims(t), 0, 0);
    EXPECT_EQ(p.heads_per_cta, 32) << t;
    EXPECT_EQ(p.num_splits, 1) << t;
    EXPECT_EQ(p.split_len, 128) << t;
    EXPECT_EQ(p.ctas, t * 4) << t;
    EXPECT_EQ(p.workspace_bytes, 0u) << t;
  }
  // NH = 48 cannot use groups of 32.
  EXPECT_EQ(plan(dims(512, 48), 0, 0).heads_per_cta, 16);
  // W = 64 with groups of 16 uses the 64-position tile; groups of 32 keep the 128 one.
  EXPECT_EQ(plan(dims(40, 128, 64), 0, 16).tile, 64);
  EXPECT_EQ(plan(dims(400, 128, 64), 0, 32).tile, 128);
  // W = 512 needs at least 4 splits of the 128-position tile.
  p = plan(dims(512, 128, 512), 0, 0);
  EXPECT_EQ(p.num_splits, 4);
  EXPECT_EQ(p.split_len, 128);
}

TEST(SwaDecodePlan, HopperTakesTheWgmmaKernel) {
  const kjit::DeviceInfo h200 = device(kH200Sms, kH200Smem, 90);
  // At least half as many (token, 64-head) items as SMs: the wgmma kernel, unsplit, no
  // workspace.
  for (int64_t t : {33, 64, 512, 1000}) {
    const md::SwaPlan p = plan(dims(t), 0, 0, h200);
    EXPECT_EQ(p.heads_per_cta, 64) << t;
    EXPECT_EQ(p.tile, 128) << t;
    EXPECT_EQ(p.num_splits, 1) << t;
    EXPECT_EQ(p.ctas, t * 2) << t;
    EXPECT_EQ(p.workspace_bytes, 0u) << t;
  }
  EXPECT_EQ(plan(dims(500, 128, 64), 0, 0, h200).heads_per_cta, 64);
  // Fewer: the mma.sync kernel's plan (groups of 16 below one CTA of 32 per SM).
  EXPECT_EQ(plan(dims(1), 0, 0, h200).heads_per_cta, 16);
  EXPECT_EQ(plan(dims(8), 0, 0, h200).heads_per_cta, 16);
  EXPECT_EQ(plan(dims(32), 0, 0, h200).heads_per_cta, 16);
  // Asked for, it runs at any T.
  EXPECT_EQ(plan(dims(1), 0, 64, h200).ctas, 2);
  // Outside its shape, or when splits or another group are asked for: the mma.sync kernel.
  EXPECT_EQ(plan(dims(512, 128, 256), 0, 0, h200).heads_per_cta, 32);
  EXPECT_EQ(plan(dims(512, 96), 0, 0, h200).heads_per_cta, 32);
  EXPECT_EQ(plan(dims(512), 4, 0, h200).num_splits, 4);
  EXPECT_EQ(plan(dims(512), 0, 32, h200).heads_per_cta, 32);
  EXPECT_EQ(plan(dims(512), 0, 0, device(kH200Sms, kAdaSmem, 90)).heads_per_cta, 16);
  // Other archs never get it unless asked (the op then throws Unsupported).
  EXPECT_EQ(plan(dims(512), 0, 0, device(kH200Sms, kH200Smem, 100)).heads_per_cta, 32);
  EXPECT_EQ(plan(dims(64), 0, 64, device(kH200Sms, kH200Smem, 89)).heads_per_cta, 64);
}

TEST(SwaDecodePlan, FewTokensOnSm90SplitTheWindowOverACluster) {
  const kjit::DeviceInfo h200 = device(kH200Sms, kH200Smem, 90);
  // Clusters of 4 while their CTAs fill at most half the SMs (66 of 132), else of 2 while theirs
  // fit one per SM, groups of 16: T = 1..2: 8..16 items × 4 CTAs of 32 positions; T = 3..8:
  // 24..64 × 2 of 64; from T = 9 none.
  struct Want {
    int64_t tokens;
    int cluster, tile, split_len;
  };
  for (const Want& w : {Want{1, 4, 64, 32}, Want{2, 4, 64, 32}, Want{3, 2, 64, 64}, Want{4, 2, 64, 64},
                        Want{8, 2, 64, 64}}) {
    SCOPED_TRACE(testing::Message() << "T" << w.tokens);
    const md::SwaPlan p = plan(dims(w.tokens), 0, 0, h200);
    EXPECT_EQ(p.cluster_split, w.cluster);
    EXPECT_EQ(p.heads_per_cta, 16);
    EXPECT_EQ(p.tile, w.tile);
    EXPECT_EQ(p.split_len, w.split_len);
    EXPECT_EQ(p.num_splits, 1);  // no merge kernel
    EXPECT_EQ(p.ctas, w.tokens * 8 * w.cluster);
    EXPECT_EQ(p.workspace_bytes, 0u);
    EXPECT_LE(p.ctas, kH200Sms);
  }
  // From T = 9 two CTAs an item would not fit one per SM: the plans of the other tests (groups
  // of 16 up to T = 32, then the wgmma kernel).
  EXPECT_EQ(plan(dims(9), 0, 0, h200).cluster_split, 1);
  EXPECT_EQ(plan(dims(16), 0, 0, h200).cluster_split, 1);
  EXPECT_EQ(plan(dims(17), 0, 0, h200).cluster_split, 1);
  EXPECT_EQ(plan(dims(17), 0, 0, h200).heads_per_cta, 16);
  EXPECT_EQ(plan(dims(64), 0, 0, h200).heads_per_cta, 64);
  // Fewer SMs, fewer tokens per cluster size: 66 SMs at T = 4: 32 items × 2; T = 1: 8 × 4.
  EXPECT_EQ(plan(dims(4), 0, 0, device(66, kH200Smem, 90)).cluster_split, 2);
  EXPECT_EQ(plan(dims(1), 0, 0, device(66, kH200Smem, 90)).cluster_split, 4);
  EXPECT_EQ(plan(dims(8), 0, 0, device(66, kH200Smem, 90)).cluster_split, 1);
  // Other windows: each CTA's slice whole 16-position steps of at most 128.
  EXPECT_EQ(plan(dims(1, 128, 64), 0, 0, h200).cluster_split, 4);
  EXPECT_EQ(plan(dims(1, 128, 64), 0, 0, h200).split_len, 16);
  EXPECT_EQ(plan(dims(1, 128, 512), 0, 0, h200).split_len, 128);
  EXPECT_EQ(plan(dims(1, 128, 512), 0, 0, h200).tile, 128);
  EXPECT_EQ(plan(dims(8, 128, 512), 0, 0, h200).cluster_split, 1);  // 2 CTAs would hold 256
  EXPECT_EQ(plan(dims(8, 128, 256), 0, 0, h200).tile, 128);          // 2 CTAs of 128
  // Fewer heads, more tokens: NH 32 at T = 33 is 66 items × 2 (× 4 would fill all the SMs).
  EXPECT_EQ(plan(dims(33, 32), 0, 0, h200).cluster_split, 2);
  // Not without clusters (sm_80, sm_89), nor when a split count or a group was requested.
  EXPECT_EQ(plan(dims(1), 0, 0, device()).cluster_split, 1);
  EXPECT_EQ(plan(dims(1), 0, 0, device(kH200Sms, kAdaSmem, 89)).cluster_split, 1);
  EXPECT_EQ(plan(dims(1), 1, 0, h200).cluster_split, 1);
  EXPECT_EQ(plan(dims(1), 0, 16, h200).cluster_split, 1);
  EXPECT_EQ(plan(dims(1), 0, 0, h200, 1).cluster_split, 1);
  // sm_100 has clusters too.
  EXPECT_EQ(plan(dims(1), 0, 0, device(148, kH200Smem, 100)).cluster_split, 4);
  // Requested: honoured with the requested group (16 when none), at any T and on any device
  // (the op checks the device), the tile the slice needs.
  md::SwaPlan p = plan(dims(100), 0, 32, device(), 2);
  EXPECT_EQ(p.cluster_split, 2);
  EXPECT_EQ(p.heads_per_cta, 32);
  EXPECT_EQ(p.tile, 64);
  EXPECT_EQ(p.split_len, 64);
  EXPECT_EQ(p.ctas, 100 * 4 * 2);
  EXPECT_EQ(p.workspace_bytes, 0u);
  p = plan(dims(1, 128, 512), 1, 0, h200, 4);
  EXPECT_EQ(p.heads_per_cta, 16);
  EXPECT_EQ(p.tile, 128);
  EXPECT_EQ(p.split_len, 128);
  EXPECT_EQ(p.num_splits, 1);
}

TEST(SwaDecodePlan, SharedMemoryLimitsTheGroup) {
  // 99 KiB per CTA: groups of 32 (≈ 105 KiB) do not fit, groups of 16 with the 128 tile do.
  md::SwaPlan p = plan(dims(512), 0, 0, device(128, kAdaSmem));
  EXPECT_EQ(p.heads_per_cta, 16);
  EXPECT_EQ(p.tile, 128);
  EXPECT_LE(kjit::mla::swa_launch_shape(p.heads_per_cta, p.tile).smem_bytes, kAdaSmem);
  // A tiny shared memory falls back to the 64-position tile (and at least two splits of W 128).
  const int small = kjit::mla::swa_launch_shape(16, 64).smem_bytes;
  p = plan(dims(512), 0, 0, device(128, small));
  EXPECT_EQ(p.tile, 64);
  EXPECT_GE(p.num_splits, 2);
  // An explicit request is kept (the op reports Unsupported when it does not fit).
  EXPECT_EQ(plan(dims(512), 0, 32, device(128, kAdaSmem)).heads_per_cta, 32);
  // 0 = no limit.
  EXPECT_EQ(plan(dims(512), 0, 0, device(132, 0)).heads_per_cta, 32);
}

TEST(SwaDecodePlan, PartitionsCoverTheWindowWithoutEmptySplits) {
  for (int64_t window : kjit::mla::kSwaWindows) {
    for (int64_t tokens : {0, 1, 3, 7, 64, 1000}) {
      for (int group : {0, 16, 32}) {
        for (int req : {0, 1, 2, 3, 5, 8, 32}) {
          if (req > md::swa_max_splits(window)) continue;
          SCOPED_TRACE(testing::Message() << "W" << window << " T" << tokens << " group " << group << " req " << req);
          const md::SwaPlan p = plan(dims(tokens, 128, window), req, group);
          EXPECT_TRUE(p.heads_per_cta == 16 || p.heads_per_cta == 32);
          if (group != 0) EXPECT_EQ(p.heads_per_cta, group);
          EXPECT_TRUE(p.tile == 64 || p.tile == 128);
          EXPECT_GE(p.num_splits, 1);
          EXPECT_LE(p.num_splits, kjit::mla::kSwaMaxSplits);
          EXPECT_EQ(p.split_len % 16, 0);
          EXPECT_LE(p.split_len, p.tile);  // a slice fits the CTA's shared memory
          EXPECT_GE(int64_t{p.split_len} * p.num_splits, window);
          EXPECT_LT(int64_t{p.split_len} * (p.num_splits - 1), window);  // no empty trailing split
          if (req > 0 && req * p.tile >= window) EXPECT_LE(p.num_splits, req);
          EXPECT_EQ(p.ctas, tokens * (128 / p.heads_per_cta) * p.num_splits);
          if (p.num_splits == 1 || tokens == 0) {
            EXPECT_EQ(p.workspace_bytes, 0u);
          } else {
            const size_t rows = static_cast<size_t>(tokens * 128 * p.num_splits);
            EXPECT_EQ(p.o_part_bytes, rows * 512 * 4);
            EXPECT_GE(p.workspace_bytes, p.o_part_bytes + rows * 4);
          }
        }
      }
    }
  }
  // A forced count is honoured: W 128 in 3 splits of 48.
  const md::SwaPlan p = plan(dims(100), 3, 0);
  EXPECT_EQ(p.num_splits, 3);
  EXPECT_EQ(p.split_len, 48);
}

TEST(SwaDecodePlan, WorkspaceCheckNamesTheBytes) {
  const md::SwaPlan p = plan(dims(1), 8, 0);
  ASSERT_GT(p.workspace_bytes, 0u);
  const std::string needed = std::to_string(p.workspace_bytes);
  try {
    md::check_swa_workspace(p, fake_ptr(), p.workspace_bytes - 1);
    ADD_FAILURE() << "no error for a short workspace";
  } catch (const kjit::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("workspace too small"), std::string::npos) << what;
    EXPECT_NE(what.find("needs " + needed + " bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("kjit::mla::swa_decode"), std::string::npos) << what;
  }
  EXPECT_THROW(md::check_swa_workspace(p, nullptr, p.workspace_bytes), kjit::InvalidArgument);
  EXPECT_THROW(md::check_swa_workspace(p, fake_ptr(8), p.workspace_bytes), kjit::InvalidArgument);
  EXPECT_NO_THROW(md::check_swa_workspace(p, fake_ptr(), p.workspace_bytes));
  EXPECT_NO_THROW(md::check_swa_workspace(plan(dims(512), 0, 0), nullptr, 0));
}

TEST(SwaDecodeOp, PlanNamesTheKernelOrSaysWhyNot) {
  using Op = md::SwaDecodeOp;
  const kjit::Family& f = kjit::mla::swa_decode_family();
  const kjit::DeviceInfo h200 = device(kH200Sms, kH200Smem, 90);
  // T = 5, NH = 32, W = 128: groups of 16 with the 128 tile where there are no clusters; on
  // sm_90 the window split over clusters of 4 CTAs (10 items).
  md::SwaPlan p = Op::plan(md::validate_swa_decode(valid_args()), device());
  ASSERT_EQ(p.choice.family, &f);
  EXPECT_EQ(f.describe(p.choice.point), "head_dim=512 group=16 kv_tile=128 window=128 cache=e4m3 cluster_split=1");
  p = Op::plan(md::validate_swa_decode(valid_args()), h200);
  ASSERT_EQ(p.choice.family, &f);
  EXPECT_EQ(f.describe(p.choice.point), "head_dim=512 group=16 kv_tile=64 window=128 cache=e4m3 cluster_split=4");
  EXPECT_EQ(f.spec(p.choice.point).name_expressions[0], "kjit::mla::swa_decode_kernel<512, 16, 64, 128, 0, 4>");
  // A cluster split asked for where there are no clusters: Unsupported.
  SwaDecodeArgs clustered = valid_args();
  clustered.cluster_split = 4;
  for (int sm : {80, 89}) {
    try {
      Op::plan(md::validate_swa_decode(clustered), device(kH200Sms, kAdaSmem, sm));
      ADD_FAILURE() << "no error for cluster_split 4 on sm_" << sm;
    } catch (const kjit::Unsupported& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("kjit::mla::swa_decode: cluster_split 4 needs thread-block clusters (sm_90+)"),
                std::string::npos) << what;
      EXPECT_NE(what.find("is sm_" + std::to_string(sm)), std::string::npos) << what;
    }
  }
  p = Op::plan(md::validate_swa_decode(clustered), h200);
  EXPECT_EQ(f.describe(p.choice.point), "head_dim=512 group=16 kv_tile=64 window=128 cache=e4m3 cluster_split=4");
  // Group 64 on Hopper: the wgmma kernel; E5M2 cache and W = 64 reach the point.
  SwaDecodeArgs a = valid_args();
  with_heads(a, 64);
  a.indices = TensorRef(fake_ptr(0x3000000), DType::kI64, {kT, 64}, {}, 0);
  a.kv_cache.dtype = DType::kE5M2;
  a.head_group = 64;
  p = Op::plan(md::validate_swa_decode(a), h200);
  ASSERT_EQ(p.choice.family, &f);
  EXPECT_EQ(f.describe(p.choice.point), "head_dim=512 group=64 kv_tile=128 window=64 cache=e5m2 cluster_split=1");
  EXPECT_EQ(f.spec(p.choice.point).source_name, "mla/swa_decode_sm90.cu");
  // Asked for where it cannot run: Unsupported, before any kernel is loaded.
  try {
    Op::plan(md::validate_swa_decode(a), device(kH200Sms, kAdaSmem, 89));
    ADD_FAILURE() << "no error for head_group 64 on sm_89";
  } catch (const kjit::Unsupported& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("kjit::mla::swa_decode: head_group 64 is the wgmma kernel, which needs sm_90a"),
              std::string::npos) << what;
    EXPECT_NE(what.find("is sm_89"), std::string::npos) << what;
  }
  // Groups of 32 where not even their 64-position tile fits.
  const int small = kjit::mla::swa_launch_shape(32, 64).smem_bytes - 16;
  a = valid_args();
  a.head_group = 32;
  try {
    Op::plan(md::validate_swa_decode(a), device(kH200Sms, small));
    ADD_FAILURE() << "no error for head_group 32 in " << small << " bytes";
  } catch (const kjit::Unsupported& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("head_group 32 needs"), std::string::npos) << what;
    EXPECT_NE(what.find("allows " + std::to_string(small)), std::string::npos) << what;
  }
  // No tokens: nothing to run, so nothing to check or load.
  a.q.shape[0] = a.out.shape[0] = a.lse.shape[0] = 0;
  EXPECT_EQ(Op::plan(md::validate_swa_decode(a), device(kH200Sms, small)).choice.family, nullptr);
}

TEST(SwaDecodeOp, ParamsFollowTheArgsAndThePlan) {
  using Op = md::SwaDecodeOp;
  SwaDecodeArgs a = valid_args();
  a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {kT, kNH, kHD}, {kNH * 2 * kHD, 2 * kHD, 1}, 0);
  a.lens.dtype = DType::kI32;
  a.num_splits = 4;
  const md::SwaDims d = md::validate_swa_decode(a);
  const md::SwaPlan plan = Op::plan(d, device());
  ASSERT_EQ(plan.num_splits, 4);
  char* ws = static_cast<char*>(fake_ptr(0x8000000));
  const kjit::mla::SwaDecodeParams p = Op::params(a, d, plan, ws);
  EXPECT_EQ(p.q, a.q.data);
  EXPECT_EQ(p.kv, a.kv_cache.data);
  EXPECT_EQ(p.fill_src, a.kv_cache.data);
  EXPECT_EQ(p.out, a.out.data);
  EXPECT_EQ(p.lse, a.lse.data);
  EXPECT_EQ(static_cast<void*>(p.o_part), ws);
  EXPECT_EQ(reinterpret_cast<char*>(p.lse_part), ws + plan.o_part_bytes);
  EXPECT_EQ(p.q_stride_t, kNH * 2 * kHD);
  EXPECT_EQ(p.q_stride_h, 2 * kHD);
  EXPECT_EQ(p.out_stride_t, kNH * kHD);
  EXPECT_EQ(p.lse_stride_t, kNH);
  EXPECT_EQ(p.kv_stride_block_bytes, kBlockSize * kHD);
  EXPECT_EQ(p.kv_stride_row_bytes, kHD);
  EXPECT_EQ(p.scale_stride, 1);
  EXPECT_EQ(p.tokens, kT);
  EXPECT_EQ(p.num_heads, kNH);
  EXPECT_EQ(p.head_groups, kNH / plan.heads_per_cta);
  EXPECT_EQ(p.block_size, kBlockSize);
  EXPECT_EQ(p.num_splits, 4);
  EXPECT_EQ(p.split_len, 32);
  EXPECT_EQ(p.lens_i64, 0);
  EXPECT_EQ(p.kv_compact, 1);
  EXPECT_FLOAT_EQ(p.scale_log2, 1.4426950408889634f / std::sqrt(512.f));
  // Unsplit: no partials; an explicit scale; one row per block steps by the block stride.
  a = valid_args();
  a.scale = 0.5f;
  a.kv_cache = TensorRef(fake_ptr(0x1000000), DType::kU8, {kBlocks, 1, kHD}, {2 * kHD, kHD, 1}, 0);
  a.inv_scale.shape[0] = kBlocks;
  const md::SwaDims d1 = md::validate_swa_decode(a);
  const kjit::mla::SwaDecodeParams p1 = Op::params(a, d1, Op::plan(d1, device()), ws);
  EXPECT_EQ(p1.o_part, nullptr);
  EXPECT_EQ(p1.kv_stride_row_bytes, 2 * kHD);
  EXPECT_FLOAT_EQ(p1.scale_log2, 0.5f * 1.4426950408889634f);
  // Without a loaded program (T = 0) the launch value has no kernels and needs no workspace.
  a.q.shape[0] = a.out.shape[0] = a.lse.shape[0] = 0;
  const md::SwaDims d0 = md::validate_swa_decode(a);
  const Op::Launch l = Op::build(a, d0, Op::plan(d0, device()), nullptr, {}, device());
  EXPECT_EQ(l.step<0>().kernel, nullptr);
  EXPECT_EQ(l.step<1>().kernel, nullptr);
  EXPECT_EQ(l.workspace_bytes, 0u);
}

TEST(SwaDecodeShape, SharedMemoryFitsTwoCtasPerSm) {
  // H200: 228 KiB per SM, 227 KiB per CTA, 1 KiB reserved per CTA.
  for (int group : {16, 32}) {
    for (int tile : {64, 128}) {
      const kjit::mla::SwaLaunchShape s = kjit::mla::swa_launch_shape(group, tile);
      SCOPED_TRACE(testing::Message() << "group " << group << " tile " << tile);
      EXPECT_EQ(s.threads, 128 * group / 16);
      EXPECT_GE(s.smem_bytes, tile * 512);
      EXPECT_LE(2 * (s.smem_bytes + 1024), 228 * 1024);
      EXPECT_EQ(s.smem_bytes % 16, 0);
    }
  }
  EXPECT_EQ(kjit::mla::swa_launch_shape(8, 128).threads, 0);
  // A cluster split's CTA also holds its exchange (f32 [group][512] + an LSE per head) over the
  // same memory; still two CTAs per SM.
  for (int group : {16, 32}) {
    for (int tile : {64, 128}) {
      const kjit::mla::SwaLaunchShape s = kjit::mla::swa_launch_shape(group, tile, 8);
      SCOPED_TRACE(testing::Message() << "cluster: group " << group << " tile " << tile);
      EXPECT_EQ(s.threads, 128 * group / 16);
      EXPECT_GE(s.smem_bytes, group * 512 * 4 + group * 4);
      EXPECT_GE(s.smem_bytes, kjit::mla::swa_launch_shape(group, tile).smem_bytes);
      EXPECT_LE(2 * (s.smem_bytes + 1024), 228 * 1024);
      EXPECT_EQ(s.smem_bytes % 16, 0);
    }
  }
  EXPECT_EQ(kjit::mla::swa_launch_shape(64, 128, 2).threads, 0);
}

TEST(SwaDecodeFamily, SpaceAndSpecs) {
  const kjit::Family& f = kjit::mla::swa_decode_family();
  EXPECT_EQ(f.name, "mla.swa_decode");
  EXPECT_EQ(f.min_sm, 80);
  ASSERT_FALSE(f.defaults.empty());
  for (const auto& d : f.defaults) EXPECT_NO_THROW(f.parse(d));
  const kjit::ProgramSpec spec = f.spec(
      {{"head_dim", "512"}, {"group", "32"}, {"kv_tile", "64"}, {"window", "256"}, {"cache", "e5m2"}, {"cluster_split", "1"}});
  ASSERT_EQ(spec.name_expressions.size(), 2u);
  EXPECT_EQ(spec.name_expressions[0], "kjit::mla::swa_decode_kernel<512, 32, 64, 256, 1, 1>");
  EXPECT_EQ(spec.name_expressions[1], "kjit::mla::swa_merge_kernel<512>");
  EXPECT_EQ(spec.source_name, "mla/swa_decode.cu");
  EXPECT_EQ(spec.family, "mla.swa_decode");
  auto point = [](const char* group, const char* tile, const char* window, const char* cache, const char* cluster) {
    return kjit::ParamMap{{"head_dim", "512"}, {"group", group},  {"kv_tile", tile},
                          {"window", window},  {"cache", cache},  {"cluster_split", cluster}};
  };
  kjit::ParamMap bad = point("16", "128", "128", "e4m3", "1");
  bad["head_dim"] = "256";
  EXPECT_THROW(f.spec(bad), kjit::InvalidArgument);
  // A point written before cluster_split existed runs as it did then: no cluster.
  EXPECT_EQ(f.spec({{"head_dim", "512"}, {"group", "16"}, {"kv_tile", "128"}, {"window", "128"}, {"cache", "e4m3"}})
                .name_expressions,
            f.spec(point("16", "128", "128", "e4m3", "1")).name_expressions);
  EXPECT_THROW(f.spec({{"head_dim", "512"}, {"kv_tile", "128"}, {"window", "128"}, {"cache", "e4m3"}}),
               kjit::InvalidArgument);  // no group
  // Group 64: the sm_90a wgmma kernel, its own source, one kernel, the whole window in one tile.
  const kjit::ProgramSpec w = f.spec(point("64", "128", "64", "e5m2", "1"));
  ASSERT_EQ(w.name_expressions.size(), 1u);
  EXPECT_EQ(w.name_expressions[0], "kjit::mla::swa_decode_wgmma_kernel<512, 64, 1>");
  EXPECT_EQ(w.source_name, "mla/swa_decode_sm90.cu");
  EXPECT_THROW(f.spec(point("64", "64", "64", "e4m3", "1")), kjit::InvalidArgument);
  EXPECT_THROW(f.spec(point("64", "128", "256", "e4m3", "1")), kjit::InvalidArgument);
  // Cluster splits: the mma.sync kernel with kCluster, the tile that holds a CTA's slice; the
  // constraint names what is wrong.
  const kjit::ProgramSpec c = f.spec(point("32", "128", "256", "e5m2", "2"));
  EXPECT_EQ(c.name_expressions[0], "kjit::mla::swa_decode_kernel<512, 32, 128, 256, 1, 2>");
  EXPECT_EQ(c.source_name, "mla/swa_decode.cu");
  auto why = [&](const kjit::ParamMap& m) {
    try {
      f.parse(m);
    } catch (const kjit::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(parsed)");
  };
  EXPECT_NE(why(point("64", "128", "128", "e4m3", "2")).find("cluster_split=2 runs the mma.sync kernel"), std::string::npos);
  EXPECT_NE(why(point("16", "64", "64", "e4m3", "8")).find("window a multiple of 128"), std::string::npos);
  EXPECT_NE(why(point("16", "128", "512", "e4m3", "2")).find("leaves 256 window positions per CTA"), std::string::npos);
  EXPECT_NE(why(point("16", "128", "128", "e4m3", "2")).find("takes kv_tile=64"), std::string::npos);
  EXPECT_NE(why(point("16", "64", "256", "e4m3", "2")).find("takes kv_tile=128"), std::string::npos);
  // Only targets with thread-block clusters.
  const kjit::Point cp = f.parse(point("16", "64", "128", "e4m3", "8"));
  EXPECT_EQ(f.unsupported_reason(cp, kjit::Target::parse("sm_90")), "");
  EXPECT_EQ(f.unsupported_reason(cp, kjit::Target::parse("sm_100a")), "");
  EXPECT_NE(f.unsupported_reason(cp, kjit::Target::parse("sm_89")).find("needs thread-block clusters (sm_90+)"),
            std::string::npos);
}

/// Compiles `params` for `arch`, prints registers/spills/smem and expects no spills.
void compile_and_check(kjit::Runtime& rt, const kjit::ParamMap& params, const char* arch) {
  const kjit::Family& f = kjit::mla::swa_decode_family();
  std::string what = arch;
  for (const auto& [k, v] : params) what += " " + k + "=" + v;
  SCOPED_TRACE(what);
  const kjit::Target target = kjit::Target::parse(arch);
  const bool wgmma = params.at("group") == "64";
  if (wgmma && !(target.sm() == 90 && target.arch_specific)) {
    // The wgmma kernel exists for sm_90a only: the family says so instead of compiling.
    EXPECT_NE(f.unsupported_reason(params, target).find("needs sm_90a"), std::string::npos);
    return;
  }
  if (params.at("cluster_split") != "1" && target.sm() < 90) {
    // Cluster splits need thread-block clusters: likewise.
    EXPECT_NE(f.unsupported_reason(params, target).find("needs thread-block clusters"), std::string::npos);
    return;
  }
  const auto prog = rt.compile(f.spec(params), target);
  ASSERT_EQ(prog->kernels.size(), wgmma ? 1u : 2u);
  EXPECT_FALSE(prog->binary.empty());
  for (const auto& k : prog->kernels) {
    std::printf("%s %s: %d registers, %d spill bytes, %d static smem\n", arch, k.name_expression.c_str(),
                k.registers, k.spill_bytes, k.static_smem);
    EXPECT_LE(k.spill_bytes, 0) << k.name_expression;
    EXPECT_LE(k.registers, 255) << k.name_expression;
  }
}

// The defaults (what `kjit precompile` ships) for every CI arch, without spills.
TEST(SwaDecodeFamily, DefaultsCompileWithoutSpills) {
  kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
  c.disk_cache = false;
  kjit::Runtime rt(c);
  for (const char* arch : {"sm_80", "sm_89", "sm_90a", "sm_100a"}) {
    for (const auto& params : kjit::mla::swa_decode_family().defaults) compile_and_check(rt, params, arch);
  }
}

// What the planner can pick beyond the defaults: both groups, both tiles (group 32 with the
// 64-position tile is never planned), every window, both fp8 formats; and the cluster splits
// of both groups a request can force (sm_90a: the GPU tests' kernels), slices of 16 to 128.
TEST(SwaDecodeFamily, PlannedSpecializationsCompileWithoutSpills) {
  kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
  c.disk_cache = false;
  kjit::Runtime rt(c);
  auto point = [](const char* group, const char* tile, const char* window, const char* cache, const char* cluster) {
    return kjit::ParamMap{{"head_dim", "512"}, {"group", group},  {"kv_tile", tile},
                          {"window", window},  {"cache", cache},  {"cluster_split", cluster}};
  };
  for (const char* arch : {"sm_80", "sm_90a"}) {
    compile_and_check(rt, point("16", "64", "64", "e4m3", "1"), arch);
    compile_and_check(rt, point("32", "128", "512", "e4m3", "1"), arch);
    compile_and_check(rt, point("16", "128", "256", "e5m2", "1"), arch);
    compile_and_check(rt, point("32", "128", "128", "e5m2", "1"), arch);
    compile_and_check(rt, point("32", "64", "128", "e5m2", "8"), arch);
    compile_and_check(rt, point("32", "64", "128", "e4m3", "2"), arch);
    compile_and_check(rt, point("16", "64", "512", "e5m2", "8"), arch);
    compile_and_check(rt, point("32", "128", "256", "e4m3", "2"), arch);
  }
}

}  // namespace
