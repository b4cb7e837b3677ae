#include "tools/testing/random.hpp"

#include "tools/testing/host_types.hpp"

#include <algorithm>
#include <atomic>
#include <thread>

namespace kjit::testing {

void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn) {
  constexpr size_t kChunk = size_t{1} << 16;
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 64);
  if (n <= kChunk || threads == 1) {
    fn(0, n);
    return;
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t b = next.fetch_add(kChunk); b < n; b = next.fetch_add(kChunk)) fn(b, std::min(n, b + kChunk));
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

float uniform01(uint64_t seed, size_t i) {
  uint64_t x = seed + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(i) + 1);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
}

std::vector<float> random_bf16_values(size_t n, float range, uint64_t seed) {
  std::vector<float> v(n);
  parallel_for(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) v[i] = round_bf16(range * (2 * uniform01(seed, i) - 1));
  });
  return v;
}

std::vector<uint16_t> bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  parallel_for(v.size(), [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) h[i] = float_to_bf16(v[i]);
  });
  return h;
}

std::vector<uint8_t> random_fp8_values(size_t n, float range, Fp8Format f, uint64_t seed) {
  std::vector<uint8_t> v(n);
  parallel_for(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) v[i] = fp8_encode(range * (2 * uniform01(seed, i) - 1), f);
  });
  return v;
}

}  // namespace kjit::testing
