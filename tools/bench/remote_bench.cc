// The fleet tier on loopback, without a GPU: a redis-server on a unix socket that this program
// starts itself, one builder that compiles the default set and publishes it (signed), then:
//   - a new host's start: the same set obtained from the warm remote tier (read-only host with
//     the trusted key: fetch, verify signature and checksum, load; the disk copy is written off
//     the request's path), against the builder's local compile of it;
//   - the per-entry fetch latency (median, p90, max), beside a disk hit's;
//   - the added cost of a remote miss: a lookup that finds nothing, and a read-write host's whole
//     single-flight round (lease, second look, publish, release) around a compile.
//   remote_bench [--arch sm_90a] [--family NAME]... [--jobs N] [--json PATH] [--dir DIR]
// (--dir: where the hosts' disk caches and the server live; compare /tmp with /dev/shm.)
//
// With --storm N, a cold-start storm instead: N processes over --storm-dirs cache folders (hosts)
// start at once, cold, and each obtains the first specialization of the set (or of --family)
// through Runtime::compile with the settings of the environment (KJIT_REMOTE_* as the caller
// sets them: the defaults when unset). With --kill-owner, one process starts first, and is
// SIGKILLed --kill-after-ms after it took the lease, mid-compile, while the others arrive. --load
// spins that many threads meanwhile (a loaded host). Per run: compiles after the owner's death,
// faults, and the time from each process's start to its kernel (p50, max).
//   remote_bench --storm 64 --storm-dirs 8 --kill-owner [--runs R] [--load L] [--json PATH]
#include <kjit/families.hpp>
#include <kjit/kjit.hpp>

#include "runtime/internal/cache.hpp"
#include "runtime/internal/fleet.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
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

/// The default set for `arch` (as `kjit precompile` builds it), or its `family_names` part.
std::vector<Work> default_set(const std::string& arch, const std::vector<std::string>& family_names) {
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
  return work;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

/// One process of a storm (--storm-child): obtains `w` with the environment's settings and
/// prints what happened as one JSON line, with the steady-clock time its kernel was ready.
int storm_child(const Work& w) {
  kjit::Runtime rt(kjit::RuntimeConfig::from_env());
  nlohmann::json j;
  try {
    auto p = rt.compile(w.spec, w.target);
    j["ready_ns"] = now_ns();
    j["origin"] = p->origin == kjit::CompiledProgram::Origin::kCompiled ? "compiled"
                  : p->origin == kjit::CompiledProgram::Origin::kRemote ? "remote"
                                                                        : "disk";
  } catch (const std::exception& e) {
    j["error"] = e.what();
  }
  const kjit::RuntimeStats s = rt.stats();
  j["compiles"] = s.compiles;
  j["faults"] = s.remote_errors;
  j["lease_waits"] = s.remote_lease_waits;
  std::printf("%s\n", j.dump().c_str());
  return j.contains("error") ? 1 : 0;
}

/// A storm process: its pid, output file and start time.
struct Child {
  pid_t pid = -1;
  fs::path out;
  int64_t started_ns = 0;
  int status = 0;
  nlohmann::json result;
};

Child spawn_child(const std::string& self, const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                  const fs::path& out) {
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    if (!env.count(name)) envs.push_back(kv);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> all = {self};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  Child c;
  c.out = out;
  c.started_ns = now_ns();
  if (posix_spawn(&c.pid, self.c_str(), &actions, nullptr, argv.data(), envp.data()) != 0) {
    throw std::runtime_error("cannot start " + self);
  }
  posix_spawn_file_actions_destroy(&actions);
  return c;
}

void reap(Child& c) {
  waitpid(c.pid, &c.status, 0);
  std::ifstream in(c.out);
  std::stringstream text;
  text << in.rdbuf();
  c.result = nlohmann::json::parse(text.str(), nullptr, false);
}

struct StormOptions {
  int processes = 0, dirs = 8, runs = 1, load = 0, kill_after_ms = 200;
  bool kill_owner = false;
  std::string arch, json_path, where, self;
  std::vector<std::string> families;
};

/// The storm (see the top of the file). Returns the exit code: 0 when every run had exactly one
/// compile (after the owner's death) and every process its kernel.
int storm(const StormOptions& o) {
  const std::vector<Work> work = default_set(o.arch, o.families);
  if (work.empty()) throw std::runtime_error("no specialization to obtain");
  std::string pattern = (fs::path(o.where) / "kjit-remote-storm-XXXXXX").string();
  const fs::path dir = mkdtemp(pattern.data());
  int rc = 0;
  nlohmann::json runs = nlohmann::json::array(), settings;
  try {
    Server server(dir / "redis");
    kjit::RemoteConfig admin;
    admin.parse_url("unix://" + server.socket);
    admin.connect_timeout_ms = admin.op_timeout_ms = 5000;
    admin.cooldown_ms = 0;
    kjit::cache::remote::RedisClient client(admin);
    // The processes' settings: the environment's KJIT_REMOTE_* with this server.
    setenv("KJIT_REMOTE", ("unix://" + server.socket).c_str(), 1);
    const kjit::RemoteConfig env_remote = kjit::RemoteConfig::from_env();
    settings = {{"lease_ms", env_remote.lease_ms},
                {"op_timeout_ms", env_remote.op_timeout_ms},
                {"connect_timeout_ms", env_remote.connect_timeout_ms}};
    std::string key_hex;
    {
      kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
      c.cache_dir = (dir / "keys").string();
      c.remote = kjit::RemoteConfig{};
      c.record_path.clear();
      key_hex = kjit::Runtime(c).key(work[0].spec, work[0].target);
    }
    kjit::cache::Key key;
    kjit::cache::Key::from_hex(key_hex, &key);
    const auto slot = kjit::cache::remote::slot_keys(env_remote.ns, key);
    fmt::print("storm: {} processes over {} cache folders, {} {} for {} (key {}){}; lease {} ms, op timeout {} ms, "
               "connect timeout {} ms{}\n",
               o.processes, o.dirs, work[0].spec.family, work[0].spec.template_args, work[0].target.str(), key_hex,
               o.kill_owner ? fmt::format(", owner killed {} ms into its lease", o.kill_after_ms) : "",
               env_remote.lease_ms, env_remote.op_timeout_ms, env_remote.connect_timeout_ms,
               o.load > 0 ? fmt::format(", {} busy thread{}", o.load, o.load == 1 ? "" : "s") : "");
    std::vector<std::string> child_args = {"--storm-child", "--arch", o.arch};
    for (const auto& f : o.families) child_args.insert(child_args.end(), {"--family", f});
    for (int run = 0; run < o.runs; ++run) {
      client.command({"FLUSHALL"});
      const fs::path run_dir = dir / fmt::format("run{}", run);
      auto env_of = [&](int i) {
        return std::map<std::string, std::string>{{"KJIT_CACHE_DIR", (run_dir / fmt::format("host{}", i % o.dirs)).string()},
                                                  {"KJIT_REMOTE", "unix://" + server.socket}};
      };
      std::atomic<bool> stop{false};
      std::vector<std::thread> load;
      for (int t = 0; t < o.load; ++t) {
        load.emplace_back([&] {
          volatile uint64_t x = 0;
          while (!stop.load(std::memory_order_relaxed)) x = x + 1;
        });
      }
      std::vector<Child> children;
      Child owner;
      bool published_first = false;
      const auto start = Clock::now();
      if (o.kill_owner) {
        owner = spawn_child(o.self, child_args, env_of(0), run_dir.string() + ".owner.out");
        fs::create_directories(run_dir);
        while (!client.command({"EXISTS", slot.lease})->integer) {
          if (ms_since(start) > 120000) throw std::runtime_error("the owner never took the lease");
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        const auto leased = Clock::now();
        for (int i = 1; i < o.processes; ++i) {
          children.push_back(spawn_child(o.self, child_args, env_of(i), run_dir.string() + fmt::format(".{}.out", i)));
        }
        std::this_thread::sleep_until(leased + std::chrono::milliseconds(o.kill_after_ms));
        kill(owner.pid, SIGKILL);
        reap(owner);
        published_first = client.command({"EXISTS", slot.value})->integer == 1;
      } else {
        fs::create_directories(run_dir);
        for (int i = 0; i < o.processes; ++i) {
          children.push_back(spawn_child(o.self, child_args, env_of(i), run_dir.string() + fmt::format(".{}.out", i)));
        }
      }
      for (Child& c : children) reap(c);
      stop = true;
      for (auto& t : load) t.join();
      uint64_t compiles = 0, faults = 0, waits = 0;
      int failed = 0;
      std::vector<double> first_kernel_ms;
      std::map<std::string, int> origins;
      for (const Child& c : children) {
        if (!c.result.is_object() || !c.result.contains("ready_ns")) {
          ++failed;
          continue;
        }
        compiles += c.result["compiles"].get<uint64_t>();
        faults += c.result["faults"].get<uint64_t>();
        waits += c.result["lease_waits"].get<uint64_t>();
        origins[c.result["origin"].get<std::string>()]++;
        first_kernel_ms.push_back(static_cast<double>(c.result["ready_ns"].get<int64_t>() - c.started_ns) / 1e6);
      }
      const uint64_t expected = o.kill_owner && published_first ? 0 : 1;
      if (compiles != expected || failed > 0) rc = 1;
      fmt::print("run {}: {} compile{}{} ({} expected), {} faults, {} lease waits; {} remote, {} disk, {} failed; "
                 "first kernel p50 {:.0f} ms, max {:.0f} ms{}\n",
                 run, compiles, compiles == 1 ? "" : "s", o.kill_owner ? " after the owner's death" : "", expected, faults,
                 waits, origins["remote"], origins["disk"], failed, quantile(first_kernel_ms, 0.5),
                 quantile(first_kernel_ms, 1.0), published_first ? " (the owner published before it was killed)" : "");
      runs.push_back({{"compiles", compiles},
                      {"expected_compiles", expected},
                      {"faults", faults},
                      {"lease_waits", waits},
                      {"failed", failed},
                      {"owner_published_first", published_first},
                      {"first_kernel_ms", first_kernel_ms},
                      {"first_kernel_p50_ms", quantile(first_kernel_ms, 0.5)},
                      {"first_kernel_max_ms", quantile(first_kernel_ms, 1.0)}});
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "remote_bench: {}\n", e.what());
    rc = 2;
  }
  if (!o.json_path.empty()) {
    std::ofstream(o.json_path) << nlohmann::json{{"processes", o.processes}, {"dirs", o.dirs}, {"kill_owner", o.kill_owner},
                                                 {"kill_after_ms", o.kill_after_ms}, {"load", o.load}, {"settings", settings}, {"runs", runs}}
                                      .dump(2)
                               << "\n";
  }
  fs::remove_all(dir);
  return rc;
}

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
  StormOptions storm_options;
  bool storm_child_mode = false;
  app.add_option("--storm", storm_options.processes, "A cold-start storm of this many processes instead");
  app.add_option("--storm-dirs", storm_options.dirs, "The storm's cache folders (hosts)")->check(CLI::PositiveNumber);
  app.add_flag("--kill-owner", storm_options.kill_owner, "SIGKILL the lease owner mid-compile");
  app.add_option("--kill-after-ms", storm_options.kill_after_ms, "When, after it took the lease");
  app.add_option("--runs", storm_options.runs, "Storms to run")->check(CLI::PositiveNumber);
  app.add_option("--load", storm_options.load, "Busy threads during the storm");
  app.add_flag("--storm-child", storm_child_mode)->group("");  // one process of a storm
  CLI11_PARSE(app, argc, argv);
  if (storm_child_mode) {
    const std::vector<Work> work = default_set(arch, family_names);
    return work.empty() ? 2 : storm_child(work[0]);
  }
  if (storm_options.processes > 0) {
    storm_options.arch = arch;
    storm_options.families = family_names;
    storm_options.json_path = json_path;
    storm_options.where = where;
    storm_options.self = fs::canonical("/proc/self/exe").string();
    return storm(storm_options);
  }

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
    const std::vector<Work> work = default_set(arch, family_names);
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
    double pull_ms = 0, copies_ms = 0;
    {
      auto host = std::make_unique<kjit::Runtime>(config("host", kjit::RemoteMode::kReadOnly));
      start = Clock::now();
      for (const Work& w : work) {
        const auto t = Clock::now();
        host->compile(w.spec, w.target);
        fetch_ms.push_back(ms_since(t));
      }
      pull_ms = ms_since(start);
      const kjit::RuntimeStats hs = host->stats();
      fmt::print("new host: {} entries from the remote tier in {:.3f} s ({} remote hits, {} compiles, {} rejected)\n",
                 work.size(), pull_ms / 1000, hs.remote_hits, hs.compiles, hs.remote_rejected_signatures);
      if (hs.remote_hits != work.size() || hs.compiles != 0) rc = 1;
      // Its disk copies are written in the background; the Runtime's end waits for the rest.
      const auto t = Clock::now();
      host.reset();
      copies_ms = ms_since(t);
    }
    fmt::print("  the disk copies, written off the requests' path, were all on disk {:.3f} s after the last hit\n",
               copies_ms / 1000);
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
               "{:.3f} ms (p90 {:.3f})\n",
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
                          {"disk_copies_after_last_hit_s", copies_ms / 1000},
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
