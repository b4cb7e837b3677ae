// The fleet tier on loopback, without a GPU: a redis-server on a unix socket that this program
// starts itself, one builder that compiles the default set and publishes it (signed), then:
//   - a new host's start: the same set obtained from the warm remote tier (read-only host with
//     the trusted key: fetch, verify signature and checksum, publish to its disk), against the
//     builder's local compile of it;
//   - the per-entry fetch latency (median, p90, max), beside a disk hit's;
//   - the added cost of a remote miss: a lookup that finds nothing, and a read-write host's whole
//     single-flight round (lease, second look, publish, release) around a compile.
//   remote_bench [--arch sm_90a] [--family NAME]... [--jobs N] [--json PATH] [--dir DIR]
// (--dir: where the hosts' disk caches and the server live; the disk's fsync latency is most of
// a remote hit's cost, so compare /tmp with /dev/shm.)
#include <kjit/families.hpp>
#include <kjit/kjit.hpp>

#include "runtime/internal.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

struct Work {
  kjit::ProgramSpec spec;
  kjit::Target target;
};

/// redis-server on a unix socket in `dir`, killed on destruction.
struct Server {
  pid_t pid = -1;
  std::string socket;
  explicit Server(const fs::path& dir) : socket((dir / "redis.sock").string()) {
    fs::create_directories(dir);
    std::vector<std::string> args = {"redis-server", "--port", "0", "--unixsocket", socket, "--save", "",
                                     "--appendonly", "no", "--dir", dir.string(), "--logfile",
                                     (dir / "redis.log").string()};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawnp(&pid, "redis-server", nullptr, nullptr, argv.data(), environ) != 0) {
      throw std::runtime_error("cannot start redis-server");
    }
    kjit::RemoteConfig c;
    c.parse_url("unix://" + socket);
    c.connect_timeout_ms = c.op_timeout_ms = 1000;
    c.cooldown_ms = 0;
    kjit::cache::remote::RedisClient client(c);
    for (int i = 0; i < 2000; ++i) {
      if (fs::exists(socket)) {
        if (auto r = client.command({"PING"}); r && r->str == "PONG") return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    throw std::runtime_error("redis-server did not start");
  }
  ~Server() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The fleet tier on loopback: a new host's start from a warm remote tier, per-entry fetch "
               "latency and the cost of a remote miss"};
  std::string arch = "sm_90a", json_path, where = fs::temp_directory_path().string();
  std::vector<std::string> family_names;
  int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("--arch", arch, "Target of the default set");
  app.add_option("--family", family_names, "Only these families (repeatable)");
  app.add_option("--jobs", jobs, "Builder threads for the local compile");
  app.add_option("--json", json_path, "Also write the figures here");
  app.add_option("--dir", where, "Folder for the temp dir of the caches and the server");
  CLI11_PARSE(app, argc, argv);

  std::string pattern = (fs::path(where) / "kjit-remote-bench-XXXXXX").string();
  const fs::path dir = mkdtemp(pattern.data());
  int rc = 0;
  try {
    Server server(dir / "redis");
    const kjit::cache::remote::SecretKey key = kjit::cache::remote::generate_key();
    std::ofstream(dir / "fleet.key") << kjit::cache::remote::secret_key_text(key);
    fs::permissions(dir / "fleet.key", fs::perms::owner_read | fs::perms::owner_write);  // a secret key is 0600
    std::ofstream(dir / "fleet.pub") << kjit::cache::remote::public_key_text(key.pub);

    auto config = [&](const std::string& host, kjit::RemoteMode mode) {
      kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
      c.cache_dir = (dir / host).string();
      c.remote = kjit::RemoteConfig{};
      c.remote.parse_url("unix://" + server.socket);
      c.remote.mode = mode;
      c.remote.trusted_key_files = {(dir / "fleet.pub").string()};
      if (mode == kjit::RemoteMode::kReadWrite) c.remote.signing_key_file = (dir / "fleet.key").string();
      return c;
    };

    // The default set for the target, as `kjit precompile` builds it.
    const kjit::Target device = kjit::Target::parse(arch);
    std::vector<Work> work;
    std::set<std::string> seen;
    for (const kjit::Family& f : kjit::families()) {
      if (!family_names.empty() && std::find(family_names.begin(), family_names.end(), f.name) == family_names.end()) continue;
      if (f.min_sm > device.sm()) continue;
      for (const auto& p : f.default_points()) {
        if (!f.unsupported_reason(p, device).empty()) continue;
        Work w{f.spec(p), f.compile_target(p, device)};
        if (seen.insert(w.spec.family + w.spec.template_args + w.target.str()).second) work.push_back(std::move(w));
      }
    }
    fmt::print("{} default specializations for {}\n", work.size(), arch);

    // 1. The builder compiles the set locally and publishes it (signed).
    kjit::Runtime builder(config("builder", kjit::RemoteMode::kReadWrite));
    auto start = Clock::now();
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t i = next++; i < work.size(); i = next++) builder.compile(work[i].spec, work[i].target);
    };
    std::vector<std::thread> threads;
    for (int t = 1; t < jobs; ++t) threads.emplace_back(worker);
    worker();
    for (auto& t : threads) t.join();
    const double build_ms = ms_since(start);
    const kjit::RuntimeStats bs = builder.stats();
    const uint64_t set_bytes = kjit::cache::DiskCache((dir / "builder").string(), 0).stats().bytes;
    fmt::print("builder: compiled {} locally on {} thread{} in {:.2f} s (NVRTC {:.2f} s summed), published {} "
               "({:.2f} MiB of entries)\n",
               bs.compiles, jobs, jobs == 1 ? "" : "s", build_ms / 1000, bs.compile_ms / 1000, bs.remote_publishes,
               static_cast<double>(set_bytes) / (1 << 20));

    // 2. A new serving host (read-only, trusting the fleet key) starts from the warm tier.
    std::vector<double> fetch_ms, disk_ms;
    kjit::Runtime host(config("host", kjit::RemoteMode::kReadOnly));
    start = Clock::now();
    for (const Work& w : work) {
      const auto t = Clock::now();
      host.compile(w.spec, w.target);
      fetch_ms.push_back(ms_since(t));
    }
    const double pull_ms = ms_since(start);
    const kjit::RuntimeStats hs = host.stats();
    fmt::print("new host: {} entries from the remote tier in {:.3f} s ({} remote hits, {} compiles, {} rejected)\n",
               work.size(), pull_ms / 1000, hs.remote_hits, hs.compiles, hs.remote_rejected_signatures);
    if (hs.remote_hits != work.size() || hs.compiles != 0) rc = 1;
    // The same host restarted: its disk now holds the set.
    kjit::Runtime restarted(config("host", kjit::RemoteMode::kReadOnly));
    for (const Work& w : work) {
      const auto t = Clock::now();
      restarted.compile(w.spec, w.target);
      disk_ms.push_back(ms_since(t));
    }
    fmt::print("per entry: remote hit median {:.3f} ms, p90 {:.3f}, max {:.3f}; disk hit median {:.3f} ms\n",
               quantile(fetch_ms, 0.5), quantile(fetch_ms, 0.9), quantile(fetch_ms, 1.0), quantile(disk_ms, 0.5));

    // Where a new host's time per entry goes: deriving the key (a cold process hashes the sources
    // and the toolkit headers they include: a local compile pays it too), and the tier's part
    // (GET, checksum, signature, decode), measured alone on a third host's tier.
    std::vector<double> key_ms, tier_ms;
    {
      kjit::RuntimeConfig plain = config("keys", kjit::RemoteMode::kReadOnly);
      plain.remote = kjit::RemoteConfig{};
      kjit::Runtime fresh(plain);
      kjit::cache::remote::RemoteTier reader(config("reader", kjit::RemoteMode::kReadOnly).remote);
      for (const Work& w : work) {
        auto t = Clock::now();
        const std::string hex = fresh.key(w.spec, w.target);
        key_ms.push_back(ms_since(t));
        kjit::cache::Key k;
        kjit::cache::Key::from_hex(hex, &k);
        t = Clock::now();
        if (!reader.fetch(k).entry) rc = 1;
        tier_ms.push_back(ms_since(t));
      }
    }
    fmt::print("  of which: key derivation in a cold process median {:.3f} ms; remote fetch + verify alone median "
               "{:.3f} ms (p90 {:.3f}); the rest is the atomic publish to the host's disk (fsync)\n",
               quantile(key_ms, 0.5), quantile(tier_ms, 0.5), quantile(tier_ms, 0.9));

    // 3. The cost of a miss, without the compile: a lookup that finds nothing (what a read-only
    // host adds, plus a PTTL), and a read-write host's single-flight round.
    kjit::cache::remote::RemoteTier tier(config("unused", kjit::RemoteMode::kReadWrite).remote);
    std::mt19937_64 rng(7);
    std::vector<double> miss_ms, round_ms;
    kjit::cache::Entry sample;
    {
      kjit::cache::Key k;
      kjit::cache::Key::from_hex(builder.key(work[0].spec, work[0].target), &k);
      sample = *kjit::cache::DiskCache((dir / "builder").string(), 0).lookup(k, false);
    }
    for (int i = 0; i < 300; ++i) {
      kjit::cache::Key k{rng(), rng()};
      auto t = Clock::now();
      tier.fetch(k);
      miss_ms.push_back(ms_since(t));
      kjit::cache::Entry e = sample;
      e.key = k;
      bool compiled = false;
      t = Clock::now();
      tier.obtain(k, [](const kjit::cache::Entry&) { return true; }, [&] { return e; }, &compiled);
      round_ms.push_back(ms_since(t));
    }
    fmt::print("remote miss: lookup median {:.3f} ms (p90 {:.3f}); read-write round (lease, second look, signed "
               "publish of {} bytes, release) median {:.3f} ms (p90 {:.3f})\n",
               quantile(miss_ms, 0.5), quantile(miss_ms, 0.9), sample.payload.size(), quantile(round_ms, 0.5),
               quantile(round_ms, 0.9));

    if (!json_path.empty()) {
      nlohmann::json j = {{"arch", arch},
                          {"dir", where},
                          {"entries", work.size()},
                          {"build_jobs", jobs},
                          {"set_bytes", set_bytes},
                          {"build_local_s", build_ms / 1000},
                          {"build_nvrtc_s", bs.compile_ms / 1000},
                          {"new_host_from_remote_s", pull_ms / 1000},
                          {"remote_hit_ms", {{"median", quantile(fetch_ms, 0.5)}, {"p90", quantile(fetch_ms, 0.9)}, {"max", quantile(fetch_ms, 1.0)}}},
                          {"disk_hit_median_ms", quantile(disk_ms, 0.5)},
                          {"cold_key_median_ms", quantile(key_ms, 0.5)},
                          {"fetch_verify_ms", {{"median", quantile(tier_ms, 0.5)}, {"p90", quantile(tier_ms, 0.9)}}},
                          {"miss_lookup_ms", {{"median", quantile(miss_ms, 0.5)}, {"p90", quantile(miss_ms, 0.9)}}},
                          {"miss_round_rw_ms", {{"median", quantile(round_ms, 0.5)}, {"p90", quantile(round_ms, 0.9)}}}};
      std::ofstream(json_path) << j.dump(2) << "\n";
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "remote_bench: {}\n", e.what());
    rc = 2;
  }
  fs::remove_all(dir);
  return rc;
}
