// The fleet tier end to end: a real redis-server on a unix socket, and "hosts" as worker
// processes (tests/remote/remote_worker.cc) with their own cache folders. Single flight across
// hosts, a lease owner killed midway, a server killed / hung / restarted, values tampered with,
// read-only hosts and failure records.
#include "tests/cache/cache_test_util.hpp"
#include "tests/remote/fleet_spec.hpp"
#include "tests/remote/redis_server.hpp"
#include "tools/testing/prometheus_text.hpp"

#include "cache/remote/record.hpp"
#include "cache/remote/signing.hpp"
#include "cache/remote/tier.hpp"
#include "cache/remote/tune_share.hpp"

#include <kjit/runtime.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// One worker process: a "host" (its cache folder) compiling fleet_spec variants.
struct Worker {
  pid_t pid = -1;
  fs::path out, err;
  int code = -1;
  json result;
  std::string stderr_text;

  long max_rss_kib = 0;        ///< its peak resident memory
  Clock::time_point exited{};  ///< when finish() or reaped() saw it end

  /// Waits for it and parses its JSON line.
  void finish() {
    if (code < 0) collect(0);
  }
  /// Reaps it if it has ended; true once it has.
  bool reaped() {
    if (code < 0) collect(WNOHANG);
    return code >= 0;
  }
  void collect(int options) {
    int status = 0;
    rusage usage{};
    if (wait4(pid, &status, options, &usage) != pid) return;
    exited = Clock::now();
    max_rss_kib = usage.ru_maxrss;
    code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    stderr_text = slurp(err);
    const std::string text = slurp(out);
    result = json::parse(text, nullptr, false);
  }
  /// The number of "kjit: warning: remote cache" lines on its stderr.
  int remote_warnings() const {
    int n = 0;
    for (size_t at = 0; (at = stderr_text.find("kjit: warning: remote cache", at)) != std::string::npos; ++at) ++n;
    return n;
  }
  std::string describe() const { return "exit " + std::to_string(code) + "\nstdout: " + result.dump() + "\nstderr: " + stderr_text; }
};

class FleetTest : public ::testing::Test {
 protected:
  // Under the system's temp folder: a unix socket path must stay under 108 bytes.
  void SetUp() override {
    tmp_ = std::make_unique<kjit::cache::testing::TempDir>(fs::temp_directory_path().c_str());
    dir_ = tmp_->path();
    redis_ = std::make_unique<kjit::test::RedisServer>(dir_ / "redis");
  }
  void TearDown() override {
    redis_.reset();
    tmp_.reset();
  }

  /// The environment of a host: its cache folder, the server and `extra` KJIT_REMOTE_* settings.
  std::map<std::string, std::string> host_env(const std::string& host, std::map<std::string, std::string> extra = {}) {
    std::map<std::string, std::string> env = {{"KJIT_CACHE_DIR", (dir_ / "hosts" / host).string()},
                                              {"KJIT_REMOTE", redis_->url()},
                                              {"KJIT_REMOTE_TIMEOUT_MS", "200"},
                                              {"KJIT_REMOTE_CONNECT_TIMEOUT_MS", "200"}};
    for (auto& [k, v] : extra) env[k] = v;
    return env;
  }

  /// The environment of a host whose ops plan on device 0 of the simulated driver
  /// (`remote_worker --tuned`), or {} with a failure added when that driver is not built.
  std::map<std::string, std::string> tuned_env(const std::string& host, std::map<std::string, std::string> extra = {}) {
    const char* bin = std::getenv("KJIT_TEST_BINARY_DIR");
    if (bin == nullptr) {
      ADD_FAILURE() << "run through ctest (KJIT_TEST_BINARY_DIR)";
      return {};
    }
    const fs::path driver = fs::path(bin) / "simulated_driver";
    if (!fs::exists(driver / "libcuda.so.1")) {
      ADD_FAILURE() << "build kjit_simulated_driver";
      return {};
    }
    extra["LD_LIBRARY_PATH"] = driver.string();
    extra["KJIT_SIM_CC"] = "9.0";
    return host_env(host, std::move(extra));
  }

  Worker spawn(const std::map<std::string, std::string>& env, std::vector<std::string> args) {
    static int n = 0;
    Worker w;
    w.out = dir_ / ("worker" + std::to_string(n) + ".out");
    w.err = dir_ / ("worker" + std::to_string(n++) + ".err");
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      if (kv.rfind("KJIT_", 0) != 0) envs.push_back(kv);
    }
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    args.insert(args.begin(), KJIT_REMOTE_WORKER);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, w.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, w.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_EQ(posix_spawn(&w.pid, KJIT_REMOTE_WORKER, &actions, nullptr, argv.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
    return w;
  }

  Worker run(const std::map<std::string, std::string>& env, std::vector<std::string> args) {
    Worker w = spawn(env, std::move(args));
    w.finish();
    return w;
  }

  std::string key_of(const kjit::ProgramSpec& spec) {
    kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
    c.cache_dir = (dir_ / "keys").string();
    c.remote = {};
    return kjit::Runtime(c).key(spec, kjit::test::kFleetTarget);
  }
  kjit::cache::Key key_struct(const kjit::ProgramSpec& spec) {
    kjit::cache::Key k;
    EXPECT_TRUE(kjit::cache::Key::from_hex(key_of(spec), &k));
    return k;
  }

  void make_keys(const std::string& name) {
    const kjit::cache::remote::SecretKey k = kjit::cache::remote::generate_key();
    std::ofstream(dir_ / (name + ".key")) << kjit::cache::remote::secret_key_text(k);
    fs::permissions(dir_ / (name + ".key"), fs::perms::owner_read | fs::perms::owner_write);  // as keygen makes it
    std::ofstream(dir_ / (name + ".pub")) << kjit::cache::remote::public_key_text(k.pub);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// The token of `lease` once someone holds it (polled for up to `seconds`), or "".
  std::string wait_for_lease(const std::string& lease, double seconds) {
    const auto start = Clock::now();
    while (seconds_since(start) < seconds) {
      auto r = redis_->client().command({"GET", lease});
      if (r && r->type == kjit::cache::remote::Reply::Type::kString) return r->str;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return "";
  }
  /// The server's total_net_output_bytes (INFO stats): every byte it has sent to any client.
  long long net_output_bytes() {
    const std::string info = redis_->client().command({"INFO", "stats"})->str;
    const std::string field = "total_net_output_bytes:";
    const size_t at = info.find(field);
    return at == std::string::npos ? -1 : std::stoll(info.substr(at + field.size()));
  }

  std::unique_ptr<kjit::cache::testing::TempDir> tmp_;
  fs::path dir_;
  std::unique_ptr<kjit::test::RedisServer> redis_;
};

TEST_F(FleetTest, SixteenProcessesOfFourHostsCompileOneColdKeyOnce) {
  std::vector<Worker> workers;
  for (int i = 0; i < 16; ++i) workers.push_back(spawn(host_env("h" + std::to_string(i % 4)), {"cold"}));
  uint64_t compiles = 0, waits = 0;
  std::set<std::string> binaries;
  std::map<std::string, int> origins;
  for (Worker& w : workers) {
    w.finish();
    ASSERT_EQ(w.code, 0) << w.describe();
    compiles += w.result["compiles"].get<uint64_t>();
    waits += w.result["lease_waits"].get<uint64_t>();
    binaries.insert(w.result["runs"][0]["binary"].get<std::string>());
    origins[w.result["runs"][0]["origin"].get<std::string>()]++;
    EXPECT_EQ(w.remote_warnings(), 0) << w.describe();
  }
  EXPECT_EQ(compiles, 1u) << "exactly one NVRTC compile fleet-wide";
  EXPECT_EQ(binaries.size(), 1u) << "every process got the same binary";
  EXPECT_EQ(origins["compiled"], 1);
  // Every other host got it from the fleet tier (waiting on the lease, or after it); a process
  // finds it on its host's disk when a neighbour published it there first, else in the tier
  // (processes of one host that miss the disk together each ask the tier).
  EXPECT_GE(origins["remote"], 3);
  EXPECT_EQ(origins["remote"] + origins["disk"], 15);
  // Every host published the entry to its own disk cache.
  for (int h = 0; h < 4; ++h) {
    EXPECT_EQ(run(host_env("h" + std::to_string(h), {{"KJIT_REMOTE", ""}}), {"cold"}).result["disk_hits"], 1) << h;
  }
  // The lease was released (compare-and-delete), the entry is stored with a TTL.
  const auto keys = kjit::cache::remote::slot_keys("kjit", key_struct(kjit::test::fleet_spec("cold")));
  EXPECT_EQ(redis_->client().command({"EXISTS", keys.lease})->integer, 0);
  EXPECT_GT(redis_->client().command({"TTL", keys.value})->integer, 0);
}

TEST_F(FleetTest, ALeaseOwnerKilledMidCompileIsTakenOverWithinTheLease) {
  const auto keys = kjit::cache::remote::slot_keys("kjit", key_struct(kjit::test::fleet_spec("k", /*slow=*/true, false, 20)));
  const std::map<std::string, std::string> lease = {{"KJIT_REMOTE_LEASE_MS", "1000"}};
  Worker owner = spawn(host_env("a", lease), {"--slow", "--depth", "20", "k"});
  // Wait until the owner holds the lease (it is compiling), then start a second host.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (redis_->client().command({"EXISTS", keys.lease})->integer == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(redis_->client().command({"EXISTS", keys.lease})->integer, 1) << "the owner never took the lease";
  const std::string owner_token = redis_->client().command({"GET", keys.lease})->str;
  Worker waiter = spawn(host_env("b", lease), {"--slow", "--depth", "20", "k"});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  kill(owner.pid, SIGKILL);
  const auto killed = Clock::now();
  owner.finish();
  EXPECT_EQ(owner.code, 128 + SIGKILL);
  EXPECT_EQ(redis_->client().command({"EXISTS", keys.value})->integer, 0) << "the owner died before publishing";
  // The waiter takes the lease over once the dead owner's expires: within the lease (1 s) and
  // one poll (at most 50 ms), whatever the machine's load, since the compile comes after.
  double takeover = -1;
  while (std::chrono::duration<double>(Clock::now() - killed).count() < 30) {
    auto r = redis_->client().command({"GET", keys.lease});
    if (r && r->type == kjit::cache::remote::Reply::Type::kString && r->str != owner_token) {
      takeover = std::chrono::duration<double>(Clock::now() - killed).count();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_GT(takeover, 0) << "nobody took the lease over";
  EXPECT_LT(takeover, 1.0 + 0.5);
  waiter.finish();
  ASSERT_EQ(waiter.code, 0) << waiter.describe();
  EXPECT_EQ(waiter.result["lease_waits"], 1) << "it waited on the dead owner's lease";
  EXPECT_EQ(waiter.result["compiles"], 1) << "then took over and compiled";
  EXPECT_EQ(waiter.result["publishes"], 1);
  EXPECT_EQ(redis_->client().command({"EXISTS", keys.value})->integer, 1);
  EXPECT_EQ(redis_->client().command({"EXISTS", keys.lease})->integer, 0);
}

TEST_F(FleetTest, AnOwnerRenewsItsLeaseSoACompileLongerThanTheLeaseIsDoneOnce) {
  // A 600 ms lease, a compile of a second or more: without renewals the waiter would take the
  // lease over after 600 ms and compile too.
  const auto spec = kjit::test::fleet_spec("renew", /*slow=*/true, false, /*depth=*/50);
  const auto keys = kjit::cache::remote::slot_keys("kjit", key_struct(spec));
  const std::map<std::string, std::string> lease = {{"KJIT_REMOTE_LEASE_MS", "600"}};
  Worker owner = spawn(host_env("a", lease), {"--slow", "--depth", "50", "renew"});
  const std::string token = wait_for_lease(keys.lease, 20);
  ASSERT_FALSE(token.empty()) << "the owner never took the lease";
  const auto taken = Clock::now();
  Worker waiter = spawn(host_env("b", lease), {"--slow", "--depth", "50", "renew"});
  // The owner's token stays on the lease until the entry is there, however long that takes.
  double held = 0;
  std::string other;
  while (!owner.reaped()) {
    auto r = redis_->client().command({"GET", keys.lease});
    if (r && r->type == kjit::cache::remote::Reply::Type::kString) {
      if (r->str != token) other = r->str;
      if (other.empty()) held = seconds_since(taken);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(other, "") << "the lease changed hands while its owner was compiling";
  waiter.finish();
  ASSERT_EQ(owner.code, 0) << owner.describe();
  ASSERT_EQ(waiter.code, 0) << waiter.describe();
  EXPECT_EQ(owner.result["compiles"], 1);
  EXPECT_EQ(waiter.result["compiles"], 0) << "it waited on the renewed lease\n" << waiter.describe();
  EXPECT_EQ(waiter.result["lease_waits"], 1);
  EXPECT_EQ(waiter.result["remote_hits"], 1);
  EXPECT_GT(held, 0.9) << "the lease outlived its term by half";
  EXPECT_EQ(redis_->client().command({"EXISTS", keys.lease})->integer, 0) << "released";
}

TEST_F(FleetTest, AnOwnerKilledAtARandomPointCostsExactlyOneCompileAndEveryWaiterGetsTheKernel) {
  // Each run: an owner takes the lease and compiles; it is SIGKILLed at a random point of its
  // compile while 2-16 waiters (hosts of their own) arrive at random times. After its death
  // exactly one host compiles (none when it published first), and every waiter gets the
  // kernel within a lease plus a compile. KJIT_TEST_KILL_RUNS sets the number of runs.
  const char* runs_env = std::getenv("KJIT_TEST_KILL_RUNS");
  const int runs = runs_env ? std::atoi(runs_env) : 3;
  constexpr int kLeaseMs = 1000;
  const std::map<std::string, std::string> lease = {{"KJIT_REMOTE_LEASE_MS", std::to_string(kLeaseMs)}};
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int run = 0; run < runs; ++run) {
    const std::string variant = "kill" + std::to_string(run);
    const std::vector<std::string> args = {"--slow", "--depth", "20", variant};
    const auto keys = kjit::cache::remote::slot_keys("kjit", key_struct(kjit::test::fleet_spec(variant, true, false, 20)));
    Worker owner = spawn(host_env("o" + std::to_string(run), lease), args);
    ASSERT_FALSE(wait_for_lease(keys.lease, 20).empty()) << "the owner never took the lease";
    const auto leased = Clock::now();
    const int n = std::uniform_int_distribution<int>(2, 16)(rng);
    const double kill_at = std::uniform_real_distribution<double>(0, 0.5)(rng);
    std::vector<double> arrivals(n);
    for (double& a : arrivals) a = std::uniform_real_distribution<double>(0, 1.5)(rng);
    std::sort(arrivals.begin(), arrivals.end());
    std::vector<Worker> waiters;
    bool killed = false, published_first = false;
    Clock::time_point killed_at{};
    auto kill_owner = [&] {
      kill(owner.pid, SIGKILL);
      killed_at = Clock::now();
      owner.finish();
      killed = true;
      published_first = redis_->client().command({"EXISTS", keys.value})->integer == 1;
    };
    for (int i = 0; i < n; ++i) {
      if (!killed && arrivals[i] > kill_at) {
        std::this_thread::sleep_until(leased + std::chrono::duration<double>(kill_at));
        kill_owner();
      }
      std::this_thread::sleep_until(leased + std::chrono::duration<double>(arrivals[i]));
      waiters.push_back(spawn(host_env("w" + std::to_string(run) + "_" + std::to_string(i), lease), args));
    }
    if (!killed) {
      std::this_thread::sleep_until(leased + std::chrono::duration<double>(kill_at));
      kill_owner();
    }
    const std::string what = "run " + std::to_string(run) + ": " + std::to_string(n) + " waiters, owner killed " +
                             std::to_string(kill_at) + " s into its lease" + (published_first ? " (after it published)" : "");
    // A kill that came after the owner's compile finds it done (published, or exited): then no
    // host compiles again.
    ASSERT_TRUE(owner.code == 128 + SIGKILL || (owner.code == 0 && published_first)) << what << "\n" << owner.describe();
    uint64_t compiles = 0;
    double compile_s = 0;
    std::set<std::string> binaries;
    for (bool all = false; !all;) {
      all = true;
      for (Worker& w : waiters) all = w.reaped() && all;
      if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    Clock::time_point last = killed_at;
    for (Worker& w : waiters) {
      ASSERT_EQ(w.code, 0) << what << "\n" << w.describe();
      compiles += w.result["compiles"].get<uint64_t>();
      compile_s += w.result["compile_ms"].get<double>() / 1000;
      binaries.insert(w.result["runs"][0]["binary"].get<std::string>());
      last = std::max(last, w.exited);
    }
    EXPECT_EQ(compiles, published_first ? 0u : 1u) << what;
    EXPECT_EQ(binaries.size(), 1u) << what;
    // Within a lease and the one compile after the death (plus process starts and polls).
    EXPECT_LT(std::chrono::duration<double>(last - killed_at).count(), kLeaseMs / 1000.0 + compile_s + 2.0) << what;
    std::printf("%s: %llu compile(s) after it, all %d had the kernel %.2f s after the kill\n", what.c_str(),
                static_cast<unsigned long long>(compiles), n, std::chrono::duration<double>(last - killed_at).count());
  }
}

TEST_F(FleetTest, AValueOverTheCapIsRefusedByItsLengthWithoutItsBytes) {
  // 8 MB planted under an entry's key, a 100 KB cap: a reader learns the length (STRLEN) and
  // never downloads the value.
  const std::map<std::string, std::string> cap = {{"KJIT_REMOTE_MAX_VALUE_BYTES", "100K"}};
  const auto keys = kjit::cache::remote::slot_keys("kjit", key_struct(kjit::test::fleet_spec("big")));
  ASSERT_TRUE(redis_->client().command({"SET", keys.value, std::string(8 << 20, 'x')}));
  // A plain miss of the same program, for the memory a reader needs anyway.
  Worker plain = run(host_env("plain", cap), {"small"});
  ASSERT_EQ(plain.code, 0) << plain.describe();
  auto ro = cap;
  ro["KJIT_REMOTE_MODE"] = "ro";
  for (const auto& [name, env] : std::map<std::string, std::map<std::string, std::string>>{{"rw", cap}, {"ro", ro}}) {
    const long long before = net_output_bytes();
    Worker w = run(host_env("reader-" + name, env), {"big"});
    const long long sent = net_output_bytes() - before;
    ASSERT_EQ(w.code, 0) << name << "\n" << w.describe();
    EXPECT_LT(sent, 1 << 20) << name << ": the server sent the value";
    EXPECT_LT(w.max_rss_kib - plain.max_rss_kib, 5 * 1024) << name << ": peak memory over a plain miss's";
    EXPECT_EQ(w.result["oversized"], 1) << name;
    EXPECT_EQ(w.result["rejected_signatures"], 0) << name;
    EXPECT_EQ(w.result["compiles"], 1) << name << ": compiled locally instead";
    EXPECT_EQ(w.remote_warnings(), 1) << name << "\n" << w.describe();
    EXPECT_NE(w.stderr_text.find("oversized: 8388608 bytes"), std::string::npos) << name << "\n" << w.describe();
    EXPECT_EQ(w.stderr_text.find("corrupt"), std::string::npos) << name << "\n" << w.describe();
    std::printf("%s reader: the server sent %lld bytes; peak memory %+ld KiB over a plain miss\n", name.c_str(), sent,
                w.max_rss_kib - plain.max_rss_kib);
  }
  // A builder holding the signing key replaces it under its lease (its read is bounded too);
  // readers then hit.
  make_keys("fleet");
  auto builder = cap;
  builder["KJIT_REMOTE_SIGNING_KEY"] = path("fleet.key");
  const long long before = net_output_bytes();
  Worker repair = run(host_env("builder", builder), {"big"});
  EXPECT_LT(net_output_bytes() - before, 1 << 20);
  EXPECT_EQ(repair.result["oversized"], 1) << repair.describe();
  EXPECT_EQ(repair.result["publishes"], 1) << repair.describe();
  EXPECT_EQ(run(host_env("after", cap), {"big"}).result["remote_hits"], 1);
}

TEST_F(FleetTest, EveryHostReadsAValueWholeWhateverItsSizeWithinTheCap) {
  // A read-only host reads a value's first kPrefetchBytes with its length and the rest after; a
  // read-write host reads it in one script. Values below, at, just over and far over that size.
  kjit::RemoteConfig rw;
  rw.parse_url(redis_->url());
  rw.op_timeout_ms = rw.connect_timeout_ms = 2000;
  kjit::RemoteConfig ro = rw;
  ro.mode = kjit::RemoteMode::kReadOnly;
  kjit::cache::remote::RemoteTier rw_tier(rw), ro_tier(ro);
  const size_t record_overhead = kjit::cache::remote::encode_record(kjit::cache::remote::RecordKind::kEntry,
                                                                    kjit::cache::testing::key_for(0),
                                                                    kjit::cache::encode(kjit::cache::testing::sample_entry(0, 0)),
                                                                    nullptr)
                                     .size();
  int i = 0;
  for (size_t value_bytes : {size_t{4096}, size_t{kjit::cache::remote::kPrefetchBytes},
                             size_t{kjit::cache::remote::kPrefetchBytes + 1}, size_t{3} << 20}) {
    const kjit::cache::Entry e = kjit::cache::testing::sample_entry(++i, value_bytes - record_overhead);
    const std::string value =
        kjit::cache::remote::encode_record(kjit::cache::remote::RecordKind::kEntry, e.key, kjit::cache::encode(e), nullptr);
    ASSERT_EQ(value.size(), value_bytes);
    ASSERT_TRUE(redis_->client().command({"SET", kjit::cache::remote::slot_keys("kjit", e.key).value, value}));
    for (auto* tier : {&rw_tier, &ro_tier}) {
      const auto got = tier->fetch(e.key);
      ASSERT_EQ(got.found, kjit::cache::remote::RemoteTier::Found::kEntry) << value_bytes;
      EXPECT_EQ(got.entry->payload, e.payload) << value_bytes;
    }
  }
}

TEST_F(FleetTest, OneLateReplyIsSentAgainNotAFault) {
  // The server stalls a little longer than the op timeout: the command is sent again on a fresh
  // connection and answered; the breaker stays closed.
  kjit::RemoteConfig rc;
  rc.parse_url(redis_->url());
  rc.op_timeout_ms = rc.connect_timeout_ms = 300;
  rc.cooldown_ms = 60000;
  kjit::cache::remote::RedisClient c(rc);
  ASSERT_TRUE(c.command({"PING"}));
  redis_->pause();
  std::thread resume([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    redis_->resume();
  });
  auto r = c.command({"PING"});
  resume.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->str, "PONG");
  EXPECT_EQ(c.faults(), 1u) << "the lost reply is counted";
  EXPECT_TRUE(c.command({"PING"})) << "and the breaker is closed";
  EXPECT_EQ(c.skipped(), 0u);
}

TEST_F(FleetTest, ServerKilledHungOrRestartedCostsABoundedMissAndOneWarning) {
  // Timeouts a loaded 2-core CI machine still meets when the server is up.
  constexpr double kTimeoutMs = 100;
  const std::map<std::string, std::string> fast = {{"KJIT_REMOTE_TIMEOUT_MS", "100"},
                                                   {"KJIT_REMOTE_CONNECT_TIMEOUT_MS", "100"},
                                                   {"KJIT_REMOTE_COOLDOWN_MS", "60000"}};
  // Warm: a second host gets it from the tier.
  ASSERT_EQ(run(host_env("w1", fast), {"warm"}).code, 0);
  Worker warm = run(host_env("w2", fast), {"warm"});
  ASSERT_EQ(warm.code, 0) << warm.describe();
  EXPECT_EQ(warm.result["remote_hits"], 1);
  EXPECT_EQ(warm.remote_warnings(), 0);

  // Hung (SIGSTOP): three cold ops all succeed. The first op's command times out, is sent again
  // on a fresh connection and times out again: two lost replies in a row open the breaker, which
  // skips the tier for the other ops.
  redis_->pause();
  Worker hung = run(host_env("s1", fast), {"x1", "x2", "x3"});
  redis_->resume();
  ASSERT_EQ(hung.code, 0) << hung.describe();
  EXPECT_EQ(hung.result["compiles"], 3);
  EXPECT_EQ(hung.remote_warnings(), 1) << hung.describe();
  EXPECT_EQ(hung.result["remote_errors"], kjit::cache::remote::kBreakerFaults)
      << "two attempts of one command, then the breaker skipped the tier";
  // The added cost: two op timeouts on the first op, nothing on the others.
  const double compile_ms = hung.result["runs"][2]["ms"].get<double>();
  EXPECT_LT(hung.result["runs"][0]["ms"].get<double>(), compile_ms + kjit::cache::remote::kBreakerFaults * kTimeoutMs + 500)
      << hung.describe();

  // Killed: same, through a refused connection.
  redis_->stop();
  Worker down = run(host_env("s2", fast), {"y1", "y2"});
  ASSERT_EQ(down.code, 0) << down.describe();
  EXPECT_EQ(down.result["compiles"], 2);
  EXPECT_EQ(down.remote_warnings(), 1) << down.describe();

  // Restarted (empty): hosts use it again, no warning.
  redis_->start();
  ASSERT_EQ(run(host_env("r1", fast), {"z"}).result["publishes"], 1);
  Worker back = run(host_env("r2", fast), {"z"});
  EXPECT_EQ(back.result["remote_hits"], 1) << back.describe();
  EXPECT_EQ(back.remote_warnings(), 0);
}

TEST_F(FleetTest, ABreakerReopensAfterItsCooldown) {
  // In one process: the server dies, the breaker opens; it comes back, the cooldown passes, the
  // tier is used again.
  kjit::RemoteConfig rc;
  rc.parse_url(redis_->url());
  rc.op_timeout_ms = rc.connect_timeout_ms = 50;
  rc.cooldown_ms = 100;
  kjit::cache::remote::RedisClient c(rc);
  ASSERT_TRUE(c.command({"PING"}));
  redis_->stop();
  EXPECT_FALSE(c.command({"PING"}));  // refused twice (sent again once), then the breaker opens
  EXPECT_FALSE(c.command({"PING"}));
  EXPECT_EQ(c.faults(), static_cast<uint64_t>(kjit::cache::remote::kBreakerFaults));
  EXPECT_EQ(c.skipped(), 1u);
  redis_->start();
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  EXPECT_TRUE(c.command({"PING"}));
}

TEST_F(FleetTest, TamperedValuesAreRejectedCountedAndNeverLoaded) {
  make_keys("fleet");
  make_keys("rogue");
  const std::map<std::string, std::string> builder = {{"KJIT_REMOTE_SIGNING_KEY", path("fleet.key")},
                                                      {"KJIT_REMOTE_TRUSTED_KEYS", path("fleet.pub")}};
  const std::map<std::string, std::string> reader = {{"KJIT_REMOTE_MODE", "ro"},
                                                     {"KJIT_REMOTE_TRUSTED_KEYS", path("fleet.pub")}};
  // A signed entry, and a reader that trusts its key.
  ASSERT_EQ(run(host_env("builder", builder), {"t"}).result["publishes"], 1);
  Worker good = run(host_env("good", reader), {"t"});
  EXPECT_EQ(good.result["remote_hits"], 1) << good.describe();
  EXPECT_EQ(good.result["compiles"], 0);

  const kjit::cache::Key key = key_struct(kjit::test::fleet_spec("t"));
  const auto keys = kjit::cache::remote::slot_keys("kjit", key);
  const std::string signed_value = redis_->client().command({"GET", keys.value})->str;
  std::optional<kjit::cache::Entry> entry;
  {
    kjit::cache::remote::Rejection why;
    auto r = kjit::cache::remote::decode_record(signed_value, key, {}, &why);
    ASSERT_TRUE(r) << kjit::cache::remote::rejection_name(why);
    entry = r->entry;
  }
  const kjit::cache::remote::SecretKey rogue = kjit::cache::remote::read_secret_key(path("rogue.key"), "test");
  kjit::cache::Key other = key;
  other.lo ^= 1;
  kjit::cache::Entry foreign_entry = *entry;
  foreign_entry.key = other;
  std::string flipped = signed_value;
  flipped[flipped.size() / 2] ^= 0x40;
  const std::map<std::string, std::pair<std::string, bool>> cases = {
      {"corrupt", {flipped, false}},
      {"truncated", {signed_value.substr(0, signed_value.size() - 9), false}},
      {"foreign", {kjit::cache::remote::encode_record(kjit::cache::remote::RecordKind::kEntry, other,
                                                      kjit::cache::encode(foreign_entry), nullptr),
                   false}},
      {"unsigned", {kjit::cache::remote::encode_record(kjit::cache::remote::RecordKind::kEntry, key,
                                                       kjit::cache::encode(*entry), nullptr),
                    true}},
      {"rogue-signed", {kjit::cache::remote::encode_record(kjit::cache::remote::RecordKind::kEntry, key,
                                                           kjit::cache::encode(*entry), &rogue),
                        true}},
  };
  for (const auto& [name, value] : cases) {
    ASSERT_TRUE(redis_->client().command({"SET", keys.value, value.first}));
    Worker w = run(host_env("reader-" + name, reader), {"t"});
    ASSERT_EQ(w.code, 0) << name << "\n" << w.describe();
    EXPECT_EQ(w.result["remote_hits"], 0) << name;
    EXPECT_EQ(w.result["compiles"], 1) << name << ": compiled locally instead";
    EXPECT_EQ(w.result["runs"][0]["origin"], "compiled") << name;
    EXPECT_EQ(w.result["rejected_signatures"], value.second ? 1 : 0) << name;
    EXPECT_EQ(w.remote_warnings(), 1) << name << "\n" << w.describe();
    EXPECT_NE(w.stderr_text.find(key.hex()), std::string::npos) << name;
  }
  // A builder with the key repairs the slot under its lease; readers hit again.
  Worker repair = run(host_env("builder2", builder), {"t"});
  EXPECT_EQ(repair.result["publishes"], 1) << repair.describe();
  EXPECT_EQ(run(host_env("good2", reader), {"t"}).result["remote_hits"], 1);
}

TEST_F(FleetTest, AReadOnlyHostNeverWrites) {
  Worker ro = run(host_env("ro", {{"KJIT_REMOTE_MODE", "ro"}}), {"r1", "r2"});
  ASSERT_EQ(ro.code, 0) << ro.describe();
  EXPECT_EQ(ro.result["compiles"], 2);
  EXPECT_EQ(ro.result["publishes"], 0);
  EXPECT_EQ(redis_->keys(), 0) << "no lease, no entry";
  // Its hit does not refresh the TTL either.
  ASSERT_EQ(run(host_env("rw"), {"r1"}).result["publishes"], 1);
  const auto keys = kjit::cache::remote::slot_keys("kjit", key_struct(kjit::test::fleet_spec("r1")));
  ASSERT_TRUE(redis_->client().command({"EXPIRE", keys.value, "1000"}));
  Worker hit = run(host_env("ro2", {{"KJIT_REMOTE_MODE", "ro"}}), {"r1"});
  EXPECT_EQ(hit.result["remote_hits"], 1);
  EXPECT_LE(redis_->client().command({"TTL", keys.value})->integer, 1000);
  EXPECT_EQ(redis_->keys(), 1);
  // A read-write host also refuses to write unsigned values where the fleet requires signatures.
  make_keys("fleet");
  Worker unsigned_writer = run(host_env("nokey", {{"KJIT_REMOTE_TRUSTED_KEYS", path("fleet.pub")}}), {"r3"});
  EXPECT_EQ(unsigned_writer.result["publishes"], 0);
  EXPECT_EQ(redis_->keys(), 1);
}

TEST_F(FleetTest, AFailedCompileIsRecordedAndNotRetriedFleetWide) {
  Worker first = run(host_env("f1"), {"--broken", "b"});
  EXPECT_EQ(first.code, 3) << first.describe();
  EXPECT_EQ(first.result["runs"][0]["origin"], "compile_error");
  const auto keys = kjit::cache::remote::slot_keys("kjit", key_struct(kjit::test::fleet_spec("b", false, true)));
  EXPECT_EQ(redis_->client().command({"EXISTS", keys.failure})->integer, 1);
  EXPECT_EQ(redis_->client().command({"EXISTS", keys.value})->integer, 0);
  Worker second = run(host_env("f2"), {"--broken", "b"});
  EXPECT_EQ(second.code, 3) << second.describe();
  EXPECT_EQ(second.result["compiles"], 0) << "nothing compiled: the fleet's record was thrown";
  EXPECT_EQ(second.result["remote_hits"], 1);
  EXPECT_EQ(second.result["runs"][0]["log_bytes"], first.result["runs"][0]["log_bytes"]) << "with the same log";
  EXPECT_NE(second.stderr_text.find("recorded by the fleet tier"), std::string::npos) << second.describe();
}

TEST_F(FleetTest, AHostMergesTheFleetsTuningTableOfItsDevice) {
  // What runtime/ops/tuned.cc does when an op first loads its device's table.
  auto table = [](int64_t bucket, int64_t when, double us) {
    kjit::cache::TuneTable t;
    t.fingerprint_id = "abcdef012345";
    t.fingerprint_text = "name=Test GPU";
    kjit::cache::TuneEntry e;
    e.op = "decode";
    e.bucket = {bucket};
    e.winner = {"attention.decode", "head_dim=128 rows=8", {}, us, us, 0, 128, 0, 96, 1};
    e.default_choice = e.winner;
    e.tuned_unix = when;
    t.entries.push_back(e);
    return t;
  };
  kjit::RemoteConfig rc;
  rc.parse_url(redis_->url());
  kjit::cache::remote::RemoteTier tier(rc);
  ASSERT_TRUE(kjit::cache::remote::push_tune_table(tier, table(1, 100, 5)));
  ASSERT_TRUE(kjit::cache::remote::push_tune_table(tier, table(2, 100, 6)));
  kjit::cache::TuneTable local = table(2, 50, 60);  // an older local measurement of bucket 2
  bool found = true;
  kjit::cache::remote::merge_fleet_table(&tier, "abcdef012345", &local, &found);
  EXPECT_TRUE(found);
  ASSERT_EQ(local.entries.size(), 2u) << "both tuners' buckets arrived";
  EXPECT_EQ(local.find("decode", {2})->winner.us, 6) << "the newer measurement won";
  // No local table: the fleet's is taken as it is; another fingerprint finds nothing.
  kjit::cache::TuneTable none;
  found = false;
  kjit::cache::remote::merge_fleet_table(&tier, "abcdef012345", &none, &found);
  EXPECT_TRUE(found);
  EXPECT_EQ(none.entries.size(), 2u);
  found = false;
  kjit::cache::remote::merge_fleet_table(&tier, "ffffffffffff", &none, &found);
  EXPECT_FALSE(found);
  // Without KJIT_REMOTE (no tier) nothing happens.
  found = false;
  kjit::cache::remote::merge_fleet_table(nullptr, "abcdef012345", &none, &found);
  EXPECT_FALSE(found);
}

// One door: a process's ops read the fleet's tuning table through the runtime's one RemoteTier
// (runtime/fleet.hpp), so its round trips and faults are the runtime's (RuntimeStats, the
// Prometheus text), and the table and the compiles share one connection.
TEST_F(FleetTest, TheTuningTableShareGoesThroughTheRuntimesOneTier) {
  const auto env = tuned_env("tuned");
  ASSERT_FALSE(env.empty());
  auto connections = [&] {
    const std::string info = redis_->client().command({"INFO", "stats"})->str;
    const size_t at = info.find("total_connections_received:");
    return at == std::string::npos ? -1 : std::stoll(info.substr(at + 27));
  };
  auto metric = [](const Worker& w, const std::string& name) {
    const kjit::testing::PrometheusText t = kjit::testing::parse_prometheus(w.result["metrics"].get<std::string>());
    return t.samples.count(name) ? t.samples.at(name) : -1.0;
  };

  // An op's first plan on the device, nothing else: the fleet's table is asked for once, and the
  // runtime counts that round trip.
  const Worker plan = run(env, {"--tuned"});
  ASSERT_EQ(plan.code, 0) << plan.describe();
  EXPECT_EQ(plan.result["tuned"], false);
  EXPECT_EQ(plan.result["round_trips"], 1) << plan.describe();
  EXPECT_EQ(metric(plan, "kjit_remote_round_trips_total"), 1.0) << plan.describe();
  EXPECT_EQ(plan.result["remote_errors"], 0);

  // The table and a compile: one connection for both.
  const long long before = connections();
  const Worker both = run(env, {"--tuned", "tuned-compile"});
  ASSERT_EQ(both.code, 0) << both.describe();
  EXPECT_EQ(connections() - before, 1) << "a second connection: a second door";
  EXPECT_GT(both.result["round_trips"].get<int>(), 1);
  EXPECT_EQ(metric(both, "kjit_remote_round_trips_total"), both.result["round_trips"].get<double>());

  // The fleet's table of this device is merged and checked when the op loads it.
  kjit::cache::TuneTable t;
  t.fingerprint_id = plan.result["fingerprint"].get<std::string>();
  t.fingerprint_text = plan.result["fingerprint_text"].get<std::string>();
  kjit::cache::TuneEntry e;
  e.op = "no_such_op";
  e.bucket = {1};
  e.winner = {"attention.decode", "head_dim=128 rows=8", {}, 5, 5, 0, 128, 0, 96, 1};
  e.default_choice = e.winner;
  e.tuned_unix = 100;
  t.entries.push_back(e);
  {
    kjit::RemoteConfig rc;
    rc.parse_url(redis_->url());
    kjit::cache::remote::RemoteTier tier(rc);
    ASSERT_TRUE(kjit::cache::remote::push_tune_table(tier, t));
  }
  const Worker merged = run(env, {"--tuned"});
  ASSERT_EQ(merged.code, 0) << merged.describe();
  EXPECT_NE(merged.stderr_text.find("entry op=no_such_op bucket=[1]: unknown op"), std::string::npos)
      << merged.describe();

  // A server that is gone: the table's fault is the runtime's fault, counted and exported.
  redis_->stop();
  const Worker down = run(env, {"--tuned"});
  ASSERT_EQ(down.code, 0) << down.describe();
  // The refused connection is tried again once before the breaker opens: two failed attempts.
  EXPECT_EQ(down.result["remote_errors"], kjit::cache::remote::kBreakerFaults) << down.describe();
  EXPECT_EQ(metric(down, "kjit_remote_errors_total"), kjit::cache::remote::kBreakerFaults) << down.describe();
  EXPECT_EQ(down.remote_warnings(), 1) << down.describe();
}

// An op's read of the fleet's tuning table is bounded like an entry's: a table over the cap is
// refused by its length, counted as oversized and never downloaded, in the one round trip.
TEST_F(FleetTest, AnOpRefusesAnOversizedTuningTableByItsLength) {
  const auto env = tuned_env("tuned", {{"KJIT_REMOTE_MAX_VALUE_BYTES", "100K"}});
  ASSERT_FALSE(env.empty());
  const Worker plan = run(env, {"--tuned"});
  ASSERT_EQ(plan.code, 0) << plan.describe();
  const std::string table_key = "{kjit}:tune:" + plan.result["fingerprint"].get<std::string>();
  ASSERT_TRUE(redis_->client().command({"SET", table_key, std::string(8 << 20, 'x')}));
  const long long before = net_output_bytes();
  const Worker w = run(env, {"--tuned"});
  const long long sent = net_output_bytes() - before;
  ASSERT_EQ(w.code, 0) << w.describe();
  EXPECT_LT(sent, 1 << 20) << "the server sent the table";
  EXPECT_EQ(w.result["tuned"], false);
  EXPECT_EQ(w.result["oversized"], 1) << w.describe();
  EXPECT_EQ(w.result["round_trips"], 1) << w.describe();
  EXPECT_EQ(w.result["remote_errors"], 0) << w.describe();
  EXPECT_NE(w.stderr_text.find("was rejected (oversized: 8388608 bytes, over KJIT_REMOTE_MAX_VALUE_BYTES=102400; "
                               "not downloaded)"),
            std::string::npos)
      << w.describe();
  std::printf("an op's read of an 8 MiB tuning table, cap 100 KB: the server sent %lld bytes\n", sent);
}

TEST_F(FleetTest, WithoutKjitRemoteNothingTouchesTheServer) {
  Worker w = run(host_env("plain", {{"KJIT_REMOTE", ""}}), {"p"});
  ASSERT_EQ(w.code, 0);
  EXPECT_EQ(w.result["remote_misses"], 0);
  EXPECT_EQ(redis_->keys(), 0);
}

}  // namespace
