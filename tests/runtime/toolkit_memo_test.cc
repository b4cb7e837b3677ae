// The toolkit memo (runtime/toolkit_memo.hpp) and the key memo (runtime/key_memo.hpp): a new
// process takes the toolkit's include closure, or a program's whole key, from a record validated
// by stat calls, reads nothing when nothing changed, and recomputes on any change it can see or
// any record it cannot trust. Also the first-key cost with and without them, printed (not
// asserted).
#include <kjit/families.hpp>
#include <kjit/runtime.hpp>

#include "runtime/kernel_sources.hpp"
#include "runtime/key_memo.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/toolkit_memo.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using kjit::detail::toolkit_memo_counters;

namespace {

fs::path temp_dir(const char* tag) {
  std::string pattern = (fs::temp_directory_path() / (std::string("kjit-") + tag + "-XXXXXX")).string();
  const char* made = mkdtemp(pattern.data());
  if (!made) throw std::runtime_error("mkdtemp failed");
  return made;
}

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const kjit::Target kSm90a = kjit::Target::parse("sm_90a");

// A user kernel that reaches the toolkit through cuda_bf16.h.
kjit::ProgramSpec bf16_spec() {
  kjit::ProgramSpec s;
  s.family = "demo.memo";
  s.source_name = "memo.cu";
  s.source_text = "#include <cuda_bf16.h>\n__global__ void k(int* p) { *p = KJIT_FAKE_CONST; }\n";
  s.name_expressions = {"k"};
  return s;
}

class ToolkitMemoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir("memo");
    cuda_ = dir_ / "cuda";
    inc_ = cuda_ / "include";
    // A small toolkit shaped like the real one: quoted includes beside the includer, an angle
    // include found only under cccl/, an #include_next and a __has_include of a missing file.
    const std::string version = kjit::detail::nvrtc_version();  // "13.0": no mismatch warning
    const int major = std::stoi(version), minor = std::stoi(version.substr(version.find('.') + 1));
    write_file(inc_ / "cuda.h", "#pragma once\n#define CUDA_VERSION " + std::to_string(major * 1000 + minor * 10) + "\n");
    write_file(inc_ / "cuda_bf16.h",
               "#pragma once\n#include \"cuda_fp16.h\"\n#include <cuda/std/cstdint>\n"
               "#if __has_include(<cuda_missing.h>)\n#include <cuda_missing.h>\n#endif\n");
    write_file(inc_ / "cuda_fp16.h", "#pragma once\n#define KJIT_FAKE_CONST 1\n");
    write_file(inc_ / "cccl" / "cuda" / "std" / "cstdint", "#pragma once\n#include_next <cuda/std/cstdint>\n");
    old_min_age_ = kjit::detail::set_toolkit_memo_min_age_ns(0);  // files written just now
    kjit::detail::reset_toolkit_memo();
  }
  void TearDown() override {
    kjit::detail::set_toolkit_memo_min_age_ns(old_min_age_);
    kjit::detail::reset_toolkit_memo();
    fs::remove_all(dir_);
  }

  kjit::RuntimeConfig config() const {
    kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
    c.cache_dir = (dir_ / "cache").string();
    c.kernel_dir.clear();
    c.cuda_home = cuda_.string();
    return c;
  }

  // The key a new process would compute: a fresh Runtime and a fresh in-process memo. Unless a
  // test keeps them, the key records go first, so the toolkit memo is what answers.
  std::string key_in_new_process(const kjit::ProgramSpec& spec = bf16_spec()) {
    if (!keep_key_records_) fs::remove_all(dir_ / "cache" / "v1" / "keys");
    kjit::detail::reset_toolkit_memo();
    kjit::Runtime rt(config());
    return rt.key(spec, kSm90a);
  }

  std::vector<fs::path> key_records() const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(dir_ / "cache" / "v1" / "keys", ec)) {
      if (e.path().extension() == ".memo") out.push_back(e.path());
    }
    return out;
  }

  // Edits the toolkit every way a stamp can see; each edit must give a new key, and the record
  // rewritten after it must serve the next process without reading any toolkit file.
  void expect_every_edit_changes_the_key() {
    // Each edit comes more than one timestamp tick after the last record: the memo's minimum
    // age is 0 here, so an edit within the tick of a recorded stamp could keep that stamp (the
    // 2 s default prevents this outside tests).
    auto past_one_tick = [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
    std::string key = key_in_new_process();
    past_one_tick();
    auto expect_new_key = [&](const char* what) {
      const std::string edited = key_in_new_process();
      EXPECT_NE(edited, key) << what;
      EXPECT_GT(toolkit_memo_counters().files_read, 0u) << what;
      key = edited;
      EXPECT_EQ(key_in_new_process(), key) << what;
      EXPECT_EQ(toolkit_memo_counters().files_read, 0u) << what;
      past_one_tick();
    };

    write_file(inc_ / "cuda_fp16.h", "#pragma once\n#define KJIT_FAKE_CONST 22\n");
    expect_new_key("size changed");

    // Same size, new bytes, another mtime (in the past: a future one is never recorded).
    write_file(inc_ / "cuda_fp16.h", "#pragma once\n#define KJIT_FAKE_CONST 33\n");
    fs::last_write_time(inc_ / "cuda_fp16.h", fs::last_write_time(inc_ / "cuda_fp16.h") - std::chrono::hours(1));
    expect_new_key("mtime changed");

    // Same size, old mtime put back: ctime, which nobody can set, still moves.
    const auto mtime = fs::last_write_time(inc_ / "cuda_fp16.h");
    write_file(inc_ / "cuda_fp16.h", "#pragma once\n#define KJIT_FAKE_CONST 44\n");
    fs::last_write_time(inc_ / "cuda_fp16.h", mtime);
    expect_new_key("mtime restored");

    // Replaced by another file (another inode), as a package manager does.
    write_file(inc_ / "cuda_fp16.h.new", "#pragma once\n#define KJIT_FAKE_CONST 55\n");
    fs::rename(inc_ / "cuda_fp16.h.new", inc_ / "cuda_fp16.h");
    expect_new_key("file replaced");

    // A file that appears where the search found nothing before shadows the one it found.
    write_file(inc_ / "cuda" / "std" / "cstdint", "#pragma once\n");
    expect_new_key("a new file shadows cccl/cuda/std/cstdint");
    write_file(inc_ / "cuda_missing.h", "#pragma once\n");
    expect_new_key("a __has_include target appears");
  }

  std::vector<fs::path> records() const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_ / "cache" / "v1" / "toolkit", ec)) {
      if (e.path().extension() == ".memo") out.push_back(e.path());
    }
    return out;
  }

  fs::path dir_, cuda_, inc_;
  int64_t old_min_age_ = 0;
  bool keep_key_records_ = false;
};

}  // namespace

TEST_F(ToolkitMemoTest, ASecondProcessReadsNoToolkitFileWhenNothingChanged) {
  const std::string first = key_in_new_process();
  EXPECT_EQ(toolkit_memo_counters().files_read, 3u) << "cuda_bf16.h, cuda_fp16.h, cccl/cuda/std/cstdint";
  EXPECT_EQ(toolkit_memo_counters().records_written, 1u);
  ASSERT_EQ(records().size(), 1u);

  EXPECT_EQ(key_in_new_process(), first);
  const auto c = toolkit_memo_counters();
  EXPECT_EQ(c.files_read, 0u) << "every toolkit file vouched for by its stamp";
  EXPECT_EQ(c.records_loaded, 1u);
  EXPECT_EQ(c.closures_from_records, 1u);
  EXPECT_EQ(c.records_written, 0u) << "nothing new to record";

  // The record is only a shortcut: without a disk cache the same key comes from reading.
  kjit::detail::reset_toolkit_memo();
  kjit::RuntimeConfig memory_only = config();
  memory_only.disk_cache = false;
  EXPECT_EQ(kjit::Runtime(memory_only).key(bf16_spec(), kSm90a), first);
  EXPECT_EQ(toolkit_memo_counters().files_read, 3u);
}

TEST_F(ToolkitMemoTest, AnEditedToolkitHeaderChangesTheKey) { expect_every_edit_changes_the_key(); }

TEST_F(ToolkitMemoTest, ACorruptOrForeignRecordIsRecomputed) {
  const std::string key = key_in_new_process();
  ASSERT_EQ(records().size(), 1u);
  const fs::path record = records()[0];
  const std::string good = read_bytes(record);

  auto expect_recomputed = [&](const std::string& bytes, const char* what) {
    write_file(record, bytes);
    EXPECT_EQ(key_in_new_process(), key) << what;
    const auto c = toolkit_memo_counters();
    EXPECT_EQ(c.records_loaded, 0u) << what;
    EXPECT_EQ(c.files_read, 3u) << what;
    EXPECT_EQ(c.records_written, 1u) << what;
    EXPECT_TRUE(kjit::detail::decode_memo(read_bytes(record))) << what << ": rewritten whole";
  };
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;
  expect_recomputed(flipped, "a flipped bit");
  expect_recomputed(good.substr(0, good.size() - 7), "truncated");
  expect_recomputed("", "empty");
  expect_recomputed("not a record at all", "garbage");

  // A valid record of other include directories, at this record's path.
  auto foreign = kjit::detail::decode_memo(good);
  ASSERT_TRUE(foreign);
  foreign->toolkit_dirs = {"/elsewhere/include"};
  expect_recomputed(kjit::detail::encode_memo(*foreign), "foreign");

  // A folder where the record belongs: no error, the key is still right (nothing is written).
  fs::remove(record);
  fs::create_directories(record);
  EXPECT_EQ(key_in_new_process(), key);
  EXPECT_EQ(toolkit_memo_counters().records_written, 0u);
}

TEST_F(ToolkitMemoTest, AStampThatCanStillChangeUnnoticedIsNotRecorded) {
  // Files changed within the last two seconds may change again within the same timestamp tick.
  kjit::detail::set_toolkit_memo_min_age_ns(2'000'000'000);
  const std::string key = key_in_new_process();
  EXPECT_EQ(toolkit_memo_counters().records_written, 0u);
  EXPECT_TRUE(records().empty());
  EXPECT_EQ(key_in_new_process(), key);
  EXPECT_EQ(toolkit_memo_counters().files_read, 3u);
}

TEST_F(ToolkitMemoTest, AReadOnlyCacheReadsRecordsButWritesNone) {
  const std::string key = key_in_new_process();
  ASSERT_EQ(records().size(), 1u);
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only folders";
  const fs::path v1 = dir_ / "cache" / "v1";
  fs::permissions(v1, fs::perms::owner_write, fs::perm_options::remove);
  fs::permissions(v1 / "toolkit", fs::perms::owner_write, fs::perm_options::remove);
  EXPECT_EQ(key_in_new_process(), key);
  EXPECT_EQ(toolkit_memo_counters().files_read, 0u);
  write_file(inc_ / "cuda_fp16.h", "#pragma once\n#define KJIT_FAKE_CONST 2\n");
  EXPECT_NE(key_in_new_process(), key);
  EXPECT_EQ(toolkit_memo_counters().records_written, 0u);
  fs::permissions(v1 / "toolkit", fs::perms::owner_write, fs::perm_options::add);
  fs::permissions(v1, fs::perms::owner_write, fs::perm_options::add);
}

TEST_F(ToolkitMemoTest, ASecondProcessTakesTheWholeKeyFromItsRecord) {
  keep_key_records_ = true;
  const std::string first = key_in_new_process();
  ASSERT_EQ(key_records().size(), 1u);
  EXPECT_EQ(key_in_new_process(), first);
  const auto c = toolkit_memo_counters();
  EXPECT_EQ(c.files_read, 0u);
  EXPECT_EQ(c.records_loaded, 0u) << "no walk: the toolkit record is not opened";

  // Another target, option or name expression is another record; the record is only a shortcut.
  kjit::ProgramSpec other = bf16_spec();
  other.options = {"-DKJIT_OTHER=1"};
  EXPECT_NE(key_in_new_process(other), first);
  EXPECT_EQ(key_records().size(), 2u);
  kjit::detail::reset_toolkit_memo();
  kjit::RuntimeConfig memory_only = config();
  memory_only.disk_cache = false;
  EXPECT_EQ(kjit::Runtime(memory_only).key(bf16_spec(), kSm90a), first);
}

TEST_F(ToolkitMemoTest, AnEditedToolkitHeaderChangesTheKeyDespiteKeyRecords) {
  keep_key_records_ = true;
  expect_every_edit_changes_the_key();
}

TEST_F(ToolkitMemoTest, ACorruptOrForeignKeyRecordIsRecomputed) {
  keep_key_records_ = true;
  const std::string key = key_in_new_process();
  ASSERT_EQ(key_records().size(), 1u);
  const fs::path record = key_records()[0];
  const std::string good = read_bytes(record);
  auto expect_recomputed = [&](const std::string& bytes, const char* what) {
    write_file(record, bytes);
    EXPECT_EQ(key_in_new_process(), key) << what;
    EXPECT_EQ(toolkit_memo_counters().records_loaded, 1u) << what << ": walked (from the toolkit record)";
    EXPECT_EQ(read_bytes(record), good) << what << ": rewritten whole";
  };
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;
  expect_recomputed(flipped, "a flipped bit");
  expect_recomputed(good.substr(0, good.size() - 7), "truncated");
  expect_recomputed("", "empty");
  expect_recomputed("not a record at all", "garbage");
  // A valid record of another program, copied to this one's path.
  kjit::detail::KeyChecks none;
  const kjit::cache::Key other_id{1, 2};
  expect_recomputed(kjit::detail::encode_key_memo(other_id, other_id, none), "another id");

  // A folder where the record belongs: no error, the key is still right.
  fs::remove(record);
  fs::create_directories(record);
  EXPECT_EQ(key_in_new_process(), key);
}

TEST_F(ToolkitMemoTest, ProgramsThatReadUserFilesWriteNoKeyRecord) {
  keep_key_records_ = true;
  // An -I directory: its files are read and digested on every call.
  write_file(dir_ / "user" / "myconst.h", "#define MYCONST 1\n");
  kjit::ProgramSpec with_dir = bf16_spec();
  with_dir.source_text = "#include \"myconst.h\"\n" + with_dir.source_text;
  with_dir.options = {"-I" + (dir_ / "user").string()};
  const std::string key = key_in_new_process(with_dir);
  EXPECT_TRUE(key_records().empty());
  write_file(dir_ / "user" / "myconst.h", "#define MYCONST 2\n");
  EXPECT_NE(key_in_new_process(with_dir), key);

  // A kernel folder given by KJIT_KERNEL_DIR can change under a running process.
  kjit::RuntimeConfig live = config();
  live.kernel_dir = (dir_ / "user").string();
  kjit::detail::reset_toolkit_memo();
  (void)kjit::Runtime(live).key(bf16_spec(), kSm90a);
  EXPECT_TRUE(key_records().empty());
}

TEST(KeyMemoRecordTest, RoundTripsAndRejectsEveryTruncationAndFlip) {
  kjit::detail::KeyChecks checks;
  kjit::detail::FileStamp s;
  s.regular = true;
  s.size = 12345;
  s.mtime_ns = -1;
  s.ctime_ns = 1'700'000'000'123'456'789;
  s.inode = ~uint64_t{0};
  s.device = 66;
  checks.add("/usr/local/cuda/include/cuda_bf16.h", s);
  // An empty path is kept as it is only when no directory above it exists (else the record
  // keeps that directory's stamp instead).
  checks.add("/kjit-no-such-root/include/nv/target", {});
  const kjit::cache::Key id{0x0123456789abcdefull, 42}, key{7, ~uint64_t{0}};
  const std::string bytes = kjit::detail::encode_key_memo(id, key, checks);
  auto back = kjit::detail::decode_key_memo(bytes, id);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->key, key);
  const std::vector<std::pair<std::string, kjit::detail::FileStamp>> want(checks.stamps.begin(), checks.stamps.end());
  EXPECT_EQ(back->checks, want);
  EXPECT_FALSE(kjit::detail::decode_key_memo(bytes, kjit::cache::Key{1, 1})) << "another id";
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(kjit::detail::decode_key_memo(bytes.substr(0, n), id)) << "truncated to " << n;
  }
  EXPECT_FALSE(kjit::detail::decode_key_memo(bytes + "x", id)) << "trailing bytes";
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string b = bytes;
    b[i] ^= 0x01;
    EXPECT_FALSE(kjit::detail::decode_key_memo(b, id)) << "bit flipped at " << i;
  }
}

TEST(ToolkitMemoRecordTest, RoundTripsAndRejectsEveryTruncationAndFlip) {
  kjit::detail::MemoRecord r;
  r.toolkit_dirs = {"/usr/local/cuda/include", "/usr/local/cuda/include/cccl"};
  kjit::detail::MemoClosure c;
  c.root = "/usr/local/cuda/include/cuda_bf16.h";
  c.files = {{"<cuda>/cuda_bf16.h", std::string(32, 'a')}, {"<cuda>/cuda_fp16.h", std::string(32, 'b')}};
  c.names = {"cuda_fp16.h", "nv/target"};
  kjit::detail::FileStamp s;
  s.regular = true;
  s.size = 12345;
  s.mtime_ns = -1;  // before 1970: negative times survive the u64 field
  s.ctime_ns = 1'700'000'000'123'456'789;
  s.inode = ~uint64_t{0};
  s.device = 66;
  c.checks = {{"/usr/local/cuda/include/cuda_bf16.h", s}, {"/usr/local/cuda/include/nv/target", {}}};
  r.closures = {c, c};
  r.closures[1].root = "/usr/local/cuda/include/cuda_fp8.h";
  const std::string bytes = kjit::detail::encode_memo(r);
  auto back = kjit::detail::decode_memo(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->toolkit_dirs, r.toolkit_dirs);
  ASSERT_EQ(back->closures.size(), 2u);
  EXPECT_EQ(back->closures[1].root, r.closures[1].root);
  EXPECT_EQ(back->closures[0].files, c.files);
  EXPECT_EQ(back->closures[0].names, c.names);
  EXPECT_EQ(back->closures[0].checks, c.checks);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(kjit::detail::decode_memo(bytes.substr(0, n))) << "truncated to " << n;
  }
  EXPECT_FALSE(kjit::detail::decode_memo(bytes + "x")) << "trailing bytes";
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string b = bytes;
    b[i] ^= 0x01;
    EXPECT_FALSE(kjit::detail::decode_memo(b)) << "bit flipped at " << i;
  }
}

// Not an assertion: what the first key of a process costs reading the toolkit, from the toolkit
// record and from the key records, over the real toolkit and the shipped kernels. ctest -V shows
// the figures.
TEST(ToolkitMemoCost, FirstKeyWithAndWithoutTheRecords) {
  const fs::path dir = temp_dir("memo-cost");
  kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
  c.cache_dir = dir.string();
  c.kernel_dir.clear();
  std::vector<kjit::ProgramSpec> specs;
  for (const kjit::Family& f : kjit::families()) specs.push_back(f.spec(f.default_points().front()));
  kjit::ProgramSpec rotary = kjit::family("rotary").spec(kjit::family("rotary").default_points().front());

  enum class Mode { kRead, kToolkitRecord, kKeyRecords };
  auto median_ms = [&](Mode mode, const std::vector<kjit::ProgramSpec>& keys) {
    kjit::RuntimeConfig cc = c;
    cc.disk_cache = mode != Mode::kRead;
    std::vector<double> ms;
    for (int i = 0; i < 31; ++i) {
      if (mode == Mode::kToolkitRecord) fs::remove_all(dir / "v1" / "keys");
      kjit::detail::reset_toolkit_memo();
      kjit::Runtime rt(cc);
      (void)rt.cuda_headers_version();  // finding the headers is not the key's cost
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& s : keys) (void)rt.key(s, kSm90a);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  const double rotary_read = median_ms(Mode::kRead, {rotary});
  const double rotary_toolkit = median_ms(Mode::kToolkitRecord, {rotary});
  const double all_read = median_ms(Mode::kRead, specs);
  const double all_toolkit = median_ms(Mode::kToolkitRecord, specs);
  (void)median_ms(Mode::kKeyRecords, specs);  // writes the key records
  const double rotary_keys = median_ms(Mode::kKeyRecords, {rotary});
  const double all_keys = median_ms(Mode::kKeyRecords, specs);
  kjit::detail::reset_toolkit_memo();
  {
    kjit::Runtime rt(c);
    for (const auto& s : specs) (void)rt.key(s, kSm90a);
  }
  const auto counters = toolkit_memo_counters();
  std::printf("first key in a process, median of 31 (ms): rotary %.3f reading the toolkit, %.3f from the toolkit "
              "record, %.3f from its key record; first key of each of the %zu families %.3f / %.3f / %.3f "
              "(files read with key records: %llu, toolkit records loaded: %llu)\n",
              rotary_read, rotary_toolkit, rotary_keys, specs.size(), all_read, all_toolkit, all_keys,
              static_cast<unsigned long long>(counters.files_read),
              static_cast<unsigned long long>(counters.records_loaded));
  EXPECT_EQ(counters.files_read, 0u) << "the shipped kernels' keys come from their records";
  EXPECT_EQ(counters.records_loaded, 0u) << "no walk: the toolkit record is not even opened";
  kjit::detail::reset_toolkit_memo();
  fs::remove_all(dir);
}
