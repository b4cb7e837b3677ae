// The FP8 ops' names, tiles and scale shapes, read from the family declarations
// (runtime/families/fp8.cc): the only place a format, a granularity or a tile is spelled.
#include <kjit/error.hpp>
#include <kjit/ops/fp8.hpp>

#include "fp8/quantize_params.h"
#include "runtime/families/fp8.hpp"
#include "runtime/ops/fp8/gemm.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kjit::fp8 {
namespace {

// Granularity's enumerators are the family's codes.
static_assert(static_cast<int>(Granularity::kTensor) == kGranTensor);
static_assert(static_cast<int>(Granularity::kRow) == kGranRow);
static_assert(static_cast<int>(Granularity::kBlock1x128) == kGranBlock1x128);
static_assert(static_cast<int>(Granularity::kBlock128x128) == kGranBlock128x128);

const FamilyParam& granularity_param() {
  static const FamilyParam& p = quantize_family().params[quantize_family().param_index("granularity")];
  return p;
}

/// The fp8.gemm `tile` values, in GemmTile's order: GemmTile(i + 1) is value i.
const FamilyParam& tile_param() {
  static const FamilyParam& p = gemm_family().params[gemm_family().param_index("tile")];
  return p;
}

}  // namespace

std::vector<const char*> format_names() {
  std::vector<const char*> names;
  for (const ParamValue& v : quantize_family().params[quantize_family().param_index("fmt")].values) {
    names.push_back(v.text.c_str());
  }
  return names;
}

const char* granularity_name(Granularity granularity) noexcept {
  for (const ParamValue& v : granularity_param().values) {
    if (v.code == static_cast<int64_t>(granularity)) return v.text.c_str();
  }
  return "?";
}

Granularity parse_granularity(std::string_view name, const char* op) {
  for (const ParamValue& v : granularity_param().values) {
    if (v.text == name) return static_cast<Granularity>(v.code);
  }
  throw InvalidArgument(fmt::format("{}: granularity must be one of {}, got '{}'", op,
                                    fmt::join(granularity_param().texts(), ", "), name));
}

std::vector<const char*> granularity_names() {
  std::vector<const char*> names;
  for (const ParamValue& v : granularity_param().values) names.push_back(v.text.c_str());
  return names;
}

ScaleShape scale_shape(Granularity granularity, int64_t rows, int64_t cols) noexcept {
  const int64_t col_blocks = kjit::detail::ceil_div(cols, kScaleBlock);
  switch (granularity) {
    case Granularity::kTensor: return {1, {1, 0}};
    case Granularity::kRow: return {1, {rows, 0}};
    case Granularity::kBlock1x128: return {2, {rows, col_blocks}};
    case Granularity::kBlock128x128: return {2, {kjit::detail::ceil_div(rows, kScaleBlock), col_blocks}};
  }
  return {};
}

const char* gemm_tile_name(GemmTile tile) noexcept {
  const size_t i = static_cast<size_t>(tile);
  if (i == 0 || i > tile_param().values.size()) return "auto";
  return tile_param().values[i - 1].text.c_str();
}

GemmTile parse_gemm_tile(std::string_view name, const char* op) {
  if (name == "auto") return GemmTile::kAuto;
  const std::vector<ParamValue>& values = tile_param().values;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].text == name) return static_cast<GemmTile>(i + 1);
  }
  throw InvalidArgument(fmt::format("{}: tile must be one of auto, {}, got '{}'", op, fmt::join(tile_param().texts(), ", "),
                                    name));
}

std::vector<const char*> gemm_tile_names() {
  std::vector<const char*> names{gemm_tile_name(GemmTile::kAuto)};
  for (const ParamValue& v : tile_param().values) names.push_back(v.text.c_str());
  return names;
}

namespace detail {

GemmTileShape gemm_tile_shape(GemmTile tile) {
  const size_t i = static_cast<size_t>(tile);
  if (i == 0 || i > tile_param().values.size()) return {};
  const int64_t code = tile_param().values[i - 1].code;
  return {static_cast<int>(code / 1000), static_cast<int>(code % 1000)};
}

GemmTile gemm_tile_of(int bm, int bn) {
  const std::vector<ParamValue>& values = tile_param().values;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].code == gemm_tile_code(bm, bn)) return static_cast<GemmTile>(i + 1);
  }
  return GemmTile::kAuto;
}

}  // namespace detail

}  // namespace kjit::fp8
