#pragma once
/// \file runtime/metrics.hpp
/// kjit's metrics in the Prometheus text exposition format (version 0.0.4), written in one
/// place for the three ways out: Runtime::metrics_text() (a host's own /metrics), Python's
/// kjit.metrics_text(), and `kjit cache stats --prometheus` (a cache with no process running).
/// Names follow the Prometheus conventions: a `kjit_` prefix, counters ending in `_total`,
/// times in seconds, sizes in bytes.

#include <kjit/runtime.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kjit::detail {

/// Accumulates metric families: each starts with its HELP and TYPE lines, then its samples.
class PromWriter {
 public:
  using Labels = std::vector<std::pair<std::string_view, std::string_view>>;
  /// Starts family `name` of `type` ("counter", "gauge", "summary"). Throws std::logic_error when
  /// `name` was started before: a family written twice is invalid exposition.
  void family(std::string_view name, std::string_view type, std::string_view help);
  /// One sample line `name{labels} value`; label values are escaped (\\, \", \n).
  void sample(std::string_view name, double value, const Labels& labels = {});
  void sample(std::string_view name, uint64_t value, const Labels& labels = {});
  const std::string& text() const noexcept { return out_; }

 private:
  void line(std::string_view name, const Labels& labels, const std::string& value);
  std::string out_;
  std::set<std::string, std::less<>> families_;
};

/// RuntimeStats, the JIT mode and the cache totals of `m`.
void write_runtime_metrics(PromWriter& w, const RuntimeMetrics& m);

/// The disk cache as a full listing sees it (`kjit cache stats --prometheus`).
struct CacheListingMetrics {
  bool writable = false;
  uint64_t entries = 0, bytes = 0, max_bytes = 0, bad = 0;
  uint64_t hits = 0;  ///< disk lookups that served an entry, summed over the hits log
  /// entries by (family, target)
  std::vector<std::pair<std::pair<std::string, std::string>, uint64_t>> by_family_target;
};
void write_cache_listing_metrics(PromWriter& w, const CacheListingMetrics& m);

}  // namespace kjit::detail
