#pragma once
/// \file random.hpp
/// The random inputs every check builds (the GPU tests' case runners, `kjit selftest`, the
/// tuner's problems): seeded, counter-based values, drawn in parallel for the large shapes the
/// tuner times, and the same for a seed whatever the thread count.

#include "tools/testing/reference_fp8.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace kjit::testing {

/// Runs fn(begin, end) over [0, n) in chunks on every hardware thread (at most 64); on the
/// calling thread alone when n is small. fn must be safe to run concurrently on disjoint ranges.
void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn);

/// Value i of a counter-based stream (splitmix64 of seed + i): uniform in [0, 1), 24 bits. The
/// same for a (seed, i) whatever the thread that draws it.
float uniform01(uint64_t seed, size_t i);

/// `n` values uniform in [-range, range), rounded to bf16 (the device sees them exactly), drawn
/// from uniform01(seed, ·) in parallel.
std::vector<float> random_bf16_values(size_t n, float range, uint64_t seed);

/// The bf16 bits of `v` (round to nearest even), converted in parallel.
std::vector<uint16_t> bf16_bits(const std::vector<float>& v);

/// `n` fp8 bytes of format `f`: values uniform in [-range, range) from uniform01(seed, ·),
/// encoded as fp8_encode does (saturating), in parallel.
std::vector<uint8_t> random_fp8_values(size_t n, float range, Fp8Format f, uint64_t seed);

}  // namespace kjit::testing
