// The warm-up manifest line format (cache/manifest.hpp): round trips, every malformed line
// reported with its number while the rest still parse, many processes appending to one file at
// once without a torn or lost line, and lines whole or not at all when a write is cut short.
#include "cache/manifest.hpp"

#include "cache_test_util.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace fs = std::filesystem;
using kjit::cache::ManifestEntry;
using namespace kjit::cache::testing;

namespace {

ManifestEntry family_entry(const std::string& head_dim) {
  ManifestEntry e;
  e.family = "attention.decode";
  e.params = {{"head_dim", head_dim}, {"rows", "8"}};
  e.target = "sm_90a";
  return e;
}

ManifestEntry user_entry() {
  ManifestEntry e;
  e.user = true;
  e.family = "myapp.gemm";
  e.template_args = "tile=128 \"quoted\"";
  e.source_name = "gemm.cu";
  e.target = "compute_120";
  e.key = "0123456789abcdef0123456789abcdef";
  return e;
}

TEST(Manifest, LinesRoundTrip) {
  for (const ManifestEntry& e : {family_entry("128"), user_entry()}) {
    const std::string line = kjit::cache::format_manifest_line(e);
    ASSERT_EQ(line.back(), '\n');
    EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line: " << line;
    const auto parsed = kjit::cache::parse_manifest(line);
    ASSERT_EQ(parsed.size(), 1u);
    ASSERT_TRUE(parsed[0].entry) << parsed[0].error;
    EXPECT_EQ(*parsed[0].entry, e);
    EXPECT_EQ(parsed[0].line, 1u);
  }
  // Equal entries, equal lines (what deduplication compares); params in name order.
  EXPECT_EQ(kjit::cache::format_manifest_line(family_entry("64")),
            R"({"family":"attention.decode","params":{"head_dim":"64","rows":"8"},"target":"sm_90a"})" "\n");
}

TEST(Manifest, BadLinesAreReportedByNumberAndTheRestParse) {
  const std::string text =
      kjit::cache::format_manifest_line(family_entry("128")) +  // 1
      "\n"                                                       // 2: blank, skipped
      "not json\n"                                               // 3
      "[1, 2]\n"                                                 // 4
      R"({"family":"rotary","target":"sm_90a"})" "\n"            // 5: no params
      R"({"family":"rotary","params":{"head_dim":128},"target":"sm_90a"})" "\n"  // 6: number
      R"({"family":"rotary","params":{}})" "\n"                  // 7: no target
      R"({"user":true,"family":"x","target":"sm_90a","key":"XYZ"})" "\n"  // 8: bad key
      R"({"user":"yes","family":"x","target":"sm_90a"})" "\n"   // 9
      R"({"family":"","params":{},"target":"sm_90a"})" "\n"     // 10
      R"({"family":"rotary","params":{"a":"1"},"target":"sm_89","extra":[1]})" "\r\n"  // 11: ok
      + kjit::cache::format_manifest_line(user_entry())         // 12
      + R"({"family":"torn","par)";                              // 13: no newline, torn
  const auto lines = kjit::cache::parse_manifest(text);
  std::set<size_t> good, bad;
  for (const auto& l : lines) {
    (l.entry ? good : bad).insert(l.line);
    if (!l.entry) EXPECT_FALSE(l.error.empty()) << "line " << l.line;
  }
  EXPECT_EQ(good, (std::set<size_t>{1, 11, 12}));
  EXPECT_EQ(bad, (std::set<size_t>{3, 4, 5, 6, 7, 8, 9, 10, 13}));
  for (const auto& l : lines) EXPECT_EQ(l.torn, l.line == 13) << "line " << l.line << ": " << l.error;
}

/// The manifest file at `path`, read whole.
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Manifest, TornLinesAreMarkedSoReadersSkipThem) {
  const std::string a = kjit::cache::format_manifest_line(family_entry("64"));
  const std::string b = kjit::cache::format_manifest_line(family_entry("128"));
  // 2: a prefix cut short, then the newline a later writer put before its own line; 4: a line
  // cut just before its closing brace; 6: the file ends mid-line. 5 is a fragment that swallowed
  // a good line (no writer makes one now): not a prefix of anything, so invalid rather than torn.
  const std::string text = a + a.substr(0, 20) + "\n" + b + b.substr(0, b.size() - 2) + "\n" + a.substr(0, 20) + b +
                           a.substr(0, 7);
  const auto lines = kjit::cache::parse_manifest(text);
  ASSERT_EQ(lines.size(), 6u);
  for (size_t i : {0, 2}) EXPECT_TRUE(lines[i].entry && !lines[i].torn) << i;
  for (size_t i : {1, 3, 5}) {
    EXPECT_TRUE(!lines[i].entry && lines[i].torn && lines[i].error.find("torn") != std::string::npos) << i;
  }
  EXPECT_TRUE(!lines[4].entry && !lines[4].torn) << lines[4].error;
}

TEST(Manifest, AnAppendAfterAFragmentStartsOnALineOfItsOwn) {
  TempDir dir;
  const std::string path = dir.path() + "/m.jsonl";
  const std::string a = kjit::cache::format_manifest_line(family_entry("64"));
  const std::string b = kjit::cache::format_manifest_line(family_entry("128"));
  write_all(path, a + a.substr(0, 25));  // a crash mid-write left a fragment
  ASSERT_EQ(kjit::cache::append_manifest_line(path, b), 0);
  EXPECT_EQ(slurp(path), a + a.substr(0, 25) + "\n" + b);
  const auto lines = kjit::cache::parse_manifest(slurp(path));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(lines[1].torn);
  ASSERT_TRUE(lines[2].entry) << lines[2].error;  // the fragment did not swallow it
  EXPECT_EQ(*lines[2].entry, family_entry("128"));
}

TEST(Manifest, AWriteCutShortIsTakenBackSoTheFileStaysWhole) {
  // A nearly full filesystem, made without privileges: a file size limit, past which write()
  // is short and then fails with EFBIG (SIGXFSZ ignored), in a child that keeps the limit.
  TempDir dir;
  const std::string path = dir.path() + "/m.jsonl";
  const std::string a = kjit::cache::format_manifest_line(family_entry("64"));
  ManifestEntry big = family_entry("128");
  big.params["padding"] = std::string(4000, 'x');
  write_all(path, a);
  const int rc = in_child(10, dir.path() + "/stderr", [&] {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{a.size() + 100, a.size() + 100};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 3;
    const int err = kjit::cache::append_manifest_line(path, kjit::cache::format_manifest_line(big));
    if (err != EFBIG) return 1;
    // A line that fits still goes in whole after the failed one.
    return kjit::cache::append_manifest_line(path, a) == 0 ? 0 : 2;
  });
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(slurp(path), a + a) << "a fragment of the refused line was left";
}

TEST(Manifest, ManyProcessesAppendWholeLines) {
  const fs::path dir = fs::temp_directory_path() / ("kjit-manifest-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "m.jsonl").string();
  constexpr int kProcesses = 8, kLines = 200;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int failures = 0;
      for (int i = 0; i < kLines; ++i) {
        ManifestEntry e = family_entry(std::to_string(p * 1000 + i));
        // Long lines too: whole even past PIPE_BUF, through the lock.
        if (i % 50 == 0) e.params["padding"] = std::string(6000, 'x');
        failures += kjit::cache::append_manifest_line(path, kjit::cache::format_manifest_line(e)) != 0;
      }
      std::_Exit(failures == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  const auto lines = kjit::cache::parse_manifest(s.str());
  std::set<std::string> seen;
  for (const auto& l : lines) {
    ASSERT_TRUE(l.entry) << "line " << l.line << " torn: " << l.error;
    seen.insert(l.entry->params.at("head_dim"));
  }
  EXPECT_EQ(lines.size(), size_t{kProcesses * kLines});
  EXPECT_EQ(seen.size(), size_t{kProcesses * kLines});
  fs::remove_all(dir);
}

TEST(Manifest, AppendToAnUnwritablePathIsAnErrno) {
  EXPECT_NE(kjit::cache::append_manifest_line("/nonexistent-dir/m.jsonl", "{}\n"), 0);
}

}  // namespace
