#pragma once
// What the decode GPU suites (attention_decode_test.cc, attention_paged_test.cc) check of the
// cluster merge: a case run with it and with the merge kernel on one seed, each against the
// float64 reference and the two against each other.
#include <kjit/device.hpp>
#include <kjit/ops/attention.hpp>

#include "tools/testing/gpu.hpp"
#include "tools/testing/reference_attention.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <string>

namespace kjit::testing {

/// Whether the current device has thread-block clusters (sm_90+: the cluster merge runs there).
inline bool device_has_clusters() { return device_info(current_device()).target().has_clusters(); }

/// Runs `c` through `run` (run_decode_case or run_paged_decode_case) on `seed` with the cluster
/// merge (`merge`: kCluster forced, or kAuto, which on sm_90+ plans it for 2..8 splits) and with
/// the merge kernel: each against the float64 reference (out_tol, lse_tol), and the cluster
/// merge's out and lse against the merge kernel's. Those are the same partials through the same
/// SplitMerge arithmetic, equal up to the last bit two compilations may round differently:
/// 1e-3 and 1e-6 catch any merge bug, whose errors are O(1).
template <class Case, class Run>
void check_cluster_against_kernel(Case c, attention::DecodeMerge merge, uint64_t seed, double out_tol,
                                  double lse_tol, Run run) {
  c.merge = merge;
  SCOPED_TRACE(c.describe() + " seed=" + std::to_string(seed));
  try {
    const DecodeCaseResult cluster = run(c, seed);
    EXPECT_TRUE(cluster.ok(out_tol, lse_tol)) << "cluster merge: " << cluster.describe();
    c.merge = attention::DecodeMerge::kKernel;
    const DecodeCaseResult kernel = run(c, seed);
    EXPECT_TRUE(kernel.ok(out_tol, lse_tol)) << "merge kernel: " << kernel.describe();
    const DecodeCaseResult same = compare_runs(cluster, kernel);
    EXPECT_TRUE(same.ok(1e-3, 1e-6)) << "cluster vs merge kernel: " << same.describe();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw: " << e.what();
  }
}

}  // namespace kjit::testing
