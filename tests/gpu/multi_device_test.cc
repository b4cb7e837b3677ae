// Two GPUs in one process, through one Runtime. With two or more devices, two threads drive
// devices 0 and 1 (their primary contexts); with one, two threads drive two contexts of their own
// (cuCtxCreate) on device 0. Each thread runs every shipped op several times, interleaved with
// the other, each result checked against the float64 reference on fresh random data into
// poisoned outputs. Then:
//   - counters: each specialization compiled once in all, loaded once per device (a library
//     serves every context of its device), and nothing more in later rounds;
//   - contexts created and destroyed (on each device in use, by a thread of that device and by a
//     fresh thread) while the other thread keeps launching: every op runs correctly in them, the
//     launching thread sees no error, and the loaded-library count does not move;
//   - tuning tables: one for device 0's fingerprint with a non-default winner is what the
//     planner runs on device 0, and on device 1 when its fingerprint is the same; a table for
//     another fingerprint (its id edited) is used by neither.
// Skips without a GPU. The output says which mode ran.
#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/ops/fp8.hpp>
#include <kjit/ops/rotary.hpp>
#include <kjit/runtime.hpp>

#include "cache/store.hpp"
#include "cache/tune_table.hpp"
#include "runtime/families/fp8.hpp"
#include "runtime/internal/driver.hpp"
#include "runtime/internal/ops.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_attention.hpp"
#include "tools/testing/reference_fp8.hpp"
#include "tools/testing/reference_rotary.hpp"
#include "tools/testing/reference_swa.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace kt = kjit::testing;
namespace ad = kjit::attention::detail;
using kjit::DType;
using kjit::TensorRef;

constexpr double kOutTol = 1e-2;   // attention: bf16 output and P rounding give ~3e-3
constexpr double kLseTol = 1e-4;
constexpr double kGemmTol = 1e-2;

uint64_t fresh_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

/// One checked launch: the op, and what went wrong ("" when it passed).
struct Outcome {
  std::string op;
  std::string failure;
};

/// A shipped op run once on the current context's device, on small shapes, against its
/// reference. Throws nothing: an exception is a failure.
struct OpRun {
  const char* name;
  std::function<std::string(kjit::Runtime&)> run;  ///< "" or what failed
};

std::string rotary_once(kjit::Runtime& rt) {
  const kt::RotaryCaseResult r = kt::run_rotary_case(kt::RotaryCase{}, fresh_seed(), rt);
  return r.ok() ? std::string() : r.describe();
}

std::string quantize_once(kjit::Runtime& rt) {
  const kt::QuantizeCaseResult r = kt::run_quantize_case(kt::QuantizeCase{}, fresh_seed(), rt);
  return r.ok() ? std::string() : r.describe();
}

std::string gemm_once(kjit::Runtime& rt, kjit::fp8::GemmKernel kernel) {
  constexpr int64_t kM = 256, kN = 512, kK = 512;
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> sd(0.002f, 0.02f);
  kt::Fp8GemmProblem p;
  p.m = kM, p.n = kN, p.k = kK;
  p.a.resize(kM * kK);
  p.b.resize(kN * kK);
  for (auto& v : p.a) v = kt::fp8_encode(normal(rng) * 60.f, kt::Fp8Format::kE4M3);
  for (auto& v : p.b) v = kt::fp8_encode(normal(rng) * 60.f, kt::Fp8Format::kE4M3);
  p.scale_a.resize(1);
  p.scale_b.resize(kN);
  for (auto& s : p.scale_a) s = sd(rng);
  for (auto& s : p.scale_b) s = sd(rng);
  const int device = kt::current_device();
  kt::DeviceBuffer da = kt::to_device(p.a), db = kt::to_device(p.b), dsa = kt::to_device(p.scale_a),
                   dsb = kt::to_device(p.scale_b), dd(kM * kN * 2);
  dd.fill(0xFF);
  kjit::fp8::GemmArgs g;
  g.a = TensorRef(da.get(), DType::kE4M3, {kM, kK}, {}, device);
  g.b = TensorRef(db.get(), DType::kE4M3, {kN, kK}, {}, device);
  g.d = TensorRef(dd.get(), DType::kBF16, {kM, kN}, {}, device);
  g.scale_a = TensorRef(dsa.get(), DType::kF32, {1}, {}, device);
  g.scale_b = TensorRef(dsb.get(), DType::kF32, {kN}, {}, device);
  g.kernel = kernel;
  kjit::fp8::gemm(g, nullptr, rt);
  kt::synchronize();
  const std::vector<double> ref = kt::fp8_gemm_reference(p);
  const std::vector<uint16_t> out = dd.download<uint16_t>(kM * kN);
  std::vector<float> got(out.size());
  for (size_t i = 0; i < out.size(); ++i) got[i] = kt::bf16_to_float(out[i]);
  const kt::Comparison cmp = kt::compare(got, ref);
  return cmp.ok(kGemmTol) ? std::string() : fmt::format("{}; seed {}", cmp.describe(), seed);
}

std::string attention_result(const kt::AttentionCaseResult& r) {
  return r.ok(kOutTol, kLseTol) ? std::string() : r.describe();
}

/// Every shipped op that `info`'s device runs, small enough that the float64 references take
/// milliseconds.
std::vector<OpRun> shipped_ops(const kjit::DeviceInfo& info) {
  std::vector<OpRun> ops;
  ops.push_back({"rotary", rotary_once});
  ops.push_back({"attention.decode", [](kjit::Runtime& rt) {
                   kt::DecodeCase c;
                   c.batch = 3;
                   c.max_kv_len = 700;
                   c.q_heads = 8;
                   c.kv_heads = 2;
                   c.ragged = true;
                   c.lse = true;
                   return attention_result(kt::run_decode_case(c, fresh_seed(), rt));
                 }});
  ops.push_back({"attention.paged_decode", [](kjit::Runtime& rt) {
                   kt::PagedDecodeCase c;
                   c.kv_lens = {300, 17, 1};
                   c.layout.page_size = 16;
                   c.lse = true;
                   return attention_result(kt::run_paged_decode_case(c, fresh_seed(), rt));
                 }});
  auto prefill = [](kjit::attention::AttentionVariant variant) {
    return [variant](kjit::Runtime& rt) {
      kt::PrefillCase c;
      c.batch = 2;
      c.q_len = 96;
      c.kv_len = 160;
      c.causal = true;
      c.lse = true;
      c.variant = variant;
      return attention_result(kt::run_prefill_case(c, fresh_seed(), rt));
    };
  };
  ops.push_back({"attention.prefill (mma)", prefill(kjit::attention::AttentionVariant::kMma)});
  if (info.target().has_wgmma()) {
    ops.push_back({"attention.prefill (wgmma)", prefill(kjit::attention::AttentionVariant::kWgmma)});
  }
  ops.push_back({"attention.paged_prefill", [](kjit::Runtime& rt) {
                   kt::PagedPrefillCase c;
                   c.q_lens = {70, 10};
                   c.kv_lens = {70, 150};
                   c.layout.page_size = 16;
                   c.causal = true;
                   c.lse = true;
                   return attention_result(kt::run_paged_prefill_case(c, fresh_seed(), rt));
                 }});
  ops.push_back({"attention.paged_append", [](kjit::Runtime& rt) {
                   kt::AppendCase c;
                   c.kv_lens = {40, 3};
                   c.new_counts = {7, 3};
                   c.layout.page_size = 16;
                   const kt::AppendCaseResult r = kt::run_append_case(c, fresh_seed(), rt);
                   return r.ok() ? std::string() : r.describe();
                 }});
  if (info.target().sm() >= kjit::fp8::kMinSm) {
    ops.push_back({"fp8.quantize", quantize_once});
    ops.push_back({"fp8.gemm", [](kjit::Runtime& rt) { return gemm_once(rt, kjit::fp8::GemmKernel::kAuto); }});
    if (info.target().has_wgmma()) {
      ops.push_back({"fp8.gemm (wgmma)", [](kjit::Runtime& rt) { return gemm_once(rt, kjit::fp8::GemmKernel::kWgmma); }});
    }
  }
  ops.push_back({"mla.swa_decode", [](kjit::Runtime& rt) {
                   kt::SwaCase c;
                   c.tokens = 4;
                   c.lens = kt::SwaCase::Lens::kRandom;
                   c.invalid_fraction = 0.1;
                   c.lse = true;
                   const kt::SwaCaseResult r = kt::run_swa_case(c, fresh_seed(), rt);
                   return r.ok(kt::kSwaOutTol, kt::kSwaLseTol) ? std::string() : r.describe();
                 }});
  return ops;
}

/// Runs every op once on the current context, forward or backward, recording each outcome.
void run_round(kjit::Runtime& rt, const std::vector<OpRun>& ops, bool backward, std::vector<Outcome>* out) {
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpRun& op = ops[backward ? ops.size() - 1 - i : i];
    Outcome o{op.name, {}};
    try {
      o.failure = op.run(rt);
    } catch (const std::exception& e) {
      o.failure = std::string("threw: ") + e.what();
    }
    out->push_back(std::move(o));
  }
}

/// The outcomes' failures, one line each, labelled with `who`; "" when all passed.
std::string failures(const std::string& who, const std::vector<Outcome>& outcomes) {
  std::string s;
  for (const Outcome& o : outcomes) {
    if (!o.failure.empty()) s += fmt::format("{}: {}: {}\n", who, o.op, o.failure);
  }
  return s;
}

std::string make_temp_dir(const char* stem) {
  std::string pattern = (fs::temp_directory_path() / (std::string(stem) + "-XXXXXX")).string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

class MultiDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kt::has_gpu()) GTEST_SKIP() << "no CUDA device";
    devices_ = kjit::device_count();
  }
  void TearDown() override {
    if (devices_ > 0) kt::use_device(0);
  }
  bool two_devices() const { return devices_ >= 2; }
  int devices_ = 0;
};

TEST_F(MultiDevice, TwoThreadsTwoContextsEveryOpCountersAndContextChurn) {
  const auto start = std::chrono::steady_clock::now();
  // Each thread's context, and the device it belongs to.
  CUcontext contexts[2] = {};
  int device_of[2] = {0, 0};
  std::vector<CUcontext> created;
  if (two_devices()) {
    for (int i = 0; i < 2; ++i) {
      kt::use_device(i);
      KJIT_CU(cuCtxGetCurrent(&contexts[i]));
      device_of[i] = i;
    }
    std::printf("[multi-device] mode: two devices, one thread each on its primary context: 0 = %s (%s), 1 = %s (%s)\n",
                kjit::device_info(0).name.c_str(), kjit::device_identity(0).fingerprint_id().c_str(),
                kjit::device_info(1).name.c_str(), kjit::device_identity(1).fingerprint_id().c_str());
  } else {
    for (int i = 0; i < 2; ++i) {
      contexts[i] = kt::create_context(0);
      created.push_back(contexts[i]);
    }
    std::printf("[multi-device] mode: one device (%s): two threads on two contexts of their own (cuCtxCreate) on "
                "device 0\n",
                kjit::device_info(0).name.c_str());
  }
  kt::use_device(0);

  const std::string cache_dir = make_temp_dir("kjit-multi");
  kjit::RuntimeConfig config = kjit::RuntimeConfig::from_env();
  config.cache_dir = cache_dir;  // cold: every specialization compiles here
  config.disk_cache = true;
  config.record_path.clear();
  config.jit = kjit::JitMode::kOn;
  kjit::Runtime rt(config);

  std::vector<OpRun> ops[2] = {shipped_ops(kjit::device_info(device_of[0])), shipped_ops(kjit::device_info(device_of[1]))};
  std::vector<Outcome> outcomes[2];
  auto thread_name = [&](int i) {
    return two_devices() ? fmt::format("thread {} (device {})", i, device_of[i]) : fmt::format("thread {} (context {} on device 0)", i, i);
  };
  // Runs `rounds` rounds on both threads at once; thread 1 goes through the ops backward on even
  // rounds (different specializations compile and load side by side) and forward on odd ones
  // (the same ones at the same time).
  auto both = [&](int first_round, int rounds) {
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] {
        try {
          KJIT_CU(cuCtxSetCurrent(contexts[i]));
          for (int r = first_round; r < first_round + rounds; ++r) run_round(rt, ops[i], i == 1 && r % 2 == 0, &outcomes[i]);
        } catch (const std::exception& e) {
          outcomes[i].push_back({"context", std::string("threw: ") + e.what()});
        }
      });
    }
    for (std::thread& t : threads) t.join();
  };

  // Round 0: everything compiles (once) and loads (once per device).
  both(0, 1);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(failures(thread_name(i), outcomes[i]), "");
  const kjit::RuntimeStats first = rt.stats();
  const size_t entries = kjit::cache::DiskCache(cache_dir, 0).list().size();
  // Two devices that plan alike (same target, SMs, shared memory and tuning table, i.e. the same
  // fingerprint) use the same programs.
  const kjit::DeviceInfo& a = kjit::device_identity(device_of[0]);
  const kjit::DeviceInfo& b = kjit::device_identity(device_of[1]);
  const bool plan_alike = a.target() == b.target() && a.fingerprint_id() == b.fingerprint_id();
  const bool distinct_devices = device_of[0] != device_of[1];
  std::printf("[multi-device] round 0: %zu programs in the cache, %llu compiles, %llu loads, %llu disk hits\n", entries,
              static_cast<unsigned long long>(first.compiles), static_cast<unsigned long long>(first.loads),
              static_cast<unsigned long long>(first.disk_hits));
  EXPECT_GT(entries, 0u);
  EXPECT_EQ(first.compiles, entries) << "each specialization compiles once in all, whichever thread asks first";
  EXPECT_EQ(first.disk_hits, 0u) << "a cold cache: nothing was there to hit";
  EXPECT_EQ(first.compile_failures, 0u);
  EXPECT_EQ(first.load_rebuilds, 0u);
  // A library serves every context of its device: one load per (device, program).
  if (!distinct_devices || plan_alike) {
    EXPECT_EQ(first.loads, distinct_devices ? 2 * entries : entries);
  } else {
    EXPECT_GE(first.loads, entries);
    EXPECT_LE(first.loads, 2 * entries);
  }

  // Rounds 1-2: nothing more compiles or loads.
  both(1, 2);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(failures(thread_name(i), outcomes[i]), "");
  const kjit::RuntimeStats later = rt.stats();
  EXPECT_EQ(later.compiles, first.compiles);
  EXPECT_EQ(later.loads, first.loads);
  EXPECT_EQ(later.disk_hits, first.disk_hits);
  EXPECT_EQ(later.misses, first.misses);

  // Contexts created and destroyed while thread 0 keeps launching on its context: on each device
  // in use, by thread 1 (a context of its own device) and by a fresh thread.
  std::atomic<bool> stop{false};
  std::atomic<int> steady_rounds{0};
  std::vector<Outcome> steady;
  std::thread launcher([&] {
    try {
      KJIT_CU(cuCtxSetCurrent(contexts[0]));
      while (!stop.load() || steady_rounds.load() == 0) {
        run_round(rt, ops[0], false, &steady);
        steady_rounds.fetch_add(1);
      }
    } catch (const std::exception& e) {
      steady.push_back({"context", std::string("threw: ") + e.what()});
    }
  });
  std::vector<Outcome> churn;
  auto churn_on = [&](int device, const std::string& who) {
    for (int k = 0; k < 2; ++k) {
      std::vector<Outcome> here;
      CUcontext temporary = nullptr;
      try {
        temporary = kt::create_context(device);
        run_round(rt, shipped_ops(kjit::device_info(device)), k == 1, &here);
        KJIT_CU(cuCtxSynchronize());
      } catch (const std::exception& e) {
        here.push_back({"context", std::string("threw: ") + e.what()});
      }
      try {
        if (temporary) kt::destroy_context(temporary);
      } catch (const std::exception& e) {
        here.push_back({"destroy", std::string("threw: ") + e.what()});
      }
      for (Outcome& o : here) o.op = fmt::format("{}, temporary context {} on device {}: {}", who, k, device, o.op);
      churn.insert(churn.end(), here.begin(), here.end());
    }
  };
  std::thread own([&] {
    // Thread 1 tears down work on its own device (device 1 with two GPUs).
    churn_on(device_of[1], "thread 1");
  });
  own.join();
  std::thread fresh([&] { churn_on(device_of[0], "a fresh thread"); });
  fresh.join();
  stop = true;
  launcher.join();
  EXPECT_EQ(failures("thread 0 while contexts came and went", steady), "");
  EXPECT_EQ(failures("churn", churn), "");
  EXPECT_GT(steady_rounds.load(), 0);
  const kjit::RuntimeStats after = rt.stats();
  EXPECT_EQ(after.loads, first.loads) << "contexts created and destroyed load nothing and leave nothing behind";
  EXPECT_EQ(after.compiles, first.compiles);
  std::printf("[multi-device] thread 0 ran %d rounds while 4 temporary contexts came and went; %llu loads before "
              "and after\n",
              steady_rounds.load(), static_cast<unsigned long long>(after.loads));

  size_t checks = steady.size() + churn.size();
  for (int i = 0; i < 2; ++i) checks += outcomes[i].size();
  std::printf("[multi-device] %zu op checks in %.1f s\n", checks,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  for (CUcontext c : created) kt::destroy_context(c);
  fs::remove_all(cache_dir);
}

/// The decode call the tuning half plans: 1 × 4096 tokens, 32/8 heads of 128.
ad::DecodeDims tuned_dims(int device) {
  ad::DecodeDims d;
  d.device = device;
  d.batch = 1;
  d.max_kv_len = 4096;
  d.q_heads = 32;
  d.kv_heads = 8;
  d.head_dim = 128;
  d.group = 4;
  d.has_kv_lens = true;
  return d;
}

void reload_tables(int devices) {
  for (int i = 0; i < devices; ++i) kjit::detail::reload_tuned_table(i);
}

TEST_F(MultiDevice, TuningTableFollowsTheDeviceFingerprint) {
  // tuned_table reads the tables of the process's runtime (Runtime::global(), configured once
  // from the environment): the test writes its tables there and removes them after.
  const std::string dir = kjit::Runtime::global().config().cache_dir;
  ASSERT_TRUE(kjit::Runtime::global().config().tuning) << "run without KJIT_TUNING=off";
  const kjit::DeviceInfo& id0 = kjit::device_identity(0);
  const ad::DecodeDims d0 = tuned_dims(0);
  const ad::DecodePlan def = ad::DecodeOp::plan(d0, kjit::device_info(0));
  kjit::detail::TunedChoice pick;
  for (const kjit::detail::TunedChoice& c : ad::DecodeOp::tune_candidates(d0, kjit::device_info(0))) {
    if (c.knobs[0] != def.num_splits) pick = c;
  }
  ASSERT_NE(pick.family, nullptr) << "no candidate other than the default plan's split count";
  kjit::detail::TunedKey key{};
  ASSERT_TRUE(ad::DecodeOp::tune_key(d0, &key));
  const auto& spec = ad::DecodeOp::tune_spec();
  kjit::cache::TuneEntry e;
  e.op = spec.name;
  int n = kjit::detail::kMaxTuneBucket;
  while (n > 0 && key.bucket[n - 1] == 0) --n;
  e.bucket.assign(key.bucket, key.bucket + n);
  e.shape = "batch=1 kv_len=4096 q_heads=32 kv_heads=8 head_dim=128";
  e.winner = kjit::detail::stored_choice_of(spec, pick);
  e.default_choice = kjit::detail::stored_choice_of(spec, ad::DecodeOp::tuned_choice(d0, def));
  e.tuned_unix = static_cast<int64_t>(std::time(nullptr));
  kjit::cache::TuneTable table;
  table.fingerprint_id = id0.fingerprint_id();
  table.fingerprint_text = id0.fingerprint();
  table.entries.push_back(e);
  kjit::cache::publish_table(dir, table);
  std::printf("[multi-device] tuning table for %s: decode splits %d (default %d)\n", table.fingerprint_id.c_str(),
              pick.knobs[0], def.num_splits);

  // Device 0 plans the stored winner, and runs it correctly.
  reload_tables(devices_);
  const ad::DecodePlan on0 = kjit::detail::choose_plan<ad::DecodeOp>(d0, kjit::device_info(0));
  EXPECT_EQ(on0.num_splits, pick.knobs[0]);
  EXPECT_EQ(on0.choice.point, pick.point);
  {
    kt::use_device(0);
    kjit::Runtime rt(kjit::RuntimeConfig::from_env());
    kt::DecodeCase c;
    c.batch = 1;
    c.max_kv_len = 4096;
    const kt::DecodeCaseResult r = kt::run_decode_case(c, fresh_seed(), rt);
    EXPECT_TRUE(r.ok(kOutTol, kLseTol)) << "the tuned plan on device 0: " << r.describe();
  }
  // Device 1 uses it only when its fingerprint is device 0's.
  if (two_devices()) {
    const kjit::DeviceInfo& id1 = kjit::device_identity(1);
    const ad::DecodeDims d1 = tuned_dims(1);
    const ad::DecodePlan on1 = kjit::detail::choose_plan<ad::DecodeOp>(d1, kjit::device_info(1));
    if (id1.fingerprint_id() == id0.fingerprint_id()) {
      std::printf("[multi-device] device 1 has device 0's fingerprint: it must use the table\n");
      EXPECT_EQ(on1.num_splits, pick.knobs[0]);
      EXPECT_EQ(on1.choice.point, pick.point);
    } else {
      std::printf("[multi-device] device 1's fingerprint %s differs from device 0's: it must not use the table\n",
                  id1.fingerprint_id().c_str());
      EXPECT_EQ(on1.num_splits, ad::DecodeOp::plan(d1, kjit::device_info(1)).num_splits);
    }
  } else {
    std::printf("[multi-device] one device: the device 1 half of the matching-fingerprint check did not run\n");
  }

  // The same table under another fingerprint id (a device that differs in anything the
  // fingerprint covers): neither device uses it, and the warning says why.
  kjit::cache::TuneTable foreign = table;
  foreign.fingerprint_id.back() = foreign.fingerprint_id.back() == '0' ? '1' : '0';
  foreign.fingerprint_text += ";edited=1";
  fs::remove(kjit::cache::table_path(dir, table.fingerprint_id));
  kjit::cache::publish_table(dir, foreign);
  auto expect_defaults = [&](const char* what) {
    for (int i = 0; i < std::min(devices_, 2); ++i) {
      const ad::DecodeDims di = tuned_dims(i);
      EXPECT_EQ(kjit::detail::choose_plan<ad::DecodeOp>(di, kjit::device_info(i)).num_splits,
                ad::DecodeOp::plan(di, kjit::device_info(i)).num_splits)
          << what << ": device " << i;
    }
  };
  reload_tables(devices_);
  ::testing::internal::CaptureStderr();
  expect_defaults("a table of another fingerprint beside none of this one");
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("no tuning table for device 0"), std::string::npos) << err;
  EXPECT_NE(err.find(foreign.fingerprint_id), std::string::npos) << err;

  // Under device 0's own file name, a table that records another fingerprint is ignored too.
  {
    std::ofstream f(kjit::cache::table_path(dir, table.fingerprint_id), std::ios::binary | std::ios::trunc);
    f << kjit::cache::encode_table(foreign);
  }
  reload_tables(devices_);
  ::testing::internal::CaptureStderr();
  expect_defaults("device 0's table file recording another fingerprint");
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("was measured on another device"), std::string::npos) << err;

  fs::remove(kjit::cache::table_path(dir, table.fingerprint_id));
  fs::remove(kjit::cache::table_path(dir, foreign.fingerprint_id));
  reload_tables(devices_);  // later tests read the runtime's tables again
}

}  // namespace
