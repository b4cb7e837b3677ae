// The toolkit memo (runtime/toolkit_memo.hpp): a new process takes the toolkit's include closure
// from a record validated by stat calls, reads nothing when nothing changed, and recomputes on
// any change it can see or any record it cannot trust. Also the first-key cost with and without
// it, printed (not asserted).
#include <kjit/families.hpp>
#include <kjit/runtime.hpp>

#include "runtime/kernel_sources.hpp"
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

  // The key a new process would compute: a fresh Runtime and a fresh in-process memo.
  std::string key_in_new_process(const kjit::ProgramSpec& spec = bf16_spec()) {
    kjit::detail::reset_toolkit_memo();
    kjit::Runtime rt(config());
    return rt.key(spec, kSm90a);
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

TEST_F(ToolkitMemoTest, AnEditedToolkitHeaderChangesTheKey) {
  std::string key = key_in_new_process();
  auto expect_new_key = [&](const char* what) {
    const std::string edited = key_in_new_process();
    EXPECT_NE(edited, key) << what;
    EXPECT_GT(toolkit_memo_counters().files_read, 0u) << what;
    key = edited;
    // The rewritten record serves the next process without reads again.
    EXPECT_EQ(key_in_new_process(), key) << what;
    EXPECT_EQ(toolkit_memo_counters().files_read, 0u) << what;
  };

  write_file(inc_ / "cuda_fp16.h", "#pragma once\n#define KJIT_FAKE_CONST 22\n");
  expect_new_key("size changed");

  // Same size, new bytes, another mtime (in the past: a future one is never recorded).
  write_file(inc_ / "cuda_fp16.h", "#pragma once\n#define KJIT_FAKE_CONST 33\n");
  fs::last_write_time(inc_ / "cuda_fp16.h", fs::last_write_time(inc_ / "cuda_fp16.h") - std::chrono::hours(1));
  expect_new_key("mtime changed");

  // Same size, old mtime put back: ctime, which nobody can set, still moves.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past one timestamp tick
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

// Not an assertion: what the first key of a process costs with and without the record, over the
// real toolkit and the shipped kernels. ctest -V shows the figures.
TEST(ToolkitMemoCost, FirstKeyWithAndWithoutTheRecord) {
  const fs::path dir = temp_dir("memo-cost");
  kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
  c.cache_dir = dir.string();
  c.kernel_dir.clear();
  std::vector<kjit::ProgramSpec> specs;
  for (const kjit::Family& f : kjit::families()) specs.push_back(f.spec(f.default_points().front()));
  kjit::ProgramSpec rotary = kjit::family("rotary").spec(kjit::family("rotary").default_points().front());

  auto median_ms = [&](bool disk, const std::vector<kjit::ProgramSpec>& keys) {
    kjit::RuntimeConfig cc = c;
    cc.disk_cache = disk;
    std::vector<double> ms;
    for (int i = 0; i < 31; ++i) {
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
  const double rotary_read = median_ms(false, {rotary});
  (void)median_ms(true, specs);  // writes the record
  const double rotary_memo = median_ms(true, {rotary});
  const double all_read = median_ms(false, specs);
  const double all_memo = median_ms(true, specs);
  kjit::detail::reset_toolkit_memo();
  {
    kjit::Runtime rt(c);
    for (const auto& s : specs) (void)rt.key(s, kSm90a);
  }
  const auto counters = toolkit_memo_counters();
  std::printf("first key in a process, median of 31 (ms): rotary %.3f reading the toolkit, %.3f from the record; "
              "first key of each of the %zu families %.3f reading, %.3f from the record (files read: %llu)\n",
              rotary_read, rotary_memo, specs.size(), all_read, all_memo,
              static_cast<unsigned long long>(counters.files_read));
  EXPECT_EQ(counters.files_read, 0u) << "the shipped kernels' toolkit closure comes from the record";
  kjit::detail::reset_toolkit_memo();
  fs::remove_all(dir);
}
