// Tuning tables on disk: round trip, merge rules, two concurrent writers, damaged and foreign
// files, and tables travelling in cache bundles.
#include "cache/tune_table.hpp"

#include "cache/bundle.hpp"
#include "cache/file_util.hpp"
#include "cache/store.hpp"
#include "cache_test_util.hpp"

#include <kjit/error.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kjit::cache {
namespace {

using namespace kjit::cache::testing;

TuneChoice choice(const char* point, int splits, double us) {
  TuneChoice c;
  c.family = "attention.decode";
  c.point = point;
  c.knobs["splits"] = splits;
  c.us = us;
  c.eager_us = us * 1.2;
  c.spread = 0.01;
  c.threads = 128;
  c.smem = 40000;
  c.registers = 96;
  return c;
}

TuneEntry entry(int kv, int splits, int64_t when) {
  TuneEntry e;
  e.op = "decode";
  e.bucket = {128, 4, 8, kv};
  e.shape = "batch=1 kv_len=" + std::to_string(kv);
  e.winner = choice("head_dim=128 rows=8", splits, 10);
  e.has_runner_up = true;
  e.runner_up = choice("head_dim=128 rows=16", splits, 11);
  e.default_choice = choice("head_dim=128 rows=8", 1, 12);
  e.margin = 0.1;
  e.gain = 0.2;
  e.tuned_unix = when;
  return e;
}

TuneTable table(const char* id, std::vector<TuneEntry> entries) {
  TuneTable t;
  t.fingerprint_id = id;
  t.fingerprint_text = std::string("name=Test GPU;id=") + id;
  t.fingerprint_fields["name"] = "Test GPU";
  t.entries = std::move(entries);
  return t;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(TuneTable, RoundTripsAndSortsEntries) {
  const TuneTable t = table("aaaaaaaaaaaa", {entry(4096, 4, 2), entry(1024, 2, 1)});
  const TuneTable back = decode_table(encode_table(t));
  EXPECT_EQ(back.fingerprint_id, "aaaaaaaaaaaa");
  EXPECT_EQ(back.fingerprint_text, t.fingerprint_text);
  EXPECT_EQ(back.fingerprint_fields.at("name"), "Test GPU");
  ASSERT_EQ(back.entries.size(), 2u);
  EXPECT_EQ(back.entries[0].bucket.back(), 1024);  // sorted by (op, bucket)
  const TuneEntry* e = back.find("decode", {128, 4, 8, 4096});
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->winner.knobs.at("splits"), 4);
  EXPECT_EQ(e->winner.point, "head_dim=128 rows=8");
  EXPECT_TRUE(e->has_runner_up);
  EXPECT_DOUBLE_EQ(e->default_choice.us, 12);
  EXPECT_EQ(e->winner.describe(), "attention.decode head_dim=128 rows=8 splits=4");
  EXPECT_EQ(e->planner, 1);
  EXPECT_EQ(back.find("decode", {1}), nullptr);
  // The planner revision round-trips; a revision below 1 is a clear error.
  TuneTable rev = t;
  rev.entries[0].planner = 3;
  EXPECT_EQ(decode_table(encode_table(rev)).find("decode", {128, 4, 8, 4096})->planner, 3);
  std::string bad = encode_table(rev);
  bad.replace(bad.find("\"planner\": 3"), std::string("\"planner\": 3").size(), "\"planner\": 0");
  try {
    decode_table(bad);
    ADD_FAILURE() << "planner 0 decoded";
  } catch (const kjit::CacheError& err) {
    EXPECT_NE(std::string(err.what()).find("planner 0 is not a revision"), std::string::npos) << err.what();
  }
}

TEST(TuneTable, MergeTakesTheNewerMeasurementPerBucket) {
  TuneTable base = table("aaaaaaaaaaaa", {entry(1024, 2, 10), entry(2048, 2, 10)});
  const TuneTable incoming = table("aaaaaaaaaaaa", {entry(1024, 8, 20), entry(2048, 8, 5), entry(4096, 8, 1)});
  EXPECT_EQ(merge_tables(base, incoming), 2u);
  ASSERT_EQ(base.entries.size(), 3u);
  EXPECT_EQ(base.find("decode", {128, 4, 8, 1024})->winner.knobs.at("splits"), 8);  // newer
  EXPECT_EQ(base.find("decode", {128, 4, 8, 2048})->winner.knobs.at("splits"), 2);  // older incoming loses
  // A tie keeps what is there: every merge order gives the same table.
  TuneTable again = base;
  TuneTable tie = table("aaaaaaaaaaaa", {entry(1024, 3, 20)});
  EXPECT_EQ(merge_tables(again, tie), 0u);
  EXPECT_THROW(merge_tables(base, table("bbbbbbbbbbbb", {})), CacheError);
}

TEST(TuneTable, TwoConcurrentWritersLoseNothing) {
  TempDir dir;
  constexpr int kPerWriter = 25;
  auto writer = [&](int first) {
    for (int i = 0; i < kPerWriter; ++i) publish_table(dir.path(), table("aaaaaaaaaaaa", {entry(first + i, 2, 1)}));
  };
  std::thread a(writer, 0), b(writer, 1000);
  a.join();
  b.join();
  TuneTable t;
  ASSERT_TRUE(read_table(table_path(dir.path(), "aaaaaaaaaaaa"), &t));
  EXPECT_EQ(t.entries.size(), 2u * kPerWriter);
  EXPECT_EQ(list_tables(dir.path()), std::vector<std::string>{"aaaaaaaaaaaa.json"});
}

TEST(TuneTable, DamagedFilesAreClearErrorsNeverCrashes) {
  const std::string good = encode_table(table("aaaaaaaaaaaa", {entry(1024, 2, 1)}));
  auto why = [](const std::string& bytes) {
    try {
      decode_table(bytes);
    } catch (const CacheError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(why("").find("not JSON"), std::string::npos);
  EXPECT_NE(why(good.substr(0, good.size() / 2)).find("not JSON"), std::string::npos);
  EXPECT_NE(why("[1, 2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(why(R"({"format": "other"})").find("format"), std::string::npos);
  std::string stale = good;
  stale.replace(stale.find("\"version\": 1"), 12, "\"version\": 9");
  EXPECT_NE(why(stale).find("version 9 != 1"), std::string::npos);
  std::string bad_time = good;
  bad_time.replace(bad_time.find("\"us\": 10.0"), 10, "\"us\": \"x\"");
  EXPECT_NE(why(bad_time).find("winner.us is not a number"), std::string::npos) << why(bad_time);
  EXPECT_NE(why(std::string(100, '[')).find("nested"), std::string::npos);
  // Two entries for one key are a damaged table, not a silent pick.
  std::string twice = encode_table(table("aaaaaaaaaaaa", {entry(1024, 2, 1), entry(2048, 2, 1)}));
  twice.replace(twice.find("2048"), 4, "1024");
  EXPECT_NE(why(twice).find("two entries"), std::string::npos);
  EXPECT_EQ(why(good), "accepted");
}

TEST(TuneTable, ReadNamesThePathAndPublishMovesABadFileAside) {
  TempDir dir;
  const std::string path = table_path(dir.path(), "aaaaaaaaaaaa");
  TuneTable t;
  EXPECT_FALSE(read_table(path, &t));  // no file: no table, no error
  publish_table(dir.path(), table("aaaaaaaaaaaa", {entry(1024, 2, 1)}));
  write(path, "{ not json");
  try {
    read_table(path, &t);
    ADD_FAILURE() << "a damaged table was read";
  } catch (const CacheError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  const TuneTable merged = publish_table(dir.path(), table("aaaaaaaaaaaa", {entry(2048, 4, 1)}));
  EXPECT_EQ(merged.entries.size(), 1u);
  ASSERT_TRUE(read_table(path, &t));
  EXPECT_EQ(t.entries.size(), 1u);
  std::vector<std::string> names;
  ASSERT_EQ(detail::list_dir(tuning_dir(dir.path()), &names), 0);
  bool aside = false;
  for (const std::string& n : names) aside = aside || n.find("aaaaaaaaaaaa.json.bad-") == 0;
  EXPECT_TRUE(aside) << "the damaged table was not kept";
}

/// The names under `<root>/tuning` that start with `prefix`.
size_t count_named(const std::string& root, const std::string& prefix) {
  std::vector<std::string> names;
  EXPECT_EQ(detail::list_dir(tuning_dir(root), &names), 0);
  size_t n = 0;
  for (const std::string& name : names) n += name.rfind(prefix, 0) == 0;
  return n;
}

TEST(TuneTable, AFileRecordingAnotherFingerprintIsMovedAsideNotMergedInto) {
  TempDir dir;
  publish_table(dir.path(), table("aaaaaaaaaaaa", {entry(1024, 2, 1)}));
  // Someone copied another device's table under this id.
  const std::string foreign = slurp(table_path(dir.path(), "aaaaaaaaaaaa"));
  write(table_path(dir.path(), "bbbbbbbbbbbb"), foreign);
  const TuneTable merged = publish_table(dir.path(), table("bbbbbbbbbbbb", {entry(2048, 2, 1)}));
  EXPECT_EQ(merged.fingerprint_id, "bbbbbbbbbbbb");
  ASSERT_EQ(merged.entries.size(), 1u);  // nothing of the other device's table mixed in
  EXPECT_EQ(merged.entries[0].bucket.back(), 2048);
  TuneTable t;
  ASSERT_TRUE(read_table(table_path(dir.path(), "bbbbbbbbbbbb"), &t));
  EXPECT_EQ(t.fingerprint_id, "bbbbbbbbbbbb");
  EXPECT_EQ(count_named(dir.path(), "bbbbbbbbbbbb.json.bad-"), 1u) << "the foreign table was not kept";
}

TEST(TuneTable, AFingerprintIdThatIsNotAFileNameDoesNotDecode) {
  for (const char* id : {"../../escape", "", "a/b", "a.json"}) {
    EXPECT_THROW(decode_table(encode_table(table(id, {entry(1024, 2, 1)}))), CacheError) << id;
  }
}

TEST(TuneTable, ImportMergesEveryTableWhenATargetTableNamesAnotherFingerprint) {
  // Issue 26, item 2: tuning/aaaaaaaaaaaa.json in the target names fingerprint ffffffffffff.
  // The import used to throw after publishing the entries, leaving bbbbbbbbbbbb unmerged.
  TempDir src, dst;
  const std::string t1 = encode_table(table("aaaaaaaaaaaa", {entry(1024, 2, 1)}));
  const std::string t2 = encode_table(table("bbbbbbbbbbbb", {entry(2048, 2, 1)}));
  const std::string bundle = src.path() + "/b.kjitb";
  write(bundle, encode_bundle({encode(sample_entry(1))}, {t1, t2}));
  ASSERT_EQ(detail::make_dirs(tuning_dir(dst.path())), 0);
  write(table_path(dst.path(), "aaaaaaaaaaaa"), encode_table(table("ffffffffffff", {entry(4096, 2, 1)})));
  DiskCache to(dst.path(), 0, true);
  ImportReport r;
  ASSERT_NO_THROW(r = import_bundle(to, bundle));
  EXPECT_EQ(r.imported, 1u);
  EXPECT_EQ(r.tables, 2u);
  EXPECT_TRUE(r.problems.empty());
  for (const char* id : {"aaaaaaaaaaaa", "bbbbbbbbbbbb"}) {
    TuneTable t;
    ASSERT_TRUE(read_table(table_path(dst.path(), id), &t)) << id;
    EXPECT_EQ(t.fingerprint_id, id);
    EXPECT_EQ(t.entries.size(), 1u) << id;
  }
  EXPECT_EQ(count_named(dst.path(), "aaaaaaaaaaaa.json.bad-"), 1u) << "the foreign table was not kept";
}

TEST(TuneTable, ImportRefusesBeforePublishingAnythingWhenItsTablesCannotBeWritten) {
  TempDir src, dst;
  const std::string bundle = src.path() + "/b.kjitb";
  const Entry e = sample_entry(1);
  write(bundle, encode_bundle({encode(e)}, {encode_table(table("aaaaaaaaaaaa", {entry(1024, 2, 1)}))}));
  DiskCache to(dst.path(), 0, true);
  write(tuning_dir(dst.path()), "a file where the tuning folder belongs");  // ENOTDIR, even as root
  try {
    import_bundle(to, bundle);
    ADD_FAILURE() << "the import went on without a tuning folder";
  } catch (const CacheError& err) {
    EXPECT_NE(std::string(err.what()).find("nothing was imported"), std::string::npos) << err.what();
  }
  EXPECT_FALSE(to.lookup(e.key, false)) << "an entry was published before the import was refused";
}

TEST(TuneTable, BundlesCarryTablesAndOldBundlesStillDecode) {
  const std::string t1 = encode_table(table("aaaaaaaaaaaa", {entry(1024, 2, 1)}));
  const std::string t2 = encode_table(table("bbbbbbbbbbbb", {entry(2048, 2, 1)}));
  const BundleContents c = decode_bundle(encode_bundle({encode(sample_entry(1))}, {t1, t2}));
  EXPECT_EQ(c.entries.size(), 1u);
  ASSERT_EQ(c.tables.size(), 2u);
  EXPECT_EQ(c.tables[1], t2);
  EXPECT_TRUE(decode_bundle(encode_bundle({encode(sample_entry(1))})).tables.empty());
  std::string cut = encode_bundle({}, {t1});
  cut.resize(cut.size() - 3);
  EXPECT_THROW(decode_bundle(cut), CacheError);
}

TEST(TuneTable, ExportAndImportMoveTablesBetweenCaches) {
  TempDir a, b;
  publish_table(a.path(), table("aaaaaaaaaaaa", {entry(1024, 2, 1)}));
  publish_table(b.path(), table("aaaaaaaaaaaa", {entry(2048, 2, 1)}));
  DiskCache from(a.path(), 0, true);
  DiskCache to(b.path(), 0, true);
  const std::string bundle = a.path() + "/out.kjitb";
  EXPECT_EQ(export_bundle(from, bundle, {}).tables, 1u);
  const ImportReport r = import_bundle(to, bundle);
  EXPECT_EQ(r.tables, 1u);
  EXPECT_TRUE(r.problems.empty());
  TuneTable t;
  ASSERT_TRUE(read_table(table_path(b.path(), "aaaaaaaaaaaa"), &t));
  EXPECT_EQ(t.entries.size(), 2u);  // merged, nothing of b's lost
}

}  // namespace
}  // namespace kjit::cache
