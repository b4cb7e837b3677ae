// A "host" of the fleet tests: compiles fleet_spec variants through a Runtime configured from
// the environment (KJIT_CACHE_DIR, KJIT_REMOTE*) and prints one JSON line per run with what
// happened, for tests/remote/fleet_test.cc to add up across processes. With --tuned it is a
// process whose ops plan on device 0 (the simulated driver): it loads the device's tuning table
// first (runtime/ops/tuned.cc), then compiles, all through Runtime::global(), and adds the
// device's fingerprint id, whether a table was found and the Prometheus text. --depth sets how
// long a variant takes to compile (fleet_spec).
//   remote_worker [--slow] [--depth N] [--broken] [--tuned] VARIANT...
#include "tests/remote/fleet_spec.hpp"

#include "runtime/ops/tuned.hpp"

#include <kjit/error.hpp>
#include <kjit/runtime.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <chrono>
#include <memory>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  bool slow = false, broken = false, tuned = false;
  int depth = 60;
  std::vector<std::string> variants;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--slow") slow = true;
    else if (a == "--depth" && i + 1 < argc) depth = std::stoi(argv[++i]);
    else if (a == "--broken") broken = true;
    else if (a == "--tuned") tuned = true;
    else variants.push_back(a);
  }
  std::unique_ptr<kjit::Runtime> own;
  if (!tuned) own = std::make_unique<kjit::Runtime>(kjit::RuntimeConfig::from_env());
  kjit::Runtime& rt = tuned ? kjit::Runtime::global() : *own;
  std::string extra;
  if (tuned) {
    const kjit::DeviceInfo& info = kjit::device_identity(0);
    const bool found = kjit::detail::tuned_table(kjit::device_info(0)) != nullptr;
    extra = fmt::format(",\"fingerprint\":\"{}\",\"fingerprint_text\":{},\"tuned\":{}", info.fingerprint_id(),
                        nlohmann::json(info.fingerprint()).dump(), found);
  }
  std::string results;
  int failures = 0;
  for (const std::string& v : variants) {
    const auto start = std::chrono::steady_clock::now();
    std::string outcome;
    try {
      auto p = rt.compile(kjit::test::fleet_spec(v, slow, broken, depth), kjit::test::kFleetTarget);
      const char* origin = p->origin == kjit::CompiledProgram::Origin::kCompiled ? "compiled"
                           : p->origin == kjit::CompiledProgram::Origin::kRemote ? "remote"
                                                                                  : "disk";
      outcome = fmt::format("\"origin\":\"{}\",\"binary\":\"{:016x}\"", origin, XXH3_64bits(p->binary.data(), p->binary.size()));
    } catch (const kjit::CompileError& e) {
      ++failures;
      std::fprintf(stderr, "%s\n", e.what());
      outcome = fmt::format("\"origin\":\"compile_error\",\"log_bytes\":{}", e.log().size());
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    results += fmt::format("{}{{\"variant\":\"{}\",{},\"ms\":{:.3f}}}", results.empty() ? "" : ",", v, outcome, ms);
  }
  const kjit::RuntimeStats s = rt.stats();
  const std::string metrics = nlohmann::json(rt.metrics_text()).dump();  // a JSON string
  fmt::print("{{\"runs\":[{}],\"compiles\":{},\"compile_ms\":{:.3f},\"remote_hits\":{},\"remote_misses\":{},"
             "\"remote_errors\":{},\"lease_waits\":{},\"rejected_signatures\":{},\"oversized\":{},\"publishes\":{},"
             "\"disk_hits\":{},\"round_trips\":{},\"metrics\":{}{}}}\n",
             results, s.compiles, s.compile_ms, s.remote_hits, s.remote_misses, s.remote_errors, s.remote_lease_waits,
             s.remote_rejected_signatures, s.remote_oversized, s.remote_publishes, s.disk_hits, s.remote_round_trips,
             metrics, extra);
  return failures == 0 ? 0 : 3;
}
