// Host-only checks of the op hot path's per-thread memos: the PodMemo itself (hits return the
// stored bytes without recomputing, other keys miss, a set keeps as many keys as it has ways, a
// throwing miss stores nothing, a hit allocates nothing), the TMA map keys of the wgmma prefill
// and FP8 GEMM (every argument of the encode is in the key, the base address included), the
// prefill Params taken from the thread's map memo, the call memo in front of it (a repeat call
// probes once; another address, stride or size is another call), and the decode planners' split-search memo
// (memoized plans equal fresh ones over random shapes and devices, also across tuning-table
// changes). No GPU needed.
#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>

#include "tests/runtime/decode_dims.hpp"
#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/paged_decode.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/pod_memo.hpp"
#include "runtime/ops/tma_map.hpp"
#include "runtime/ops/tuned.hpp"

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

// Counts this thread's allocations while `counting` is set: a memo hit must make none.
namespace {
thread_local bool counting = false;
thread_local uint64_t allocations = 0;
void* counted_alloc(size_t bytes, size_t align) {
  if (counting) ++allocations;
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (bytes + align - 1) / align * align)
                                              : std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace
void* operator new(size_t bytes) { return counted_alloc(bytes, 0); }
void* operator new(size_t bytes, std::align_val_t align) { return counted_alloc(bytes, static_cast<size_t>(align)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

namespace ad = kjit::attention::detail;
namespace fd = kjit::fp8::detail;
namespace kd = kjit::detail;
using kjit::DType;
using kjit::TensorRef;
using kjit::fp8::TmaDescriptor;

/// Allocations made by `fn` on this thread.
template <class Fn>
uint64_t allocations_of(Fn&& fn) {
  allocations = 0;
  counting = true;
  fn();
  counting = false;
  return allocations;
}

void* fake_ptr(uintptr_t offset) { return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + offset); }

bool same_bytes(const TmaDescriptor& a, const TmaDescriptor& b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

/// A stand-in for cuTensorMapEncodeTiled: a descriptor derived from every byte of the key, so
/// two keys get different descriptors and the same key the same one.
TmaDescriptor fake_encode(const kd::TmaMapKey& key) {
  TmaDescriptor d{};
  const auto* p = reinterpret_cast<const unsigned char*>(&key);
  for (size_t i = 0; i < sizeof(key); ++i) {
    d.opaque[i % 16] = (d.opaque[i % 16] ^ p[i]) * 0x100000001b3ull + i;
  }
  return d;
}

// ---- PodMemo ------------------------------------------------------------------------------------

struct Key3 {
  int64_t a, b, c;
};

int64_t slow(const Key3& k) { return k.a * 1000003 + k.b * 1009 + k.c; }

TEST(PodMemo, HitReturnsTheStoredValueWithoutRecomputing) {
  kd::PodMemo<Key3, int64_t, 16> memo;
  int calls = 0;
  auto make = [&](const Key3& k) {
    ++calls;
    return slow(k);
  };
  Key3 k{};
  k.a = 1;
  k.b = 2;
  k.c = 3;
  EXPECT_EQ(memo.get(k, make), slow(k));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(memo.get(k, make), slow(k));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(memo.hits(), 1u);
  EXPECT_EQ(memo.misses(), 1u);
  // Any field of the key makes another key.
  for (int field = 0; field < 3; ++field) {
    Key3 other = k;
    (field == 0 ? other.a : field == 1 ? other.b : other.c) += 1;
    EXPECT_EQ(memo.get(other, make), slow(other));
  }
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(memo.size(), 4u);
  memo.clear();
  EXPECT_EQ(memo.size(), 0u);
  EXPECT_EQ(memo.get(k, make), slow(k));
  EXPECT_EQ(calls, 5);
  const uint64_t n = allocations_of([&] { EXPECT_EQ(memo.get(k, make), slow(k)); });
  EXPECT_EQ(n, 0u) << "a hit allocated";
}

TEST(PodMemo, ManyMoreKeysThanSlotsAlwaysGetTheirOwnValue) {
  kd::PodMemo<Key3, int64_t, 16> memo;
  std::mt19937_64 rng(7);
  std::vector<Key3> pool(40);
  for (Key3& k : pool) {
    k = Key3{};
    k.a = static_cast<int64_t>(rng() % 1000);
    k.b = static_cast<int64_t>(rng() % 1000);
    k.c = static_cast<int64_t>(rng() % 1000);
  }
  for (int i = 0; i < 4000; ++i) {
    const Key3& k = pool[rng() % (i < 2000 ? 8 : pool.size())];  // first a working set that fits
    ASSERT_EQ(memo.get(k, slow), slow(k));
  }
  EXPECT_GT(memo.hits(), 1000u);
  EXPECT_GT(memo.misses(), 40u);  // the wide phase evicts
  EXPECT_LE(memo.size(), 16u);
}

TEST(PodMemo, ASetKeepsAsManyKeysAsItHasWays) {
  constexpr size_t kSlots = 16, kWays = 4, kSets = kSlots / kWays;
  kd::PodMemo<Key3, int64_t, kSlots, kWays> memo;
  // Five keys of one set.
  std::vector<Key3> same_set;
  for (int64_t i = 0; same_set.size() < 5; ++i) {
    Key3 k{};
    k.a = i;
    if ((kd::pod_words_hash(&k, sizeof(k)) & (kSets - 1)) == 0) same_set.push_back(k);  // 24 bytes: all hashed
  }
  int calls = 0;
  auto make = [&](const Key3& k) {
    ++calls;
    return slow(k);
  };
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < kWays; ++i) EXPECT_EQ(memo.get(same_set[i], make), slow(same_set[i]));
  }
  EXPECT_EQ(calls, 4) << "four keys of one set must all stay";
  EXPECT_EQ(memo.get(same_set[4], make), slow(same_set[4]));  // evicts one of them
  EXPECT_EQ(calls, 5);
  for (const Key3& k : same_set) EXPECT_EQ(memo.get(k, make), slow(k));
  EXPECT_EQ(memo.size(), 4u);
}

TEST(PodMemo, AThrowingMissStoresNothing) {
  kd::PodMemo<Key3, int64_t, 16> memo;
  Key3 k{};
  k.a = 5;
  EXPECT_THROW(memo.get(k, [](const Key3&) -> int64_t { throw std::runtime_error("refused"); }), std::runtime_error);
  EXPECT_EQ(memo.size(), 0u);
  EXPECT_EQ(memo.misses(), 1u);
  int calls = 0;
  EXPECT_EQ(memo.get(k, [&](const Key3& key) {
    ++calls;
    return slow(key);
  }),
            slow(k));
  EXPECT_EQ(calls, 1);
}

// ---- TMA map keys ---------------------------------------------------------------------------------

TensorRef blhd(uintptr_t offset, int64_t b, int64_t l, int64_t h, int64_t d) {
  return TensorRef(fake_ptr(offset), DType::kBF16, {b, l, h, d}, {}, 0);
}

TEST(TmaMapKey, BlhdKeyIsTheEncodeArguments) {
  const TensorRef q = blhd(0x1000, 2, 100, 8, 128);
  const kd::TmaMapKey key = ad::blhd_tma_map_key(q, 128);
  EXPECT_EQ(key.base, q.data);
  EXPECT_EQ(key.rank, 4);
  const uint64_t dims[5] = {128, 100, 8, 2, 0};
  const uint64_t strides[4] = {8 * 128 * 2, 128 * 2, 100 * 8 * 128 * 2, 0};
  const uint32_t box[5] = {64, 128, 1, 1, 0};
  const uint32_t elem[5] = {1, 1, 1, 1, 0};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(key.dims[i], dims[i]) << i;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(key.strides[i], strides[i]) << i;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(key.box[i], box[i]) << i;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(key.elem_strides[i], elem[i]) << i;
  EXPECT_EQ(key.dtype, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  EXPECT_EQ(key.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
  EXPECT_EQ(key.interleave, CU_TENSOR_MAP_INTERLEAVE_NONE);
  EXPECT_EQ(key.l2_promotion, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  EXPECT_EQ(key.oob_fill, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  // A K/V of no tokens still encodes (one nominal token); an extent-1 batch gets a 16-byte
  // multiple stride covering the dims inside.
  const kd::TmaMapKey empty = ad::blhd_tma_map_key(blhd(0x1000, 1, 0, 2, 64), 64);
  EXPECT_EQ(empty.dims[1], 1u);
  EXPECT_EQ(empty.strides[2] % 16, 0u);
  EXPECT_GE(empty.strides[2], empty.strides[1] * 2);
}

TEST(TmaMapKey, EveryArgumentMakesAnotherKey) {
  const TensorRef q = blhd(0x1000, 2, 100, 8, 128);
  const kd::TmaMapKey base = ad::blhd_tma_map_key(q, 128);
  TensorRef moved = q;
  moved.data = fake_ptr(0x2000);  // same geometry, another buffer
  TensorRef strided = TensorRef(q.data, DType::kBF16, {2, 100, 8, 128}, {100 * 16 * 128, 16 * 128, 128, 1}, 0);
  const std::vector<kd::TmaMapKey> others = {
      ad::blhd_tma_map_key(moved, 128), ad::blhd_tma_map_key(strided, 128), ad::blhd_tma_map_key(q, 64),
      ad::blhd_tma_map_key(blhd(0x1000, 2, 101, 8, 128), 128), ad::blhd_tma_map_key(blhd(0x1000, 2, 100, 8, 64), 128)};
  kd::TmaMapMemo memo;
  const TmaDescriptor first = memo.get(base, fake_encode);
  for (const kd::TmaMapKey& k : others) {
    EXPECT_NE(std::memcmp(&k, &base, sizeof(k)), 0);
    const uint64_t misses = memo.misses();
    const TmaDescriptor got = memo.get(k, fake_encode);
    EXPECT_EQ(memo.misses(), misses + 1) << "a key that differs from a stored one must miss";
    EXPECT_TRUE(same_bytes(got, fake_encode(k)));
    EXPECT_FALSE(same_bytes(got, first));
  }
  // And the stored one is still returned as it was.
  const uint64_t hits = memo.hits();
  EXPECT_TRUE(same_bytes(memo.get(base, fake_encode), first));
  EXPECT_EQ(memo.hits(), hits + 1);
}

TEST(TmaMapKey, GemmKeysAreTheEncodeArguments) {
  const kd::TmaMapKey a = fd::operand_tma_map_key(fake_ptr(0x100), 2048, 64, 2048, 128);
  EXPECT_EQ(a.base, fake_ptr(0x100));
  EXPECT_EQ(a.rank, 2);
  EXPECT_EQ(a.dims[0], 2048u);
  EXPECT_EQ(a.dims[1], 64u);
  EXPECT_EQ(a.strides[0], 2048u);
  EXPECT_EQ(a.box[0], 128u);
  EXPECT_EQ(a.box[1], 128u);
  EXPECT_EQ(a.dtype, CU_TENSOR_MAP_DATA_TYPE_UINT8);
  // One row with a nominal stride: TMA gets the row bytes rounded up to 16.
  EXPECT_EQ(fd::operand_tma_map_key(fake_ptr(0x100), 2056, 1, 0, 128).strides[0], 2064u);
  const kd::TmaMapKey d16 = fd::output_tma_map_key(fake_ptr(0x200), false, 7168, 64, 7168);
  const kd::TmaMapKey d32 = fd::output_tma_map_key(fake_ptr(0x200), true, 7168, 64, 7168);
  EXPECT_EQ(d16.dtype, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  EXPECT_EQ(d16.box[0], 64u);
  EXPECT_EQ(d16.strides[0], 7168u * 2);
  EXPECT_EQ(d32.dtype, CU_TENSOR_MAP_DATA_TYPE_FLOAT32);
  EXPECT_EQ(d32.box[0], 32u);
  EXPECT_EQ(d32.strides[0], 7168u * 4);
  EXPECT_EQ(d16.l2_promotion, CU_TENSOR_MAP_L2_PROMOTION_NONE);
  const kd::TmaMapKey b_other = fd::operand_tma_map_key(fake_ptr(0x180), 2048, 64, 2048, 128);
  const kd::TmaMapKey box_other = fd::operand_tma_map_key(fake_ptr(0x100), 2048, 64, 2048, 64);
  EXPECT_NE(std::memcmp(&a, &b_other, sizeof(a)), 0);
  EXPECT_NE(std::memcmp(&a, &box_other, sizeof(a)), 0);
}

kjit::DeviceInfo h200() {
  kjit::DeviceInfo info;
  info.cc_major = 9;
  info.cc_minor = 0;
  info.sm_count = 132;
  info.max_smem_per_block_optin = 227 * 1024;
  info.max_smem_per_sm = 228 * 1024;
  info.max_threads_per_block = 1024;
  return info;
}

kjit::attention::PrefillArgs wgmma_prefill(uintptr_t q_offset) {
  kjit::attention::PrefillArgs a;
  a.q = blhd(q_offset, 2, 100, 8, 128);
  a.k = blhd(0x1000000, 2, 300, 2, 128);
  a.v = blhd(0x2000000, 2, 300, 2, 128);
  a.out = blhd(0x4000000, 2, 100, 8, 128);
  a.causal = true;
  return a;
}

TEST(TmaMapMemo, PrefillParamsTakeTheMapsFromTheThreadMemo) {
  using Op = ad::PrefillOp;
  const kjit::attention::PrefillArgs a = wgmma_prefill(0);
  const ad::PrefillDims d = Op::validate(a);
  const ad::PrefillPlan plan = Op::plan(d, h200());
  ASSERT_EQ(plan.variant, kjit::attention::AttentionVariant::kWgmma);
  const kjit::attention::PrefillSm90LaunchShape shape = kjit::attention::prefill_sm90_launch_shape(128);
  const kd::TmaMapKey keys[4] = {ad::blhd_tma_map_key(a.q, shape.block_m), ad::blhd_tma_map_key(a.k, shape.block_n),
                                 ad::blhd_tma_map_key(a.v, shape.block_n), ad::blhd_tma_map_key(a.out, 64)};
  // Seeded with stand-in maps, the thread's memo answers all four: no driver call (there is no
  // driver here) and no allocation. The call memo in front starts empty, so the first call asks
  // the map memo.
  kd::tma_call_memo().clear();
  kd::TmaMapMemo& memo = kd::tma_map_memo();
  memo.clear();
  for (const kd::TmaMapKey& k : keys) memo.get(k, fake_encode);
  const uint64_t hits = memo.hits(), misses = memo.misses();
  kjit::attention::PrefillSm90Params p{};
  const uint64_t n = allocations_of([&] { p = Op::params_sm90(a, d, plan); });
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(memo.hits(), hits + 4);
  EXPECT_EQ(memo.misses(), misses);
  EXPECT_TRUE(same_bytes(p.tma_q, fake_encode(keys[0])));
  EXPECT_TRUE(same_bytes(p.tma_k, fake_encode(keys[1])));
  EXPECT_TRUE(same_bytes(p.tma_v, fake_encode(keys[2])));
  EXPECT_TRUE(same_bytes(p.tma_out, fake_encode(keys[3])));
  // q in another buffer of the same shape: its map is not the stored one. The miss encodes with
  // the driver (which fails here without one, storing nothing; with a GPU it is the real map).
  const kjit::attention::PrefillArgs moved = wgmma_prefill(0x8000000);
  try {
    const kjit::attention::PrefillSm90Params m = Op::params_sm90(moved, Op::validate(moved), plan);
    EXPECT_FALSE(same_bytes(m.tma_q, p.tma_q));
    EXPECT_TRUE(same_bytes(m.tma_k, p.tma_k));
  } catch (const std::exception&) {
    EXPECT_FALSE(kjit::driver_available());
  }
  EXPECT_EQ(memo.misses(), misses + 1) << "the moved q must have missed";
}

// ---- the call memo of TMA maps ------------------------------------------------------------------

TEST(TmaCallMemo, ARepeatCallTakesItsMapsInOneProbe) {
  using Op = ad::PrefillOp;
  const kjit::attention::PrefillArgs a = wgmma_prefill(0);
  const ad::PrefillDims d = Op::validate(a);
  const ad::PrefillPlan plan = Op::plan(d, h200());
  const kjit::attention::PrefillSm90LaunchShape shape = kjit::attention::prefill_sm90_launch_shape(128);
  kd::TmaCallMemo& calls = kd::tma_call_memo();
  kd::TmaMapMemo& maps = kd::tma_map_memo();
  calls.clear();
  maps.clear();
  for (const TensorRef* t : {&a.q, &a.k, &a.v, &a.out}) {
    const int rows = t == &a.q ? shape.block_m : t == &a.out ? 64 : shape.block_n;
    maps.get(ad::blhd_tma_map_key(*t, rows), fake_encode);
  }
  const kjit::attention::PrefillSm90Params first = Op::params_sm90(a, d, plan);  // the call memo's miss
  const uint64_t call_hits = calls.hits(), call_misses = calls.misses(), map_hits = maps.hits();
  kjit::attention::PrefillSm90Params again{};
  EXPECT_EQ(allocations_of([&] { again = Op::params_sm90(a, d, plan); }), 0u);
  EXPECT_EQ(calls.hits(), call_hits + 1);
  EXPECT_EQ(calls.misses(), call_misses);
  EXPECT_EQ(maps.hits(), map_hits) << "a call-memo hit must not probe the map memo";
  EXPECT_EQ(std::memcmp(&first, &again, sizeof(first)), 0);
  EXPECT_TRUE(same_bytes(again.tma_q, fake_encode(ad::blhd_tma_map_key(a.q, shape.block_m))));
  EXPECT_TRUE(same_bytes(again.tma_out, fake_encode(ad::blhd_tma_map_key(a.out, 64))));
}

TEST(TmaCallMemo, EveryInputOfAMapKeyMakesAnotherCall) {
  using Op = ad::PrefillOp;
  const kjit::attention::PrefillArgs a = wgmma_prefill(0);
  const ad::PrefillPlan plan = Op::plan(Op::validate(a), h200());
  const kjit::attention::PrefillSm90LaunchShape shape = kjit::attention::prefill_sm90_launch_shape(128);
  // Variants of one call, each differing from `a` in one tensor: the address, a stride (k padded
  // to 16 heads per row of the same shape), a size.
  std::vector<kjit::attention::PrefillArgs> variants(4, a);
  variants[0].out.data = fake_ptr(0x9000000);
  variants[1].k = TensorRef(a.k.data, DType::kBF16, {2, 300, 2, 128}, {300 * 16 * 128, 16 * 128, 128, 1}, 0);
  variants[2].v.strides[0] += 128;  // another batch stride, nothing else
  variants[3].q = blhd(0, 2, 101, 8, 128);
  variants[3].out = blhd(0x4000000, 2, 101, 8, 128);
  kd::TmaCallMemo& calls = kd::tma_call_memo();
  kd::TmaMapMemo& maps = kd::tma_map_memo();
  calls.clear();
  maps.clear();
  auto seed = [&](const kjit::attention::PrefillArgs& x) {
    maps.get(ad::blhd_tma_map_key(x.q, shape.block_m), fake_encode);
    maps.get(ad::blhd_tma_map_key(x.k, shape.block_n), fake_encode);
    maps.get(ad::blhd_tma_map_key(x.v, shape.block_n), fake_encode);
    maps.get(ad::blhd_tma_map_key(x.out, 64), fake_encode);
  };
  seed(a);
  for (const auto& x : variants) seed(x);
  Op::params_sm90(a, Op::validate(a), plan);
  for (size_t i = 0; i < variants.size(); ++i) {
    const kjit::attention::PrefillArgs& x = variants[i];
    const uint64_t misses = calls.misses();
    const kjit::attention::PrefillSm90Params p = Op::params_sm90(x, Op::validate(x), plan);
    EXPECT_EQ(calls.misses(), misses + 1) << "variant " << i << " was served another call's maps";
    EXPECT_TRUE(same_bytes(p.tma_q, fake_encode(ad::blhd_tma_map_key(x.q, shape.block_m)))) << i;
    EXPECT_TRUE(same_bytes(p.tma_k, fake_encode(ad::blhd_tma_map_key(x.k, shape.block_n)))) << i;
    EXPECT_TRUE(same_bytes(p.tma_v, fake_encode(ad::blhd_tma_map_key(x.v, shape.block_n)))) << i;
    EXPECT_TRUE(same_bytes(p.tma_out, fake_encode(ad::blhd_tma_map_key(x.out, 64)))) << i;
  }
  // Each variant is stored beside `a` (5 calls in 256 slots), and each comes back as it was.
  for (const auto& x : variants) {
    const uint64_t hits = calls.hits();
    const kjit::attention::PrefillSm90Params p = Op::params_sm90(x, Op::validate(x), plan);
    EXPECT_EQ(calls.hits(), hits + 1);
    EXPECT_TRUE(same_bytes(p.tma_k, fake_encode(ad::blhd_tma_map_key(x.k, shape.block_n))));
  }
}

TEST(TmaCallMemo, AFailedEncodeStoresNoCall) {
  kd::TmaCallKey key{};
  static const char kTag = 0;
  key.op = &kTag;
  key.words[0] = 1;
  kd::TmaCallMemo& calls = kd::tma_call_memo();
  calls.clear();
  int made = 0;
  const auto make = [&](kd::TmaMapKey(&keys)[4]) {
    ++made;
    throw std::runtime_error("no driver");
    keys[0] = kd::TmaMapKey{};
  };
  EXPECT_THROW(kd::tma_call_maps(key, 1, make), std::runtime_error);
  EXPECT_THROW(kd::tma_call_maps(key, 1, make), std::runtime_error);
  EXPECT_EQ(made, 2) << "a failed call must not be stored";
  EXPECT_EQ(calls.size(), 0u);
}

// ---- the split-search memo ----------------------------------------------------------------------

TEST(SplitChunkMemo, MatchesTheSearchOverRandomInputs) {
  std::mt19937_64 rng(11);
  const int64_t slot_counts[] = {1, 78, 108, 114, 132, 142, 264};
  ad::SplitChunkMemo& memo = ad::split_chunk_memo();
  memo.clear();
  const uint64_t hits = memo.hits();
  std::vector<ad::SplitSearchKey> pool(300);
  for (ad::SplitSearchKey& k : pool) {
    k = ad::SplitSearchKey{};
    k.tiles = 1 + static_cast<int64_t>(rng() % (rng() % 3 == 0 ? 2000 : 64));
    k.base = 1 + static_cast<int64_t>(rng() % (rng() % 2 == 0 ? 4096 : 8));
    k.slots = slot_counts[rng() % 7];
  }
  for (int i = 0; i < 4000; ++i) {
    // First a working set that fits the memo (hits), then every key (evictions).
    const ad::SplitSearchKey& k = pool[rng() % (i < 2000 ? 24 : pool.size())];
    ASSERT_EQ(ad::split_chunk(k.tiles, k.base, k.slots), ad::search_split_chunk(k.tiles, k.base, k.slots))
        << k.tiles << " " << k.base << " " << k.slots;
  }
  EXPECT_GT(memo.hits(), hits + 500);
}

kjit::DeviceInfo random_device(std::mt19937_64& rng) {
  kjit::DeviceInfo info = h200();
  const int sms[] = {46, 78, 108, 114, 132, 142};
  const int smem_per_sm[] = {100 * 1024, 164 * 1024, 228 * 1024};
  info.sm_count = sms[rng() % 6];
  info.max_smem_per_sm = smem_per_sm[rng() % 3];
  return info;
}

bool same_plan(const ad::DecodePlan& a, const ad::DecodePlan& b) {
  return a.choice.family == b.choice.family && a.choice.point == b.choice.point && a.heads_per_cta == b.heads_per_cta &&
         a.m_tiles == b.m_tiles && a.num_splits == b.num_splits && a.split_tokens == b.split_tokens &&
         a.ctas == b.ctas && a.o_part_bytes == b.o_part_bytes && a.workspace_bytes == b.workspace_bytes;
}

ad::DecodeDims random_decode(std::mt19937_64& rng) {
  const int64_t kv[] = {1, 2, 4, 8};
  const int64_t groups[] = {1, 4, 8, 12, 16, 32};
  const int64_t hd[] = {64, 128, 256};
  const int64_t lens[] = {0, 1, 63, 64, 65, 500, 4096, 8192, 32768, 100000};
  ad::DecodeDims d;
  d.batch = 1 + static_cast<int64_t>(rng() % 64);
  d.kv_heads = kv[rng() % 4];
  d.group = groups[rng() % 6];
  d.q_heads = d.kv_heads * d.group;
  d.head_dim = hd[rng() % 3];
  d.max_kv_len = rng() % 4 == 0 ? static_cast<int64_t>(rng() % 50000) : lens[rng() % 10];
  d.requested_splits = rng() % 5 == 0 ? static_cast<int>(1 + rng() % 40) : 0;
  return d;
}

TEST(SplitChunkMemo, DecodePlansAreTheSameWarmOrCold) {
  std::mt19937_64 rng(13);
  ad::SplitChunkMemo& memo = ad::split_chunk_memo();
  for (int i = 0; i < 2000; ++i) {
    const ad::DecodeDims d = random_decode(rng);
    const kjit::DeviceInfo info = random_device(rng);
    memo.clear();
    const ad::DecodePlan cold = ad::DecodeOp::plan(d, info);
    const ad::DecodePlan warm = ad::DecodeOp::plan(d, info);
    ASSERT_TRUE(same_plan(cold, warm)) << "B" << d.batch << " L" << d.max_kv_len << " D" << d.head_dim;
    // The searched chunk is the plan's.
    if (d.requested_splits == 0 && d.batch > 0) {
      const int64_t tile = kjit::attention::decode_launch_shape(static_cast<int>(d.head_dim)).tile_tokens;
      const int64_t tiles = (std::max<int64_t>(d.max_kv_len, 1) + tile - 1) / tile;
      const int64_t slots = int64_t{info.sm_count} * ad::decode_ctas_per_sm(d.head_dim, info.max_smem_per_sm);
      const int64_t chunk = ad::search_split_chunk(tiles, d.batch * d.kv_heads * warm.m_tiles, slots);
      EXPECT_EQ(warm.split_tokens, std::min<int64_t>(chunk * tile, INT32_MAX));
    }
  }
  // Interleaved, not cleared: a memo full of other shapes still gives each its own plan.
  std::vector<std::pair<ad::DecodeDims, kjit::DeviceInfo>> calls;
  std::vector<ad::DecodePlan> fresh;
  for (int i = 0; i < 300; ++i) {
    calls.emplace_back(random_decode(rng), random_device(rng));
    memo.clear();
    fresh.push_back(ad::DecodeOp::plan(calls.back().first, calls.back().second));
  }
  const uint64_t hits = memo.hits();
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < calls.size(); ++i) {
      ASSERT_TRUE(same_plan(ad::DecodeOp::plan(calls[i].first, calls[i].second), fresh[i])) << i;
    }
  }
  EXPECT_GT(memo.hits(), hits);
  // A hit allocates nothing.
  const ad::DecodeDims d = calls.front().first;
  const kjit::DeviceInfo& info = calls.front().second;
  ad::DecodeOp::plan(d, info);
  EXPECT_EQ(allocations_of([&] { ad::DecodeOp::plan(d, info); }), 0u);
}

TEST(SplitChunkMemo, PagedDecodePlansAreTheSameWarmOrCold) {
  std::mt19937_64 rng(17);
  ad::SplitChunkMemo& memo = ad::split_chunk_memo();
  for (int i = 0; i < 1500; ++i) {
    const ad::DecodeDims dd = random_decode(rng);
    ad::PagedDecodeDims d;
    d.batch = dd.batch;
    d.q_heads = dd.q_heads;
    d.head_dim = dd.head_dim;
    d.group = dd.group;
    d.cache.batch = dd.batch;
    d.cache.kv_heads = dd.kv_heads;
    d.cache.head_dim = dd.head_dim;
    d.cache.page_size = int64_t{1} << (rng() % 7);
    d.cache.nnz = dd.batch * (1 + static_cast<int64_t>(rng() % 300));
    d.cache.num_pages = d.cache.nnz;
    d.requested_splits = dd.requested_splits;
    d.kv_len_hint = rng() % 3 == 0 ? static_cast<int64_t>(rng() % 20000) : 0;
    const kjit::DeviceInfo info = random_device(rng);
    memo.clear();
    const ad::DecodePlan cold = ad::PagedDecodeOp::plan(d, info);
    const ad::DecodePlan warm = ad::PagedDecodeOp::plan(d, info);
    ASSERT_TRUE(same_plan(cold, warm)) << i;
  }
}

TEST(SplitChunkMemo, ATuningTableChangeReachesAWarmMemo) {
  kjit::DeviceInfo info = h200();
  info.ordinal = 11;  // a slot no real device of this machine has
  kd::install_tuned_table(info.ordinal, {});
  const ad::DecodeDims d = decode_dims(1, 4096, 32, 8, 128);
  ad::split_chunk_memo().clear();
  const ad::DecodePlan def = kd::choose_plan<ad::DecodeOp>(d, info);
  EXPECT_TRUE(same_plan(kd::choose_plan<ad::DecodeOp>(d, info), def));  // warm
  kd::TunedChoice pick;
  for (const kd::TunedChoice& c : ad::DecodeOp::tune_candidates(d, info)) {
    if (c.knobs[0] != def.num_splits) pick = c;
  }
  ASSERT_NE(pick.family, nullptr);
  kd::TunedKey key{};
  ASSERT_TRUE(ad::DecodeOp::tune_key(d, &key));
  kd::TunedTable table;
  table.set(key, pick);
  kd::install_tuned_table(info.ordinal, table);
  ad::DecodePlan expected;
  ASSERT_TRUE(ad::DecodeOp::apply_tuned(d, info, pick, &expected));
  const ad::DecodePlan tuned = kd::choose_plan<ad::DecodeOp>(d, info);
  EXPECT_TRUE(same_plan(tuned, expected));
  EXPECT_EQ(tuned.num_splits, pick.knobs[0]);
  EXPECT_NE(tuned.num_splits, def.num_splits);
  // The table gone, the warm memo plans as a cold one.
  kd::install_tuned_table(info.ordinal, {});
  EXPECT_TRUE(same_plan(kd::choose_plan<ad::DecodeOp>(d, info), def));
  ad::split_chunk_memo().clear();
  EXPECT_TRUE(same_plan(kd::choose_plan<ad::DecodeOp>(d, info), def));
}

TEST(SplitChunkMemo, EachThreadHasItsOwn) {
  ad::split_chunk(64, 128, 132);
  const ad::SplitChunkMemo* mine = &ad::split_chunk_memo();
  const ad::SplitChunkMemo* theirs = nullptr;
  uint64_t their_misses = 0;
  std::thread t([&] {
    theirs = &ad::split_chunk_memo();
    ad::split_chunk(64, 128, 132);
    their_misses = ad::split_chunk_memo().misses();
  });
  t.join();
  EXPECT_NE(mine, theirs);
  EXPECT_EQ(their_misses, 1u);
}

}  // namespace
