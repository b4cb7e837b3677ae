// The warm-up manifest line format (cache/manifest.hpp): round trips, every malformed line
// reported with its number while the rest still parse, and many processes appending to one
// file at once without a torn or lost line.
#include "cache/manifest.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace fs = std::filesystem;
using kjit::cache::ManifestEntry;

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
