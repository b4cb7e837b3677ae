// The tuner's worker process: reads one job (op, and per shape the candidate indices) from stdin,
// measures shape after shape and writes one JSON line per event to stdout (see tuner.hpp):
//
//   {"preparing": s}            inputs and the float64 reference of shape s being built
//   {"ready": s, "copies": n}   shape s prepared, n input copies rotate through the L2
//   {"start": i, "shape": s}    candidate i of shape s about to run (the parent's timeout restarts)
//   {"index": i, "shape": s, ...}   candidate i's final measurement (measurement_line)
//   {"error": why, "shape": s}  shape s could not be set up: its candidates fail with `why`
//   {"done": true}
//
// Per shape, two passes over the candidates: check each (poisoned outputs against the
// reference), capture its CUDA graph and take a few screening samples; drop those clearly slower
// than the leader (screen_candidates); then give the kept ones and the default the full graph
// and eager samples.
#include "tools/tune/tuner.hpp"

#include <kjit/error.hpp>

#include "runtime/internal/driver.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace kjit::tune {
namespace {

using nlohmann::json;

void emit(const json& j) {
  const std::string line = j.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

void emit_result(const Measurement& m, int shape) {
  const std::string line = measurement_line(m, shape) + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

/// One pair of CUDA events, created once per worker.
struct Events {
  CUevent start = nullptr, stop = nullptr;
  Events() {
    KJIT_CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
    KJIT_CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));
  }
  ~Events() {
    kjit::detail::driver().cuEventDestroy(start);
    kjit::detail::driver().cuEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  /// Milliseconds of `fn` on `stream`.
  template <class Fn>
  double time(CUstream stream, Fn&& fn) {
    KJIT_CU(cuEventRecord(start, stream));
    fn();
    KJIT_CU(cuEventRecord(stop, stream));
    KJIT_CU(cuEventSynchronize(stop));
    float ms = 0;
    KJIT_CU(cuEventElapsedTime(&ms, start, stop));
    return ms;
  }
};

struct Stats {
  double median = 0, spread = 0, best = 0;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Stats s;
  if (v.empty()) return s;
  s.median = v[v.size() / 2];
  s.best = v.front();
  const double p10 = v[v.size() / 10], p90 = v[v.size() - 1 - v.size() / 10];
  s.spread = s.median > 0 ? (p90 - p10) / s.median : 0;
  return s;
}

/// A candidate's timing so far: its measurement (resources, status) and its graph samples.
struct Timing {
  Measurement m;
  std::vector<double> graphed;
};

/// A correct candidate's launches as one sample's worth of calls, and their CUDA graph.
class Timed {
 public:
  Timed(Runner r, int copies) : r_(std::move(r)), copies_(copies) {}
  ~Timed() {
    const kjit::detail::Driver& d = kjit::detail::driver();
    if (exec_) d.cuGraphExecDestroy(exec_);
    if (graph_) d.cuGraphDestroy(graph_);
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

  /// Calls per sample: every input copy at least once, and at least 8.
  int launches() const { return std::max(copies_, 8); }
  void run_all(CUstream stream) const {
    for (int i = 0; i < launches(); ++i) r_.per_copy[static_cast<size_t>(i % copies_)](stream);
  }

  /// Captures the launches of one sample as a CUDA graph and replays it once (warm).
  void capture(CUstream stream) {
    const kjit::detail::Driver& d = kjit::detail::driver();
    kjit::detail::check_driver(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                               "cuStreamBeginCapture");
    try {
      run_all(stream);
    } catch (...) {
      d.cuStreamEndCapture(stream, &graph_);
      throw;
    }
    kjit::detail::check_driver(d.cuStreamEndCapture(stream, &graph_), "cuStreamEndCapture");
    kjit::detail::check_driver(d.cuGraphInstantiateWithFlags(&exec_, graph_, 0), "cuGraphInstantiateWithFlags");
    kjit::detail::check_driver(d.cuGraphLaunch(exec_, stream), "cuGraphLaunch");
    KJIT_CU(cuStreamSynchronize(stream));
  }

  /// Graph samples (µs per call) into `t` until it has `count`.
  void graph_samples(Events& ev, CUstream stream, Timing& t, int count) const {
    const kjit::detail::Driver& d = kjit::detail::driver();
    while (static_cast<int>(t.graphed.size()) < count) {
      t.graphed.push_back(
          ev.time(stream, [&] { kjit::detail::check_driver(d.cuGraphLaunch(exec_, stream), "cuGraphLaunch"); }) *
          1000.0 / launches());
    }
  }

  /// Tops the graph samples up to `samples`, then times `samples` eager samples: `t` measured.
  void finish(Events& ev, CUstream stream, int samples, Timing& t) const {
    graph_samples(ev, stream, t, samples);
    run_all(stream);  // eager warm-up: attributes raised, the driver's caches filled
    KJIT_CU(cuStreamSynchronize(stream));
    std::vector<double> eager;
    for (int s = 0; s < samples; ++s) eager.push_back(ev.time(stream, [&] { run_all(stream); }) * 1000.0 / launches());
    // A candidate that faults asynchronously shows it here at the latest.
    KJIT_CU(cuStreamSynchronize(stream));
    const Stats g = stats(t.graphed), e = stats(eager);
    t.m.status = "ok";
    t.m.us = g.median;
    t.m.spread = g.spread;
    t.m.eager_us = e.median;
    t.m.samples = static_cast<int>(t.graphed.size());
  }

 private:
  Runner r_;
  int copies_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

/// `t` screened out behind candidate `leader` whose median was `leader_us`.
void drop(Timing& t, int leader, double leader_us, double margin) {
  const Stats g = stats(t.graphed);
  t.m.status = "dropped";
  t.m.us = g.median;
  t.m.spread = g.spread;
  t.m.samples = static_cast<int>(t.graphed.size());
  t.m.leader = leader;
  t.m.leader_us = leader_us;
  t.m.why = fmt::format("dropped early: best of {} graph samples {:.2f} µs > {:.2f} × leader #{}'s median {:.2f} µs",
                        t.graphed.size(), g.best, 1 + margin, leader, leader_us);
}

/// Runs `fn` for candidate `i` of shape `shape`; a failure is its final result ("failed"). A
/// DriverError may have left the context dead (an illegal address poisons it): report and exit,
/// so a fresh worker takes the rest. Returns false when `fn` threw.
template <class Fn>
bool guarded(int shape, int i, Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const DriverError& e) {
    Measurement m;
    m.index = i;
    m.status = "failed";
    m.why = e.what();
    emit_result(m, shape);
    std::_Exit(3);
  } catch (const std::exception& e) {
    Measurement m;
    m.index = i;
    m.status = "failed";
    m.why = e.what();
    emit_result(m, shape);
  }
  return false;
}

struct Job {
  int samples = 25;
  int screen_samples = 5;
  double screen_margin = 0.15;
};

/// Measures `indices` of `shape` (see the file comment). One candidate's launches and buffers
/// exist at a time: a survivor of the screening is built and captured again for its full
/// measurement.
void measure_shape(const TuneOp& top, int id, const Shape& shape, const std::vector<int>& indices, const Job& job,
                   Events& ev, CUstream stream, Runtime& runtime) {
  emit({{"preparing", id}});
  const DeviceInfo& info = device_info(0);
  std::unique_ptr<Harness> h = top.make(shape);
  const std::vector<Candidate> candidates = h->candidates(info);
  // Enough copies that the inputs of consecutive launches never sit in L2 together.
  const size_t bytes = std::max<size_t>(h->input_bytes(), 1);
  const int copies = static_cast<int>(std::clamp<size_t>((2 * static_cast<size_t>(info.l2_bytes)) / bytes + 1, 1, 64));
  h->prepare(copies, 0x6b6a6974u);
  emit({{"ready", id}, {"copies", copies}});
  const int screen = indices.size() > 1 ? std::min(job.screen_samples, job.samples) : 0;

  // Pass 1: check each candidate against the reference, capture its graph and take its
  // screening samples (all its samples when nothing is screened).
  std::vector<Timing> screened;
  for (int i : indices) {
    emit({{"start", i}, {"shape", id}});
    guarded(id, i, [&] {
      if (i < 0 || static_cast<size_t>(i) >= candidates.size()) throw InvalidArgument("candidate index out of range");
      const Candidate& c = candidates[static_cast<size_t>(i)];
      Timing t;
      t.m.index = i;
      t.m.is_default = c.is_default;
      Runner r = h->runner(c, runtime);
      t.m.threads = r.threads;
      t.m.smem = r.smem;
      t.m.registers = r.registers;
      t.m.cluster = r.cluster;
      if (std::string why = h->check(r, stream); !why.empty()) {
        t.m.status = "wrong";
        t.m.why = why;
        emit_result(t.m, id);
        return;
      }
      Timed timed(std::move(r), copies);
      timed.capture(stream);
      if (screen == 0) {
        timed.finish(ev, stream, job.samples, t);
        emit_result(t.m, id);
        return;
      }
      timed.graph_samples(ev, stream, t, screen);
      KJIT_CU(cuStreamSynchronize(stream));
      const Stats g = stats(t.graphed);
      t.m.screen_best_us = g.best;
      t.m.screen_median_us = g.median;
      screened.push_back(std::move(t));
    });
  }
  if (screened.empty()) return;

  // Early rejection.
  std::vector<std::vector<double>> samples;
  std::vector<bool> always;
  for (const Timing& t : screened) {
    samples.push_back(t.graphed);
    always.push_back(t.m.is_default);
  }
  const Screen verdict = screen_candidates(samples, always, job.screen_margin);
  const int leader = verdict.leader >= 0 ? screened[static_cast<size_t>(verdict.leader)].m.index : -1;
  for (size_t k = 0; k < screened.size(); ++k) {
    if (verdict.keep[k]) continue;
    drop(screened[k], leader, verdict.leader_us, job.screen_margin);
    emit_result(screened[k].m, id);
  }

  // Pass 2: the full measurement of the kept candidates and the default.
  for (size_t k = 0; k < screened.size(); ++k) {
    if (!verdict.keep[k]) continue;
    Timing& t = screened[k];
    const int i = t.m.index;
    emit({{"start", i}, {"shape", id}});
    guarded(id, i, [&] {
      Timed timed(h->runner(candidates[static_cast<size_t>(i)], runtime), copies);
      timed.capture(stream);
      timed.finish(ev, stream, job.samples, t);
      emit_result(t.m, id);
    });
  }
}

int worker_main() {
  std::string line;
  std::getline(std::cin, line);
  const json job = json::parse(line, nullptr, false);
  if (!job.is_object()) {
    emit({{"error", "the tune worker got no job"}});
    return 2;
  }
  int current = -1;
  try {
    const TuneOp& top = op(job.at("op").get<std::string>());
    Job j;
    j.samples = job.value("samples", 25);
    j.screen_samples = job.value("screen_samples", 5);
    j.screen_margin = job.value("screen_margin", 0.15);
    kjit::detail::ensure_context(0);
    CUstream stream = nullptr;
    KJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    Events ev;
    Runtime& runtime = Runtime::global();
    for (const json& s : job.at("shapes")) {
      current = s.at("id").get<int>();
      try {
        measure_shape(top, current, s.at("shape").get<Shape>(), s.at("indices").get<std::vector<int>>(), j, ev, stream,
                      runtime);
      } catch (const DriverError& e) {
        emit({{"error", e.what()}, {"shape", current}});
        return 3;  // the context may be dead: a fresh worker takes the other shapes
      } catch (const std::exception& e) {
        // The shape could not be set up (or its harness failed between candidates): its
        // candidates without a result fail with the reason; the next shape goes on.
        emit({{"error", e.what()}, {"shape", current}});
      }
    }
    emit({{"done", true}});
  } catch (const std::exception& e) {
    emit(current >= 0 ? json{{"error", e.what()}, {"shape", current}} : json{{"error", e.what()}});
    return 2;
  }
  return 0;
}

}  // namespace

void run_worker_if_requested() {
  const char* v = std::getenv("KJIT_TUNE_WORKER");
  if (v == nullptr || std::string(v) != "1") return;
  std::_Exit(worker_main());
}

}  // namespace kjit::tune
