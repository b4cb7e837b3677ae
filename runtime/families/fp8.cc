// The FP8 family declarations.
#include "runtime/families/fp8.hpp"

#include "fp8/gemm_sm90_params.h"
#include "fp8/quantize_params.h"

#include <fmt/format.h>

#include <string>

namespace kjit::fp8 {
namespace {

const FamilyParam kFormatParam(const char* name, const char* doc) {
  return {name, {{"e4m3", kFormatE4M3, ""}, {"e5m2", kFormatE5M2, ""}}, doc};
}

}  // namespace

const Family& quantize_family() {
  static const Family family = [] {
    Family f;
    f.name = "fp8.quantize";
    f.doc = "FP8 quantization bf16/f16/f32 -> e4m3/e5m2 with amax; per tensor, row, 1x128 or 128x128 block "
            "(kernel_sources/fp8/quantize.cu)";
    f.params = {
        {"in", {{"bf16", kInBF16, ""}, {"f16", kInF16, ""}, {"f32", kInF32, ""}}, "input element type"},
        kFormatParam("fmt", "output FP8 format"),
        {"granularity",
         {{"tensor", kGranTensor, ""},
          {"row", kGranRow, ""},
          {"block1x128", kGranBlock1x128, ""},
          {"block128x128", kGranBlock128x128, ""}},
         "which elements share a multiplier"},
        {"pow2", {{"0", 0, "false"}, {"1", 1, "true"}}, "1: round multipliers down to powers of two (UE8M0 scales)"},
    };
    f.programs = {
        {"granularity", "tensor", "fp8/quantize.cu",
         {"kjit::fp8::quantize_tensor_kernel<{in}, {fmt}, false, {pow2}>",
          "kjit::fp8::quantize_tensor_kernel<{in}, {fmt}, true, {pow2}>", "kjit::fp8::amax_kernel<{in}>",
          "kjit::fp8::delayed_scaling_kernel<{fmt}>"}},
        {"granularity", "row", "fp8/quantize.cu", {"kjit::fp8::quantize_row_kernel<{in}, {fmt}, {pow2}>"}},
        {"granularity", "block1x128", "fp8/quantize.cu", {"kjit::fp8::quantize_block_kernel<{in}, {fmt}, {pow2}>"}},
        {"", "", "fp8/quantize.cu", {"kjit::fp8::quantize_tile_kernel<{in}, {fmt}, {pow2}>"}},
    };
    f.min_sm = kMinSm;
    // bf16 activations and weights in e4m3 at every granularity (per-tensor delayed/dynamic
    // scaling, per-token, 1x128 activations and 128x128 weights as DeepSeek-V3 uses), and e5m2
    // gradients.
    auto p = [](const char* fmt, const char* granularity) {
      return ParamMap{{"in", "bf16"}, {"fmt", fmt}, {"granularity", granularity}, {"pow2", "0"}};
    };
    f.defaults = {p("e4m3", "tensor"), p("e4m3", "row"), p("e4m3", "block1x128"), p("e4m3", "block128x128"),
                  p("e5m2", "tensor")};
    return f;
  }();
  return family;
}

const Family& gemm_family() {
  static const Family family = [] {
    Family f;
    f.name = "fp8.gemm";
    f.doc = "FP8 GEMM on pre-quantized operands, mma.sync m16n8k32 e4m3/e5m2 -> f32, tensor/channel or "
            "1x128/128x128 block scales (kernel_sources/fp8/gemm.cu); impl=wgmma: the persistent TMA + wgmma "
            "kernel for sm_90a (kernel_sources/fp8/gemm_sm90.cu)";
    f.params = {
        {"impl", {{"mma", 0, ""}, {"wgmma", 1, ""}},
         "mma: mma.sync m16n8k32 kernel (sm_89+); wgmma: TMA + wgmma kernel (sm_90a)", true},
        kFormatParam("a", "format of A"),
        kFormatParam("b", "format of B"),
        {"out", {{"bf16", 0, "false"}, {"f32", 1, "true"}}, "output element type"},
        {"scale", {{"tensor", 0, "false"}, {"block", 1, "true"}},
         "tensor: per-tensor/row/column scales; block: 1x128 (A) and 128x128 (B)"},
        {"tile",
         {{"64x64", gemm_tile_code(64, 64), "64, 64"},
          {"128x64", gemm_tile_code(128, 64), "128, 64"},
          {"128x128", gemm_tile_code(128, 128), "128, 128"},
          {"128x256", gemm_tile_code(128, 256), "128, 256"},
          {"128x16", gemm_tile_code(128, 16), "128, 16"},
          {"128x32", gemm_tile_code(128, 32), "128, 32"},
          {"64x16", gemm_tile_code(64, 16), "64, 16"},
          {"64x32", gemm_tile_code(64, 32), "64, 32"},
          {"128x80", gemm_tile_code(128, 80), "128, 80"},
          {"128x96", gemm_tile_code(128, 96), "128, 96"},
          {"128x112", gemm_tile_code(128, 112), "128, 112"},
          {"128x160", gemm_tile_code(128, 160), "128, 160"},
          {"128x192", gemm_tile_code(128, 192), "128, 192"},
          {"128x224", gemm_tile_code(128, 224), "128, 224"},
          {"64x80", gemm_tile_code(64, 80), "64, 80"},
          {"64x96", gemm_tile_code(64, 96), "64, 96"},
          {"64x112", gemm_tile_code(64, 112), "64, 112"},
          {"64x128", gemm_tile_code(64, 128), "64, 128"},
          {"64x160", gemm_tile_code(64, 160), "64, 160"},
          {"64x192", gemm_tile_code(64, 192), "64, 192"},
          {"64x224", gemm_tile_code(64, 224), "64, 224"},
          {"64x256", gemm_tile_code(64, 256), "64, 256"}},
         "CTA tile M x N (mma: 64x64, 128x64, 128x128, scale=block: 64x64 or 128x64; wgmma: 128x128 and "
         "128x256, for N <= 64 128x16, 128x32, 128x64, 64x16, 64x32, 64x64, the wave-fitting 128x80, 128x96, "
         "128x112, 128x160, 128x192, 128x224 for M <= 256, and 64x80 ... 64x256 for CTA pairs at M <= 128)",
         true},
        {"stages",
         {{"2", 2, ""},
          {"3", 3, ""},
          {"4", 4, ""},
          {"5", 5, ""},
          {"6", 6, ""},
          {"7", 7, ""},
          {"8", 8, ""},
          {"9", 9, ""},
          {"10", 10, ""},
          {"11", 11, ""},
          {"12", 12, ""}},
         "pipeline stages of 128 k (mma: 2..4; wgmma: 2..6, small tiles 2..12)", true},
        {"a_major", {{"k", 0, "false"}, {"m", 1, "true"}}, "A stored [M, K] (k) or [K, M] (m)"},
        {"b_major", {{"k", 0, "false"}, {"n", 1, "true"}}, "B stored [N, K] (k) or [K, N] (n)"},
    };
    f.programs = {
        {"impl", "wgmma", "fp8/gemm_sm90.cu", {"kjit::fp8::gemm_sm90_kernel<{a}, {b}, {out}, {tile:0}, {tile:1}, {stages}>"}, true},
        {"", "", "fp8/gemm.cu",
         {"kjit::fp8::gemm_kernel<{a}, {b}, {out}, {scale}, {tile:0}, {tile:1}, {stages}, {a_major}, {b_major}>"}},
    };
    f.min_sm = kMinSm;
    f.constraint = [](const Family& self, const Point& pt) -> std::string {
      const bool wgmma = self.value(pt, "impl").code == 1;
      const bool block = self.value(pt, "scale").code == 1;
      const int64_t tile = self.value(pt, "tile").code;
      const int64_t stages = self.value(pt, "stages").code;
      if (wgmma) {
        if (block) return "the wgmma kernel takes tensorwise scales only";
        if (self.value(pt, "a_major").code != 0 || self.value(pt, "b_major").code != 0) {
          return "the wgmma kernel reads FP8 operands K-major only (a_major=k, b_major=k)";
        }
        const int bn = static_cast<int>(tile % 1000);
        if (!sm90_valid_bm(static_cast<int>(tile / 1000), bn)) {
          return "wgmma tiles are 128 or 64 rows by 16, 32, 64, 80, 96, 112, 128, 160, 192, 224 or 256";
        }
        if (!sm90_small_tile(bn) && stages > kSm90LargeTileMaxStages) {
          return "the wgmma kernel takes 2..8 stages with tiles of N > 64";
        }
        return {};
      }
      if (tile != gemm_tile_code(64, 64) && tile != gemm_tile_code(128, 64) && tile != gemm_tile_code(128, 128)) {
        return "the mma.sync kernel's tiles are 64x64, 128x64 and 128x128; the others are wgmma tiles";
      }
      if (stages > 4) return "the mma.sync kernel takes 2..4 stages";
      if (block && tile == gemm_tile_code(128, 128)) {
        return "tile=128x128 is not available with scale=block (two accumulator sets of a 128x128 tile do not fit "
               "the register file); use 128x64 or 64x64";
      }
      return {};
    };
    // The wgmma kernel exists only for sm_90a; elsewhere its source compiles to an empty stub.
    f.target_rule = [](const Family& self, const Point& pt, const Target& target) -> std::string {
      if (self.value(pt, "impl").code == 1 && !target.has_wgmma()) {
        return fmt::format("{} impl=wgmma needs sm_90a; the target is {}", self.name, target.str());
      }
      return {};
    };
    auto p = [](const char* impl, const char* scale, const char* tile, const char* stages) {
      return ParamMap{{"impl", impl}, {"a", "e4m3"},      {"b", "e4m3"},    {"out", "bf16"},   {"scale", scale},
                      {"tile", tile}, {"stages", stages}, {"a_major", "k"}, {"b_major", "k"}};
    };
    // e4m3 x e4m3 -> bf16 linear layers (x [M, K] times W [N, K]): on Hopper the two wgmma tiles
    // and the six small ones (M <= 64, operands swapped; 64 rows when 128 would leave SMs idle) at
    // the planner's stage counts, the wave-fitting tiles the planner takes for the common decode
    // shapes at M <= 256 (N = 10240: 128x80, and 128x160 at M = 256; 28672 and 57344:
    // 128x224) and the 64-row pair tile at M <= 128 (N = 7168 and 8192: 64x128); elsewhere (and
    // for small M) the mma tiles at 4 stages (sm_100 shared memory) and 128x128 at 3 (sm_89's 99
    // KiB); the two blockwise tiles.
    f.defaults = {
        p("wgmma", "tensor", "128x256", "3"), p("wgmma", "tensor", "128x128", "6"),
        p("wgmma", "tensor", "128x16", "8"),  p("wgmma", "tensor", "128x32", "8"),
        p("wgmma", "tensor", "128x64", "8"),  p("wgmma", "tensor", "64x16", "8"),
        p("wgmma", "tensor", "64x32", "8"),   p("wgmma", "tensor", "64x64", "8"),
        p("wgmma", "tensor", "128x80", "6"),  p("wgmma", "tensor", "128x160", "6"),
        p("wgmma", "tensor", "128x224", "5"), p("wgmma", "tensor", "64x128", "6"),
        p("mma", "tensor", "128x128", "3"),   p("mma", "tensor", "128x64", "4"),
        p("mma", "tensor", "64x64", "4"),     p("mma", "block", "128x64", "4"),
        p("mma", "block", "64x64", "4"),      p("mma", "tensor", "128x128", "4"),
    };
    return f;
  }();
  return family;
}

}  // namespace kjit::fp8
