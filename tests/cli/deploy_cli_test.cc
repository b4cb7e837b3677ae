// The deployment recipe through the `kjit` binary, as an operator runs it: several processes
// record into one manifest at once (KJIT_RECORD with `kjit compile` standing in for a service),
// a stale line is added, `kjit precompile --manifest` builds exactly the valid lines into an
// empty cache and exits 1 naming the stale line, `kjit cache export`/`import` ship it, then
// `kjit compile` under KJIT_JIT=off succeeds for what was recorded and fails (exit 1, the
// command to run) for what was not: the README's recipe, with `kjit compile` as the service;
// `kjit cache ls --json --sort` reports hits and the per-entry figures.
#include "tests/cli/process.hpp"

#include <kjit/device.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace kjit::test {
namespace {

using nlohmann::json;

fs::path kjit_binary() { return build_dir() / "tools" / "kjit"; }

const char* const kHeadDims[] = {"32", "64", "96", "128"};

std::vector<std::string> rotary_args(const std::string& head_dim) {
  return {"compile", "rotary", "style=neox", "head_dim=" + head_dim, "pos=i32", "--arch", "sm_90a"};
}

class DeployCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kjit_binary())) << "build the kjit_cli target";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    work_ = fresh_dir(std::string("DeployCli.") + info->name());
  }
  ProcessResult kjit(const std::vector<std::string>& args, const fs::path& cache,
                     std::map<std::string, std::string> env = {}) {
    env["KJIT_CACHE_DIR"] = cache.string();
    std::vector<std::string> argv = {kjit_binary().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, env, work_ / "io");
  }
  fs::path work_;
};

TEST_F(DeployCli, RecordReplayAndRunFailClosed) {
  const fs::path manifest = work_ / "manifest.jsonl";
  const fs::path dev_cache = work_ / "dev-cache", image_cache = work_ / "image-cache";
  // 1. Several processes at once record what they compile.
  std::string script;
  for (const char* hd : kHeadDims) {
    std::string cmd = "KJIT_CACHE_DIR=" + shell_quote(dev_cache.string()) + " KJIT_RECORD=" +
                      shell_quote(manifest.string()) + " " + shell_quote(kjit_binary().string());
    for (const std::string& a : rotary_args(hd)) cmd += " " + shell_quote(a);
    script += cmd + " >/dev/null & ";
  }
  // And one of them again: a line already in the file is not written twice.
  ProcessResult r = run_process({"/bin/sh", "-c", script + "wait"}, {}, work_ / "io");
  ASSERT_EQ(r.code, 0) << r.describe();
  r = kjit(rotary_args("64"), dev_cache, {{"KJIT_RECORD", manifest.string()}});
  ASSERT_EQ(r.code, 0) << r.describe();
  std::string text = read_file(manifest);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4) << text;  // one line per specialization
  // 2. A stale line: a value the family no longer declares.
  std::ofstream(manifest, std::ios::app)
      << R"({"family":"rotary","params":{"style":"neox","head_dim":"48","pos":"i32"},"target":"sm_90a"})" << "\n"
      << R"({"family":"removed.family","params":{},"target":"sm_90a"})" << "\n";

  // 3. Replay into an empty cache: exactly the four valid specializations; the stale lines are
  //    named by number and make the exit status 1.
  r = kjit({"precompile", "--manifest", manifest.string(), "--json"}, image_cache);
  EXPECT_EQ(r.code, 1) << r.describe();
  json j = json::parse(r.out);
  EXPECT_EQ(j["compiled"], 4);
  EXPECT_EQ(j["cached"], 0);
  EXPECT_EQ(j["failed"], 0);
  ASSERT_EQ(j["items"].size(), 4u);
  ASSERT_EQ(j["invalid"].size(), 2u) << j.dump(2);
  EXPECT_EQ(j["invalid"][0]["line"], 5);
  EXPECT_EQ(j["invalid"][1]["line"], 6);
  EXPECT_NE(r.err.find("manifest.jsonl:5:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("head_dim=48"), std::string::npos) << r.err;
  // Without the stale lines, a second replay finds everything cached and succeeds.
  {
    std::vector<std::string> keep;
    std::ifstream in(manifest);
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"48\"") == std::string::npos && line.find("removed.family") == std::string::npos) keep.push_back(line);
    }
    std::ofstream out(manifest, std::ios::trunc);
    for (const std::string& line : keep) out << line << "\n";
  }
  r = kjit({"precompile", "--manifest", manifest.string(), "--json"}, image_cache);
  ASSERT_EQ(r.code, 0) << r.describe();
  j = json::parse(r.out);
  EXPECT_EQ(j["compiled"], 0);
  EXPECT_EQ(j["cached"], 4);

  // 4. Ship it: export from the build cache, import into the production image's cache.
  const fs::path bundle = work_ / "kernels.kjb", prod_cache = work_ / "prod-cache";
  r = kjit({"cache", "export", bundle.string()}, image_cache);
  ASSERT_EQ(r.code, 0) << r.describe();
  r = kjit({"cache", "import", bundle.string(), "--json"}, prod_cache);
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(json::parse(r.out)["imported"], 4);

  // 5. Fail-closed: recorded specializations are served, anything else is refused.
  for (const char* hd : kHeadDims) {
    r = kjit(rotary_args(hd), prod_cache, {{"KJIT_JIT", "off"}});
    EXPECT_EQ(r.code, 0) << r.describe();
  }
  // The import's own checks are not uses: each entry was hit once, by its `compile` above.
  const json listing = json::parse(kjit({"cache", "ls", "--json"}, prod_cache).out);
  for (const json& e : listing["entries"]) {
    EXPECT_EQ(e["hits"], 1) << e.dump();
  }
  r = kjit(rotary_args("256"), prod_cache, {{"KJIT_JIT", "off"}});
  EXPECT_EQ(r.code, 1) << r.describe();
  EXPECT_EQ(r.err_lines().size(), 1u) << r.describe();
  EXPECT_NE(r.err.find("kjit compile rotary head_dim=256 pos=i32 style=neox --arch sm_90a"), std::string::npos)
      << r.err;
  r = kjit(rotary_args("256"), prod_cache, {{"KJIT_JIT", "sometimes"}});
  EXPECT_EQ(r.code, 2) << r.describe();
  EXPECT_NE(r.err.find("KJIT_JIT"), std::string::npos) << r.err;

  // 6. The index of the build cache: each of the four entries was read from disk once (by the
  //    second replay; the first compiled them, export reads without counting).
  r = kjit({"cache", "ls", "--json", "--sort", "hits"}, image_cache);
  ASSERT_EQ(r.code, 0) << r.describe();
  j = json::parse(r.out);
  ASSERT_EQ(j["entries"].size(), 4u);
  for (const json& e : j["entries"]) {
    EXPECT_EQ(e["family"], "rotary");
    EXPECT_EQ(e["target"], "sm_90a");
    EXPECT_EQ(e["hits"], 1) << e.dump();
    EXPECT_TRUE(e["params"].is_object());
    EXPECT_GT(e["registers"].get<int>(), 0);
    EXPECT_GE(e["spill_bytes"].get<int>(), 0);
    EXPECT_GE(e["static_smem"].get<int>(), 0);
    EXPECT_GT(e["compile_ms"].get<double>(), 0);
    EXPECT_GT(e["bytes"].get<uint64_t>(), 0u);
    EXPECT_GT(e["last_used_unix"].get<int64_t>(), 0);
  }
  // One more hit on head_dim=128 puts it first by hits; by family/params the order is by name.
  ASSERT_EQ(kjit(rotary_args("128"), image_cache).code, 0);
  j = json::parse(kjit({"cache", "ls", "--json", "--sort", "hits"}, image_cache).out);
  EXPECT_EQ(j["entries"][0]["params"]["head_dim"], "128");
  EXPECT_EQ(j["entries"][0]["hits"], 2);
  j = json::parse(kjit({"cache", "ls", "--json", "--sort", "params"}, image_cache).out);
  std::vector<std::string> args;
  for (const json& e : j["entries"]) args.push_back(e["template_args"]);
  EXPECT_TRUE(std::is_sorted(args.begin(), args.end()));
  j = json::parse(kjit({"cache", "ls", "--json", "--sort", "registers"}, image_cache).out);
  for (size_t i = 1; i < j["entries"].size(); ++i) {
    EXPECT_GE(j["entries"][i - 1]["registers"].get<int>(), j["entries"][i]["registers"].get<int>());
  }
  r = kjit({"cache", "ls", "--sort", "colour"}, image_cache);
  EXPECT_EQ(r.code, 2) << r.describe();
}

// A recorded decode point brings its companion, the split merge at its head_dim (a recording
// run that never split did not load it); two decode points of one head_dim share it.
// The command a JitDisabled names runs as printed, from a shell that still exports KJIT_JIT=off,
// with a cache path that needs quoting.
TEST_F(DeployCli, TheRefusalsCommandPastesIntoTheShellThatRaisedIt) {
  const fs::path cache = work_ / "prod cache 'one'";
  ProcessResult r = kjit(rotary_args("64"), cache, {{"KJIT_JIT", "off"}});
  ASSERT_EQ(r.code, 1) << r.describe();
  const std::string marker = "build it with: ";
  const size_t at = r.err.find(marker);
  ASSERT_NE(at, std::string::npos) << r.describe();
  std::string command = r.err.substr(at + marker.size());
  command = command.substr(0, command.find('\n'));
  // `kjit` on PATH, KJIT_JIT=off exported, as in the production shell; nothing else set.
  const std::string shell = "export KJIT_JIT=off PATH=" + shell_quote(kjit_binary().parent_path().string()) +
                            ":$PATH; " + command;
  r = run_process({"/bin/sh", "-c", shell}, {}, work_ / "io");
  ASSERT_EQ(r.code, 0) << r.describe();
  // It built the entry into that cache: the refused call now succeeds with JIT off.
  r = kjit(rotary_args("64"), cache, {{"KJIT_JIT", "off"}});
  EXPECT_EQ(r.code, 0) << r.describe();
}

TEST_F(DeployCli, AUserLineWhoseKeyIsAnotherKernelsEntryIsInvalid) {
  // An application's own kernel is named by its key alone: a line whose key is the cache's entry
  // of another family (edited, or pasted from another manifest) is refused, not reported cached.
  const fs::path cache = work_ / "c";
  std::vector<std::string> args = rotary_args("64");
  args.push_back("--json");
  ProcessResult r = kjit(args, cache);
  ASSERT_EQ(r.code, 0) << r.describe();
  const std::string key = json::parse(r.out)["key"];
  const fs::path manifest = work_ / "user.jsonl";
  std::ofstream(manifest) << R"({"user":true,"family":"myapp.gemm","template_args":"","source_name":"gemm.cu","target":"sm_90a","key":")"
                          << key << "\"}\n";
  r = kjit({"precompile", "--manifest", manifest.string()}, cache);
  EXPECT_EQ(r.code, 1) << r.describe();
  EXPECT_NE(r.err.find("is the cache's entry of rotary for sm_90a, not myapp.gemm for sm_90a"), std::string::npos)
      << r.describe();
  EXPECT_EQ(r.err.find("is cached"), std::string::npos) << r.describe();
}

TEST_F(DeployCli, ManifestDecodeLinesBringTheirMerge) {
  const fs::path manifest = work_ / "decode.jsonl";
  std::ofstream(manifest)
      << R"({"family":"attention.decode","params":{"head_dim":"64","rows":"8","merge":"kernel"},"target":"sm_89"})"
      << "\n"
      << R"({"family":"attention.paged_decode","params":{"head_dim":"64","rows":"8","merge":"kernel"},"target":"sm_89"})"
      << "\n";
  const ProcessResult r = kjit({"precompile", "--manifest", manifest.string(), "--json"}, work_ / "c");
  ASSERT_EQ(r.code, 0) << r.describe();
  const json j = json::parse(r.out);
  ASSERT_EQ(j["items"].size(), 3u) << j.dump(2);
  int merges = 0;
  for (const json& item : j["items"]) {
    if (item["family"] != "attention.decode_merge") continue;
    ++merges;
    EXPECT_EQ(item["params"]["head_dim"], "64");
    EXPECT_EQ(item["target"], "sm_89");
  }
  EXPECT_EQ(merges, 1) << j.dump(2);
}

TEST_F(DeployCli, ManifestArchReplacesTheRecordedTargets) {
  const fs::path manifest = work_ / "m.jsonl";
  std::ofstream(manifest) << R"({"family":"fp8.gemm","params":{"impl":"wgmma","a":"e4m3","b":"e4m3","out":"bf16",)"
                             R"("scale":"tensor","tile":"128x128","stages":"5","a_major":"k","b_major":"k"},)"
                             R"("target":"sm_90a"})" "\n"
                          << R"({"family":"rotary","params":{"style":"gptj","head_dim":"64","pos":"i64"},"target":"sm_90a"})"
                          << "\n";
  // For sm_89 the wgmma line is skipped with its reason (it needs sm_90a), the rotary one builds.
  ProcessResult r = kjit({"precompile", "--manifest", manifest.string(), "--arch", "sm_89", "--json"}, work_ / "c");
  ASSERT_EQ(r.code, 0) << r.describe();
  const json j = json::parse(r.out);
  ASSERT_EQ(j["items"].size(), 1u);
  EXPECT_EQ(j["items"][0]["family"], "rotary");
  EXPECT_EQ(j["items"][0]["target"], "sm_89");
  ASSERT_EQ(j["skipped"].size(), 1u);
  EXPECT_NE(j["skipped"][0]["reason"].get<std::string>().find("sm_90a"), std::string::npos);
  // For sm_90a each line builds for what its op loads on such a device: the wgmma GEMM for
  // sm_90a, rotary (no arch-specific instructions) for sm_90, the entry an H200 looks up.
  r = kjit({"precompile", "--manifest", manifest.string(), "--arch", "sm_90a", "--json"}, work_ / "c90");
  ASSERT_EQ(r.code, 0) << r.describe();
  const json k = json::parse(r.out);
  ASSERT_EQ(k["items"].size(), 2u) << k.dump(2);
  for (const json& item : k["items"]) {
    EXPECT_EQ(item["target"], item["family"] == "rotary" ? "sm_90" : "sm_90a") << item.dump();
  }
  // An unreadable manifest is an error naming it (exit 2: could not run).
  r = kjit({"precompile", "--manifest", (work_ / "missing.jsonl").string()}, work_ / "c");
  EXPECT_EQ(r.code, 2) << r.describe();
  EXPECT_NE(r.err.find("missing.jsonl"), std::string::npos) << r.err;
}

// What an operator gets wrong before a deploy: an empty manifest or an empty bundle is legal but
// warned (a wrong KJIT_RECORD or KJIT_CACHE_DIR would otherwise ship nothing silently); without a
// GPU, KJIT_ARCH is the default target and a malformed one is an error naming it; a parameter
// given twice names the family.
TEST_F(DeployCli, OperatorMistakesAreNamed) {
  const fs::path cache = work_ / "cache";
  const fs::path empty = work_ / "empty.jsonl";
  std::ofstream(empty).close();
  ProcessResult r = kjit({"precompile", "--manifest", empty.string()}, cache);
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.err.find("names no specialization"), std::string::npos) << r.describe();
  EXPECT_NE(r.out.find("0 specializations for no target"), std::string::npos) << r.describe();

  r = kjit({"cache", "export", (work_ / "empty.kjitb").string()}, cache);
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.err.find("is empty"), std::string::npos) << r.describe();

  r = kjit({"compile", "rotary", "style=neox", "head_dim=64", "head_dim=128", "pos=i32"}, cache);
  EXPECT_EQ(r.code, 2) << r.describe();
  EXPECT_NE(r.err.find("rotary: parameter 'head_dim' is given twice"), std::string::npos) << r.describe();

  if (device_count() > 0) return;  // with a GPU, KJIT_ARCH applies to it (runtime tests)
  r = kjit({"compile", "rotary", "style=neox", "head_dim=64", "pos=i32", "--json"}, cache, {{"KJIT_ARCH", "sm_89"}});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(json::parse(r.out)["target"], "sm_89") << r.describe();
  r = kjit({"compile", "rotary", "style=neox", "head_dim=64", "pos=i32"}, cache, {{"KJIT_ARCH", "banana"}});
  EXPECT_EQ(r.code, 2) << r.describe();
  EXPECT_NE(r.err.find("KJIT_ARCH=banana"), std::string::npos) << r.describe();
  // A PTX target needs --emit ptx whether --arch or KJIT_ARCH names it (KJIT_ARCH emitted PTX
  // silently for the cubin asked for).
  r = kjit({"compile", "rotary", "style=neox", "head_dim=64", "pos=i32"}, cache, {{"KJIT_ARCH", "compute_90"}});
  EXPECT_EQ(r.code, 2) << r.describe();
  EXPECT_EQ(r.err_lines(), std::vector<std::string>{"kjit: error: KJIT_ARCH=compute_90 is a PTX target; add --emit ptx"})
      << r.describe();
  r = kjit({"compile", "rotary", "style=neox", "head_dim=64", "pos=i32", "--arch", "compute_90"}, cache);
  EXPECT_EQ(r.code, 2) << r.describe();
  EXPECT_EQ(r.err_lines(), std::vector<std::string>{"kjit: error: --arch compute_90 is a PTX target; add --emit ptx"})
      << r.describe();
}

// Issue 26, item 4: a FIFO as KJIT_RECORD blocked the first compile, and one at v1/hits.log every
// disk hit and `kjit cache ls`. Now each is refused at once with one warning naming it. Every
// command runs under `timeout`: 124 means it blocked.
TEST_F(DeployCli, FifosInTheCacheOrAsTheManifestBlockNothing) {
  const fs::path cache = work_ / "cache", fifo = work_ / "record.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  auto timed = [&](const std::vector<std::string>& args, std::map<std::string, std::string> env = {}) {
    env["KJIT_CACHE_DIR"] = cache.string();
    std::vector<std::string> argv = {"timeout", "30", kjit_binary().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, env, work_ / "io");
  };
  ProcessResult r = timed(rotary_args("64"), {{"KJIT_RECORD", fifo.string()}});
  ASSERT_EQ(r.code, 0) << r.describe();
  ASSERT_EQ(r.err_lines().size(), 1u) << r.describe();
  EXPECT_NE(r.err_lines()[0].find(fifo.string() + " is a FIFO"), std::string::npos) << r.describe();
  const fs::path log = cache / "v1" / "hits.log";
  fs::remove(log);
  ASSERT_EQ(::mkfifo(log.c_str(), 0644), 0);
  for (const std::vector<std::string>& args : {rotary_args("64"), std::vector<std::string>{"cache", "ls"}}) {
    r = timed(args);
    EXPECT_EQ(r.code, 0) << r.describe();
    EXPECT_NE(r.err.find(log.string() + " is a FIFO"), std::string::npos) << r.describe();
  }
  EXPECT_NE(r.out.find("1 entry"), std::string::npos) << r.describe();
}

// A FIFO named as the manifest or the bundle drew two messages (open_regular's "goes on without
// it" warning, then the errno of the refused read): now one error naming the role, the path and
// the reason, exit 2 like every usage error, and nothing blocks (124 from `timeout` would say so).
TEST_F(DeployCli, ANamedManifestOrBundleThatIsNoFileIsRefusedWithOneLine) {
  const fs::path fifo = work_ / "named.fifo", cache = work_ / "cache";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  auto refused = [&](const std::vector<std::string>& args, const std::string& message) {
    std::vector<std::string> argv = {"timeout", "30", kjit_binary().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult r = run_process(argv, {{"KJIT_CACHE_DIR", cache.string()}}, work_ / "io");
    EXPECT_EQ(r.code, 2) << r.describe();
    EXPECT_EQ(r.err_lines(), std::vector<std::string>{"kjit: error: " + message}) << r.describe();
  };
  const std::string not_regular = " is not a regular file (a FIFO, socket or device)";
  refused({"precompile", "--manifest", fifo.string()}, "manifest " + fifo.string() + not_regular);
  refused({"precompile", "--manifest", work_.string()}, "manifest " + work_.string() + " is a folder, not a file");
  refused({"precompile", "--manifest", (work_ / "nope").string()},
          "cannot read manifest " + (work_ / "nope").string() + ": No such file or directory");
  refused({"cache", "import", fifo.string()}, "bundle " + fifo.string() + not_regular);
}

// Issue 26, item 5: a write cut short left a fragment that swallowed the next recorded line.
// Torn lines are skipped with a warning; the whole ones around them are built.
TEST_F(DeployCli, PrecompileSkipsTornManifestLines) {
  const fs::path manifest = work_ / "m.jsonl";
  const std::string a = R"({"family":"rotary","params":{"head_dim":"64","pos":"i32","style":"neox"},"target":"sm_90a"})";
  const std::string b = R"({"family":"rotary","params":{"head_dim":"128","pos":"i32","style":"neox"},"target":"sm_90a"})";
  std::ofstream(manifest) << a << "\n" << a.substr(0, 30) << "\n" << b << "\n" << b.substr(0, 40);
  const ProcessResult r = kjit({"precompile", "--manifest", manifest.string(), "--json"}, work_ / "c");
  ASSERT_EQ(r.code, 0) << r.describe();
  const json j = json::parse(r.out);
  EXPECT_EQ(j["compiled"], 2) << j.dump(2);
  EXPECT_TRUE(j["invalid"].empty()) << j.dump(2);
  for (const char* line : {"line 2: a torn line", "line 4: a torn line"}) {
    EXPECT_NE(r.err.find(line), std::string::npos) << r.describe();
  }
}

}  // namespace
}  // namespace kjit::test
