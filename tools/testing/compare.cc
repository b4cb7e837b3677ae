#include "tools/testing/compare.hpp"

#include <fmt/format.h>

#include <cmath>

namespace kjit::testing {

std::string Comparison::describe() const {
  return fmt::format("rel_l2={:.3e} max_abs={:.3e} at {}, {} non-finite of {}", rel_l2, max_abs,
                     worst_index, non_finite, count);
}

Comparison compare(const std::vector<float>& out, const std::vector<double>& ref) {
  Comparison c;
  c.count = out.size();
  double err2 = 0, ref2 = 0;
  const size_t n = std::min(out.size(), ref.size());
  if (out.size() != ref.size()) c.non_finite += out.size() > ref.size() ? out.size() - n : ref.size() - n;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i]) && std::isfinite(ref[i])) {
      ++c.non_finite;
      continue;
    }
    if (!std::isfinite(ref[i])) {
      // A non-finite reference (e.g. -inf LSE of an empty row) must be matched exactly.
      if (!(out[i] == ref[i] || (std::isnan(out[i]) && std::isnan(ref[i])))) ++c.non_finite;
      continue;
    }
    const double d = static_cast<double>(out[i]) - ref[i];
    err2 += d * d;
    ref2 += ref[i] * ref[i];
    if (std::abs(d) > c.max_abs) {
      c.max_abs = std::abs(d);
      c.worst_index = i;
    }
  }
  c.rel_l2 = std::sqrt(err2) / std::max(std::sqrt(ref2), 1e-30);
  if (ref2 == 0 && err2 == 0) c.rel_l2 = 0;
  return c;
}

}  // namespace kjit::testing
