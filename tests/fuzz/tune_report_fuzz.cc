// Fuzz target: the sweep report reader (tools/tune/tuner.hpp: from_json, what `kjit tune report`
// reads). A report may come from another machine or an editor, so from_json must take any bytes
// without crashing and either throw InvalidArgument or return a result that is safe to index by
// its winners; the report table of what it accepts must build, and a round trip through to_json
// must be accepted again with the same shapes, candidates and choices.

#include "tools/tune/tuner.hpp"

#include <kjit/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kjit::tune::SweepResult r;
  try {
    r = kjit::tune::from_json(text);
  } catch (const kjit::InvalidArgument&) {
    return 0;
  }
  for (const kjit::tune::ShapeResult& s : r.shapes) {
    const int n = static_cast<int>(s.candidates.size());
    check(s.winner >= -1 && s.winner < n && s.runner_up >= -1 && s.runner_up < n);
    // What the CLI's summary does with a winner.
    if (s.winner >= 0) check(s.candidates[static_cast<size_t>(s.winner)].index == s.winner);
  }
  check(!kjit::tune::report_table(r).empty());
  kjit::tune::SweepResult again;
  try {
    again = kjit::tune::from_json(kjit::tune::to_json(r));
  } catch (const kjit::InvalidArgument&) {
    check(false);
  }
  check(again.shapes.size() == r.shapes.size());
  for (size_t i = 0; i < r.shapes.size(); ++i) {
    check(again.shapes[i].shape == r.shapes[i].shape && again.shapes[i].winner == r.shapes[i].winner &&
          again.shapes[i].runner_up == r.shapes[i].runner_up &&
          again.shapes[i].candidates.size() == r.shapes[i].candidates.size());
  }
  return 0;
}
