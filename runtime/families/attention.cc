// The attention family declarations.
#include "runtime/families/attention.hpp"

#include <kjit/ops/attention.hpp>

#include "attention/decode_params.h"

#include <fmt/format.h>

#include <string>
#include <utility>

namespace kjit::attention {
namespace {

template <size_t N>
FamilyParam head_dim_param(const int (&dims)[N]) {
  FamilyParam p{"head_dim", {}, "head dimension (elements)"};
  for (int d : dims) p.values.push_back({std::to_string(d), d, ""});
  return p;
}

// Query rows per CTA (a tile shape): performance-only.
FamilyParam block_m_param(const char* doc) {
  FamilyParam p{"block_m", {}, doc, true};
  for (int m : kBlockMs) p.values.push_back({std::to_string(m), m, ""});
  return p;
}

// Query heads per CTA: any group runs with either (m_tiles = ceil(group / rows)), so performance-only.
const FamilyParam kRows{"rows", {{"8", 8, ""}, {"16", 16, ""}},
                        "query heads per CTA: 8 when q_heads / kv_heads <= 8, else 16", true};

// How a split plan combines its splits: DecodeMerge's names and codes but auto (the kernel's
// kClusterMerge flag). Performance-only: both compute the same output by the same formula.
FamilyParam merge_param() {
  FamilyParam p{"merge", {},
                fmt::format("how a split plan combines its KV splits: kernel (partials in the workspace, "
                            "attention.decode_merge) or cluster (2..{} splits as one thread-block cluster, "
                            "distributed shared memory, sm_90+)",
                            kDecodeMaxClusterSplits),
                true, "kernel"};
  for (const auto& row : kDecodeMergeNames) {
    if (row.value == DecodeMerge::kAuto) continue;
    p.values.push_back({row.name, static_cast<int64_t>(row.value), row.value == DecodeMerge::kCluster ? "true" : "false"});
  }
  return p;
}

// merge=cluster needs thread-block clusters; merge=kernel runs from the family's floor.
std::string decode_target_rule(const Family& self, const Point& point, const Target& target) {
  if (self.value(point, "merge").code == static_cast<int64_t>(DecodeMerge::kCluster) && !target.has_clusters()) {
    return fmt::format("{} merge=cluster needs thread-block clusters (sm_90+); the target is {}", self.name,
                       target.str());
  }
  return {};
}

}  // namespace

const Family& decode_family() {
  static const Family family = [] {
    Family f;
    f.name = "attention.decode";
    f.doc = "GQA decode attention over a contiguous BLHD bf16 KV cache: the split-KV mma.sync kernel "
            "(kernel_sources/attention/decode.cu); a split plan's splits combine in attention.decode_merge "
            "(merge=kernel) or in the decode kernel's thread-block clusters (merge=cluster)";
    f.params = {head_dim_param(kHeadDims), kRows, merge_param()};
    // The decode kernel alone: the merge kernel is its own family (attention.decode_merge),
    // compiled and loaded only when a plan merges with it, so a compile here does not pay for it.
    f.programs = {{"", "", "attention/decode.cu",
                   {"kjit::attention::decode_kernel<{head_dim}, {rows}, kjit::attention::ContigKV, {merge}>"}}};
    f.companion = "attention.decode_merge";  // precompiled with every point, at its head_dim
    f.min_sm = kMinSm;
    f.target_rule = decode_target_rule;
    // Llama-3/Mistral/Qwen (hd128, group 4–8), small models (hd64), Gemma (hd256, group 2–8),
    // MHA-heavy or group-16 models (hd128 rows 16); each with both merges (cluster: sm_90+ only,
    // what split plans of 2..8 splits run there).
    for (const char* merge : {"kernel", "cluster"}) {
      for (const auto& [hd, rows] : {std::pair{"128", "8"}, {"64", "8"}, {"256", "8"}, {"128", "16"}}) {
        f.defaults.push_back({{"head_dim", hd}, {"rows", rows}, {"merge", merge}});
      }
    }
    return f;
  }();
  return family;
}

const Family& paged_decode_family() {
  static const Family family = [] {
    // The same kernel body over another KV source: the same space and defaults.
    Family f = decode_family();
    f.name = "attention.paged_decode";
    f.doc = "GQA decode attention over a paged bf16 KV cache (page pools + CSR page table): the split-KV "
            "mma.sync decode kernel with the PagedKV source (kernel_sources/attention/decode.cu); a split "
            "plan's splits combine as attention.decode's do";
    f.programs = {{"", "", "attention/decode.cu",
                   {"kjit::attention::decode_kernel<{head_dim}, {rows}, kjit::attention::PagedKV, {merge}>"}}};
    return f;
  }();
  return family;
}

const Family& decode_merge_family() {
  static const Family family = [] {
    Family f;
    f.name = "attention.decode_merge";
    f.doc = "The split-KV merge of attention.decode and attention.paged_decode: combines the per-split "
            "partials when a plan splits the KV with merge=kernel (kernel_sources/attention/decode_merge.cu)";
    // head_dim alone: one program serves both decode ops and both rows values.
    f.params = {head_dim_param(kHeadDims)};
    f.programs = {{"", "", "attention/decode_merge.cu", {"kjit::attention::decode_merge_kernel<{head_dim}>"}}};
    f.min_sm = kMinSm;
    // Every head_dim the decode defaults cover: a precompiled cache serves split plans too.
    f.defaults = {{{"head_dim", "128"}}, {{"head_dim", "64"}}, {{"head_dim", "256"}}};
    return f;
  }();
  return family;
}

const Family& paged_append_family() {
  static const Family family = [] {
    Family f;
    f.name = "attention.paged_append";
    f.doc = "Append new bf16 K/V tokens into the page pools of a paged KV cache "
            "(kernel_sources/attention/paged_append.cu)";
    f.params = {head_dim_param(kHeadDims),
                {"index",
                 {{"positions", 0, "false"}, {"indptr", 1, "true"}},
                 "per-token batch_indices + positions, or append_indptr"}};
    f.programs = {{"", "", "attention/paged_append.cu", {"kjit::attention::paged_append_kernel<{head_dim}, {index}>"}}};
    f.min_sm = kMinSm;
    f.defaults = {
        {{"head_dim", "128"}, {"index", "indptr"}},
        {{"head_dim", "128"}, {"index", "positions"}},
    };
    return f;
  }();
  return family;
}

const Family& prefill_family() {
  static const Family family = [] {
    Family f;
    f.name = "attention.prefill";
    f.doc = "GQA prefill attention over contiguous BLHD bf16 K/V: split-Q mma.sync kernel, causal (run-time "
            "flag), optional bool mask (kernel_sources/attention/prefill.cu, DenseQSchedule + ContigKV)";
    f.params = {head_dim_param(kHeadDims),
                block_m_param("query rows per CTA"),
                {"mask", {{"none", 0, "false"}, {"bool", 1, "true"}}, "bool keep-mask (2-D or 3-D) read per element"}};
    f.programs = {{"", "", "attention/prefill.cu",
                   {"kjit::attention::prefill_kernel<{head_dim}, {block_m}, {mask}, "
                    "kjit::attention::DenseQSchedule, kjit::attention::ContigKV>"}}};
    f.min_sm = kMinSm;
    f.defaults = {
        {{"head_dim", "128"}, {"block_m", "128"}, {"mask", "none"}},
        {{"head_dim", "128"}, {"block_m", "64"}, {"mask", "none"}},
        {{"head_dim", "64"}, {"block_m", "128"}, {"mask", "none"}},
        {{"head_dim", "256"}, {"block_m", "128"}, {"mask", "none"}},
    };
    return f;
  }();
  return family;
}

const Family& prefill_sm90_family() {
  static const Family family = [] {
    Family f;
    f.name = "attention.prefill_sm90";
    f.doc = "GQA prefill attention over contiguous BLHD bf16 K/V on Hopper: TMA producer warpgroup, two wgmma "
            "consumer warpgroups, causal or full (run-time flag), chunked, LSE (kernel_sources/attention/"
            "prefill_sm90.cu; sm_90a only)";
    f.params = {head_dim_param(kSm90HeadDims)};
    f.programs = {{"", "", "attention/prefill_sm90.cu", {"kjit::attention::prefill_sm90_kernel<{head_dim}>"}, true}};
    f.min_sm = Target::kWgmmaSm;  // sm_90a only: target_rule asks has_wgmma
    // wgmma and setmaxnreg exist only in the sm_90a feature set; elsewhere the source compiles
    // to an empty stub, so there is nothing to build.
    f.target_rule = [](const Family& self, const Point&, const Target& target) -> std::string {
      if (!target.has_wgmma()) return fmt::format("{} needs sm_90a; the target is {}", self.name, target.str());
      return {};
    };
    f.defaults = {{{"head_dim", "128"}}, {{"head_dim", "64"}}};
    return f;
  }();
  return family;
}

const Family& paged_prefill_family() {
  static const Family family = [] {
    Family f;
    f.name = "attention.paged_prefill";
    f.doc = "Ragged GQA prefill over a paged bf16 KV cache: the prefill kernel with a packed Q schedule "
            "(q_tile_to_batch / q_tile_to_index work map) and the PagedKV source (kernel_sources/attention/prefill.cu)";
    f.params = {head_dim_param(kHeadDims),
                block_m_param("query rows per work item (the plan's tile_rows)")};
    f.programs = {{"", "", "attention/prefill.cu",
                   {"kjit::attention::prefill_kernel<{head_dim}, {block_m}, false, "
                    "kjit::attention::PackedQSchedule, kjit::attention::PagedKV>"}}};
    f.min_sm = kMinSm;
    f.defaults = {
        {{"head_dim", "128"}, {"block_m", "128"}},
        {{"head_dim", "128"}, {"block_m", "64"}},
    };
    return f;
  }();
  return family;
}

const Family& paged_prefill_sm90_family() {
  static const Family family = [] {
    Family f;
    f.name = "attention.paged_prefill_sm90";
    f.doc = "Ragged GQA prefill over a paged bf16 KV cache on Hopper: the wgmma consumers of attention.prefill_sm90 "
            "with a producer warpgroup that gathers Q and K/V rows through the page table with cp.async (any page "
            "size) or loads K/V pages with TMA (page sizes that are multiples of 16), "
            + fmt::format("the plan's work items of block_m rows (128: two consumer warpgroups; {} at head_dim {}: "
                          "three), causal or full, LSE (kernel_sources/attention/prefill_sm90.cu; sm_90a only)",
                          kWideTileRows, kWideTileHeadDim);
    FamilyParam rows{"block_m", {},
                     fmt::format("query rows per work item (the plan's tile_rows): 128, or {} at head_dim {}",
                                 kWideTileRows, kWideTileHeadDim),
                     true};
    for (int m : kSm90PagedRows) rows.values.push_back({std::to_string(m), m, ""});
    f.params = {head_dim_param(kSm90HeadDims), rows,
                {"page_load",
                 {{"gather", 0, "false"}, {"tma", 1, "true"}},
                 "how K/V pages load: gather (cp.async per token, any page size) or tma (16-slot boxes, page sizes "
                 "that are multiples of 16; the tail tile still gathered)",
                 true}};
    f.programs = {{"", "", "attention/prefill_sm90.cu",
                   {"kjit::attention::paged_prefill_sm90_kernel<{head_dim}, {block_m}, {page_load}>"}, true}};
    f.constraint = [](const Family& self, const Point& pt) -> std::string {
      const int64_t hd = self.value(pt, "head_dim").code;
      const int64_t rows = self.value(pt, "block_m").code;
      if (!sm90_paged_tile(hd, static_cast<int>(rows))) {
        return fmt::format("block_m={} runs only at head_dim={}, got head_dim={}", kWideTileRows, kWideTileHeadDim, hd);
      }
      return {};
    };
    f.min_sm = Target::kWgmmaSm;  // sm_90a only: target_rule asks has_wgmma
    f.target_rule = prefill_sm90_family().target_rule;
    // Where plans land (paged_prefill_plan.cc): 128-row tiles at hd128, 192 at hd64, TMA for page
    // sizes that are multiples of 16 (the common 16 and 64) and the gather for the rest.
    for (const char* load : {"tma", "gather"}) {
      f.defaults.push_back({{"head_dim", "128"}, {"block_m", "128"}, {"page_load", load}});
      f.defaults.push_back({{"head_dim", std::to_string(kWideTileHeadDim)},
                            {"block_m", std::to_string(kWideTileRows)},
                            {"page_load", load}});
    }
    f.defaults.push_back({{"head_dim", "64"}, {"block_m", "128"}, {"page_load", "tma"}});
    return f;
  }();
  return family;
}

std::string paged_tile_rows_text() {
  std::string out;
  for (int m : kPagedTileRows) {
    if (m == kWideTileRows) continue;
    out += fmt::format("{}, ", m);
  }
  return fmt::format("{}or {} at head_dim {}", out, kWideTileRows, kWideTileHeadDim);
}

}  // namespace kjit::attention
