// `kjit cache export --oci` / `import --oci` with the real tools an operator moves images with:
// `skopeo inspect` reads the layout, `umoci unpack` gives the entries as a ready cache folder,
// `skopeo copy` pushes the image to a distribution registry (docker-registry, started here on a
// loopback port) and pulls it back (compressed by the push), and the import of what came back
// gives a byte-identical cache; a tampered blob and a re-signed image are refused with nothing
// imported, and --manifest exports what a recorded warm-up names. A test whose tool is missing
// skips, saying which (tools/setup.sh installs them: skopeo, umoci, docker-registry).
#include "tests/cli/process.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

extern char** environ;

namespace kjit::test {
namespace {

using nlohmann::json;

fs::path kjit_binary() { return build_dir() / "tools" / "kjit"; }

/// "" when `tool` is on PATH, else the reason a test skips.
std::string missing(const std::string& tool) {
  const std::string probe = "command -v " + shell_quote(tool) + " >/dev/null 2>&1";
  return std::system(probe.c_str()) == 0 ? ""
                                         : tool + " is not installed (Debian package " +
                                               (tool == "docker-registry" ? std::string("docker-registry") : tool) +
                                               "; tools/setup.sh installs it)";
}

/// The entry files of the cache at `root`: path under it → bytes.
std::map<std::string, std::string> entry_files(const fs::path& root) {
  std::map<std::string, std::string> out;
  if (!fs::exists(root / "v1")) return out;
  for (const auto& f : fs::recursive_directory_iterator(root / "v1")) {
    if (f.is_regular_file() && f.path().extension() == ".kjit") out[fs::relative(f.path(), root).string()] = read_file(f.path());
  }
  return out;
}

/// A distribution registry (docker-registry serve) on a free loopback port, its storage and
/// config in `dir`; stopped (SIGTERM, then reaped) when the object goes.
class Registry {
 public:
  explicit Registry(const fs::path& dir) {
    fs::create_directories(dir / "storage");
    port_ = free_port();
    std::ofstream(dir / "config.yml") << "version: 0.1\n"
                                         "log:\n  level: error\n"
                                         "storage:\n  filesystem:\n    rootdirectory: "
                                      << (dir / "storage").string() << "\nhttp:\n  addr: 127.0.0.1:" << port_ << "\n";
    std::vector<std::string> args = {"docker-registry", "serve", (dir / "config.yml").string()};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, (dir / "registry.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int err = posix_spawnp(&pid_, "docker-registry", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (err != 0) {
      pid_ = -1;
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline && !answers()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~Registry() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  /// Whether it accepts connections.
  bool answers() const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    return ok;
  }
  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  /// A port the kernel hands out for 127.0.0.1 now (free until someone else takes it).
  static int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    close(fd);
    return ntohs(a.sin_port);
  }

  pid_t pid_ = -1;
  int port_ = 0;
};

class OciCli : public ::testing::Test {
 protected:
  /// One cache of real compiles for the suite: rotary for sm_89 and sm_90a (two layers).
  static void SetUpTestSuite() {
    source_ = fresh_dir("OciCli.source") / "cache";
    for (const char* arch : {"sm_89", "sm_90a"}) {
      const ProcessResult r = run_process({kjit_binary().string(), "compile", "rotary", "style=neox", "head_dim=64",
                                           "pos=i32", "--arch", arch},
                                          {{"KJIT_CACHE_DIR", source_.string()}}, source_.parent_path() / "io");
      ASSERT_EQ(r.code, 0) << r.describe();
    }
  }
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kjit_binary())) << "build the kjit_cli target";
    ASSERT_EQ(entry_files(source_).size(), 2u);
    dir_ = fresh_dir(std::string("OciCli.") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  /// `kjit ARGS` on the cache `cache` (the suite's source cache by default).
  ProcessResult kjit(std::vector<std::string> args, const fs::path& cache = source_,
                     std::map<std::string, std::string> env = {}) {
    args.insert(args.begin(), kjit_binary().string());
    env.emplace("KJIT_CACHE_DIR", cache.string());
    return run_process(args, env, dir_ / "io");
  }
  /// A tool's run; its output for assertion messages.
  ProcessResult tool(const std::vector<std::string>& argv) { return run_process(argv, {}, dir_ / "io"); }

  static fs::path source_;
  fs::path dir_;
};

fs::path OciCli::source_;

TEST_F(OciCli, SkopeoInspectsAndUmociUnpacksTheImageIntoACacheFolder) {
  for (const char* t : {"skopeo", "umoci"}) {
    if (const std::string why = missing(t); !why.empty()) GTEST_SKIP() << why;
  }
  const std::string layout = (dir_ / "img").string();
  ProcessResult r = kjit({"cache", "export", "--oci", layout, "--tag", "v1", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const json exported = json::parse(r.out);
  EXPECT_EQ(exported["entries"], 2);
  EXPECT_EQ(exported["layers"], 2);

  r = tool({"skopeo", "--insecure-policy", "inspect", "oci:" + layout + ":v1"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const json inspected = json::parse(r.out);
  EXPECT_EQ(inspected["Digest"], exported["manifest_digest"]);
  EXPECT_EQ(inspected["Labels"]["dev.kjit.entries"], "2");
  EXPECT_EQ(inspected["Labels"]["dev.kjit.targets"], "sm_89,sm_90a");
  EXPECT_EQ(inspected["Os"], "linux");
  EXPECT_EQ(inspected["Layers"].size(), 2u);

  const fs::path bundle = dir_ / "unpacked";
  r = tool({"umoci", "unpack", "--rootless", "--image", layout + ":v1", bundle.string()});
  ASSERT_EQ(r.code, 0) << r.describe();
  std::map<std::string, std::string> unpacked;
  for (const auto& f : fs::recursive_directory_iterator(bundle / "rootfs")) {
    if (!f.is_directory()) unpacked[fs::relative(f.path(), bundle / "rootfs").string()] = read_file(f.path());
  }
  EXPECT_EQ(unpacked, entry_files(source_)) << "the root file system is the entries, nothing else";
  // ... and it is a cache: a compile that may not JIT finds its entry there.
  r = kjit({"compile", "rotary", "style=neox", "head_dim=64", "pos=i32", "--arch", "sm_89", "--json"}, bundle / "rootfs",
           {{"KJIT_JIT", "off"}});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(json::parse(r.out)["origin"], "disk");
}

TEST_F(OciCli, ARoundTripThroughARegistryGivesAnIdenticalCache) {
  for (const char* t : {"skopeo", "docker-registry"}) {
    if (const std::string why = missing(t); !why.empty()) GTEST_SKIP() << why;
  }
  const std::string keys = (dir_ / "fleet").string();
  ASSERT_EQ(kjit({"remote", "keygen", keys}).code, 0);
  const std::string layout = (dir_ / "img").string();
  ProcessResult r = kjit({"cache", "export", "oci:" + layout + ":v1", "--signing-key", keys + ".key", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(json::parse(r.out)["signer"].get<std::string>().size(), 16u);

  Registry registry(dir_ / "registry");
  ASSERT_TRUE(registry.answers()) << "docker-registry did not start: " << read_file(dir_ / "registry" / "registry.log");
  const std::string remote = "docker://" + registry.host() + "/kjit/kernels:v1";
  r = tool({"skopeo", "--insecure-policy", "copy", "--dest-tls-verify=false", "oci:" + layout + ":v1", remote});
  ASSERT_EQ(r.code, 0) << r.describe();
  r = tool({"skopeo", "--insecure-policy", "inspect", "--tls-verify=false", remote});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(json::parse(r.out)["Labels"]["dev.kjit.entries"], "2");
  const std::string pulled = (dir_ / "pulled").string();
  r = tool({"skopeo", "--insecure-policy", "copy", "--src-tls-verify=false", remote, "oci:" + pulled + ":v1"});
  ASSERT_EQ(r.code, 0) << r.describe();

  const fs::path cache = dir_ / "node-cache";
  r = kjit({"cache", "import", "oci:" + pulled + ":v1", "--json"}, cache, {{"KJIT_REMOTE_TRUSTED_KEYS", keys + ".pub"}});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(json::parse(r.out)["imported"], 2);
  EXPECT_EQ(entry_files(cache), entry_files(source_)) << "byte-identical entries";
}

TEST_F(OciCli, ATamperedBlobAndAReSignedImageAreRefusedWithNothingImported) {
  const std::string good = (dir_ / "fleet").string(), other = (dir_ / "other").string();
  ASSERT_EQ(kjit({"remote", "keygen", good}).code, 0);
  ASSERT_EQ(kjit({"remote", "keygen", other}).code, 0);
  const std::string layout = (dir_ / "img").string();
  ASSERT_EQ(kjit({"cache", "export", "--oci", layout, "--signing-key", good + ".key"}).code, 0);
  const std::string resigned = (dir_ / "resigned").string();
  ASSERT_EQ(kjit({"cache", "export", "--oci", resigned, "--signing-key", other + ".key"}).code, 0);
  const std::map<std::string, std::string> trusting = {{"KJIT_REMOTE_TRUSTED_KEYS", good + ".pub"}};

  // The good image imports; the re-signed one (every digest valid) is refused by its signature.
  ProcessResult r = kjit({"cache", "import", "--oci", layout}, dir_ / "ok", trusting);
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(entry_files(dir_ / "ok").size(), 2u);
  r = kjit({"cache", "import", "--oci", resigned}, dir_ / "refused", trusting);
  EXPECT_EQ(r.code, 2) << r.describe();
  EXPECT_NE(r.err.find("signed by an untrusted key"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nothing was imported"), std::string::npos) << r.err;
  EXPECT_TRUE(entry_files(dir_ / "refused").empty());
  r = kjit({"cache", "import", "--oci", resigned, "--trusted-keys", other + ".pub"}, dir_ / "other-trust");
  EXPECT_EQ(r.code, 0) << "trusting the other key instead: " << r.describe();

  // One byte of the second layer's blob flipped: refused by its digest.
  const json index = json::parse(read_file(fs::path(layout) / "index.json"));
  const std::string manifest_digest = index["manifests"][0]["digest"];
  const json manifest = json::parse(read_file(fs::path(layout) / "blobs" / "sha256" / manifest_digest.substr(7)));
  const std::string layer = manifest["layers"][1]["digest"];
  const fs::path blob = fs::path(layout) / "blobs" / "sha256" / layer.substr(7);
  std::string bytes = read_file(blob);
  bytes[bytes.size() / 3] ^= 0x20;
  std::ofstream(blob, std::ios::binary | std::ios::trunc) << bytes;
  r = kjit({"cache", "import", "--oci", layout}, dir_ / "tampered", trusting);
  EXPECT_EQ(r.code, 2) << r.describe();
  EXPECT_NE(r.err.find("layer 2 of 2 (" + layer + "): digest mismatch"), std::string::npos) << r.err;
  EXPECT_TRUE(entry_files(dir_ / "tampered").empty()) << "the first layer's entry was imported";

  // A bundle carries no signatures: naming keys for one is a mistake, said so.
  r = kjit({"cache", "import", (dir_ / "x.kjb").string(), "--trusted-keys", good + ".pub"}, dir_ / "bundle");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bundles carry none"), std::string::npos) << r.err;
}

TEST_F(OciCli, ExportTakesWhatARecordedWarmUpNames) {
  const fs::path manifest = dir_ / "warmup.jsonl";
  std::ofstream(manifest) << R"({"family":"rotary","params":{"head_dim":"64","pos":"i32","style":"neox"},"target":"sm_90a"})"
                          << "\nnot json\n";
  const std::string layout = (dir_ / "img").string();
  ProcessResult r = kjit({"cache", "export", "--oci", layout, "--manifest", manifest.string(), "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(json::parse(r.out)["entries"], 1);
  EXPECT_NE(r.err.find("line 2"), std::string::npos) << "the bad line is named: " << r.err;
  r = kjit({"cache", "import", "--oci", layout, "--json"}, dir_ / "imported");
  ASSERT_EQ(r.code, 0) << r.describe();
  const auto imported = entry_files(dir_ / "imported");
  ASSERT_EQ(imported.size(), 1u);
  r = kjit({"cache", "ls", "--json"}, dir_ / "imported");
  EXPECT_EQ(json::parse(r.out)["entries"][0]["target"], "sm_90a") << r.out;
  // The same filter writes a bundle too.
  r = kjit({"cache", "export", (dir_ / "b.kjb").string(), "--manifest", manifest.string(), "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(json::parse(r.out)["entries"], 1);
}

}  // namespace
}  // namespace kjit::test
