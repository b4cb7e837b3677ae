// OCI images of a cache (cache/oci.hpp) through the library: the layout and its annotations,
// byte-identical round trips, reproducible digests, the export filters, tags, and the import's
// refusals (a blob that fails its digest, a forged layer with valid digests, untrusted and
// missing signatures), each with nothing published. The real tools (skopeo, umoci, a registry)
// are in tests/cli/oci_cli_test.cc.
#include "cache/oci.hpp"

#include "cache/remote/signing.hpp"
#include "cache/store.hpp"
#include "cache/tune_table.hpp"
#include "tests/cache/cache_test_util.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

namespace kjit::cache {
namespace {

using nlohmann::json;
using testing::read_all;
using testing::sample_entry;
using testing::TempDir;
using testing::write_all;
namespace fs = std::filesystem;

Entry entry_for(int i, const std::string& target, const std::string& nvrtc = "13.0", const std::string& family = "rotary") {
  Entry e = sample_entry(i, 300 + static_cast<size_t>(i));
  e.meta.target = target;
  e.meta.nvrtc_version = nvrtc;
  e.meta.family = family;
  e.meta.template_args = "head_dim=" + std::to_string(64 * i) + " style=neox";
  return e;
}

TuneTable small_table(const std::string& id) {
  TuneTable t;
  t.fingerprint_id = id;
  t.fingerprint_text = "name=Test GPU;id=" + id;
  TuneEntry e;
  e.op = "decode";
  e.bucket = {128, 4, 8, 1024};
  e.shape = "batch=1 kv_len=1024";
  e.winner.family = "attention.decode";
  e.winner.point = "head_dim=128 rows=8";
  e.winner.us = 10;
  e.tuned_unix = 1;
  t.entries.push_back(e);
  return t;
}

/// A cache at `dir` with five entries: sm_89 and sm_90a under NVRTC 13.0, one sm_90a under 12.8,
/// and one of another family, plus a tuning table.
std::vector<Entry> fill(const std::string& dir) {
  DiskCache cache(dir, 0, true);
  const std::vector<Entry> entries = {entry_for(1, "sm_89"), entry_for(2, "sm_89"), entry_for(3, "sm_90a"),
                                      entry_for(4, "sm_90a", "12.8"), entry_for(5, "sm_90a", "13.0", "gemm")};
  for (const Entry& e : entries) cache.publish(e);
  publish_table(dir, small_table("aaaaaaaaaaaa"));
  return entries;
}

json read_json(const std::string& path) { return json::parse(read_all(path)); }

std::string blob(const std::string& layout, const std::string& digest) {
  return layout + "/blobs/sha256/" + digest.substr(7);
}

/// The manifest of the layout's image tagged `tag`.
json manifest_of(const std::string& layout, const std::string& tag = "latest") {
  const json index = read_json(layout + "/index.json");
  for (const json& m : index["manifests"]) {
    if (m["annotations"]["org.opencontainers.image.ref.name"] == tag) return read_json(blob(layout, m["digest"]));
  }
  ADD_FAILURE() << "no image tagged " << tag;
  return json();
}

/// Every file under `dir`, relative path → bytes.
std::map<std::string, std::string> files_under(const std::string& dir) {
  std::map<std::string, std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& f : fs::recursive_directory_iterator(dir)) {
    if (f.is_regular_file()) out[fs::relative(f.path(), dir).string()] = read_all(f.path().string());
  }
  return out;
}

/// The entry files of the cache at `root` (its v1 shard folders), relative path → bytes.
std::map<std::string, std::string> entry_files(const std::string& root) {
  std::map<std::string, std::string> out;
  for (auto& [path, bytes] : files_under(root + "/v1")) {
    if (path.size() > 5 && path.substr(path.size() - 5) == ".kjit") out[path] = bytes;
  }
  return out;
}

/// Rewrites blob `old_digest` of the single image tagged latest as `bytes`, and everything that
/// names it (the config's diff_id for an uncompressed layer, the manifest, index.json), so the
/// layout's digests all hold again: what a forger with write access to a registry can do.
void replace_layer(const std::string& layout, size_t layer, const std::string& bytes) {
  json index = read_json(layout + "/index.json");
  json manifest = read_json(blob(layout, index["manifests"][0]["digest"]));
  json config = read_json(blob(layout, manifest["config"]["digest"]));
  const std::string digest = oci_digest(bytes);
  write_all(blob(layout, digest), bytes);
  manifest["layers"][layer]["digest"] = digest;
  manifest["layers"][layer]["size"] = bytes.size();
  config["rootfs"]["diff_ids"][layer] = digest;
  const std::string config_text = config.dump();
  write_all(blob(layout, oci_digest(config_text)), config_text);
  manifest["config"]["digest"] = oci_digest(config_text);
  manifest["config"]["size"] = config_text.size();
  const std::string manifest_text = manifest.dump();
  write_all(blob(layout, oci_digest(manifest_text)), manifest_text);
  index["manifests"][0]["digest"] = oci_digest(manifest_text);
  index["manifests"][0]["size"] = manifest_text.size();
  write_all(layout + "/index.json", index.dump());
}

remote::SecretKey key(unsigned char seed) {
  std::array<unsigned char, 32> s{};
  s.fill(seed);
  return remote::key_from_seed(s);
}

/// Expects `import_oci` of `ref` into a fresh cache to be refused with `words` in the message,
/// and that cache to hold no entry afterwards.
void expect_refused(const OciRef& ref, const std::string& words, const OciImportOptions& options = {}) {
  TempDir dst;
  DiskCache to(dst.path(), 0, true);
  try {
    import_oci(to, ref, options);
    ADD_FAILURE() << "imported; expected a refusal naming: " << words;
  } catch (const CacheError& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nothing was imported"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(to.list().empty()) << "an entry was published by a refused import";
  EXPECT_TRUE(list_tables(dst.path()).empty()) << "a table was published by a refused import";
}

TEST(Oci, TheLayoutHasOneLayerPerTargetAndToolkitAndPerTableWithAnnotations) {
  TempDir src, out;
  fill(src.path());
  const DiskCache cache(src.path(), 0, true);
  const std::string layout = out.path() + "/img";
  const OciExportReport r = export_oci(cache, layout, {}, {});
  EXPECT_EQ(r.entries, 5u);
  EXPECT_EQ(r.tables, 1u);
  EXPECT_EQ(r.layers, 4u);  // sm_89/13.0, sm_90a/12.8, sm_90a/13.0, the table
  EXPECT_EQ(read_json(layout + "/oci-layout"), json({{"imageLayoutVersion", "1.0.0"}}));
  const json index = read_json(layout + "/index.json");
  ASSERT_EQ(index["manifests"].size(), 1u);
  EXPECT_EQ(index["manifests"][0]["digest"], r.manifest_digest);
  EXPECT_EQ(index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"], "latest");
  EXPECT_EQ(oci_digest(read_all(blob(layout, r.manifest_digest))), r.manifest_digest);

  const json m = manifest_of(layout);
  EXPECT_EQ(m["schemaVersion"], 2);
  EXPECT_EQ(m["mediaType"], "application/vnd.oci.image.manifest.v1+json");
  EXPECT_EQ(m["annotations"]["dev.kjit.entries"], "5");
  EXPECT_EQ(m["annotations"]["dev.kjit.targets"], "sm_89,sm_90a");
  EXPECT_EQ(m["annotations"]["dev.kjit.nvrtc-versions"], "12.8,13.0");
  EXPECT_EQ(m["annotations"]["dev.kjit.cuda-headers-versions"], "13000");
  EXPECT_EQ(m["annotations"]["dev.kjit.fingerprints"], "aaaaaaaaaaaa");
  EXPECT_FALSE(m["annotations"].contains("dev.kjit.signer"));
  EXPECT_FALSE(m["annotations"]["dev.kjit.version"].get<std::string>().empty());
  const json layers = m["layers"];
  ASSERT_EQ(layers.size(), 4u);
  const std::vector<std::pair<std::string, std::string>> groups = {{"sm_89", "13.0"}, {"sm_90a", "12.8"}, {"sm_90a", "13.0"}};
  const std::vector<std::string> counts = {"2", "1", "2"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(layers[i]["mediaType"], "application/vnd.oci.image.layer.v1.tar");
    EXPECT_EQ(layers[i]["annotations"]["dev.kjit.target"], groups[i].first) << i;
    EXPECT_EQ(layers[i]["annotations"]["dev.kjit.nvrtc-version"], groups[i].second) << i;
    EXPECT_EQ(layers[i]["annotations"]["dev.kjit.entries"], counts[i]) << i;
  }
  EXPECT_EQ(layers[3]["annotations"]["dev.kjit.fingerprint"], "aaaaaaaaaaaa");

  const json config = read_json(blob(layout, m["config"]["digest"]));
  EXPECT_EQ(m["config"]["mediaType"], "application/vnd.oci.image.config.v1+json");
  EXPECT_EQ(config["os"], "linux");
  EXPECT_FALSE(config["architecture"].get<std::string>().empty());
  EXPECT_EQ(config["rootfs"]["type"], "layers");
  ASSERT_EQ(config["rootfs"]["diff_ids"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(config["rootfs"]["diff_ids"][i], layers[i]["digest"]) << "an uncompressed layer is its own diff_id";
    const std::string bytes = read_all(blob(layout, layers[i]["digest"]));
    EXPECT_EQ(bytes.size(), layers[i]["size"].get<size_t>());
    EXPECT_EQ(oci_digest(bytes), layers[i]["digest"]);
  }
  EXPECT_EQ(config["config"]["Labels"], m["annotations"]);
  // Every tar member: mtime 0, uid and gid 0, no user or group name; files 0644, folders 0755.
  for (size_t i = 0; i < 4; ++i) {
    const std::string tar = read_all(blob(layout, layers[i]["digest"]));
    size_t members = 0;
    for (size_t at = 0; at + 512 <= tar.size() && tar[at] != '\0';) {
      const std::string name = tar.substr(at, tar.find('\0', at) - at);
      const bool dir = tar[at + 156] == '5';
      auto octal = [&](size_t offset, size_t width) { return std::stoul(tar.substr(at + offset, width), nullptr, 8); };
      EXPECT_EQ(octal(100, 8), dir ? 0755u : 0644u) << name;  // mode
      EXPECT_EQ(octal(108, 8), 0u) << name;                   // uid
      EXPECT_EQ(octal(116, 8), 0u) << name;                   // gid
      EXPECT_EQ(octal(136, 12), 0u) << name;                  // mtime
      EXPECT_EQ(tar[at + 265], '\0') << name;  // uname
      EXPECT_EQ(tar[at + 297], '\0') << name;  // gname
      const size_t size = std::stoul(tar.substr(at + 124, 11), nullptr, 8);
      at += 512 + (size + 511) / 512 * 512;
      ++members;
    }
    EXPECT_GT(members, 1u) << "layer " << i;
  }
  for (const char* word : {"created", "history"}) EXPECT_FALSE(config.contains(word)) << "no time in the image";
}

TEST(Oci, ARoundTripGivesByteIdenticalEntriesAndTheTables) {
  TempDir src, out, dst;
  fill(src.path());
  const std::string layout = out.path() + "/img";
  export_oci(DiskCache(src.path(), 0, true), layout, {}, {});
  DiskCache to(dst.path(), 0, true);
  const ImportReport r = import_oci(to, {layout, ""}, {});
  EXPECT_EQ(r.declared, 5u);
  EXPECT_EQ(r.imported, 5u);
  EXPECT_EQ(r.tables, 1u);
  EXPECT_TRUE(r.problems.empty());
  const auto before = entry_files(src.path()), after = entry_files(dst.path());
  EXPECT_EQ(before.size(), 5u);
  EXPECT_EQ(before, after);
  EXPECT_EQ(read_all(table_path(dst.path(), "aaaaaaaaaaaa")), read_all(table_path(src.path(), "aaaaaaaaaaaa")));
  // Again: every entry is present and kept.
  const ImportReport again = import_oci(to, {layout, "latest"}, {});
  EXPECT_EQ(again.present, 5u);
  EXPECT_EQ(again.imported, 0u);
}

TEST(Oci, BadAndMisnamedTuningTablesAreLeftOutAndCountedApartFromEntries) {
  // A table that does not decode, and a good one filed under another fingerprint's name (the
  // runtime would not read it there): both left out with a warning naming them, counted as
  // tables, not as bad entries.
  TempDir src, out;
  fill(src.path());
  write_all(src.path() + "/tuning/cccccccccccc.json", "not json");
  write_all(src.path() + "/tuning/dddddddddddd.json", read_all(table_path(src.path(), "aaaaaaaaaaaa")));
  ::testing::internal::CaptureStderr();
  const OciExportReport r = export_oci(DiskCache(src.path(), 0, true), out.path() + "/img", {}, {});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.entries, 5u);
  EXPECT_EQ(r.tables, 1u);
  EXPECT_EQ(r.skipped_bad, 0u);
  EXPECT_EQ(r.skipped_tables, 2u);
  EXPECT_NE(err.find("cccccccccccc.json left out"), std::string::npos) << err;
  EXPECT_NE(err.find("dddddddddddd.json left out"), std::string::npos) << err;
  EXPECT_NE(err.find("belongs in aaaaaaaaaaaa.json"), std::string::npos) << err;
}

TEST(Oci, TheSameEntriesGiveTheSameDigests) {
  TempDir a, b, out;
  const std::vector<Entry> entries = fill(a.path());
  // Another cache with the same entries, published in the other order, with other mtimes.
  {
    DiskCache other(b.path(), 0, true);
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) other.publish(*it);
    publish_table(b.path(), small_table("aaaaaaaaaaaa"));
    for (const EntryInfo& e : other.list()) testing::set_mtime(e.path, 1000 + e.key.lo % 1000);
  }
  const OciExportReport r1 = export_oci(DiskCache(a.path(), 0, true), out.path() + "/one", {}, {});
  const OciExportReport r2 = export_oci(DiskCache(b.path(), 0, true), out.path() + "/two", {}, {});
  EXPECT_EQ(r1.manifest_digest, r2.manifest_digest);
  EXPECT_EQ(files_under(out.path() + "/one"), files_under(out.path() + "/two")) << "every byte of the layouts";
  // Exporting into the same layout again changes nothing.
  const OciExportReport r3 = export_oci(DiskCache(a.path(), 0, true), out.path() + "/one", {}, {});
  EXPECT_EQ(r3.manifest_digest, r1.manifest_digest);
  EXPECT_EQ(files_under(out.path() + "/one"), files_under(out.path() + "/two"));
  // What the image holds or says is in its digest: a filter, a tag's platform, a signer.
  ExportFilter only_89;
  only_89.targets = {"sm_89"};
  EXPECT_NE(export_oci(DiskCache(a.path(), 0, true), out.path() + "/three", only_89, {}).manifest_digest, r1.manifest_digest);
  OciExportOptions arm;
  arm.architecture = "arm64";
  EXPECT_NE(export_oci(DiskCache(a.path(), 0, true), out.path() + "/four", {}, arm).manifest_digest, r1.manifest_digest);
}

TEST(Oci, TakesWhatTheBundleFiltersTake) {
  TempDir src, out;
  const std::vector<Entry> entries = fill(src.path());
  const DiskCache cache(src.path(), 0, true);
  auto exported = [&](const ExportFilter& filter, const std::string& name) {
    const std::string layout = out.path() + "/" + name;
    export_oci(cache, layout, filter, {});
    TempDir dst;
    DiskCache to(dst.path(), 0, true);
    import_oci(to, {layout, ""}, {});
    std::set<std::string> keys;
    for (const EntryInfo& e : to.list()) keys.insert(e.key.hex());
    return keys;
  };
  ExportFilter family;
  family.families = {"gemm"};
  EXPECT_EQ(exported(family, "family"), std::set<std::string>{entries[4].key.hex()});
  ExportFilter target;
  target.targets = {"sm_89"};
  EXPECT_EQ(exported(target, "target"), (std::set<std::string>{entries[0].key.hex(), entries[1].key.hex()}));
  // A warm-up manifest: a family line (parameters in another order than template_args spells
  // them) and a host-application line by key.
  ExportFilter manifest;
  manifest.manifest.emplace();
  ManifestEntry point;
  point.family = "rotary";
  point.params = {{"style", "neox"}, {"head_dim", "64"}};
  point.target = "sm_89";
  ManifestEntry user;
  user.user = true;
  user.family = "myapp";
  user.target = "sm_90a";
  user.key = entries[3].key.hex();
  manifest.manifest->push_back(point);
  manifest.manifest->push_back(user);
  EXPECT_EQ(exported(manifest, "manifest"), (std::set<std::string>{entries[0].key.hex(), entries[3].key.hex()}));
  ExportFilter none;
  none.manifest.emplace();
  EXPECT_TRUE(exported(none, "empty-manifest").empty()) << "a manifest that names nothing takes nothing";
}

TEST(Oci, TagsNameImagesOfOneLayout) {
  TempDir src, out, dst;
  fill(src.path());
  const DiskCache cache(src.path(), 0, true);
  const std::string layout = out.path() + "/img";
  ExportFilter only_89;
  only_89.targets = {"sm_89"};
  OciExportOptions v1, v2;
  v1.tag = "v1";
  v2.tag = "v2";
  export_oci(cache, layout, only_89, v1);
  const OciExportReport second = export_oci(cache, layout, {}, v2);
  expect_refused({layout, ""}, "holds 2 images (tags: v1, v2)");
  expect_refused({layout, "v3"}, "no image is tagged v3 (tags: v1, v2)");
  DiskCache to(dst.path(), 0, true);
  EXPECT_EQ(import_oci(to, {layout, "v1"}, {}).imported, 2u);
  // Exporting a tag again replaces its image and keeps the others.
  const OciExportReport again = export_oci(cache, layout, only_89, v2);
  const json index = read_json(layout + "/index.json");
  ASSERT_EQ(index["manifests"].size(), 2u);
  EXPECT_EQ(index["manifests"][1]["digest"], again.manifest_digest);
  EXPECT_NE(again.manifest_digest, second.manifest_digest);

  EXPECT_EQ(parse_oci_ref("oci:/a/b:v1").dir, "/a/b");
  EXPECT_EQ(parse_oci_ref("oci:/a/b:v1").tag, "v1");
  EXPECT_EQ(parse_oci_ref("oci:img").tag, "");
  EXPECT_EQ(parse_oci_ref("some/dir").dir, "some/dir");
  for (const char* bad : {"oci:", "oci::v1", "oci:img:", "oci:img:a b", "oci:img:-x", ""}) {
    EXPECT_THROW(parse_oci_ref(bad), InvalidArgument) << bad;
  }
  OciExportOptions bad_tag;
  bad_tag.tag = "no/slash";
  EXPECT_THROW(export_oci(cache, layout, {}, bad_tag), InvalidArgument);
  // A folder with other files is not taken over.
  write_all(out.path() + "/other", "x");
  EXPECT_THROW(export_oci(cache, out.path(), {}, {}), CacheError);
}

TEST(Oci, ABlobThatFailsItsDigestIsRefusedWithNothingPublished) {
  TempDir src, out;
  fill(src.path());
  const std::string layout = out.path() + "/img";
  export_oci(DiskCache(src.path(), 0, true), layout, {}, {});
  // The second layer: the first one's entries must not be published either.
  const json m = manifest_of(layout);
  const std::string path = blob(layout, m["layers"][1]["digest"]);
  std::string bytes = read_all(path);
  bytes[bytes.size() / 2] ^= 1;
  write_all(path, bytes);
  expect_refused({layout, ""}, "layer 2 of 4 (" + m["layers"][1]["digest"].get<std::string>() + "): digest mismatch");
  bytes.pop_back();
  write_all(path, bytes);
  expect_refused({layout, ""}, "size mismatch");
  fs::remove(path);
  expect_refused({layout, ""}, "No such file");
}

TEST(Oci, AForgedLayerWithValidDigestsIsRefusedByItsEntryCheck) {
  TempDir src, out;
  const std::vector<Entry> entries = fill(src.path());
  const std::string layout = out.path() + "/img";
  export_oci(DiskCache(src.path(), 0, true), layout, {}, {});
  const json m = manifest_of(layout);
  // A byte of entry 1's payload changed inside the tar (tar headers do not cover file data).
  std::string tar = read_all(blob(layout, m["layers"][0]["digest"]));
  const std::string payload = entries[0].payload;
  const size_t at = tar.find(payload);
  ASSERT_NE(at, std::string::npos);
  tar[at + 7] ^= 1;
  replace_layer(layout, 0, tar);
  expect_refused({layout, ""}, entry_relative_path(entries[0].key) + " in layer 1: corrupt (entry: checksum mismatch)");
  // An entry file moved to another key's path: intact, but not that key's.
  TempDir src2, out2;
  fill(src2.path());
  const std::string moved = out2.path() + "/img";
  export_oci(DiskCache(src2.path(), 0, true), moved, {}, {});
  std::string layer = read_all(blob(moved, manifest_of(moved)["layers"][0]["digest"]));
  // Swap the paths of entries 1 and 2 (one layer: both sm_89) in their tar headers, and fix each
  // header's checksum (bytes 148..155: six octal digits, NUL, space).
  const std::string from = entry_relative_path(entries[0].key), to = entry_relative_path(entries[1].key);
  const size_t first = layer.find(from), second = layer.find(to);
  ASSERT_NE(first, std::string::npos);
  ASSERT_NE(second, std::string::npos);
  ASSERT_EQ(first % 512, 0u) << "a name starts its header";
  layer.replace(first, from.size(), to);
  layer.replace(second, to.size(), from);
  for (size_t header : {first, second}) {
    std::fill(layer.begin() + static_cast<long>(header) + 148, layer.begin() + static_cast<long>(header) + 156, ' ');
    unsigned sum = 0;
    for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(layer[header + i]);
    layer.replace(header + 148, 7, fmt::format("{:06o}", sum) + '\0');
  }
  replace_layer(moved, 0, layer);
  expect_refused({moved, ""}, "in layer 1: corrupt (entry: key mismatch)");
}

TEST(Oci, SignaturesAreCheckedAgainstTheTrustedKeys) {
  TempDir src, out;
  fill(src.path());
  const DiskCache cache(src.path(), 0, true);
  const remote::SecretKey builder = key(1), forger = key(2);
  OciExportOptions good, forged, plain;
  good.tag = "good";
  good.signer = &builder;
  forged.tag = "forged";
  forged.signer = &forger;
  plain.tag = "plain";
  const std::string layout = out.path() + "/img";
  const OciExportReport signed_report = export_oci(cache, layout, {}, good);
  export_oci(cache, layout, {}, forged);
  export_oci(cache, layout, {}, plain);
  EXPECT_EQ(manifest_of(layout, "good")["annotations"]["dev.kjit.signer"], fmt::format("{:016x}", builder.pub.id));
  EXPECT_GT(signed_report.bytes, 0u);

  OciImportOptions trusting;
  trusting.trusted = {builder.pub};
  {
    TempDir dst;
    DiskCache to(dst.path(), 0, true);
    const ImportReport r = import_oci(to, {layout, "good"}, trusting);
    EXPECT_EQ(r.imported, 5u);
    EXPECT_EQ(r.tables, 1u);
    EXPECT_EQ(entry_files(dst.path()), entry_files(src.path()));
  }
  // Re-signed by another key: every digest holds, the signature does not.
  expect_refused({layout, "forged"}, "signed by an untrusted key", trusting);
  expect_refused({layout, "plain"}, ": unsigned", trusting);
  // Without trusted keys signatures are not required: all three import.
  for (const char* tag : {"good", "forged", "plain"}) {
    TempDir dst;
    DiskCache to(dst.path(), 0, true);
    EXPECT_EQ(import_oci(to, {layout, tag}, {}).imported, 5u) << tag;
  }
  // A tuning table signed by another key: refused by the table's own signature.
  TempDir mixed_src, mixed_out;
  DiskCache mixed(mixed_src.path(), 0, true);
  publish_table(mixed_src.path(), small_table("bbbbbbbbbbbb"));
  OciExportOptions table_by_forger;
  table_by_forger.signer = &forger;
  export_oci(mixed, mixed_out.path() + "/img", {}, table_by_forger);
  expect_refused({mixed_out.path() + "/img", ""}, "tuning/bbbbbbbbbbbb.json in layer 1: signed by an untrusted key", trusting);
}

}  // namespace
}  // namespace kjit::cache
