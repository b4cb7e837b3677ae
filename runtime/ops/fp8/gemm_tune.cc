// kjit::fp8::gemm's tuning: bucket, knobs, candidates and stored plans (runtime/ops/tuned.hpp).
#include "runtime/ops/fp8/gemm.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace kjit::fp8::detail {
namespace {

using kjit::detail::TunedChoice;
using kjit::detail::TunedKey;

struct PointView {
  bool wgmma;
  int64_t fmt_a, fmt_b;
  bool out_f32, block;
  int bm, bn, stages;
  bool a_trans, b_trans;
};

PointView view(const TunedChoice& c) {
  const Family& f = *c.family;
  const int64_t tile = f.value(c.point, "tile").code;
  return {f.value(c.point, "impl").code == 1,
          f.value(c.point, "a").code,
          f.value(c.point, "b").code,
          f.value(c.point, "out").code == 1,
          f.value(c.point, "scale").code == 1,
          static_cast<int>(tile / 1000),
          static_cast<int>(tile % 1000),
          static_cast<int>(f.value(c.point, "stages").code),
          f.value(c.point, "a_major").code == 1,
          f.value(c.point, "b_major").code == 1};
}

std::string fits(const TunedChoice& c, const DeviceInfo& info) {
  if (c.family != &gemm_family()) {
    return fmt::format("family {} is not fp8.gemm", c.family ? c.family->name : std::string("(none)"));
  }
  if (std::string why = c.family->invalid_reason(c.point); !why.empty()) return why;
  if (std::string why = c.family->unsupported_reason(c.point, info.target()); !why.empty()) return why;
  const PointView v = view(c);
  const int splits = c.knobs[0], multicast = c.knobs[1];
  const int smem = v.wgmma ? sm90_smem_bytes(v.bm, v.bn, v.stages)
                           : v.stages * gemm_launch_shape(v.bm, v.bn, v.block).stage_bytes;
  const int threads = v.wgmma ? kSm90Threads : gemm_launch_shape(v.bm, v.bn, v.block).threads;
  if (smem > info.max_smem_per_block_optin) {
    return fmt::format("{} stages of a {}x{} tile need {} bytes of shared memory, the device allows {}", v.stages, v.bm,
                       v.bn, smem, info.max_smem_per_block_optin);
  }
  if (info.max_threads_per_block > 0 && threads > info.max_threads_per_block) {
    return fmt::format("{} threads per CTA, the device allows {}", threads, info.max_threads_per_block);
  }
  if (splits < 1 || splits > kSm90MaxSplits) return fmt::format("splits={} is outside 1..{}", splits, kSm90MaxSplits);
  // multicast: 1 none, 2 CTA pairs sharing B, 3 CTA pairs sharing A (the same rules: a pair
  // tile, persistent, clusters of 2), as check_gemm_force has them for a caller's override.
  if (multicast < 1 || multicast > 3) return fmt::format("multicast={} is outside 1..3", multicast);
  if (!v.wgmma && (splits != 1 || multicast != 1)) return "the mma.sync kernel has no split-K or multicast";
  if (splits > 1 && multicast > 1) return fmt::format("multicast {} is the persistent kernel's (splits 1)", multicast);
  if (v.wgmma && !sm90_pair_tile(v.bn) && multicast > 1) {
    return fmt::format("multicast {} is the wgmma tiles' of N side 80 ... 256", multicast);
  }
  if (v.wgmma && sm90_wave_tile(v.bn) && splits > 1) return "the wave-fitting wgmma tiles run persistent (splits 1)";
  const int cluster = multicast > 1 ? 2 : splits;
  if (cluster > 1 && !info.target().has_clusters()) return fmt::format("clusters of {} CTAs need sm_90+", cluster);
  return {};
}

/// True when `c`'s fixed parameters (formats, output, scales, layouts) are the call's.
bool matches(const GemmDims& g, const TunedChoice& c) {
  if (c.family != &gemm_family()) return false;
  const PointView v = view(c);
  // A small wgmma tile runs the swapped problem when M is the smaller side (plan_gemm's rule):
  // its point names the swapped formats.
  const bool swap = v.wgmma && sm90_small_tile(v.bn) && small_tile_swaps(g);
  const int64_t fa = swap ? g.fmt_b : g.fmt_a, fb = swap ? g.fmt_a : g.fmt_b;
  return v.fmt_a == fa && v.fmt_b == fb && v.out_f32 == g.out_f32 && v.block == g.block &&
         v.a_trans == g.a_trans && v.b_trans == g.b_trans;
}

bool auto_force(const GemmForce& f) {
  return f.kernel == GemmKernel::kAuto && f.tile == GemmTile::kAuto && f.stages == 0 && f.splits == 0 && f.multicast == 0;
}

}  // namespace

const kjit::detail::TuneOpSpec& GemmOp::tune_spec() {
  static const kjit::detail::TuneOpSpec spec{
      kjit::detail::TuneOpId::kGemm,
      "fp8_gemm",
      &kInfo,
      {"splits", "multicast", nullptr, nullptr},
      "[pow2(M), N, K, 16 * fmt_a + fmt_b, out_f32 | block << 1 | a_major_m << 2 | b_major_n << 3]: M rounded up "
      "to a power of two; N, K, formats and layouts exact (the kernel's problem, after a column-major D's swap)",
      "m=128 n=7168 k=2048 a=e4m3 b=e4m3 out=bf16",
      fits,
      3};
  return spec;
}

bool GemmOp::tune_key(const GemmDims& g, TunedKey* key) {
  if (!auto_force(g.force) || g.m == 0 || g.n == 0) return false;
  key->op = static_cast<int32_t>(kjit::detail::TuneOpId::kGemm);
  key->bucket[0] = kjit::detail::bucket_pow2(g.m);
  key->bucket[1] = kjit::detail::bucket_exact(g.n);
  key->bucket[2] = kjit::detail::bucket_exact(g.k);
  key->bucket[3] = g.fmt_a * 16 + g.fmt_b;
  key->bucket[4] = (g.out_f32 ? 1 : 0) | (g.block ? 2 : 0) | (g.a_trans ? 4 : 0) | (g.b_trans ? 8 : 0);
  return true;
}

GemmForce GemmOp::force_of(const TunedChoice& c) {
  const PointView v = view(c);
  GemmForce f;
  f.kernel = v.wgmma ? GemmKernel::kWgmma : GemmKernel::kMmaSync;
  f.tile = gemm_tile_of(v.bm, v.bn);  // every point's tile has a GemmTile
  f.stages = v.stages;
  f.splits = c.knobs[0];
  f.multicast = c.knobs[1];
  return f;
}

bool GemmOp::apply_tuned(const GemmDims& dims, const DeviceInfo& info, const TunedChoice& c, GemmPlan* out) {
  if (!matches(dims, c)) return false;
  GemmDims g = dims;
  g.force = force_of(c);
  try {
    check_gemm_force(g.force, g);  // a stored choice is checked as a caller's overrides are
    *out = plan_gemm(g, info);
  } catch (const Error&) {
    return false;  // a stored choice the call's shape rules out: the default plan runs
  }
  return out->choice.point == c.point;
}

TunedChoice GemmOp::tuned_choice(const GemmDims& /*g*/, const GemmPlan& plan) {
  TunedChoice c;
  c.family = plan.choice.family;
  c.point = plan.choice.point;
  c.knobs[0] = plan.wgmma ? plan.splits : 1;
  c.knobs[1] = plan.cluster_n > 1 ? 3 : plan.cluster_m > 1 ? 2 : 1;
  return c;
}

std::vector<TunedChoice> GemmOp::tune_candidates(const GemmDims& g, const DeviceInfo& info) {
  std::vector<TunedChoice> out;
  if (g.m == 0 || g.n == 0 || info.sm() < kInfo.min_sm) return out;
  const Family& f = gemm_family();
  const Target target = info.target();
  const int64_t ktiles = (g.k + 127) / 128;
  for (const Point& p : f.enumerate(&target)) {
    TunedChoice base;
    base.family = &f;
    base.point = p;
    if (!matches(g, base)) continue;
    const PointView v = view(base);
    const bool wgmma = v.wgmma;
    // The wgmma small tiles (128 and 64 rows): for problems with M or N ≤ 64 only, at 6, 8 and
    // the deepest ring that fits (their point is the weight bytes in flight).
    if (wgmma && sm90_small_tile(v.bn)) {
      if (std::min(g.m, g.n) > 64) continue;
      const bool deeper_fits =
          v.stages < kSm90MaxStages && sm90_smem_bytes(v.bm, v.bn, v.stages + 1) <= info.max_smem_per_block_optin;
      if (v.stages != 6 && v.stages != 8 && deeper_fits) continue;
    }
    // The wave-fitting tiles: for M ≤ 256 only, at the deepest ring that fits up to
    // kSm90LargeTileStages. The 64-row tiles of N side 80..256: for one 128-row tile row
    // (M ≤ 128) only, in pairs, likewise.
    const bool half_rows = wgmma && v.bm == 64 && sm90_pair_tile(v.bn);
    if (wgmma && (sm90_wave_tile(v.bn) || half_rows)) {
      if (g.m > (half_rows ? kSm90BM : kSm90WaveTileMaxM)) continue;
      if (v.stages > kSm90LargeTileStages) continue;
      if (v.stages < kSm90LargeTileStages && sm90_smem_bytes(v.bm, v.bn, v.stages + 1) <= info.max_smem_per_block_optin) {
        continue;
      }
    }
    // multicast 3 (CTA pairs sharing A) is not offered: an experiment, forced only until measured
    // (fits and apply_tuned take a stored 3 under multicast 2's rules).
    for (int splits = 1; splits <= (wgmma ? kSm90MaxSplits : 1); ++splits) {
      if (splits > ktiles) break;
      for (int multicast = half_rows ? 2 : 1; multicast <= (wgmma && splits == 1 ? 2 : 1); ++multicast) {
        TunedChoice c = base;
        c.knobs[0] = splits;
        c.knobs[1] = multicast;
        if (fits(c, info).empty()) out.push_back(c);
      }
    }
  }
  return out;
}

}  // namespace kjit::fp8::detail
