#pragma once
/// \file compare.hpp
/// Comparing kernel outputs with float64 references: relative L2 error ‖out − ref‖ / ‖ref‖,
/// the largest absolute error, and whether any output is not finite (an unwritten, poisoned
/// element reads back as NaN).

#include <cstddef>
#include <string>
#include <vector>

namespace kjit::testing {

struct Comparison {
  double rel_l2 = 0;       ///< ‖out − ref‖₂ / max(‖ref‖₂, tiny)
  double max_abs = 0;      ///< max |out − ref|
  size_t worst_index = 0;  ///< where max_abs occurs
  size_t non_finite = 0;   ///< outputs that are NaN or inf where the reference is finite
  size_t count = 0;

  /// True when there is no non-finite output and rel_l2 ≤ rel_tol.
  bool ok(double rel_tol) const { return non_finite == 0 && rel_l2 <= rel_tol; }
  /// "rel_l2=1.2e-03 max_abs=3.1e-02 at 17, 0 non-finite of 4096".
  std::string describe() const;
};

/// Compares `out` (float values read back from the device) with `ref`.
Comparison compare(const std::vector<float>& out, const std::vector<double>& ref);

}  // namespace kjit::testing
