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

const Family& swa_decode_family() {
  static const Family family = [] {
    Family f;
    f.name = "mla.swa_decode";
    f.doc = "fp8 sliding-window MLA decode attention (K = V, paged E4M3/E5M2 cache + per-token bf16 inverse "
            "scale, window indices): fused mma.sync kernel plus split merge (kernel_sources/mla/swa_decode.cu); group 64 "
            "is the sm_90a wgmma kernel (kernel_sources/mla/swa_decode_sm90.cu)";
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
    };
    f.programs = {
        {"group", "64", "mla/swa_decode_sm90.cu", {"kjit::mla::swa_decode_wgmma_kernel<{head_dim}, {window}, {cache}>"}, true},
        {"", "", "mla/swa_decode.cu",
         {"kjit::mla::swa_decode_kernel<{head_dim}, {group}, {kv_tile}, {window}, {cache}>",
          "kjit::mla::swa_merge_kernel<{head_dim}>"}},
    };
    f.min_sm = kMinSm;
    f.constraint = [](const Family& self, const Point& pt) -> std::string {
      if (self.value(pt, "group").code != kSwaWgmmaHeads) return {};
      const int64_t tile = self.value(pt, "kv_tile").code;
      const int64_t window = self.value(pt, "window").code;
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
      return {};
    };
    // DeepSeek-V4 decode (HD 512, W 128, E4M3): group 16 for small batches, 32 for large ones;
    // on sm_90a the wgmma kernel (group 64).
    auto p = [](const char* group) {
      return ParamMap{{"head_dim", "512"}, {"group", group}, {"kv_tile", "128"}, {"window", "128"}, {"cache", "e4m3"}};
    };
    f.defaults = {p("16"), p("32"), p("64")};
    return f;
  }();
  return family;
}

}  // namespace kjit::mla
