// The tuner's parent side: shapes, the op registry, compiles, worker processes, selection and
// publishing (see tuner.hpp).
#include "tools/tune/tuner.hpp"

#include <kjit/error.hpp>

#include "runtime/internal/fleet.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

extern char** environ;

namespace kjit::tune {

void register_builtin_ops();  // op_harness.cc

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::map<std::string, TuneOp>& registry() {
  static std::map<std::string, TuneOp> r;
  return r;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---- failed compiles, remembered across sweeps -------------------------------------------------

std::string failed_path() {
  return cache::tuning_dir(RuntimeConfig::from_env().cache_dir) + "/failed-compiles.json";
}

/// Program key → {"family", "template_args", "target", "log"}. A record that is not such an
/// object is dropped with a warning (that program is compiled again); a damaged file reads as
/// empty.
json read_failed() {
  std::string bytes;
  if (cache::read_file(failed_path(), 64 << 20, cache::kReadPlain, &bytes) != 0) return json::object();
  json j = json::parse(bytes, nullptr, false);
  if (!j.is_object()) {
    if (!bytes.empty()) warn(fmt::format("{} is not a JSON object; earlier failed compiles are tried again", failed_path()));
    return json::object();
  }
  for (auto it = j.begin(); it != j.end();) {
    const auto log = it->is_object() ? it->find("log") : it->end();
    if (it->is_object() && log != it->end() && log->is_string()) {
      ++it;
    } else {
      warn(fmt::format("{}: the record of {} has no \"log\" string; that program is compiled again", failed_path(), it.key()));
      it = j.erase(it);
    }
  }
  return j;
}

void remember_failed(const std::map<std::string, json>& failures) {
  if (failures.empty()) return;
  json all = read_failed();
  for (const auto& [key, what] : failures) all[key] = what;
  const std::string dir = cache::tuning_dir(RuntimeConfig::from_env().cache_dir);
  if (cache::make_dirs(dir) != 0 || cache::write_file_atomic(failed_path(), all.dump(1)) != 0) {
    warn(fmt::format("could not remember {} failed compile(s) in {}", failures.size(), failed_path()));
  }
}

// ---- the worker process ----------------------------------------------------------------------

struct Child {
  pid_t pid = -1;
  int out = -1;  // its stdout
  std::string err_path;
};

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw Error("cannot find this executable (/proc/self/exe) to start a tune worker");
  return std::string(buf, static_cast<size_t>(n));
}

Child spawn(const std::string& exe, const std::string& job) {
  int in_pipe[2], out_pipe[2];
  if (::pipe(in_pipe) != 0 || ::pipe(out_pipe) != 0) throw Error("pipe() failed starting a tune worker");
  Child c;
  c.err_path = fmt::format("/tmp/kjit-tune-worker-{}-{}.err", ::getpid(), cache::unique_suffix());
  std::vector<std::string> env_strings = {"KJIT_TUNE_WORKER=1", "KJIT_TUNING=off"};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "KJIT_TUNE_WORKER=", 17) != 0 && std::strncmp(*e, "KJIT_TUNING=", 12) != 0) env_strings.push_back(*e);
  }
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe_copy = exe;
  char* argv[] = {exe_copy.data(), nullptr};
  const pid_t pid = ::fork();
  if (pid < 0) throw Error("fork() failed starting a tune worker");
  if (pid == 0) {
    ::dup2(in_pipe[0], 0);
    ::dup2(out_pipe[1], 1);
    const int err = ::open(c.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (err >= 0) ::dup2(err, 2);
    ::close(in_pipe[1]);
    ::close(out_pipe[0]);
    ::execve(exe_copy.c_str(), argv, envp.data());
    ::_exit(127);
  }
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  const std::string line = job + "\n";
  // The job is small (a few KiB), far below a pipe's buffer.
  if (::write(in_pipe[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    warn("could not hand the tune worker its job");
  }
  ::close(in_pipe[1]);
  c.pid = pid;
  c.out = out_pipe[0];
  return c;
}

std::string tail_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::string t = s.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  if (t.size() > 600) t = "..." + t.substr(t.size() - 600);
  return t;
}

/// Reaps `c` and says how it ended ("exit 3", "signal 11").
std::string finish(Child& c, bool kill_it) {
  if (kill_it) ::kill(c.pid, SIGKILL);
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::close(c.out);
  std::string how = WIFSIGNALED(status) ? fmt::format("signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)))
                                        : fmt::format("exit {}", WEXITSTATUS(status));
  const std::string err = tail_of(c.err_path);
  std::remove(c.err_path.c_str());
  return err.empty() ? how : how + ": " + err;
}

}  // namespace

namespace detail {

void measure(const std::string& op_name, std::vector<ShapeResult>& shapes, std::vector<Todo> todo, const Options& o,
             const std::string& exe, const std::function<void()>& tick) {
  bool first_worker = true;
  auto timeout = [&o] {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s));
  };
  // Inputs and the float64 reference of a shape come first, and may take a while.
  auto preparing = [] { return Clock::now() + std::chrono::seconds(600); };
  while (!todo.empty()) {
    json job_shapes = json::array();
    for (const Todo& t : todo) {
      job_shapes.push_back({{"id", t.shape}, {"shape", shapes[t.shape].shape}, {"indices", t.indices}});
    }
    const json job = {{"op", op_name},
                      {"samples", std::max(o.samples, 20)},
                      {"screen_samples", std::max(o.screen_samples, 0)},
                      {"screen_margin", o.screen_margin},
                      {"shapes", job_shapes}};
    Child c = spawn(exe, job.dump());
    std::string buffer;
    // The candidate the worker runs (and its shape), and the shape it sets up (-1: none).
    int in_flight = -1, in_flight_shape = -1, current = -1, setting_up = -1;
    bool done = false;
    auto deadline = preparing();
    std::set<std::pair<size_t, int>> finished;
    auto finish_shape = [&](size_t shape, const std::string& why) {
      for (const Todo& t : todo) {
        if (t.shape != shape) continue;
        for (int i : t.indices) {
          if (finished.insert({shape, i}).second) {
            Measurement& m = shapes[shape].candidates[static_cast<size_t>(i)];
            m.status = "failed";
            m.why = why;
            tick();
          }
        }
      }
    };
    while (!done) {
      const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      if (left <= 0) break;
      pollfd p{c.out, POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::min(left, 1.0) * 1000) + 1);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) continue;
      char chunk[4096];
      const ssize_t got = ::read(c.out, chunk, sizeof(chunk));
      if (got <= 0) break;  // the worker is gone
      buffer.append(chunk, static_cast<size_t>(got));
      size_t nl;
      while ((nl = buffer.find('\n')) != std::string::npos) {
        const json j = json::parse(buffer.substr(0, nl), nullptr, false);
        buffer.erase(0, nl + 1);
        if (!j.is_object()) continue;
        // The worker is this program, but its lines are still input: every number that indexes
        // a shape or candidate is checked, and a line that does not check out is ignored.
        try {
          const int last_shape = static_cast<int>(shapes.size()) - 1;
          const int shape = json_int(j, "shape", -1, -1, last_shape, "tune worker line: ");
          auto candidate = [&](const char* name) {
            if (shape < 0) throw InvalidArgument(fmt::format("tune worker line: {} without a shape", name));
            const int last = static_cast<int>(shapes[static_cast<size_t>(shape)].candidates.size()) - 1;
            return json_int(j, name, -1, 0, last, "tune worker line: ");
          };
          if (j.contains("preparing")) {
            current = setting_up = json_int(j, "preparing", -1, 0, last_shape, "tune worker line: ");
            in_flight = -1;
            deadline = preparing();
          } else if (j.contains("ready")) {
            setting_up = -1;
            deadline = timeout();
          } else if (j.contains("start")) {
            in_flight = candidate("start");
            in_flight_shape = shape;
            deadline = timeout();
          } else if (j.contains("index")) {
            const int i = candidate("index");
            auto& cands = shapes[static_cast<size_t>(shape)].candidates;
            if (finished.insert({static_cast<size_t>(shape), i}).second) {
              read_measurement(j, &cands[static_cast<size_t>(i)], "tune worker line: ");
              tick();
            }
            in_flight = -1;
          } else if (j.contains("done")) {
            done = true;
          } else if (j.contains("error")) {
            // A shape the worker could not set up: its candidates fail with the reason. Without a
            // shape, the job itself: every candidate does.
            const std::string why = j["error"].is_string() ? j["error"].get<std::string>() : j["error"].dump();
            if (shape >= 0) {
              finish_shape(static_cast<size_t>(shape), why);
            } else {
              for (const Todo& t : todo) finish_shape(t.shape, why);
            }
            in_flight = -1;
            setting_up = -1;
          }
        } catch (const InvalidArgument& e) {
          warn(fmt::format("{}; line ignored", e.what()));
        }
      }
    }
    const bool hung = !done && Clock::now() >= deadline;
    const std::string how = finish(c, !done);
    if (!done && finished.empty() && current < 0) {
      // The worker never got to a shape.
      for (const Todo& t : todo) {
        finish_shape(t.shape, (first_worker ? "the tune worker died before measuring: " : "tune worker failed to start: ") + how);
      }
      return;
    }
    first_worker = false;
    if (in_flight >= 0 && in_flight_shape >= 0 && finished.insert({static_cast<size_t>(in_flight_shape), in_flight}).second) {
      Measurement& m = shapes[static_cast<size_t>(in_flight_shape)].candidates[static_cast<size_t>(in_flight)];
      m.status = "failed";
      m.why = hung ? fmt::format("no result within {} s (killed): {}", o.timeout_s, how) : "the worker died: " + how;
      tick();
    } else if (!done && setting_up >= 0) {
      // Died or hung building a shape's inputs or reference: that shape is lost.
      finish_shape(static_cast<size_t>(setting_up),
                   (hung ? "the tune worker hung setting this shape up (killed): " : "the tune worker died setting this shape up: ") + how);
    }
    std::vector<Todo> rest;
    size_t left = 0, before = 0;
    for (const Todo& t : todo) {
      Todo r{t.shape, {}};
      for (int i : t.indices) {
        ++before;
        if (!finished.count({t.shape, i})) r.indices.push_back(i);
      }
      left += r.indices.size();
      if (!r.indices.empty()) rest.push_back(std::move(r));
    }
    if (left == before) {  // no progress: do not loop
      for (const Todo& t : rest) finish_shape(t.shape, "the tune worker made no progress: " + how);
      return;
    }
    todo = std::move(rest);
  }
}

}  // namespace detail

// ---- shapes -----------------------------------------------------------------------------------

Shape parse_shape(const std::vector<std::string>& words, const Shape& defaults) {
  Shape s = defaults;
  for (const std::string& word : words) {
    std::stringstream parts(word);
    std::string part;
    while (std::getline(parts, part, ',')) {
      std::stringstream blanks(part);
      std::string kv;
      while (blanks >> kv) {
        const size_t eq = kv.find('=');
        if (eq == std::string::npos || eq == 0) {
          throw InvalidArgument(fmt::format("shape word '{}' is not key=value", kv));
        }
        const std::string key = kv.substr(0, eq);
        if (!defaults.count(key)) {
          std::string keys;
          for (const auto& [k, v] : defaults) keys += (keys.empty() ? "" : ", ") + k;
          throw InvalidArgument(fmt::format("unknown shape key '{}' (keys: {})", key, keys));
        }
        s[key] = kv.substr(eq + 1);
      }
    }
  }
  return s;
}

std::vector<Shape> read_shapes_file(const std::string& path, const Shape& defaults) {
  std::istringstream in(cache::read_input_file(path, "shapes file", kMaxTuneFileBytes));
  std::vector<Shape> out;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back(parse_shape({line}, defaults));
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("{}:{}: {}", path, number, e.what()));
    }
  }
  if (out.empty()) throw InvalidArgument(fmt::format("shapes file {} holds no shape", path));
  return out;
}

int64_t shape_int(const Shape& shape, const std::string& key) {
  const auto it = shape.find(key);
  if (it == shape.end()) throw InvalidArgument(fmt::format("shape has no '{}'", key));
  try {
    size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  throw InvalidArgument(fmt::format("shape key {}={} is not an integer", key, it->second));
}

// ---- registry ---------------------------------------------------------------------------------

void register_op(TuneOp op) {
  std::string name = op.name;
  registry()[name] = std::move(op);
}

const std::map<std::string, TuneOp>& ops() {
  static std::once_flag once;
  std::call_once(once, register_builtin_ops);
  return registry();
}

const TuneOp& op(const std::string& name) {
  const auto& all = ops();
  const auto it = all.find(name);
  if (it == all.end()) {
    std::string names;
    for (const auto& [n, o] : all) names += (names.empty() ? "" : ", ") + n;
    throw InvalidArgument(fmt::format("unknown op '{}' (kjit tune covers: {})", name, names));
  }
  return it->second;
}

// ---- selection --------------------------------------------------------------------------------

int select_winner(const std::vector<Measurement>& m, double noise, int* runner_up) {
  *runner_up = -1;
  int def = -1;
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i].is_default) def = static_cast<int>(i);
  }
  if (def < 0 || m[static_cast<size_t>(def)].status != "ok") return -1;
  const double def_us = m[static_cast<size_t>(def)].us;
  double best = def_us;
  for (const Measurement& x : m) {
    if (x.status == "ok" && !x.is_default && x.us < def_us * (1 - noise)) best = std::min(best, x.us);
  }
  int winner = def;
  if (best < def_us) {
    for (size_t i = 0; i < m.size(); ++i) {
      const Measurement& x = m[i];
      if (x.status == "ok" && !x.is_default && x.us < def_us * (1 - noise) && x.us <= best * (1 + noise)) {
        winner = static_cast<int>(i);
        break;
      }
    }
  }
  for (size_t i = 0; i < m.size(); ++i) {
    if (static_cast<int>(i) == winner || (m[i].status != "ok" && m[i].status != "dropped")) continue;
    if (*runner_up < 0 || m[i].us < m[static_cast<size_t>(*runner_up)].us) *runner_up = static_cast<int>(i);
  }
  return winner;
}

Screen screen_candidates(const std::vector<std::vector<double>>& samples, const std::vector<bool>& always,
                         double margin) {
  Screen s;
  s.keep.assign(samples.size(), false);
  std::vector<double> median(samples.size(), 0), best(samples.size(), 0);
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].empty()) continue;
    std::vector<double> v = samples[i];
    std::sort(v.begin(), v.end());
    median[i] = v[v.size() / 2];
    best[i] = v.front();
    if (s.leader < 0 || median[i] < s.leader_us) {
      s.leader = static_cast<int>(i);
      s.leader_us = median[i];
    }
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].empty()) continue;
    s.keep[i] = (i < always.size() && always[i]) || best[i] <= s.leader_us * (1 + margin);
  }
  return s;
}

// ---- the sweep --------------------------------------------------------------------------------

std::string stored_description(const std::string& op_name, const Measurement& m) {
  const kjit::detail::TuneOpSpec* spec = kjit::detail::find_tune_op(op_name);
  return spec ? kjit::detail::stored_choice_of(*spec, m.choice).describe() : m.label;
}

namespace {

/// Whether the options ask for measurement `m` of shape `s` (the default always).
bool wanted(const std::string& op_name, const Options& o, size_t s, const Measurement& m) {
  const std::vector<std::string>& only = o.only_by_shape.empty() ? o.only : o.only_by_shape[s];
  return m.is_default || only.empty() || std::find(only.begin(), only.end(), stored_description(op_name, m)) != only.end();
}

/// Every shape's bucket and candidates (host only); r.shapes gets one unmeasured Measurement per
/// candidate.
std::vector<std::vector<Candidate>> collect_candidates(const TuneOp& top, const std::vector<Shape>& shapes,
                                                       const DeviceInfo& info, SweepResult& r) {
  std::vector<std::vector<Candidate>> candidates;
  for (const Shape& s : shapes) {
    std::unique_ptr<Harness> h = top.make(s);
    ShapeResult sr;
    sr.shape = s;
    sr.tunable = h->bucket(&sr.bucket);
    candidates.push_back(h->candidates(info));
    for (size_t i = 0; i < candidates.back().size(); ++i) {
      const Candidate& c = candidates.back()[i];
      Measurement m;
      m.index = static_cast<int>(i);
      m.label = c.label;
      m.is_default = c.is_default;
      m.choice = c.choice;
      sr.candidates.push_back(m);
    }
    r.shapes.push_back(std::move(sr));
  }
  return candidates;
}

/// Compiles `todo` (key, spec) on o.jobs threads, records each failure's message in
/// `compile_errors` and remembers the compile errors (not other failures, which may be
/// transient) for later sweeps. Returns the number that failed.
int compile_on_threads(const std::string& op_name, const std::vector<std::pair<std::string, ProgramSpec>>& todo,
                       const Options& o, const Target& target, std::map<std::string, std::string>& compile_errors) {
  Runtime& runtime = Runtime::global();
  std::atomic<size_t> next{0};
  std::atomic<int> done{0}, failed{0};
  std::mutex mutex;
  std::map<std::string, json> new_failures;
  auto worker = [&] {
    for (size_t i = next++; i < todo.size(); i = next++) {
      try {
        runtime.compile(todo[i].second, todo[i].second.target_on(target));
      } catch (const CompileError& e) {
        std::lock_guard<std::mutex> lock(mutex);
        compile_errors[todo[i].first] = e.what();
        new_failures[todo[i].first] = {{"family", todo[i].second.family},
                                       {"template_args", todo[i].second.template_args},
                                       {"target", target.str()},
                                       {"log", e.what()}};
        ++failed;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        compile_errors[todo[i].first] = e.what();  // not remembered: may be transient
        ++failed;
      }
      const int d = ++done;
      if (o.progress) {
        std::lock_guard<std::mutex> lock(mutex);
        std::fprintf(stderr, "\rkjit tune %s: compiling %d/%zu (%d failed)   ", op_name.c_str(), d, todo.size(), failed.load());
        std::fflush(stderr);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(o.jobs, 1); ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  if (o.progress && !todo.empty()) std::fprintf(stderr, "\n");
  remember_failed(new_failures);
  return failed.load();
}

/// Compiles every program the wanted candidates need, once each, on o.jobs threads; a program
/// that failed in an earlier sweep is skipped, a new compile error remembered. Its users are
/// marked compile-failed.
void compile_programs(const std::string& op_name, const std::vector<std::vector<Candidate>>& candidates,
                      const Options& o, const Target& target, SweepResult& r) {
  Runtime& runtime = Runtime::global();
  const Clock::time_point compile_start = Clock::now();
  std::map<std::string, ProgramSpec> programs;  // key → spec
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> users;
  for (size_t s = 0; s < candidates.size(); ++s) {
    for (size_t i = 0; i < candidates[s].size(); ++i) {
      if (!wanted(op_name, o, s, r.shapes[s].candidates[i])) continue;
      for (const ProgramSpec& p : candidates[s][i].programs) {
        const std::string key = runtime.key(p, p.target_on(target));
        programs.emplace(key, p);
        users[key].push_back({s, i});
      }
    }
  }
  const json failed_before = read_failed();
  std::vector<std::pair<std::string, ProgramSpec>> todo;
  std::map<std::string, std::string> compile_errors;
  for (const auto& [key, spec] : programs) {
    if (failed_before.contains(key)) {
      compile_errors[key] = "failed in an earlier sweep: " + failed_before[key].value("log", std::string());
      ++r.compile_skipped;
    } else {
      todo.emplace_back(key, spec);
    }
  }
  const int failed = compile_on_threads(op_name, todo, o, target, compile_errors);
  r.compiled = static_cast<int>(todo.size()) - failed;
  r.compile_failed = failed;
  for (const auto& [key, why] : compile_errors) {
    for (const auto& [s, i] : users[key]) {
      Measurement& m = r.shapes[s].candidates[i];
      m.status = "compile-failed";
      m.why = why.substr(0, 2000);
    }
  }
  r.compile_s = seconds_since(compile_start);
}

/// Measures every wanted, compiled candidate in worker processes, then selects each shape's
/// winner and runner-up.
void measure_shapes(const std::string& op_name, const Options& o, SweepResult& r) {
  const Clock::time_point measure_start = Clock::now();
  const std::string exe = o.worker.empty() ? self_exe() : o.worker;
  size_t total = 0, measured = 0;
  std::vector<detail::Todo> to_measure;
  for (size_t s = 0; s < r.shapes.size(); ++s) {
    detail::Todo t{s, {}};
    for (const Measurement& m : r.shapes[s].candidates) {
      ++total;
      if (m.status != "compile-failed" && wanted(op_name, o, s, m)) {
        t.indices.push_back(m.index);
      } else {
        ++measured;
      }
    }
    if (!t.indices.empty()) to_measure.push_back(std::move(t));
  }
  r.screen_samples = std::max(o.screen_samples, 0);
  r.screen_margin = o.screen_margin;
  detail::measure(op_name, r.shapes, to_measure, o, exe, [&] {
    ++measured;
    if (o.progress) {
      std::fprintf(stderr, "\rkjit tune %s: measured %zu/%zu   ", op_name.c_str(), measured, total);
      std::fflush(stderr);
    }
  });
  for (ShapeResult& sr : r.shapes) {
    sr.winner = select_winner(sr.candidates, o.noise, &sr.runner_up);
    if (sr.winner >= 0) {
      const Measurement& w = sr.candidates[static_cast<size_t>(sr.winner)];
      const Measurement& d = sr.candidates[0];
      sr.gain = d.us / w.us - 1;
      sr.margin = sr.runner_up >= 0 ? sr.candidates[static_cast<size_t>(sr.runner_up)].us / w.us - 1 : 0;
    }
  }
  if (o.progress) std::fprintf(stderr, "\n");
  r.measure_s = seconds_since(measure_start);
}

/// Publishes each tunable shape's winner (with the default and the runner-up) to the device's
/// tuning table.
void publish_winners(const std::string& op_name, const DeviceInfo& info, const SweepResult& r) {
  const kjit::detail::TuneOpSpec* spec = kjit::detail::find_tune_op(op_name);
  cache::TuneTable table;
  table.fingerprint_id = r.fingerprint_id;
  table.fingerprint_text = r.fingerprint;
  table.fingerprint_fields = {{"name", info.name},
                              {"compute_capability", fmt::format("{}.{}", info.cc_major, info.cc_minor)},
                              {"sm_count", std::to_string(info.sm_count)},
                              {"driver_version", std::to_string(info.driver_version)},
                              {"nvrtc_version", info.nvrtc_version}};
  auto stored = [&](const Measurement& m) {
    cache::TuneChoice c = kjit::detail::stored_choice_of(*spec, m.choice);
    c.us = m.us;
    c.eager_us = m.eager_us;
    c.spread = m.spread;
    c.threads = m.threads;
    c.smem = m.smem;
    c.registers = m.registers;
    c.cluster = m.cluster;
    return c;
  };
  for (const ShapeResult& sr : r.shapes) {
    if (spec == nullptr || !sr.tunable || sr.winner < 0) continue;
    cache::TuneEntry e;
    e.op = op_name;
    e.bucket = sr.bucket;
    e.shape = shape_text(sr.shape);
    e.winner = stored(sr.candidates[static_cast<size_t>(sr.winner)]);
    e.default_choice = stored(sr.candidates[0]);
    e.has_runner_up = sr.runner_up >= 0;
    if (e.has_runner_up) e.runner_up = stored(sr.candidates[static_cast<size_t>(sr.runner_up)]);
    e.margin = std::max(sr.margin, 0.0);
    e.gain = std::max(sr.gain, 0.0);
    e.tuned_unix = static_cast<int64_t>(std::time(nullptr));
    e.planner = spec->planner;
    // Two shapes of one bucket: the later one's measurement is the one kept (same second:
    // merge keeps the first), so buckets should be tuned at their representative shape.
    table.entries.erase(std::remove_if(table.entries.begin(), table.entries.end(),
                                       [&](const cache::TuneEntry& x) { return x.bucket == e.bucket; }),
                        table.entries.end());
    table.entries.push_back(e);
  }
  if (!table.entries.empty()) {
    const Runtime& runtime = Runtime::global();
    // The merged table goes to the fleet tier too (KJIT_REMOTE), through the runtime's one door,
    // for every host of this kind.
    cache::remote::share_tune_table(kjit::detail::fleet_tier(runtime),
                                    cache::publish_table(runtime.config().cache_dir, table));
  }
}

}  // namespace

SweepResult sweep(const std::string& op_name, const std::vector<Shape>& shapes, const Options& o) {
  const TuneOp& top = op(op_name);
  if (!top.only_default.empty()) {
    throw InvalidArgument(fmt::format("{}: the default plan is the only candidate, nothing to sweep: {}", op_name,
                                      top.only_default));
  }
  const DeviceInfo& info = device_identity(0);
  SweepResult r;
  r.op = op_name;
  r.fingerprint_id = info.fingerprint_id();
  r.fingerprint = info.fingerprint();
  r.device = info.name;
  const std::vector<std::vector<Candidate>> candidates = collect_candidates(top, shapes, info, r);
  if (!o.only_by_shape.empty() && o.only_by_shape.size() != shapes.size()) {
    throw InvalidArgument(fmt::format("only_by_shape has {} lists for {} shapes", o.only_by_shape.size(), shapes.size()));
  }
  compile_programs(op_name, candidates, o, info.target(), r);
  measure_shapes(op_name, o, r);
  if (o.publish) publish_winners(op_name, info, r);
  return r;
}

}  // namespace kjit::tune
