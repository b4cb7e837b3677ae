// The tuner's worker process: reads one job (op, shape, candidate indices) from stdin, measures
// the candidates in order and writes one JSON line per event to stdout (see tuner.hpp).
#include "tools/tune/tuner.hpp"

#include <kjit/error.hpp>

#include "runtime/internal.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
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
  double median = 0, spread = 0;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Stats s;
  if (v.empty()) return s;
  s.median = v[v.size() / 2];
  const double p10 = v[v.size() / 10], p90 = v[v.size() - 1 - v.size() / 10];
  s.spread = s.median > 0 ? (p90 - p10) / s.median : 0;
  return s;
}

/// Checks, then times `r`: eager launches and CUDA-graph replays of `launches` calls cycling
/// through the input copies, `samples` samples each; medians in µs per call.
Measurement measure_one(Harness& h, const Candidate& c, int index, int samples, int copies, CUstream stream,
                        Runtime& runtime) {
  Measurement m;
  m.index = index;
  Runner r = h.runner(c, runtime);
  m.threads = r.threads;
  m.smem = r.smem;
  m.registers = r.registers;
  m.cluster = r.cluster;
  if (std::string why = h.check(r, stream); !why.empty()) {
    m.status = "wrong";
    m.why = why;
    return m;
  }
  const int launches = std::max(copies, 8);
  auto run_all = [&] {
    for (int i = 0; i < launches; ++i) r.per_copy[static_cast<size_t>(i % copies)](stream);
  };
  Events ev;
  run_all();  // warm: attributes raised, caches of the driver filled
  KJIT_CU(cuStreamSynchronize(stream));
  std::vector<double> eager;
  for (int s = 0; s < samples; ++s) eager.push_back(ev.time(stream, run_all) * 1000.0 / launches);

  const kjit::detail::Driver& d = kjit::detail::driver();
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  kjit::detail::check_driver(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
  try {
    run_all();
  } catch (...) {
    d.cuStreamEndCapture(stream, &graph);
    if (graph) d.cuGraphDestroy(graph);
    throw;
  }
  kjit::detail::check_driver(d.cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
  kjit::detail::check_driver(d.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
  kjit::detail::check_driver(d.cuGraphLaunch(exec, stream), "cuGraphLaunch");
  KJIT_CU(cuStreamSynchronize(stream));
  std::vector<double> graphed;
  for (int s = 0; s < samples; ++s) {
    graphed.push_back(ev.time(stream, [&] { kjit::detail::check_driver(d.cuGraphLaunch(exec, stream), "cuGraphLaunch"); }) *
                      1000.0 / launches);
  }
  d.cuGraphExecDestroy(exec);
  d.cuGraphDestroy(graph);
  // A candidate that faults asynchronously shows it here at the latest.
  KJIT_CU(cuStreamSynchronize(stream));
  const Stats g = stats(graphed), e = stats(eager);
  m.status = "ok";
  m.us = g.median;
  m.spread = g.spread;
  m.eager_us = e.median;
  m.samples = samples;
  return m;
}

int worker_main() {
  std::string line;
  std::getline(std::cin, line);
  const json job = json::parse(line, nullptr, false);
  if (!job.is_object()) {
    emit({{"error", "the tune worker got no job"}});
    return 2;
  }
  try {
    const TuneOp& top = op(job.at("op").get<std::string>());
    const Shape shape = job.at("shape").get<Shape>();
    const std::vector<int> indices = job.at("indices").get<std::vector<int>>();
    const int samples = job.value("samples", 25);
    kjit::detail::ensure_context(0);
    const DeviceInfo& info = device_info(0);
    std::unique_ptr<Harness> h = top.make(shape);
    const std::vector<Candidate> candidates = h->candidates(info);
    // Enough copies that the inputs of consecutive launches never sit in L2 together.
    const size_t bytes = std::max<size_t>(h->input_bytes(), 1);
    const int copies = static_cast<int>(std::clamp<size_t>((2 * static_cast<size_t>(info.l2_bytes)) / bytes + 1, 1, 64));
    h->prepare(copies, 0x6b6a6974u);
    CUstream stream = nullptr;
    KJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    emit({{"ready", true}, {"copies", copies}});
    Runtime& runtime = Runtime::global();
    for (int i : indices) {
      emit({{"start", i}});
      Measurement m;
      m.index = i;
      bool fatal = false;
      try {
        if (i < 0 || static_cast<size_t>(i) >= candidates.size()) throw InvalidArgument("candidate index out of range");
        m = measure_one(*h, candidates[static_cast<size_t>(i)], i, samples, copies, stream, runtime);
      } catch (const DriverError& e) {
        // The context may be dead (an illegal address poisons it): report and let a fresh
        // worker take the rest.
        m.status = "failed";
        m.why = e.what();
        fatal = true;
      } catch (const std::exception& e) {
        m.status = "failed";
        m.why = e.what();
      }
      json out = {{"index", i},         {"status", m.status},   {"why", m.why},         {"us", m.us},
                  {"eager_us", m.eager_us}, {"spread", m.spread}, {"samples", m.samples}, {"threads", m.threads},
                  {"smem", m.smem},     {"registers", m.registers}, {"cluster", m.cluster}};
      emit(out);
      if (fatal) std::_Exit(3);
    }
    emit({{"done", true}});
  } catch (const std::exception& e) {
    emit({{"error", e.what()}});
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
