// Prometheus text for a Runtime and for a disk cache (see metrics.hpp).
#include "runtime/metrics.hpp"

#include <fmt/format.h>

#include <optional>
#include <stdexcept>

namespace kjit {
namespace detail {

void PromWriter::family(std::string_view name, std::string_view type, std::string_view help) {
  if (!families_.emplace(name).second) throw std::logic_error(fmt::format("metric {} written twice", name));
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void PromWriter::line(std::string_view name, const Labels& labels, const std::string& value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) out_ += ',';
      out_ += labels[i].first;
      out_ += "=\"";
      for (char c : labels[i].second) {
        if (c == '\\' || c == '"') {
          out_ += '\\';
          out_ += c;
        } else if (c == '\n') {
          out_ += "\\n";
        } else {
          out_ += c;
        }
      }
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += value;
  out_ += '\n';
}

void PromWriter::sample(std::string_view name, double value, const Labels& labels) {
  line(name, labels, fmt::format("{}", value));
}

void PromWriter::sample(std::string_view name, uint64_t value, const Labels& labels) {
  line(name, labels, std::to_string(value));
}

namespace {

// The totals a Runtime and the CLI both report, under one set of names.
void write_cache_totals(PromWriter& w, std::optional<uint64_t> entries, std::optional<uint64_t> bytes,
                        uint64_t max_bytes, bool writable) {
  if (entries) {
    w.family("kjit_cache_entries", "gauge", "Entries in the disk cache.");
    w.sample("kjit_cache_entries", *entries);
  }
  if (bytes) {
    w.family("kjit_cache_bytes", "gauge", "Bytes of the disk cache's entries.");
    w.sample("kjit_cache_bytes", *bytes);
  }
  w.family("kjit_cache_max_bytes", "gauge", "The disk cache's byte cap (KJIT_CACHE_MAX_BYTES); 0 = none.");
  w.sample("kjit_cache_max_bytes", max_bytes);
  w.family("kjit_cache_writable", "gauge", "1 when compiles are published to the disk cache (a folder not created yet: when its nearest existing parent is writable, since the first publish creates it).");
  w.sample("kjit_cache_writable", static_cast<uint64_t>(writable ? 1 : 0));
}

}  // namespace

void write_runtime_metrics(PromWriter& w, const RuntimeMetrics& m) {
  const RuntimeStats& s = m.stats;
  auto counter = [&](const char* name, uint64_t value, const char* help) {
    w.family(name, "counter", help);
    w.sample(name, value);
  };
  counter("kjit_memory_hits_total", s.memory_hits, "Programs answered from the in-process table.");
  counter("kjit_disk_hits_total", s.disk_hits, "Programs read from the disk cache.");
  counter("kjit_misses_total", s.misses, "Programs in neither memory nor the disk cache (compiled, refused or waited for).");
  counter("kjit_compiles_total", s.compiles, "NVRTC compiles run by this process.");
  counter("kjit_compile_failures_total", s.compile_failures, "NVRTC compiles that failed.");
  w.family("kjit_compile_seconds", "summary", "Wall time of the NVRTC compiles run by this process.");
  w.sample("kjit_compile_seconds_sum", s.compile_ms / 1000.0);
  w.sample("kjit_compile_seconds_count", s.compiles);
  counter("kjit_loads_total", s.loads, "Programs loaded onto a device (one per device and program).");
  counter("kjit_load_rebuilds_total", s.load_rebuilds,
          "Cached binaries the driver refused to load, replaced by a fresh compile.");
  counter("kjit_refused_total", s.refused, "Misses refused: JIT off (KJIT_JIT=off or freeze) or during a graph capture.");
  counter("kjit_remote_hits_total", s.remote_hits, "Entries (or failed-compile records) served by the fleet tier.");
  counter("kjit_remote_misses_total", s.remote_misses, "Fleet tier lookups that found nothing usable.");
  counter("kjit_remote_errors_total", s.remote_errors,
          "Fleet tier faults: each failed attempt (down, slow) and error reply (full, refused).");
  counter("kjit_remote_lease_waits_total", s.remote_lease_waits, "Waits on another host's compile lease.");
  counter("kjit_remote_rejected_signatures_total", s.remote_rejected_signatures,
          "Fleet tier entries refused for a missing or untrusted signature.");
  counter("kjit_remote_oversized_total", s.remote_oversized,
          "Fleet tier values refused by their length (over KJIT_REMOTE_MAX_VALUE_BYTES), not downloaded.");
  counter("kjit_remote_publishes_total", s.remote_publishes, "Entries this process wrote to the fleet tier.");
  counter("kjit_remote_round_trips_total", s.remote_round_trips,
          "Round trips to the fleet tier's server (lookups, leases, publishes, tuning tables; a resend counts "
          "again).");
  counter("kjit_fallback_launches_total", s.fallback_launches,
          "Op calls launched from a fallback while their exact program compiled in the background (KJIT_JIT=async).");
  counter("kjit_no_fallback_total", s.no_fallback,
          "Misses under KJIT_JIT=async with no fallback built: compiled on the calling thread (or refused in a capture).");
  counter("kjit_background_compiles_total", s.background_compiles,
          "Background compiles (KJIT_JIT=async) that ended with their program loaded.");
  counter("kjit_background_failures_total", s.background_failures, "Background compiles that failed.");
  counter("kjit_background_abandoned_total", s.background_abandoned,
          "Queued background compiles dropped before they started (Runtime destroyed, or finish_background).");
  counter("kjit_background_queue_full_total", s.background_queue_full,
          "Misses whose background compile found the queue full (KJIT_JIT_QUEUE); a later call queues it.");
  w.family("kjit_jit_mode", "gauge", "The JIT mode misses follow (KJIT_JIT and freeze): 1 for the mode in force.");
  for (const EnumName<JitMode>& mode : kJitModeNames) {
    w.sample("kjit_jit_mode", static_cast<uint64_t>(mode.value == m.jit_mode ? 1 : 0), {{"mode", mode.name}});
  }
  w.family("kjit_frozen", "gauge", "1 after Runtime::freeze.");
  w.sample("kjit_frozen", static_cast<uint64_t>(m.frozen ? 1 : 0));
  write_cache_totals(w, m.cache_entries, m.cache_bytes, m.cache.max_bytes, m.cache.writable);
}

void write_cache_listing_metrics(PromWriter& w, const CacheListingMetrics& m) {
  write_cache_totals(w, m.entries, m.bytes, m.max_bytes, m.writable);
  w.family("kjit_cache_bad_entries", "gauge", "Entries that do not decode (kjit cache verify names them).");
  w.sample("kjit_cache_bad_entries", m.bad);
  w.family("kjit_cache_lookup_hits_total", "counter",
           "Disk lookups that served an entry, over every process, from the cache's hits log.");
  w.sample("kjit_cache_lookup_hits_total", m.hits);
  w.family("kjit_cache_family_entries", "gauge", "Entries in the disk cache by family and target.");
  for (const auto& [ft, n] : m.by_family_target) {
    w.sample("kjit_cache_family_entries", n, {{"family", ft.first}, {"target", ft.second}});
  }
}

}  // namespace detail

std::string Runtime::metrics_text() const {
  detail::PromWriter w;
  detail::write_runtime_metrics(w, metrics());
  return w.text();
}

}  // namespace kjit
