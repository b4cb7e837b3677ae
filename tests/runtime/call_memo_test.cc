// The op call memo (runtime/ops/call_memo.hpp) without a GPU: every byte of each op's Args that
// is not padding reaches its call key (so two calls that differ anywhere are two keys), the
// paged prefill's key holds its host plan's scalars, a key too long for its words turns the memo
// off for that call, and the memo stores, finds, evicts within a set and forgets on
// forget_op_calls(). tests/runtime/host_path_test.cc checks the ops' calls through it on the
// stand-in driver.
#include <kjit/ops/attention.hpp>
#include <kjit/ops/fp8.hpp>
#include <kjit/ops/swa_decode.hpp>
#include <kjit/ops/rotary.hpp>

#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/paged_append.hpp"
#include "runtime/ops/attention/paged_decode.hpp"
#include "runtime/ops/attention/paged_prefill.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/call_memo.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/fp8/quantize.hpp"
#include "runtime/ops/mla/swa_decode.hpp"
#include "runtime/ops/rotary/rotary.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <new>
#include <string>
#include <vector>

namespace {

namespace ad = kjit::attention::detail;
namespace kd = kjit::detail;

template <class Op>
std::vector<uint64_t> key_of(const typename Op::Args& args) {
  uint64_t words[kd::CallKeyWords<Op>::value];
  kd::CallKeyWriter writer(words, std::size(words));
  Op::call_key(args, writer);
  EXPECT_TRUE(writer.ok()) << "the key outgrew its words";
  return {words, words + writer.size()};
}

/// Which bytes of a default-constructed T are its members': default-initialization writes every
/// member (each has an initializer) and leaves padding as it was, so a byte that reads the same
/// over a buffer of zeros and one of ones is a member's.
template <class T>
std::vector<bool> member_bytes() {
  alignas(T) unsigned char zeros[sizeof(T)];
  alignas(T) unsigned char ones[sizeof(T)];
  std::memset(zeros, 0x00, sizeof(T));
  std::memset(ones, 0xff, sizeof(T));
  new (zeros) T;
  new (ones) T;
  std::vector<bool> mask(sizeof(T));
  for (size_t i = 0; i < sizeof(T); ++i) mask[i] = zeros[i] == ones[i];
  return mask;
}

/// Flips each member byte of `base` in turn: every flip must change the key that `key` writes.
template <class Args, class Key>
void expect_every_member_byte_keyed(const Args& base, Key&& key, const std::string& what) {
  const std::vector<bool> mask = member_bytes<Args>();
  const std::vector<uint64_t> base_key = key(base);
  size_t members = 0;
  for (size_t i = 0; i < sizeof(Args); ++i) {
    if (!mask[i]) continue;
    ++members;
    Args flipped = base;
    reinterpret_cast<unsigned char*>(&flipped)[i] ^= 0x01;
    EXPECT_NE(key(flipped), base_key) << what << ": byte " << i << " of " << sizeof(Args) << " does not reach the key";
  }
  // Padding is a few bytes a tensor and after the small fields; not most of the struct.
  EXPECT_GT(members, sizeof(Args) * 9 / 10) << what;
}

template <class Op>
void expect_every_field_keyed(const std::string& what) {
  expect_every_member_byte_keyed(typename Op::Args{}, key_of<Op>, what);
}

TEST(CallMemo, EveryFieldOfEachOpsArgumentsReachesItsKey) {
  expect_every_field_keyed<kd::RotaryOp>("rotary");
  expect_every_field_keyed<ad::DecodeOp>("decode");
  expect_every_field_keyed<ad::PagedDecodeOp>("paged_decode");
  expect_every_field_keyed<ad::PrefillOp>("prefill");
  expect_every_field_keyed<ad::AppendOp>("append_paged_kv");
  expect_every_field_keyed<kjit::mla::detail::SwaDecodeOp>("swa_decode");
  expect_every_field_keyed<kjit::fp8::detail::QuantizeOp>("fp8 quantize");
  expect_every_field_keyed<kjit::fp8::detail::GemmOp>("fp8 gemm");
}

TEST(CallMemo, ThePagedPrefillKeyHoldsItsArgumentsAndItsHostPlansScalars) {
  kjit::attention::PagedPrefillPlan plan;
  plan.batch = 2;
  plan.total_q = 100;
  plan.head_dim = 128;
  plan.tile_rows = 128;
  plan.q_tile_to_batch = {0, 1};
  plan.q_tile_to_index = {0, 0};
  plan.workspace_bytes = 16;
  plan.map_index_offset = 8;
  const char workspace[16] = {};
  auto key = [&](const kjit::attention::PagedPrefillArgs& a, const kjit::attention::PagedPrefillPlan& p,
                 const void* ws = nullptr, size_t ws_bytes = 16) {
    return key_of<ad::PagedPrefillOp>(ad::PagedPrefillOp::Args{a, p, ws ? ws : workspace, ws_bytes});
  };
  expect_every_member_byte_keyed(kjit::attention::PagedPrefillArgs{},
                                 [&](const kjit::attention::PagedPrefillArgs& a) { return key(a, plan); }, "paged_prefill args");
  const kjit::attention::PagedPrefillArgs args;
  const std::vector<uint64_t> base = key(args, plan);
  auto changed = [&](auto&& edit) {
    kjit::attention::PagedPrefillPlan p = plan;
    edit(p);
    return key(args, p);
  };
  EXPECT_NE(changed([](auto& p) { p.batch = 3; }), base);
  EXPECT_NE(changed([](auto& p) { p.total_q = 101; }), base);
  EXPECT_NE(changed([](auto& p) { p.head_dim = 64; }), base);
  EXPECT_NE(changed([](auto& p) { p.tile_rows = 64; }), base);
  EXPECT_NE(changed([](auto& p) { p.variant = kjit::attention::AttentionVariant::kMma; }), base);
  EXPECT_NE(changed([](auto& p) { p.q_tile_to_batch.push_back(1); }), base);
  EXPECT_NE(changed([](auto& p) { p.q_tile_to_index.push_back(1); }), base);
  EXPECT_NE(changed([](auto& p) { p.workspace_bytes = 32; }), base);
  EXPECT_NE(changed([](auto& p) { p.map_index_offset = 12; }), base);
  const char other[16] = {};
  EXPECT_NE(key(args, plan, other), base) << "another workspace";
  EXPECT_NE(key(args, plan, nullptr, 32), base) << "another workspace size";
  // The work map's entries are read by the kernel from the workspace, not by the launch.
  EXPECT_EQ(changed([](auto& p) { p.q_tile_to_batch = {1, 0}; }), base);
}

TEST(CallMemo, AKeyLongerThanItsWordsIsRefusedNotCut) {
  uint64_t words[20];
  kd::CallKeyWriter writer(words, std::size(words));
  writer.put(kjit::TensorRef{});  // 15 words
  EXPECT_TRUE(writer.ok());
  writer.put_all(1, 2, 3, 4, 5);
  EXPECT_TRUE(writer.ok());
  writer.put(6);
  EXPECT_FALSE(writer.ok());
  kd::CallKeyWriter tensors(words, std::size(words));
  tensors.put(kjit::TensorRef{});
  tensors.put(kjit::TensorRef{});
  EXPECT_FALSE(tensors.ok());
}

/// An op of one int64 argument, for the memo's own behaviour.
struct TinyOp {
  struct Args {
    kjit::TensorRef t;  // its address picks the set
    int64_t x = 0;
  };
  using Launch = kd::Launches<int64_t>;
  static void call_key(const Args& a, kd::CallKeyWriter& k) { k.put_all(a.t, a.x); }
};

using TinyMemo = kd::CallMemo<TinyOp, 8, 4>;  // two sets of four

struct TinyKey : TinyMemo::Key {
  explicit TinyKey(const TinyOp::Args& a) { TinyOp::call_key(a, writer); }
};

kd::CallEntry<TinyOp::Launch> entry_of(int64_t value) {
  kd::CallEntry<TinyOp::Launch> e;
  e.launch.step<0>().params = value;
  return e;
}

TEST(CallMemo, StoresFindsEvictsInASetAndForgets) {
  TinyMemo memo;
  char buffer[2];
  TinyOp::Args a;
  a.t.data = buffer;
  EXPECT_EQ(memo.find(TinyKey(a)), nullptr);
  memo.store(TinyKey(a), entry_of(7));
  ASSERT_NE(memo.find(TinyKey(a)), nullptr);
  EXPECT_EQ(memo.find(TinyKey(a))->launch.step<0>().params, 7);
  // Five keys over one tensor address share a set of four: the first one stored is evicted.
  for (int64_t x = 1; x <= 4; ++x) {
    TinyOp::Args b = a;
    b.x = x;
    EXPECT_EQ(memo.find(TinyKey(b)), nullptr);
    memo.store(TinyKey(b), entry_of(x));
  }
  EXPECT_EQ(memo.find(TinyKey(a)), nullptr) << "evicted by the set's fifth key";
  for (int64_t x = 1; x <= 4; ++x) {
    TinyOp::Args b = a;
    b.x = x;
    ASSERT_NE(memo.find(TinyKey(b)), nullptr) << x;
    EXPECT_EQ(memo.find(TinyKey(b))->launch.step<0>().params, x);
  }
  // Another address, another key, although x matches.
  TinyOp::Args c = a;
  c.t.data = buffer + 1;
  c.x = 1;
  EXPECT_EQ(memo.find(TinyKey(c)), nullptr);
  // forget_op_calls reaches every memo on its next probe.
  TinyOp::Args b = a;
  b.x = 4;
  kd::forget_op_calls();
  EXPECT_EQ(memo.find(TinyKey(b)), nullptr);
}

}  // namespace
