// `kjit remote ...` and `kjit precompile --remote --shard i/N` against a real redis-server on a
// unix socket: keygen, push/pull/ls/verify/prune/stats with --json, and N sharded builders that
// cover a set exactly once.
#include "tests/cli/process.hpp"
#include "tests/remote/redis_server.hpp"

#include "cache/tune_table.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

namespace {

using kjit::test::build_dir;
using kjit::test::fresh_dir;
using kjit::test::ProcessResult;
using kjit::test::run_process;
using nlohmann::json;
namespace fs = std::filesystem;

fs::path kjit_binary() { return build_dir() / "tools" / "kjit"; }

/// A listening TCP socket on `address` (AF_INET or AF_INET6) and a free port, or -1 with errno.
int listen_on(int family, const char* address, int* port) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    ::inet_pton(AF_INET6, address, &a->sin6_addr);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    ::inet_pton(AF_INET, address, &a->sin_addr);
    len = sizeof *a;
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, 64) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  *port = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

/// A hung Redis: a TCP server on 127.0.0.1 that accepts every connection and never answers.
class HungServer {
 public:
  HungServer() {
    fd_ = listen_on(AF_INET, "127.0.0.1", &port_);
    if (fd_ < 0) return;
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 20) > 0) {
          const int c = ::accept(fd_, nullptr, nullptr);
          if (c >= 0) {
            held_.push_back(c);
            accepted_.fetch_add(1);
          }
        }
      }
    });
  }
  ~HungServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (int c : held_) ::close(c);
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }
  /// Connections accepted so far (a client that connected and left is accepted within 20 ms).
  int accepted() const { return accepted_.load(); }

 private:
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::vector<int> held_;
  std::thread thread_;
};

class RemoteCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kjit_binary())) << "build the kjit_cli target";
    dir_ = fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    redis_ = std::make_unique<kjit::test::RedisServer>(dir_ / "redis");
  }
  void TearDown() override { redis_.reset(); }

  /// `kjit args…` as `host` (its cache folder), with KJIT_REMOTE this test's server unless `env`
  /// says otherwise. `*ms` (when given): how long it ran.
  ProcessResult kjit(const std::string& host, std::vector<std::string> args, std::map<std::string, std::string> env = {},
                     double* ms = nullptr) {
    const auto start = std::chrono::steady_clock::now();
    ProcessResult r = kjit_untimed(host, std::move(args), std::move(env));
    if (ms) *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return r;
  }
  ProcessResult kjit_untimed(const std::string& host, std::vector<std::string> args,
                             std::map<std::string, std::string> env) {
    args.insert(args.begin(), kjit_binary().string());
    env.emplace("KJIT_CACHE_DIR", (dir_ / "hosts" / host).string());
    env.emplace("KJIT_REMOTE", redis_->url());
    env.emplace("KJIT_REMOTE_TIMEOUT_MS", "2000");
    return run_process(args, env, dir_ / "scratch");
  }
  json kjit_json(const std::string& host, std::vector<std::string> args, std::map<std::string, std::string> env = {},
                 int code = 0) {
    args.push_back("--json");
    ProcessResult r = kjit(host, args, env);
    EXPECT_EQ(r.code, code) << r.describe();
    return json::parse(r.out, nullptr, false);
  }

  fs::path dir_;
  std::unique_ptr<kjit::test::RedisServer> redis_;
};

TEST_F(RemoteCli, KeygenPushPullVerifyPrune) {
  const std::string prefix = (dir_ / "fleet").string();
  const json keys = kjit_json("any", {"remote", "keygen", prefix});
  EXPECT_EQ(keys["secret_key_file"], prefix + ".key");
  EXPECT_EQ(fs::status(prefix + ".key").permissions() & fs::perms::group_all, fs::perms::none);
  EXPECT_EQ(kjit("any", {"remote", "keygen", prefix}).code, 2) << "never overwrites a key";
  const std::map<std::string, std::string> builder = {{"KJIT_REMOTE_SIGNING_KEY", prefix + ".key"},
                                                      {"KJIT_REMOTE_TRUSTED_KEYS", prefix + ".pub"}};
  const std::map<std::string, std::string> server = {{"KJIT_REMOTE_MODE", "ro"},
                                                     {"KJIT_REMOTE_TRUSTED_KEYS", prefix + ".pub"}};

  // A local compile (no remote), then pushed.
  ASSERT_EQ(kjit("b", {"compile", "rotary", "style=neox", "head_dim=64", "pos=i32", "--arch", "sm_89"},
                 {{"KJIT_REMOTE", ""}})
                .code,
            0);
  EXPECT_EQ(kjit("s", {"remote", "push"}, server).code, 2) << "a read-only host refuses to push";
  EXPECT_EQ(kjit_json("b", {"remote", "push"}, builder)["pushed"], 1);
  EXPECT_EQ(kjit_json("b", {"remote", "push"}, builder)["present"], 1);

  const json ls = kjit_json("s", {"remote", "ls"}, server);
  ASSERT_EQ(ls["entries"].size(), 1u);
  EXPECT_EQ(ls["entries"][0]["family"], "rotary");
  EXPECT_EQ(ls["entries"][0]["signer"], keys["key_id"]);
  EXPECT_GT(ls["entries"][0]["ttl_s"].get<int64_t>(), 0);
  EXPECT_EQ(kjit_json("s", {"remote", "stats"}, server)["entries"], 1);

  // A serving host pulls it, then compiles it from its disk without asking the tier.
  EXPECT_EQ(kjit_json("s", {"remote", "pull"}, server)["pulled"], 1);
  EXPECT_EQ(kjit_json("s", {"remote", "pull"}, server)["present"], 1);
  const json hit = kjit_json("s", {"compile", "rotary", "style=neox", "head_dim=64", "pos=i32", "--arch", "sm_89"},
                             {{"KJIT_REMOTE", ""}, {"KJIT_JIT", "off"}});
  EXPECT_EQ(hit["origin"], "disk") << hit.dump();

  // An entry forged with another key fails verify and is pruned by a read-write host.
  const std::string value_key = redis_->client().command({"KEYS", "*:v"})->elements.at(0).str;
  std::string forged = redis_->client().command({"GET", value_key})->str;
  forged[forged.size() - 1] ^= 1;  // the signature's last byte
  ASSERT_TRUE(redis_->client().command({"SET", value_key, forged}));
  const json verify = kjit_json("s", {"remote", "verify"}, server, 1);
  EXPECT_EQ(verify["bad"], 1);
  EXPECT_NE(verify["entries"][0]["problem"].get<std::string>().find("bad signature"), std::string::npos);
  EXPECT_EQ(kjit("s", {"remote", "prune"}, server).code, 2) << "read-only";
  EXPECT_EQ(kjit_json("b", {"remote", "prune"}, builder)["removed"], 1);
  EXPECT_EQ(redis_->keys(), 0);
}

TEST_F(RemoteCli, AFleetManifestRecordsWhatHostsUsedAndReplays) {
  // Two serving hosts (read-only) record into the fleet's manifest set; one specialization is
  // used by both and listed once.
  const std::map<std::string, std::string> serving = {{"KJIT_REMOTE_MODE", "ro"}, {"KJIT_RECORD", "remote:"}};
  ASSERT_EQ(kjit("s1", {"compile", "rotary", "style=neox", "head_dim=64", "pos=i32", "--arch", "sm_89"}, serving).code, 0);
  ASSERT_EQ(kjit("s2", {"compile", "rotary", "style=neox", "head_dim=64", "pos=i32", "--arch", "sm_89"}, serving).code, 0);
  ASSERT_EQ(kjit("s2", {"compile", "rotary", "style=gptj", "head_dim=64", "pos=i32", "--arch", "sm_89"}, serving).code, 0);
  EXPECT_EQ(redis_->keys(), 1) << "the manifest set is the only thing read-only hosts wrote";
  const std::string file = (dir_ / "fleet.jsonl").string();
  EXPECT_EQ(kjit_json("b", {"remote", "manifest", "-o", file})["lines"], 2);
  // A builder replays it.
  const json r = kjit_json("b", {"precompile", "--manifest", file});
  EXPECT_EQ(r["compiled"], 2) << r.dump();
  EXPECT_EQ(r["failed"], 0);
}

TEST_F(RemoteCli, PullRefusesAManifestThatIsNoFileWithOneLine) {
  // A FIFO drew open_regular's warning and then the refused read's errno; now one error, exit 2.
  const fs::path fifo = dir_ / "manifest.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const ProcessResult r = kjit("s", {"remote", "pull", "--manifest", fifo.string()});
  EXPECT_EQ(r.code, 2) << r.describe();
  EXPECT_EQ(r.err_lines(), std::vector<std::string>{"kjit: error: manifest " + fifo.string() +
                                                    " is not a regular file (a FIFO, socket or device)"})
      << r.describe();
}

kjit::cache::TuneTable tune_table(int64_t bucket, int64_t tuned_unix) {
  kjit::cache::TuneTable t;
  t.fingerprint_id = "f1eet0000001";
  t.fingerprint_text = "name=Test GPU;cc=9.0";
  kjit::cache::TuneEntry e;
  e.op = "decode";
  e.bucket = {bucket};
  e.shape = "batch=" + std::to_string(bucket);
  e.winner = {"attention.decode", "head_dim=128 rows=8", {{"splits", bucket}}, 10, 12, 0.01, 128, 4096, 96, 1};
  e.default_choice = e.winner;
  e.tuned_unix = tuned_unix;
  t.entries.push_back(e);
  return t;
}

TEST_F(RemoteCli, TuningTablesAreSharedAndMerged) {
  const std::string prefix = (dir_ / "fleet").string();
  kjit_json("any", {"remote", "keygen", prefix});
  const std::map<std::string, std::string> builder = {{"KJIT_REMOTE_SIGNING_KEY", prefix + ".key"},
                                                      {"KJIT_REMOTE_TRUSTED_KEYS", prefix + ".pub"}};
  const std::map<std::string, std::string> server = {{"KJIT_REMOTE_MODE", "ro"},
                                                     {"KJIT_REMOTE_TRUSTED_KEYS", prefix + ".pub"}};
  // Two builders tuned two buckets of one kind of device; both push, nothing is lost.
  kjit::cache::publish_table((dir_ / "hosts" / "b1").string(), tune_table(1, 100));
  kjit::cache::publish_table((dir_ / "hosts" / "b2").string(), tune_table(2, 200));
  EXPECT_EQ(kjit_json("b1", {"remote", "push"}, builder)["tuning_tables"], 1);
  EXPECT_EQ(kjit_json("b2", {"remote", "push"}, builder)["tuning_tables"], 1);
  // A serving host with its own older measurement of bucket 2 merges the fleet's on pull.
  kjit::cache::TuneTable own = tune_table(2, 50);
  own.entries[0].winner.us = 99;
  kjit::cache::publish_table((dir_ / "hosts" / "s").string(), own);
  EXPECT_EQ(kjit_json("s", {"remote", "pull"}, server)["tuning_tables"], 1);
  kjit::cache::TuneTable merged;
  ASSERT_TRUE(kjit::cache::read_table(kjit::cache::table_path((dir_ / "hosts" / "s").string(), "f1eet0000001"), &merged));
  ASSERT_EQ(merged.entries.size(), 2u);
  EXPECT_EQ(merged.entries[1].tuned_unix, 200) << "the newer measurement won";
  EXPECT_EQ(merged.entries[1].winner.us, 10);
  // An unsigned table (pushed by a host without the key, trusting nothing) is not merged by
  // hosts that require signatures.
  ASSERT_TRUE(redis_->client().command({"FLUSHALL"}));
  kjit::cache::publish_table((dir_ / "hosts" / "u").string(), tune_table(3, 300));
  EXPECT_EQ(kjit_json("u", {"remote", "push"})["tuning_tables"], 1);
  const ProcessResult pull = kjit("s2", {"remote", "pull", "--json"}, server);
  EXPECT_EQ(json::parse(pull.out, nullptr, false)["tuning_tables"], 0) << pull.describe();
  EXPECT_NE(pull.err.find("tuning table of fingerprint f1eet0000001 was rejected (unsigned"), std::string::npos)
      << pull.describe();
}

// Values over KJIT_REMOTE_MAX_VALUE_BYTES, planted under an entry's key and a tuning table's:
// every operator command that reads them (ls, verify, pull, push's compare-and-set, prune)
// learns their length first and never downloads them; ls and verify report them as oversized,
// push replaces the table, prune deletes the entry.
TEST_F(RemoteCli, OversizedValuesAreReportedButNeverDownloaded) {
  auto& server = redis_->client();
  auto net_output_bytes = [&] {
    const std::string info = server.command({"INFO", "stats"})->str;
    const std::string field = "total_net_output_bytes:";
    const size_t at = info.find(field);
    return at == std::string::npos ? -1 : std::stoll(info.substr(at + field.size()));
  };
  const std::string big(8 << 20, 'x');
  const std::string value_key = "{kjit:00112233445566778899aabbccddeeff}:v";
  const std::string table_key = "{kjit}:tune:f1eet0000001";
  ASSERT_TRUE(server.command({"SET", value_key, big}));
  ASSERT_TRUE(server.command({"SET", table_key, big}));
  const std::map<std::string, std::string> cap = {{"KJIT_REMOTE_MAX_VALUE_BYTES", "100K"}};
  const std::string why = "oversized: 8388608 bytes, over KJIT_REMOTE_MAX_VALUE_BYTES=102400; not downloaded";
  const long long before = net_output_bytes();

  for (const char* command : {"ls", "verify"}) {
    const json r = kjit_json("s", {"remote", command}, cap, std::string(command) == "verify" ? 1 : 0);
    ASSERT_EQ(r["entries"].size(), 1u) << r.dump();
    EXPECT_EQ(r["entries"][0]["bytes"], 8 << 20);
    EXPECT_EQ(r["entries"][0]["ok"], false);
    EXPECT_EQ(r["entries"][0]["problem"], why) << command;
  }
  // pull: the entry is refused (exit 1) and the table is not merged.
  const ProcessResult pull = kjit("s", {"remote", "pull", "--json"}, cap);
  EXPECT_EQ(pull.code, 1) << pull.describe();
  const json pulled = json::parse(pull.out, nullptr, false);
  EXPECT_EQ(pulled["rejected"], 1) << pull.describe();
  EXPECT_EQ(pulled["tuning_tables"], 0) << pull.describe();
  EXPECT_NE(pull.err.find("tuning table of fingerprint f1eet0000001 was rejected (" + why + ")"), std::string::npos)
      << pull.describe();
  // push: the oversized table is replaced by the local one (compare-and-set on its length).
  kjit::cache::publish_table((dir_ / "hosts" / "b").string(), tune_table(1, 100));
  EXPECT_EQ(kjit_json("b", {"remote", "push"}, cap)["tuning_tables"], 1);
  EXPECT_LT(server.command({"STRLEN", table_key})->integer, 100 << 10) << "replaced";
  // prune: the entry goes.
  EXPECT_EQ(kjit_json("b", {"remote", "prune"}, cap)["removed"], 1);
  EXPECT_EQ(server.command({"EXISTS", value_key})->integer, 0);
  // Two 8 MiB values, read by five commands: a few hundred KiB in all, not tens of MiB.
  const long long sent = net_output_bytes() - before;
  EXPECT_LT(sent, 2 << 20) << "the server sent the values";
  std::printf("[remote-cli] ls, verify, pull, push and prune over two 8 MiB values, cap 100 KB: the server sent "
              "%lld bytes\n",
              sent);
  // And a table within the cap is read whole again.
  EXPECT_EQ(kjit_json("s", {"remote", "pull"}, cap)["tuning_tables"], 1);
}

TEST_F(RemoteCli, ShardedBuildersCoverTheSetExactlyOnce) {
  const std::vector<std::string> set = {"precompile", "--family", "rotary", "--arch", "sm_89", "-j", "1"};
  // The whole set's keys, from one local run without the tier.
  std::set<std::string> all;
  const json whole = kjit_json("all", set, {{"KJIT_REMOTE", ""}});
  for (const json& item : whole["items"]) all.insert(item["key"].get<std::string>());
  ASSERT_GE(all.size(), 3u);
  std::multiset<std::string> covered;
  constexpr int kShards = 3;
  for (int i = 0; i < kShards; ++i) {
    std::vector<std::string> args = set;
    args.insert(args.end(), {"--remote", "--shard", std::to_string(i) + "/" + std::to_string(kShards)});
    const json r = kjit_json("builder" + std::to_string(i), args);
    EXPECT_EQ(r["in_remote"], r["items"].size());
    for (const json& item : r["items"]) covered.insert(item["key"].get<std::string>());
  }
  EXPECT_EQ(std::set<std::string>(covered.begin(), covered.end()), all);
  EXPECT_EQ(covered.size(), all.size()) << "no key built by two shards";
  EXPECT_EQ(kjit_json("x", {"remote", "stats"})["entries"], all.size());
  for (const char* bad : {"3/3", "0/18446744073709551616", "+1/4", "0/4 ", "a/b"}) {
    EXPECT_EQ(kjit("x", {"precompile", "--remote", "--shard", bad}).code, 2) << bad;
  }
  EXPECT_EQ(kjit("x", {"precompile", "--shard", "0/3"}).code, 2) << "--shard without --remote";
  // A malformed share is named before what it lacks.
  const ProcessResult malformed = kjit("x", {"precompile", "--shard", "abc"});
  EXPECT_EQ(malformed.code, 2);
  EXPECT_NE(malformed.err.find("--shard 'abc' is not i/N"), std::string::npos) << malformed.describe();
  EXPECT_EQ(kjit("x", {"remote", "stats"}, {{"KJIT_REMOTE", ""}}).code, 2);
}

// The operator commands against a hung server (accepts, never answers): they follow
// KJIT_REMOTE_TIMEOUT_MS or --timeout-ms for the connect and every command, and fail as commands
// with a timeout, in about that time.
TEST_F(RemoteCli, OperatorCommandsFollowTheTimeoutAndSpeakAsCommands) {
  HungServer hung;
  ASSERT_GT(hung.port(), 0) << "cannot listen on 127.0.0.1: " << std::strerror(errno);
  // What a process costs here without any server, so the bound below is the timeout's.
  double base_ms = 0;
  EXPECT_EQ(kjit("x", {"remote", "stats"}, {{"KJIT_REMOTE", ""}}, &base_ms).code, 2);
  const std::string where = fmt::format("redis://127.0.0.1:{}/0", hung.port());
  // Something for push to send.
  kjit::cache::publish_table((dir_ / "hosts" / "x").string(), tune_table(1, 100));
  for (const char* command : {"stats", "ls", "verify", "pull", "push", "manifest"}) {
    for (const std::string auth : {"", "user:Hung5ecret@"}) {
      const std::string url = fmt::format("redis://{}127.0.0.1:{}", auth, hung.port());
      double ms = 0;
      const int connections = hung.accepted();
      const ProcessResult r = kjit("x", {"remote", command},
                                   {{"KJIT_REMOTE", url}, {"KJIT_REMOTE_TIMEOUT_MS", "100"},
                                    {"KJIT_REMOTE_CONNECT_TIMEOUT_MS", "100"}},
                                   &ms);
      EXPECT_EQ(r.code, 2) << r.describe();
      // An op's client sends a lost command again on a fresh connection; a command's never does,
      // so a hung server costs it one timeout.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      EXPECT_EQ(hung.accepted() - connections, 1) << command << ": connections to the hung server";
      EXPECT_EQ(r.err_lines(), std::vector<std::string>{fmt::format(
                                   "kjit: error: remote {}: no answer within 100 ms from {}", command, where)})
          << r.describe();
      EXPECT_EQ(r.out.find("Hung5ecret") + r.err.find("Hung5ecret"), 2 * std::string::npos) << r.describe();
      EXPECT_LT(ms, base_ms + 100 + 1000) << command << " took " << ms << " ms (a process alone: " << base_ms << " ms)";
      std::printf("[remote-cli] kjit remote %s against a hung server, KJIT_REMOTE_TIMEOUT_MS=100%s: %.0f ms "
                  "(a process alone: %.0f ms)\n",
                  command, auth.empty() ? "" : ", with AUTH", ms, base_ms);
    }
  }
  // --timeout-ms wins over the variables.
  double ms = 0;
  const ProcessResult r = kjit("x", {"remote", "ls", "--timeout-ms", "150"},
                               {{"KJIT_REMOTE", where}, {"KJIT_REMOTE_TIMEOUT_MS", "5000"},
                                {"KJIT_REMOTE_CONNECT_TIMEOUT_MS", "5000"}},
                               &ms);
  EXPECT_EQ(r.err_lines(),
            std::vector<std::string>{"kjit: error: remote ls: no answer within 150 ms from " + where})
      << r.describe();
  EXPECT_LT(ms, base_ms + 150 + 1000);
  EXPECT_EQ(kjit("x", {"remote", "ls", "--timeout-ms", "0"}).code, 2) << "a timeout of 0 is refused";
  // A server that refuses the connection, in the same words.
  const ProcessResult refused = kjit("x", {"remote", "stats"}, {{"KJIT_REMOTE", "unix://" + (dir_ / "none.sock").string()}});
  EXPECT_EQ(refused.code, 2);
  ASSERT_EQ(refused.err_lines().size(), 1u) << refused.describe();
  EXPECT_EQ(refused.err_lines()[0].rfind("kjit: error: remote stats: cannot connect to unix://", 0), 0u)
      << refused.describe();
}

// IPv6 host literals reach a real server listening on ::1, with a password and a db.
TEST_F(RemoteCli, Ipv6HostLiteralsReachTheServer) {
  int port = 0;
  const int probe = listen_on(AF_INET6, "::1", &port);
  if (probe < 0) {
    std::printf("[remote-cli] skipped: this host has no IPv6 loopback (binding ::1: %s)\n", std::strerror(errno));
    GTEST_SKIP() << "no IPv6 loopback (binding ::1: " << std::strerror(errno) << ")";
  }
  ::close(probe);
  kjit::test::RedisServer v6(dir_ / "redis6", "::1", port);
  const std::string where = fmt::format("redis://[::1]:{}", port);
  const json plain = kjit_json("h", {"remote", "stats"}, {{"KJIT_REMOTE", where}});
  EXPECT_EQ(plain["server"], where + "/0");
  EXPECT_EQ(plain["entries"], 0);
  // With a password and db 2: the runtime publishes its compile there, and nowhere else.
  ASSERT_TRUE(v6.client().command({"CONFIG", "SET", "requirepass", "V6passw0rd"}));
  const std::string secured = fmt::format("redis://:V6passw0rd@[::1]:{}/2", port);
  const ProcessResult compiled = kjit("b", {"compile", "rotary", "style=neox", "head_dim=64", "pos=i32", "--arch",
                                            "sm_89", "--json"},
                                      {{"KJIT_REMOTE", secured}});
  ASSERT_EQ(compiled.code, 0) << compiled.describe();
  EXPECT_EQ(json::parse(compiled.out)["origin"], "compiled");
  EXPECT_EQ(compiled.err.find("warning"), std::string::npos) << "the tier was used without a fault: " << compiled.describe();
  const json db2 = kjit_json("h", {"remote", "stats"}, {{"KJIT_REMOTE", secured}});
  EXPECT_EQ(db2["server"], where + "/2");
  EXPECT_EQ(db2["entries"], 1) << db2.dump();
  EXPECT_EQ(kjit_json("h", {"remote", "stats"}, {{"KJIT_REMOTE", fmt::format("redis://:V6passw0rd@[::1]:{}", port)}})["entries"], 0);
  // A wrong password is the server's refusal, and is never shown.
  const ProcessResult wrong = kjit("h", {"remote", "stats"}, {{"KJIT_REMOTE", fmt::format("redis://:Wr0ngPass@[::1]:{}", port)}});
  EXPECT_EQ(wrong.code, 2);
  EXPECT_NE(wrong.err.find("refused AUTH"), std::string::npos) << wrong.describe();
  EXPECT_EQ(wrong.err.find("Wr0ngPass"), std::string::npos) << wrong.describe();
}

// No output of any command shows a password or a secret key: every malformed KJIT_REMOTE that
// carries one, a key file others may read, a wrong password.
TEST_F(RemoteCli, NoCommandPrintsAPasswordOrASecretKey) {
  const std::string pw = "S3cretPassw0rd";
  const std::vector<std::string> urls = {
      "rediss://:" + pw + "@cache:6379/0", "tcp://user:" + pw + "@cache:6379", "redis://:" + pw + "@",
      "redis://:" + pw + "@/0",            "redis//:" + pw + "@cache:6379",    "redis:/:" + pw + "@cache:6379",
      " redis://:" + pw + "@cache:6379",   "redis://:" + pw,                   "redis://:" + pw + "@cache:1\n",
      "redis://cache?password=" + pw,      "redis://:" + pw + "@::1:6379"};
  const std::vector<std::vector<std::string>> commands = {
      {"remote", "stats"}, {"remote", "ls"}, {"remote", "verify"}, {"remote", "pull"}, {"remote", "push"},
      {"compile", "rotary", "style=neox", "head_dim=64", "pos=i32", "--arch", "sm_89"},
      {"precompile", "--remote", "--family", "rotary", "--arch", "sm_89"}};
  for (const std::string& url : urls) {
    for (const std::vector<std::string>& command : commands) {
      const ProcessResult r = kjit("x", command, {{"KJIT_REMOTE", url}});
      EXPECT_EQ(r.code, 2) << r.describe();
      EXPECT_EQ(r.out.find(pw), std::string::npos) << r.describe();
      EXPECT_EQ(r.err.find(pw), std::string::npos) << r.describe();
      EXPECT_NE(r.err.find("KJIT_REMOTE='"), std::string::npos) << r.describe();
      EXPECT_EQ(r.err_lines().size(), 1u) << r.describe();
    }
  }
  // A secret key file others may read: refused by every command that would load it, with the
  // fix, and the key never shown.
  const std::string prefix = (dir_ / "fleet").string();
  kjit_json("any", {"remote", "keygen", prefix});
  std::string key_text;
  {
    std::ifstream in(prefix + ".key");
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line[0] != '#') key_text = line;
    }
  }
  ASSERT_EQ(key_text.size(), 128u);
  ASSERT_EQ(::chmod((prefix + ".key").c_str(), 0644), 0);
  for (const std::vector<std::string>& command : commands) {
    const ProcessResult r = kjit("b", command, {{"KJIT_REMOTE_SIGNING_KEY", prefix + ".key"}});
    EXPECT_EQ(r.code, 2) << r.describe();
    EXPECT_NE(r.err.find("chmod 600 " + prefix + ".key"), std::string::npos) << r.describe();
    for (size_t at = 0; at + 16 <= key_text.size(); at += 16) {
      EXPECT_EQ((r.out + r.err).find(key_text.substr(at, 16)), std::string::npos) << r.describe();
    }
  }
  // The secret key named where public keys go: refused without showing it.
  ASSERT_EQ(::chmod((prefix + ".key").c_str(), 0600), 0);
  const ProcessResult swapped = kjit("s", {"remote", "verify"}, {{"KJIT_REMOTE_TRUSTED_KEYS", prefix + ".key"}});
  EXPECT_EQ(swapped.code, 2) << swapped.describe();
  EXPECT_EQ((swapped.out + swapped.err).find(key_text.substr(0, 16)), std::string::npos) << swapped.describe();
  // A wrong password from a file: the server's refusal, never the password.
  ASSERT_TRUE(redis_->client().command({"CONFIG", "SET", "requirepass", "R1ghtPassw0rd"}));
  {
    std::ofstream(dir_ / "pw") << "Wr0ngPassw0rd\n";
  }
  const ProcessResult wrong = kjit("s", {"remote", "stats"}, {{"KJIT_REMOTE_PASSWORD_FILE", (dir_ / "pw").string()}});
  EXPECT_EQ(wrong.code, 2) << wrong.describe();
  EXPECT_NE(wrong.err.find("refused AUTH"), std::string::npos) << wrong.describe();
  EXPECT_EQ((wrong.out + wrong.err).find("Passw0rd"), std::string::npos) << wrong.describe();
}

// Trust is never off by accident: KJIT_REMOTE_TRUSTED_KEYS set to something that names no key
// is an error, not "checked against 0 trusted keys" and exit 0.
TEST_F(RemoteCli, VerifyRefusesTrustedKeysThatNameNoKey) {
  for (const char* value : {"", ":", "::", "a.pub::b.pub", ":a.pub", "a.pub:"}) {
    const ProcessResult r = kjit("s", {"remote", "verify"}, {{"KJIT_REMOTE_TRUSTED_KEYS", value}});
    EXPECT_EQ(r.code, 2) << r.describe();
    ASSERT_EQ(r.err_lines().size(), 1u) << r.describe();
    EXPECT_EQ(r.err_lines()[0].rfind("kjit: error: KJIT_REMOTE_TRUSTED_KEYS='", 0), 0u) << r.describe();
    EXPECT_EQ(r.out.find("trusted key"), std::string::npos) << r.describe();
  }
  // Unset, verify still checks checksums and keys, and says that signatures were not checked.
  const ProcessResult unset = kjit("s", {"remote", "verify"});
  EXPECT_EQ(unset.code, 0) << unset.describe();
  EXPECT_NE(unset.out.find("signatures were not checked"), std::string::npos) << unset.describe();
}

// Values a message echoes stay one line of bounded length: control characters escaped, a long
// value cut.
TEST_F(RemoteCli, EchoedValuesStayOneBoundedLine) {
  const ProcessResult mode = kjit("s", {"remote", "stats"}, {{"KJIT_REMOTE_MODE", "ro\n\x1b[2Jkjit: all good"}});
  EXPECT_EQ(mode.code, 2);
  EXPECT_EQ(mode.err_lines(), std::vector<std::string>{"kjit: error: KJIT_REMOTE_MODE='ro\\n\\x1b[2Jkjit: all good' is "
                                                       "not rw or ro"})
      << mode.describe();
  const ProcessResult host = kjit("s", {"remote", "stats"}, {{"KJIT_REMOTE", "redis://" + std::string(100000, 'h') + ":1"}});
  EXPECT_EQ(host.code, 2);
  ASSERT_EQ(host.err_lines().size(), 1u) << host.describe().substr(0, 2000);
  EXPECT_LT(host.err.size(), 1000u) << host.describe().substr(0, 2000);
}

}  // namespace
