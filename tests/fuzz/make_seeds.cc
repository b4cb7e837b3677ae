// Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/{entry,bundle,memo}/): well-formed
// inputs and the near misses the decoders must refuse, so fuzzing starts from every branch.
// Run from tools/fuzz.sh --seeds; the output is checked in, so this only reruns when the
// formats change.

#include "cache/bundle.hpp"
#include "cache/tune_table.hpp"
#include "cache/entry.hpp"
#include "cache/key.hpp"
#include "cache/manifest.hpp"
#include "cache/remote/record.hpp"
#include "cache/remote/signing.hpp"
#include "cache/le_bytes.hpp"
#include "runtime/key_memo.hpp"
#include "runtime/toolkit_memo.hpp"

#include <xxhash.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

using namespace kjit::cache;
namespace fs = std::filesystem;

Entry sample(int i, size_t payload) {
  Entry e;
  e.key = KeyBuilder().add("seed", int64_t{i}).finish();
  e.meta.family = "attention.decode";
  e.meta.template_args = "head_dim=128 group=4";
  e.meta.target = "sm_90a";
  e.meta.kernels.push_back({"decode<128, 4>", "_Z6decodeILi128ELi4EEvv", 96, 0, 4096});
  e.meta.options = {"-std=c++17", "-DKJIT_HEAD_DIM=128"};
  e.meta.nvrtc_version = "13.0";
  e.meta.cuda_headers_version = "13000";
  e.meta.source_name = "attention/decode.cu";
  e.meta.compile_ms = 45.5;
  e.meta.created_unix = 1764460800;
  e.payload.assign(payload, '\0');
  for (size_t b = 0; b < payload; ++b) e.payload[b] = static_cast<char>((b * 31 + i) & 0xff);
  return e;
}

/// An entry whose metadata text is `meta` verbatim, with a correct checksum.
std::string raw_entry(const std::string& meta, const std::string& payload) {
  std::string out = "KJITCUBN";
  detail::put_le(out, kFormatVersion, 4);
  detail::put_le(out, 0x0123456789abcdefull, 8);
  detail::put_le(out, 0xfedcba9876543210ull, 8);
  detail::put_le(out, meta.size(), 8);
  detail::put_le(out, payload.size(), 8);
  const std::string body = meta + payload;
  detail::put_le(out, XXH3_64bits(body.data(), body.size()), 8);
  return out + body;
}

void put(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

}  // namespace

/// The fleet tier's records (tests/fuzz/remote_record_fuzz.cc signs with the same seed).
void remote_record_seeds(const fs::path& dir) {
  using namespace kjit::cache::remote;
  std::array<unsigned char, 32> seed{};
  seed.fill(0x2a);
  const SecretKey key = key_from_seed(seed);
  seed.fill(0x17);
  const SecretKey rogue = key_from_seed(seed);
  const Entry e = sample(7, 48);
  const std::string body = encode(e);
  const std::string good = encode_record(RecordKind::kEntry, e.key, body, &key);
  put(dir, "signed-entry", good);
  put(dir, "unsigned-entry", encode_record(RecordKind::kEntry, e.key, body, nullptr));
  put(dir, "rogue-signed-entry", encode_record(RecordKind::kEntry, e.key, body, &rogue));
  put(dir, "signed-failure", encode_record(RecordKind::kFailure, e.key,
                                           encode_failure({"kjit: NVRTC failed", "log", {"-arch=sm_90a"}}), &key));
  put(dir, "failure-bad-body", encode_record(RecordKind::kFailure, e.key, "[1]", &key));
  put(dir, "signed-tune-table", encode_record(RecordKind::kTuneTable, e.key, R"({"format": "kjit-tuning"})", &key));
  Entry other = e;
  other.key.lo ^= 1;
  put(dir, "entry-of-another-key", encode_record(RecordKind::kEntry, e.key, encode(other), &key));
  put(dir, "truncated", good.substr(0, good.size() - 10));
  std::string flipped = good;
  flipped[45] ^= 1;
  put(dir, "flipped", flipped);
  put(dir, "empty", "");
}

int main(int argc, char** argv) {
  const fs::path root = argc > 1 ? argv[1] : "tests/fuzz/corpus";
  remote_record_seeds(root / "remote_record");
  const fs::path entry = root / "entry";
  const fs::path bundle = root / "bundle";

  const std::string good = encode(sample(1, 64));
  put(entry, "valid", good);
  Entry ptx = sample(2, 0);
  ptx.meta = EntryMeta{};
  ptx.meta.ptx = true;
  ptx.payload = ".version 9.0\n.target sm_90a\n";
  put(entry, "valid-ptx-sparse-meta", encode(ptx));
  put(entry, "empty", "");
  put(entry, "truncated-header", good.substr(0, 30));
  put(entry, "truncated-body", good.substr(0, good.size() - 7));
  put(entry, "bad-magic", "KJITCUBX" + good.substr(8));
  std::string version = good;
  version[8] = 7;
  put(entry, "other-version", version);
  std::string flipped = good;
  flipped[flipped.size() - 1] ^= 1;
  put(entry, "checksum-mismatch", flipped);
  put(entry, "trailing-bytes", good + "xx");
  std::string huge = good;
  for (int i = 0; i < 8; ++i) huge[28 + i] = static_cast<char>(0xff);
  put(entry, "huge-meta-size", huge);
  put(entry, "meta-empty-object", raw_entry("{}", "payload"));
  put(entry, "meta-not-json", raw_entry("{\"family\": ", "p"));
  put(entry, "meta-array", raw_entry("[1,2,3]", ""));
  put(entry, "meta-wrong-types", raw_entry(R"({"family": 3, "ptx": "yes", "kernels": {}})", ""));
  put(entry, "meta-kernel-out-of-range",
      raw_entry(R"({"kernels": [{"registers": 18446744073709551615, "spill_bytes": -1}]})", ""));
  put(entry, "meta-options-mixed", raw_entry(R"({"options": ["-O3", 4, null]})", ""));
  put(entry, "meta-deep", raw_entry(std::string(200, '[') + std::string(200, ']'), ""));
  put(entry, "meta-bad-utf8", raw_entry("{\"family\": \"\xff\xfe\"}", ""));

  const std::string two = encode_bundle({good, encode(sample(3, 16))});
  put(bundle, "empty-bundle", encode_bundle({}));
  put(bundle, "one-entry", encode_bundle({good}));
  put(bundle, "two-entries", two);
  put(bundle, "one-damaged", encode_bundle({flipped, good}));
  put(bundle, "truncated", two.substr(0, two.size() - 10));
  put(bundle, "trailing", two + "z");
  std::string count = encode_bundle({good});
  for (int i = 0; i < 8; ++i) count[12 + i] = static_cast<char>(0xff);
  put(bundle, "huge-count", count);
  std::string size = encode_bundle({good});
  for (int i = 0; i < 8; ++i) size[20 + i] = static_cast<char>(0xfe);
  put(bundle, "huge-entry-size", size);
  put(bundle, "bad-magic", "KJITBNDX" + two.substr(8));
  put(bundle, "not-a-bundle", good);
  // Memo records: a toolkit record and a key record (with the id memo_fuzz.cc decodes with),
  // each whole and with the near misses its decoder must refuse.
  const fs::path memo = root / "memo";
  kjit::detail::FileStamp file;
  file.regular = true;
  file.size = 2193;
  file.mtime_ns = 1'700'000'000'000'000'000;
  file.ctime_ns = 1'700'000'000'123'456'789;
  file.inode = 4242;
  file.device = 66;
  kjit::detail::MemoRecord record;
  record.toolkit_dirs = {"/usr/local/cuda/include", "/usr/local/cuda/include/cccl"};
  kjit::detail::MemoClosure closure;
  closure.root = "/usr/local/cuda/include/cuda_bf16.h";
  closure.files = {{"<cuda>/cuda_bf16.h", std::string(32, 'a')}, {"<cuda>/cuda_fp16.h", std::string(32, 'b')}};
  closure.names = {"cuda_fp16.h", "nv/target"};
  closure.checks = {{"/usr/local/cuda/include/cuda_bf16.h", file}, {"/usr/local/cuda/include/nv/target", {}}};
  record.closures = {closure};
  const std::string toolkit = kjit::detail::encode_memo(record);
  put(memo, "toolkit-record", toolkit);
  put(memo, "toolkit-truncated", toolkit.substr(0, toolkit.size() - 5));
  kjit::detail::KeyChecks checks;
  checks.add("/usr/local/cuda/include/cuda_bf16.h", file);
  checks.add("/usr/local/cuda/include/cuda/std/cstdint", {});
  const kjit::cache::Key id{0x0123456789abcdefull, 0xfedcba9876543210ull};
  const std::string key = kjit::detail::encode_key_memo(id, KeyBuilder().add("seed", int64_t{9}).finish(), checks);
  put(memo, "key-record", key);
  put(memo, "key-record-other-id", kjit::detail::encode_key_memo(Key{1, 2}, Key{3, 4}, checks));
  put(memo, "key-truncated", key.substr(0, key.size() - 9));
  std::string flipped_key = key;
  flipped_key[flipped_key.size() - 1] ^= 0x01;  // the checksum no longer matches
  put(memo, "key-flipped-tail", flipped_key);
  put(memo, "empty", "");

  const fs::path tune = root / "tune_table";
  TuneTable table;
  table.fingerprint_id = "0123456789ab";
  table.fingerprint_text = "name=NVIDIA H200;cc=9.0;sms=132";
  table.fingerprint_fields["name"] = "NVIDIA H200";
  TuneEntry e;
  e.op = "decode";
  e.bucket = {128, 4, 8, 4096};
  e.shape = "batch=1 kv_len=4096";
  e.winner.family = "attention.decode";
  e.winner.point = "head_dim=128 rows=8";
  e.winner.knobs["splits"] = 16;
  e.winner.us = 16.1;
  e.default_choice = e.winner;
  e.default_choice.knobs["splits"] = 8;
  e.has_runner_up = true;
  e.runner_up = e.default_choice;
  table.entries.push_back(e);
  const std::string good_table = encode_table(table);
  put(tune, "valid", good_table);
  put(tune, "empty-entries", encode_table(TuneTable{}));
  put(tune, "truncated", good_table.substr(0, good_table.size() / 2));
  put(tune, "deep", std::string(300, '[') + std::string(300, ']'));
  put(tune, "wrong-types", R"({"format": "kjit-tuning", "version": 1, "fingerprint": {"id": 3}, "entries": {}})");
  put(tune, "other-version", R"({"format": "kjit-tuning", "version": 2})");
  put(bundle, "with-tuning-table", encode_bundle({good}, {good_table}));

  const fs::path manifest = root / "manifest";
  ManifestEntry point;
  point.family = "attention.decode";
  point.params = {{"head_dim", "128"}, {"rows", "8"}};
  point.target = "sm_90a";
  ManifestEntry user;
  user.user = true;
  user.family = "myapp.gemm";
  user.template_args = "tile=128";
  user.source_name = "gemm.cu";
  user.target = "compute_120";
  user.key = "0123456789abcdef0123456789abcdef";
  const std::string line = format_manifest_line(point);
  put(manifest, "valid", line + format_manifest_line(user));
  put(manifest, "empty", "");
  put(manifest, "blank-lines", "\n \t\n" + line + "\r\n\n");
  put(manifest, "torn-last-line", line + line.substr(0, line.size() / 2));
  put(manifest, "not-json", "not json\n{\"family\":\n");
  put(manifest, "wrong-types",
      R"({"family":3,"params":[],"target":null})" "\n" R"({"user":"yes","family":"x","target":"sm_90a"})" "\n"
      R"({"family":"x","params":{"a":1},"target":"sm_90a"})" "\n");
  put(manifest, "user-bad-key", R"({"user":true,"family":"x","target":"sm_90a","key":"ABC"})" "\n");
  put(manifest, "deep", std::string(300, '[') + std::string(300, ']') + "\n");
  put(manifest, "bad-utf8", "{\"family\":\"\xff\xfe\",\"params\":{},\"target\":\"sm_90a\"}\n");
  std::printf("seeds written to %s\n", root.c_str());
  return 0;
}
