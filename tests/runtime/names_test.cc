// Guard tests of the name tables (kjit/names.hpp) and the names the family declarations give:
// each table lists its enum in enumerator order with unique names, its name and parse functions
// agree with it, and where a family declares the same values (rotary style, fp8.gemm impl and
// tile) the two spell them alike. python/tests/test_names.py checks the other half: every
// enumerator of each enum's declaration has its table row, and Python and the docs follow.
#include <kjit/error.hpp>
#include <kjit/families.hpp>
#include <kjit/names.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/ops/fp8.hpp>
#include <kjit/ops/rotary.hpp>
#include <kjit/runtime.hpp>

#include "runtime/ops/attention/variant.hpp"
#include "runtime/ops/fp8/gemm.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace {

using namespace kjit;

/// Rows in enumerator order (row i is Enum(i)), unique names, and parse_enum / enum_name
/// round trips; an unknown name is an InvalidArgument listing every name.
template <class Enum, size_t N>
void expect_table(const EnumName<Enum> (&table)[N], const char* what) {
  std::set<std::string> names;
  for (size_t i = 0; i < N; ++i) {
    SCOPED_TRACE(std::string(what) + " row " + std::to_string(i) + " '" + table[i].name + "'");
    EXPECT_EQ(static_cast<size_t>(table[i].value), i) << "rows out of enumerator order";
    EXPECT_TRUE(names.insert(table[i].name).second) << "name given twice";
    EXPECT_EQ(parse_enum(table, table[i].name, "op", what), table[i].value);
    EXPECT_STREQ(enum_name(table, table[i].value), table[i].name);
  }
  try {
    parse_enum(table, "no-such-name", "kjit.op", what);
    ADD_FAILURE() << what << ": an unknown name parsed";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), std::string("kjit.op: ") + what + " must be one of " + enum_choices(table) +
                                         ", got 'no-such-name'");
  }
}

std::vector<std::string> family_texts(const char* family, const char* param) {
  const Family& f = kjit::family(family);
  return f.params[static_cast<size_t>(f.param_index(param))].texts();
}

TEST(NameTables, ListTheirEnumsInOrderAndRoundTrip) {
  expect_table(kDTypeNames, "dtype");
  expect_table(kJitModeNames, "jit mode");
  expect_table(attention::kAttentionVariantNames, "variant");
  expect_table(attention::kPackGqaNames, "pack_gqa");
  expect_table(attention::kDecodeMergeNames, "merge");
  expect_table(kRotaryStyleNames, "style");
  expect_table(fp8::kScaleModeNames, "scale_mode");
  expect_table(fp8::kGemmKernelNames, "kernel");
  expect_table(fp8::kRecipeNames, "recipe");
}

TEST(NameTables, TheNameFunctionsReadThem) {
  for (const auto& row : kDTypeNames) EXPECT_STREQ(dtype_name(row.value), row.name);
  for (const auto& row : kJitModeNames) {
    EXPECT_STREQ(jit_mode_name(row.value), row.name);
    EXPECT_EQ(RuntimeConfig::parse_jit_mode(row.name, "KJIT_JIT"), row.value);
  }
  for (const auto& row : attention::kDecodeMergeNames) EXPECT_STREQ(attention::decode_merge_name(row.value), row.name);
  for (const auto& row : attention::kAttentionVariantNames) {
    EXPECT_STREQ(attention::variant_name(row.value), row.name);
    EXPECT_EQ(attention::detail::parse_variant(row.name), row.value) << "KJIT_ATTN_VARIANT=" << row.name;
  }
  // The message lists the table.
  try {
    RuntimeConfig::parse_jit_mode("sometimes", "KJIT_JIT");
    ADD_FAILURE() << "KJIT_JIT=sometimes parsed";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), "KJIT_JIT='sometimes' is not on, warn, async or off");
  }
}

TEST(NameTables, TheFamiliesSpellTheSameValues) {
  // The decode families' merge values are the table's but auto, codes included.
  for (const char* name : {"attention.decode", "attention.paged_decode"}) {
    const Family& f = kjit::family(name);
    const auto& merges = f.params[static_cast<size_t>(f.param_index("merge"))].values;
    ASSERT_EQ(merges.size() + 1, std::size(attention::kDecodeMergeNames)) << name;
    for (size_t i = 0; i < merges.size(); ++i) {
      EXPECT_EQ(merges[i].text, attention::kDecodeMergeNames[i + 1].name) << name;
      EXPECT_EQ(merges[i].code, static_cast<int64_t>(attention::kDecodeMergeNames[i + 1].value)) << name;
    }
  }
  // The rotary family's style values are the table, codes included (the kernels' kStyle).
  const Family& rotary = kjit::family("rotary");
  const auto& styles = rotary.params[static_cast<size_t>(rotary.param_index("style"))].values;
  ASSERT_EQ(styles.size(), std::size(kRotaryStyleNames));
  for (size_t i = 0; i < styles.size(); ++i) {
    EXPECT_EQ(styles[i].text, kRotaryStyleNames[i].name);
    EXPECT_EQ(styles[i].code, static_cast<int64_t>(kRotaryStyleNames[i].value));
  }
  // Past "auto", GemmKernel's names are the fp8.gemm family's impl values (code = enumerator - 1).
  const std::vector<std::string> impls = family_texts("fp8.gemm", "impl");
  ASSERT_EQ(impls.size() + 1, std::size(fp8::kGemmKernelNames));
  for (size_t i = 0; i < impls.size(); ++i) EXPECT_EQ(impls[i], fp8::kGemmKernelNames[i + 1].name);
  // The FP8 formats are DType names.
  for (const char* f : fp8::format_names()) EXPECT_NO_THROW(parse_enum(kDTypeNames, f, "format_names", "dtype")) << f;
}

TEST(NameTables, GemmTilesAndGranularitiesFollowTheFamilies) {
  const std::vector<const char*> tiles = fp8::gemm_tile_names();
  const std::vector<std::string> declared = family_texts("fp8.gemm", "tile");
  ASSERT_EQ(tiles.size(), declared.size() + 1);
  EXPECT_STREQ(tiles[0], "auto");
  EXPECT_EQ(fp8::parse_gemm_tile("auto"), fp8::GemmTile::kAuto);
  for (size_t i = 1; i < tiles.size(); ++i) {
    SCOPED_TRACE(tiles[i]);
    EXPECT_EQ(declared[i - 1], tiles[i]);
    const auto tile = static_cast<fp8::GemmTile>(i);
    EXPECT_EQ(fp8::parse_gemm_tile(tiles[i]), tile);
    EXPECT_STREQ(fp8::gemm_tile_name(tile), tiles[i]);
    // The name is the shape the planner runs: "<bm>x<bn>".
    const fp8::detail::GemmTileShape shape = fp8::detail::gemm_tile_shape(tile);
    EXPECT_EQ(std::to_string(shape.bm) + "x" + std::to_string(shape.bn), tiles[i]);
    EXPECT_EQ(fp8::detail::gemm_tile_of(shape.bm, shape.bn), tile);
  }
  const std::vector<const char*> granularities = fp8::granularity_names();
  ASSERT_EQ(granularities.size(), family_texts("fp8.quantize", "granularity").size());
  for (size_t i = 0; i < granularities.size(); ++i) {
    const auto g = static_cast<fp8::Granularity>(i);
    EXPECT_EQ(fp8::parse_granularity(granularities[i]), g);
    EXPECT_STREQ(fp8::granularity_name(g), granularities[i]);
  }
}

}  // namespace
