// The MLA family declarations.
#include "runtime/families/mla.hpp"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace kjit::mla {
namespace {

template <size_t N>
std::vector<ParamValue> values_of(const int (&values)[N]) {
  std::vector<ParamValue> out;
  for (int v : values) out.push_back({std::to_string(v), v, ""});
  return out;
}

}  // namespace

std::string swa_cluster_split_rule(int group, int tile, int64_t window, int cluster_split) {
  if (cluster_split <= 1) return {};
  if (group == kSwaWgmmaHeads) {
    return fmt::format("cluster_split={} runs the mma.sync kernel (group 16 or 32), got group={}", cluster_split, group);
  }
  if (window % (int64_t{kSwaStepTokens} * cluster_split) != 0) {
    return fmt::format("cluster_split={} needs whole {}-position steps per CTA (window a multiple of {}), got window={}",
                       cluster_split, kSwaStepTokens, kSwaStepTokens * cluster_split, window);
  }
  if (window / cluster_split > 128) {
    return fmt::format("cluster_split={} leaves {} window positions per CTA, more than a tile holds (128), got window={}",
                       cluster_split, window / cluster_split, window);
  }
  if (tile != swa_cluster_tile(window, cluster_split)) {
    return fmt::format("cluster_split={} with window={} takes kv_tile={} (the smallest tile that holds a CTA's {} "
                       "positions), got kv_tile={}",
                       cluster_split, window, swa_cluster_tile(window, cluster_split), window / cluster_split, tile);
  }
  return {};
}

const Family& swa_decode_family() {
  static const Family family = [] {
    Family f;
    f.name = "mla.swa_decode";
    f.doc = "fp8 sliding-window MLA decode attention (K = V, paged E4M3/E5M2 cache + per-token bf16 inverse "
            "scale, window indices): fused mma.sync kernel plus split merge (kernel_sources/mla/swa_decode.cu), or "
            "with cluster_split > 1 the window split over a thread-block cluster merged through distributed shared "
            "memory in one launch (sm_90+); group 64 is the sm_90a wgmma kernel "
            "(kernel_sources/mla/swa_decode_sm90.cu)";
    f.params = {
        {"head_dim", {{"512", kSwaHeadDim, ""}}, "latent dimension (elements)"},
        {"group",
         values_of(kSwaGroups),
         "query heads per CTA: 16 / 32 the mma.sync kernel (four warps per 16 heads share one KV slice); 64 the "
         "sm_90a wgmma kernel (kernel_sources/mla/swa_decode_sm90.cu: kv_tile 128, window <= 128)",
         true},
        {"kv_tile", {{"64", 64, ""}, {"128", 128, ""}}, "window positions one CTA holds in shared memory", true},
        {"window", values_of(kSwaWindows),
         "window size W (length of an indices row)"},
        {"cache", {{"e4m3", kSwaCacheE4M3, ""}, {"e5m2", kSwaCacheE5M2, ""}}, "fp8 format of the cache bytes"},
        {"cluster_split",
         values_of(kSwaClusterSplits),
         "CTAs of one thread-block cluster (sm_90+) that split the window of one (token, head group), each "
         "window / cluster_split positions, and merge their partials through distributed shared memory in the "
         "same launch (no workspace, no merge kernel); 1 = no cluster. group 16 / 32 only, kv_tile the smallest "
         "tile that holds a CTA's positions",
         true, "1"},
    };
    f.programs = {
        {"group", "64", "mla/swa_decode_sm90.cu", {"kjit::mla::swa_decode_wgmma_kernel<{head_dim}, {window}, {cache}>"}, true},
        {"", "", "mla/swa_decode.cu",
         {"kjit::mla::swa_decode_kernel<{head_dim}, {group}, {kv_tile}, {window}, {cache}, {cluster_split}>",
          "kjit::mla::swa_merge_kernel<{head_dim}>"}},
    };
    f.min_sm = kMinSm;
    f.constraint = [](const Family& self, const Point& pt) -> std::string {
      const int64_t group = self.value(pt, "group").code;
      const int64_t tile = self.value(pt, "kv_tile").code;
      const int64_t window = self.value(pt, "window").code;
      std::string cluster = swa_cluster_split_rule(static_cast<int>(group), static_cast<int>(tile), window,
                                                   static_cast<int>(self.value(pt, "cluster_split").code));
      if (!cluster.empty() || group != kSwaWgmmaHeads) return cluster;
      if (tile != kSwaWgmmaTile || window > kSwaWgmmaTile) {
        return fmt::format("group=64 (the sm_90a wgmma kernel) takes kv_tile=128 and window 64 or 128, got "
                           "kv_tile={} window={}",
                           tile, window);
      }
      return {};
    };
    f.target_rule = [](const Family& self, const Point& pt, const Target& target) -> std::string {
      if (self.value(pt, "group").code == kSwaWgmmaHeads && !target.has_wgmma()) {
        return fmt::format("{} group=64 (the wgmma kernel) needs sm_90a; the target is {}", self.name, target.str());
      }
      const int64_t cluster = self.value(pt, "cluster_split").code;
      if (cluster > 1 && target.sm() < kSwaClusterMinSm) {
        return fmt::format("{} cluster_split={} needs thread-block clusters (sm_90+); the target is {}", self.name,
                           cluster, target.str());
      }
      return {};
    };
    // DeepSeek-V4 decode (HD 512, W 128, E4M3): group 16 for small batches, 32 for large ones;
    // on sm_90a the wgmma kernel (group 64); on sm_90+ the planner's cluster splits of groups of 16
    // for T ≤ 2 and T ≤ 8 (4 and 2 CTAs of 32 and 64 positions).
    auto p = [](const char* group, const char* tile = "128", const char* cluster = "1") {
      return ParamMap{{"head_dim", "512"}, {"group", group},  {"kv_tile", tile},
                      {"window", "128"},   {"cache", "e4m3"}, {"cluster_split", cluster}};
    };
    f.defaults = {p("16"), p("32"), p("64"), p("16", "64", "4"), p("16", "64", "2")};
    return f;
  }();
  return family;
}

}  // namespace kjit::mla
