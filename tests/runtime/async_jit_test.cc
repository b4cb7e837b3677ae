// KJIT_JIT=async end to end on the stand-in driver (tests/support/simulated_driver.cc with
// KJIT_SIM_HOST_PATH=1 and KJIT_SIM_CC=9.0, set by tests/CMakeLists.txt): NVRTC compiles for
// real, the stand-in loads the cubins and checks each launch, and kjitSimLastKernel() names the
// kernel a launch ran. The decode op is the subject: its `rows` parameter is performance-only,
// so a tuning table naming rows=16 for a shape whose rows=8 program is built (the "seed" cache,
// compiled once per run) is a miss with a fallback, and a head_dim nothing is built for is a
// miss without one. Checked:
//   - a miss returns before the background compile ends (the compile's event waits for the
//     call to return; a call that compiled itself would wait for its own event), launching the
//     fallback; calls meanwhile keep the fallback from the call memo; the call after the compile
//     ends runs the exact program; the fallback is logged for `kjit cache explain`;
//   - the first call that misses costs a host call, not a compile: under 0.2 ms (the median over
//     fresh Runtimes and two programs, with the stand-in's launch taking the host time a GPU
//     driver's does), against the NVRTC compile of ≥ 100 ms a first call under `on` waits for.
//     Its ratio to a warm call is printed, not asserted: on this 2-core machine it is 1.5–2.3×
//     in some processes and 4–7× in others (the background compile starting beside the calling
//     thread), so the ≤ 2× of the design is a device benchmark's figure (bench_async_jit.py);
//   - 8 threads missing one key at once cost one compile;
//   - a miss without a fallback compiles on the calling thread (no_fallback event);
//   - during a graph capture the loaded fallback is captured, the program compiles and loads in
//     the background (the stand-in refuses a module load during a global capture unless the
//     loading thread's capture mode is relaxed), the done event says to re-capture, and a
//     re-capture runs it; without a fallback the capture is refused and the compile queued;
//   - a fork()'s child compiles on a background thread of its own;
//   - destroying the Runtime (or finish_background()) during a background compile waits for it,
//     abandons the queued one (counted, its fallback and the abandonment reported on the
//     finishing thread), and nothing compiles afterwards; after finish_background() a miss keeps
//     its fallback and queues nothing.
// Timings (first call under on and async, warm calls) are printed for the record. Skips when the
// stand-in's host path is not loaded.
#include <kjit/device.hpp>
#include <kjit/families.hpp>
#include <kjit/ops/attention.hpp>

#include "cache/fallback_log.hpp"
#include "runtime/driver.hpp"
#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/tuned.hpp"
#include "tools/testing/gpu.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace ad = kjit::attention::detail;
namespace kd = kjit::detail;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using kjit::DType;
using kjit::EventKind;
using kjit::TensorRef;

using LastKernel = const char* (*)();
using SetLaunchNs = void (*)(uint64_t);

/// The stand-in's function `name`, or null when the loaded libcuda.so.1 is not it.
template <class Fn>
Fn sim_fn(const char* name) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return lib ? reinterpret_cast<Fn>(dlsym(lib, name)) : nullptr;
}

/// The stand-in's last-launched-kernel query, or null when the loaded libcuda.so.1 is not it.
LastKernel last_kernel_fn() { return sim_fn<LastKernel>("kjitSimLastKernel"); }

// A sanitizer's instrumentation slows the host path many times over: its timings bound nothing.
// TSan also refuses to start a thread in the child of a multi-threaded fork().
#if defined(__has_feature)
#define KJIT_TEST_HAS_FEATURE(x) __has_feature(x)
#else
#define KJIT_TEST_HAS_FEATURE(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || KJIT_TEST_HAS_FEATURE(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
#if defined(__SANITIZE_ADDRESS__) || KJIT_TEST_HAS_FEATURE(address_sanitizer)
constexpr bool kInstrumented = true;
#else
constexpr bool kInstrumented = kThreadSanitizer;
#endif

/// The host time of one kernel launch on the GPUs the async bound is stated for: a raw
/// cuLaunchKernelEx took 3.0–4.4 µs of host time on H100 and H200 (docs/perf-notes.md, the hot
/// op call against the raw launch); the low end. The stand-in's own launch takes a few ns, which
/// would make "twice a warm call" a bound on the call memo's hit rather than on a call.
constexpr uint64_t kDriverLaunchNs = 3000;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void* fake_ptr(uintptr_t offset) { return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + offset); }

/// A decode of one sequence of 64 tokens, 32 query heads over 8 KV heads (group 4: rows=8 is the
/// built-in plan); the planner takes one split for one KV tile (no workspace, no merge program)
/// and the call is tunable (it requests no split count). Nothing computes on the stand-in, so
/// the tensors are addresses only.
kjit::attention::DecodeArgs decode_args(int64_t head_dim) {
  constexpr int64_t kB = 1, kL = 64, kHq = 32, kHkv = 8;
  kjit::attention::DecodeArgs a;
  a.q = TensorRef(fake_ptr(0x0), DType::kBF16, {kB, 1, kHq, head_dim}, {}, 0);
  a.k = TensorRef(fake_ptr(0x100000), DType::kBF16, {kB, kL, kHkv, head_dim}, {}, 0);
  a.v = TensorRef(fake_ptr(0x200000), DType::kBF16, {kB, kL, kHkv, head_dim}, {}, 0);
  a.out = TensorRef(fake_ptr(0x400000), DType::kBF16, {kB, 1, kHq, head_dim}, {}, 0);
  return a;
}

kjit::ProgramSpec decode_spec(int64_t head_dim, int rows) {
  return kjit::attention::decode_family().spec(kjit::attention::decode_family().point(
      {head_dim, rows, static_cast<int64_t>(kjit::attention::DecodeMerge::kKernel)}));
}

/// Installs a tuning table naming `rows` for the decode bucket of each head_dim (one split).
void push_rows(std::initializer_list<int64_t> head_dims, int rows) {
  kd::TunedTable table;
  for (int64_t hd : head_dims) {
    kd::TunedKey key{};
    ASSERT_TRUE(ad::DecodeOp::tune_key(ad::validate_decode(decode_args(hd)), &key));
    kd::TunedChoice choice;
    choice.family = &kjit::attention::decode_family();
    choice.point = kjit::attention::decode_family().point(
        {hd, rows, static_cast<int64_t>(kjit::attention::DecodeMerge::kKernel)});
    choice.knobs[0] = 1;
    table.set(key, choice);
  }
  kd::install_tuned_table(0, table);
}

/// What the listeners saw: every event, with the thread it came from and when.
struct Seen {
  EventKind kind;
  std::string key, params, detail;
  std::thread::id thread;
  Clock::time_point at;
};

class Recorder {
 public:
  void add(const kjit::Event& e) {
    std::lock_guard lock(mutex_);
    seen_.push_back({e.kind, std::string(e.key), std::string(e.params), std::string(e.detail),
                     std::this_thread::get_id(), Clock::now()});
    changed_.notify_all();
  }
  std::vector<Seen> of(EventKind kind) {
    std::lock_guard lock(mutex_);
    std::vector<Seen> out;
    for (const Seen& s : seen_) {
      if (s.kind == kind) out.push_back(s);
    }
    return out;
  }
  /// Waits until `n` events of `kind` arrived (or 60 s passed); whether they did.
  bool wait_for(EventKind kind, size_t n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(60), [&] {
      return static_cast<size_t>(std::count_if(seen_.begin(), seen_.end(), [&](const Seen& s) { return s.kind == kind; })) >= n;
    });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Seen> seen_;
};

/// A flag one thread raises and another waits for, with a timeout.
class Gate {
 public:
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

/// The median host time of `n` calls of `call`, in milliseconds.
template <class F>
double median_ms(int n, F&& call) {
  std::vector<double> t;
  for (int i = 0; i < n; ++i) {
    const auto a = Clock::now();
    call();
    t.push_back(ms_between(a, Clock::now()));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Figures of the run, printed at the end.
struct Figures {
  double on_first_ms = 0, warm_ms = 0, warm_miss_ms = 0, async_first_ms = 0, async_fallback_hit_ms = 0;
  double launch_warm_ms = 0, launch_first_ms = 0;  // the medians of AFirstMissCostsAHostCallNotACompile
};
Figures figures;

class AsyncJit : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* host_path = std::getenv("KJIT_SIM_HOST_PATH");
    if (host_path == nullptr || std::string(host_path) != "1" || !kjit::testing::has_gpu() || !last_kernel_fn()) return;
    available_ = true;
    // The seed cache: the built-in decode plans (rows=8) at head_dim 128 and 64, compiled by the
    // first call under KJIT_JIT=on (timed), as a precompiled deployment would hold them.
    seed_ = fs::temp_directory_path() / ("kjit-async-seed-" + std::to_string(::getpid()));
    fs::remove_all(seed_);
    kd::install_tuned_table(0, {});
    kjit::Runtime on(config_for(seed_ / "cache", kjit::JitMode::kOn));
    auto args = decode_args(128);
    const auto t0 = Clock::now();
    kjit::attention::decode(args, nullptr, 0, nullptr, on);
    figures.on_first_ms = ms_between(t0, Clock::now());
    figures.warm_ms = median_ms(101, [&] { kjit::attention::decode(args, nullptr, 0, nullptr, on); });
    // A call the memo has not seen whose program is loaded: the full path without a compile.
    figures.warm_miss_ms = median_ms(21, [&] {
      kd::forget_op_calls();
      kjit::attention::decode(args, nullptr, 0, nullptr, on);
    });
    kjit::attention::decode(decode_args(64), nullptr, 0, nullptr, on);
  }
  static void TearDownTestSuite() {
    if (!available_) return;
    fs::remove_all(seed_);
    std::printf("[figures] decode on the stand-in (host time): first call under on %.1f ms (NVRTC); warm call %.4f ms; "
                "memo miss, program loaded %.4f ms; first call under async (tuned plan not built, fallback "
                "loaded) %.4f ms; stored fallback call %.4f ms; with each launch spinning %.1f us of CPU: warm call %.4f ms, first "
                "call under async %.4f ms (medians)\n",
                figures.on_first_ms, figures.warm_ms, figures.warm_miss_ms, figures.async_first_ms,
                figures.async_fallback_hit_ms, kDriverLaunchNs / 1000.0, figures.launch_warm_ms,
                figures.launch_first_ms);
  }

  static kjit::RuntimeConfig config_for(const fs::path& cache, kjit::JitMode jit) {
    kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
    c.cache_dir = cache.string();
    c.kernel_dir.clear();
    c.record_path.clear();
    c.jit = jit;
    return c;
  }

  void SetUp() override {
    if (!available_) GTEST_SKIP() << "needs the stand-in driver's host path (KJIT_SIM_HOST_PATH=1, its folder on LD_LIBRARY_PATH)";
    last_kernel_ = last_kernel_fn();
    dir_ = fs::temp_directory_path() / ("kjit-async-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy(seed_ / "cache", dir_ / "cache", fs::copy_options::recursive);
    kd::install_tuned_table(0, {});
    kd::forget_op_calls();
  }
  void TearDown() override {
    if (!available_) return;
    kd::install_tuned_table(0, {});
    kd::forget_op_calls();
    fs::remove_all(dir_);
  }

  kjit::RuntimeConfig config(kjit::JitMode jit = kjit::JitMode::kAsync) const { return config_for(dir_ / "cache", jit); }

  /// The lowered name of the decode kernel of (head_dim, rows), from `rt`'s memory or its disk
  /// cache: call it only for a program built already (it would compile otherwise).
  static std::string kernel_name(kjit::Runtime& rt, int64_t head_dim, int rows) {
    return rt.load(decode_spec(head_dim, rows)).kernel(0).info().lowered_name;
  }
  std::string last_kernel() const {
    const char* name = last_kernel_();
    return name ? name : "";
  }

  static inline bool available_ = false;
  static inline fs::path seed_;
  LastKernel last_kernel_ = nullptr;
  fs::path dir_;
};

TEST_F(AsyncJit, AMissRunsTheFallbackAndTheNextCallAfterTheCompileRunsTheExactProgram) {
  kjit::Runtime rt(config());
  Recorder rec;
  Gate returned;
  std::atomic<bool> compile_after_return{false};
  rt.add_listener([&](const kjit::Event& e) {
    // The compile waits (on the thread that runs it) for the missing call to return: a call that
    // compiled itself would wait here for its own return, and time out.
    if (e.kind == EventKind::kCompile) compile_after_return = returned.wait(std::chrono::seconds(20));
    rec.add(e);
  });
  auto args = decode_args(128);
  kjit::attention::decode(args, nullptr, 0, nullptr, rt);  // warm: rows=8 from the disk cache
  const std::string rows8 = kernel_name(rt, 128, 8);
  ASSERT_EQ(last_kernel(), rows8);

  push_rows({128}, 16);  // a pushed tuning table names a plan no one compiled
  const auto t0 = Clock::now();
  kjit::attention::decode(args, nullptr, 0, nullptr, rt);
  figures.async_first_ms = ms_between(t0, Clock::now());
  EXPECT_EQ(last_kernel(), rows8) << "the miss launched its fallback";
  // Calls while the compile runs keep the stored fallback.
  figures.async_fallback_hit_ms = median_ms(11, [&] { kjit::attention::decode(args, nullptr, 0, nullptr, rt); });
  EXPECT_EQ(last_kernel(), rows8);
  returned.open();

  ASSERT_TRUE(rec.wait_for(EventKind::kBackgroundCompileDone, 1));
  EXPECT_TRUE(compile_after_return) << "the call waited for the compile";
  const std::vector<Seen> compiles = rec.of(EventKind::kCompile);
  ASSERT_EQ(compiles.size(), 1u);
  EXPECT_NE(compiles[0].thread, std::this_thread::get_id()) << "compiled on the calling thread";
  const std::vector<Seen> fallbacks = rec.of(EventKind::kFallbackLaunch);
  ASSERT_EQ(fallbacks.size(), 1u) << "one launch value built from the fallback, then served from the memo";
  EXPECT_NE(fallbacks[0].params.find("rows=16"), std::string::npos) << fallbacks[0].params;
  EXPECT_NE(fallbacks[0].detail.find("rows=8"), std::string::npos) << fallbacks[0].detail;
  const std::vector<Seen> done = rec.of(EventKind::kBackgroundCompileDone);
  EXPECT_EQ(done[0].key, fallbacks[0].key);
  EXPECT_EQ(done[0].detail, "");

  kjit::attention::decode(args, nullptr, 0, nullptr, rt);
  const std::string rows16 = kernel_name(rt, 128, 16);  // in memory now: no compile
  EXPECT_NE(rows16, rows8);
  EXPECT_EQ(last_kernel(), rows16) << "the call after the compile ended ran the exact program";
  const kjit::RuntimeStats s = rt.stats();
  EXPECT_EQ(s.compiles, 1u);
  EXPECT_EQ(s.background_compiles, 1u);
  EXPECT_EQ(s.fallback_launches, 12u);  // the miss and the 11 timed calls
  EXPECT_EQ(s.no_fallback, 0u);
  EXPECT_EQ(s.background_failures + s.background_abandoned + s.background_queue_full, 0u);
  const std::string metrics = rt.metrics_text();
  EXPECT_NE(metrics.find("kjit_fallback_launches_total 12\n"), std::string::npos);
  EXPECT_NE(metrics.find("kjit_background_compiles_total 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("kjit_jit_mode{mode=\"async\"} 1\n"), std::string::npos);

  // The fallback that served the key is on record for `kjit cache explain`.
  kjit::cache::Key missing;
  ASSERT_TRUE(kjit::cache::Key::from_hex(fallbacks[0].key, &missing));
  const std::vector<kjit::cache::FallbackRecord> log = kjit::cache::read_fallbacks(rt.disk_cache().root, missing);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].family, "attention.decode");
  EXPECT_EQ(log[0].params, "head_dim=128 rows=8 merge=kernel");
  EXPECT_EQ(log[0].fallback.hex(), rt.load(decode_spec(128, 8)).compiled().key);

  // The first call returned long before a compile could: generous bounds, the ordering above is
  // the strict check (the next test bounds the first call's time).
  EXPECT_LT(figures.async_first_ms, figures.on_first_ms / 4);
}

TEST_F(AsyncJit, AFirstMissCostsAHostCallNotACompile) {
  const auto set_launch_ns = sim_fn<SetLaunchNs>("kjitSimSetLaunchNs");
  ASSERT_NE(set_launch_ns, nullptr);
  set_launch_ns(kDriverLaunchNs);
  struct Reset {
    SetLaunchNs fn;
    ~Reset() { fn(0); }
  } reset{set_launch_ns};
  // Fresh Runtimes (nothing of theirs in memory: the kernel tables, the call memo and the key
  // memo are per Runtime) alternating between two programs, each with its fallback (rows=8)
  // loaded by warm-up calls and the tuned program (rows=16) in memory nowhere. The cache is
  // shared, so after a program's first background compile the later ones read it from disk:
  // the calling thread's work is the same, it looks in memory only. Each sample times one warm
  // call and then the miss, single calls both.
  constexpr int kSamples = 9;
  constexpr double kMissBoundMs = 0.2;  // a compile is ≥ 100 ms; a miss 6–30 µs here
  std::vector<double> first, warm;
  for (int i = 0; i < kSamples; ++i) {
    const int64_t head_dim = i % 2 == 0 ? 128 : 64;
    kd::install_tuned_table(0, {});
    kjit::Runtime rt(config());
    auto args = decode_args(head_dim);
    for (int j = 0; j < 20; ++j) kjit::attention::decode(args, nullptr, 0, nullptr, rt);
    auto t0 = Clock::now();
    kjit::attention::decode(args, nullptr, 0, nullptr, rt);
    warm.push_back(ms_between(t0, Clock::now()));
    push_rows({head_dim}, 16);
    t0 = Clock::now();
    kjit::attention::decode(args, nullptr, 0, nullptr, rt);
    first.push_back(ms_between(t0, Clock::now()));
    EXPECT_EQ(last_kernel(), kernel_name(rt, head_dim, 8)) << "sample " << i << ": the miss ran its fallback";
    EXPECT_EQ(rt.stats().fallback_launches, 1u) << "sample " << i;
    // The Runtime's destructor waits for the background compile: none runs into the next sample.
  }
  std::sort(first.begin(), first.end());
  std::sort(warm.begin(), warm.end());
  figures.launch_first_ms = first[kSamples / 2];
  figures.launch_warm_ms = warm[kSamples / 2];
  if (kInstrumented) return;  // the sequence ran; its timings are the instrumentation's
  std::printf("first call under async %.2f us, warm call %.2f us (medians over %d fresh Runtimes): %.1fx\n",
              figures.launch_first_ms * 1000, figures.launch_warm_ms * 1000, kSamples,
              figures.launch_first_ms / figures.launch_warm_ms);
  EXPECT_LT(figures.launch_first_ms, kMissBoundMs)
      << "first call under async " << figures.launch_first_ms * 1000 << " us (median over " << kSamples
      << " fresh Runtimes): it waited for more than the host work of a call";
}

TEST_F(AsyncJit, EightThreadsMissingOneKeyAtOnceCostOneCompile) {
  kjit::Runtime rt(config());
  Recorder rec;
  rt.add_listener([&](const kjit::Event& e) { rec.add(e); });
  kjit::attention::decode(decode_args(128), nullptr, 0, nullptr, rt);
  const std::string rows8 = kernel_name(rt, 128, 8);
  push_rows({128}, 16);
  constexpr int kThreads = 8;
  std::atomic<int> ready{0};
  std::vector<std::string> first(kThreads), after(kThreads);
  std::vector<std::thread> threads;
  Gate done;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto args = decode_args(128);
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      kjit::attention::decode(args, nullptr, 0, nullptr, rt);
      const char* name = last_kernel_();
      first[i] = name ? name : "";
      done.wait(std::chrono::seconds(120));
      kjit::attention::decode(args, nullptr, 0, nullptr, rt);
      name = last_kernel_();
      after[i] = name ? name : "";
    });
  }
  const bool compiled = rec.wait_for(EventKind::kBackgroundCompileDone, 1);
  done.open();
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(compiled);
  const std::string rows16 = kernel_name(rt, 128, 16);
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_TRUE(first[i] == rows8 || first[i] == rows16) << "thread " << i << " launched " << first[i];
    EXPECT_EQ(after[i], rows16) << "thread " << i;
  }
  const kjit::RuntimeStats s = rt.stats();
  EXPECT_EQ(s.compiles, 1u);
  EXPECT_EQ(rec.of(EventKind::kCompile).size(), 1u);
  EXPECT_EQ(s.background_compiles, 1u);
  EXPECT_EQ(rec.of(EventKind::kBackgroundCompileDone).size(), 1u);
}

TEST_F(AsyncJit, AMissWithoutAFallbackCompilesOnTheCallingThread) {
  kjit::Runtime rt(config());
  Recorder rec;
  rt.add_listener([&](const kjit::Event& e) { rec.add(e); });
  kjit::attention::decode(decode_args(128), nullptr, 0, nullptr, rt);  // head_dim 128 is built; 256 is not
  kjit::attention::decode(decode_args(256), nullptr, 0, nullptr, rt);
  const std::vector<Seen> compiles = rec.of(EventKind::kCompile);
  ASSERT_EQ(compiles.size(), 1u);
  EXPECT_EQ(compiles[0].thread, std::this_thread::get_id()) << "a semantic miss compiles as under on";
  EXPECT_NE(compiles[0].params.find("head_dim=256"), std::string::npos);
  const std::vector<Seen> none = rec.of(EventKind::kNoFallback);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].key, compiles[0].key);
  EXPECT_LT(none[0].at, compiles[0].at);
  EXPECT_TRUE(rec.of(EventKind::kFallbackLaunch).empty()) << "rows=8 at head_dim 128 computes something else";
  EXPECT_EQ(last_kernel(), kernel_name(rt, 256, 8));
  const kjit::RuntimeStats s = rt.stats();
  EXPECT_EQ(s.no_fallback, 1u);
  EXPECT_EQ(s.background_compiles, 0u);
  EXPECT_EQ(s.fallback_launches, 0u);
}

TEST_F(AsyncJit, ACaptureRunsTheLoadedFallbackAndIsToldToRecapture) {
  kjit::Runtime rt(config());
  Recorder rec;
  rt.add_listener([&](const kjit::Event& e) { rec.add(e); });
  auto args = decode_args(128);
  kjit::attention::decode(args, nullptr, 0, nullptr, rt);  // rows=8 loaded outside the capture
  const std::string rows8 = kernel_name(rt, 128, 8);
  push_rows({128}, 16);
  const kd::Driver& d = kd::driver();
  CUstream stream = reinterpret_cast<CUstream>(uintptr_t{0x5eed});
  ASSERT_EQ(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  kjit::attention::decode(args, nullptr, 0, stream, rt);
  EXPECT_EQ(last_kernel(), rows8) << "the capture holds the loaded fallback";
  // The background thread loads the exact program while the global-mode capture is open (the
  // stand-in refuses that unless the loading thread's mode is relaxed).
  ASSERT_TRUE(rec.wait_for(EventKind::kBackgroundCompileDone, 1));
  const std::vector<Seen> done = rec.of(EventKind::kBackgroundCompileDone);
  EXPECT_NE(done[0].detail.find("re-capture"), std::string::npos) << done[0].detail;
  EXPECT_EQ(rt.stats().background_failures, 0u);
  const std::vector<Seen> fallbacks = rec.of(EventKind::kFallbackLaunch);
  ASSERT_EQ(fallbacks.size(), 1u);
  EXPECT_NE(fallbacks[0].detail.find("captured"), std::string::npos) << fallbacks[0].detail;
  CUgraph graph = nullptr;
  ASSERT_EQ(d.cuStreamEndCapture(stream, &graph), CUDA_SUCCESS);

  // The re-capture runs the exact program, loaded already: nothing loads during the capture.
  ASSERT_EQ(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  const uint64_t loads = rt.stats().loads;
  kjit::attention::decode(args, nullptr, 0, stream, rt);
  EXPECT_EQ(rt.stats().loads, loads);
  ASSERT_EQ(d.cuStreamEndCapture(stream, &graph), CUDA_SUCCESS);
  EXPECT_EQ(last_kernel(), kernel_name(rt, 128, 16));

  // Without a fallback (head_dim 256: nothing built) a capture is refused, and the compile is
  // queued: a later capture finds it loaded.
  ASSERT_EQ(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_THROW(kjit::attention::decode(decode_args(256), nullptr, 0, stream, rt), kjit::CaptureMiss);
  EXPECT_EQ(rec.of(EventKind::kNoFallback).size(), 1u);
  ASSERT_TRUE(rec.wait_for(EventKind::kBackgroundCompileDone, 2));
  kjit::attention::decode(decode_args(256), nullptr, 0, stream, rt);
  ASSERT_EQ(d.cuStreamEndCapture(stream, &graph), CUDA_SUCCESS);
  EXPECT_EQ(last_kernel(), kernel_name(rt, 256, 8));
  EXPECT_EQ(rt.stats().background_failures, 0u);
}

/// What the two shutdown tests share: an async Runtime with one background thread whose first
/// compile (rows=16 at head_dim 128) holds on its compile event until `release` opens, while the
/// second (rows=16 at head_dim 64) waits in the queue; both misses ran their fallbacks.
struct HeldCompile {
  std::unique_ptr<kjit::Runtime> rt;
  Recorder rec;
  Gate compiling, release;
  std::atomic<int> compiles{0};
  std::string key128, key64;

  explicit HeldCompile(const kjit::RuntimeConfig& config) {
    kjit::RuntimeConfig c = config;
    c.background_threads = 1;
    rt = std::make_unique<kjit::Runtime>(c);
    rt->add_listener([this](const kjit::Event& e) {
      rec.add(e);
      if (e.kind == EventKind::kCompile) {
        compiles.fetch_add(1);
        compiling.open();
        release.wait(std::chrono::seconds(20));  // the compile is running while the Runtime finishes
      }
    });
    auto a128 = decode_args(128);
    auto a64 = decode_args(64);
    kjit::attention::decode(a128, nullptr, 0, nullptr, *rt);
    kjit::attention::decode(a64, nullptr, 0, nullptr, *rt);
    auto key_of = [&](int64_t head_dim) {
      const kjit::ProgramSpec spec = decode_spec(head_dim, 16);
      return rt->key(spec, spec.target_on(kjit::device_info(0).target()));
    };
    key128 = key_of(128);
    key64 = key_of(64);
    push_rows({128, 64}, 16);
    kjit::attention::decode(a128, nullptr, 0, nullptr, *rt);  // runs on the one background thread
    kjit::attention::decode(a64, nullptr, 0, nullptr, *rt);   // waits in the queue
  }
  /// Checks the one abandoned compile's report: the fallback that served it, then the event,
  /// both sent on `finisher` (the thread that finished the background compiles).
  void expect_abandoned_64(std::thread::id finisher) {
    const std::vector<Seen> abandoned = rec.of(EventKind::kBackgroundCompileAbandoned);
    ASSERT_EQ(abandoned.size(), 1u) << "one queued compile was abandoned";
    EXPECT_EQ(abandoned[0].key, key64);
    EXPECT_NE(abandoned[0].params.find("rows=16"), std::string::npos) << abandoned[0].params;
    EXPECT_EQ(abandoned[0].detail.rfind("abandoned: ", 0), 0u) << abandoned[0].detail;
    EXPECT_EQ(abandoned[0].thread, finisher);
    std::vector<Seen> served;
    for (const Seen& f : rec.of(EventKind::kFallbackLaunch)) {
      if (f.key == key64) served.push_back(f);
    }
    ASSERT_EQ(served.size(), 1u) << "the fallback that served the abandoned key is reported";
    EXPECT_NE(served[0].detail.find("rows=8"), std::string::npos) << served[0].detail;
    EXPECT_EQ(served[0].thread, finisher);
    EXPECT_LE(served[0].at, abandoned[0].at);
    EXPECT_STREQ(kjit::event_kind_name(EventKind::kBackgroundCompileAbandoned), "background_compile_abandoned");
  }
};

TEST_F(AsyncJit, DestroyingTheRuntimeDuringACompileWaitsForItAndAbandonsTheQueue) {
  HeldCompile held(config());
  ASSERT_TRUE(held.compiling.wait(std::chrono::seconds(120)));
  const std::string root = held.rt->disk_cache().root;
  std::thread::id destroyer;
  std::thread destroy([&] {
    destroyer = std::this_thread::get_id();
    held.rt.reset();
  });
  // Let the destructor close the queue before the running compile may finish.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  held.release.open();
  destroy.join();
  EXPECT_EQ(held.compiles.load(), 1);
  const std::vector<Seen> done = held.rec.of(EventKind::kBackgroundCompileDone);
  ASSERT_EQ(done.size(), 1u) << "the running compile finished and told";
  EXPECT_EQ(done[0].key, held.key128);
  held.expect_abandoned_64(destroyer);
  // The abandoned key's fallback is on record for `kjit cache explain`.
  kjit::cache::Key key64;
  ASSERT_TRUE(kjit::cache::Key::from_hex(held.key64, &key64));
  ASSERT_EQ(kjit::cache::read_fallbacks(root, key64).size(), 1u);
  auto entry = [&](const std::string& key) { return dir_ / "cache" / "v1" / key.substr(0, 2) / (key + ".kjit"); };
  EXPECT_TRUE(fs::exists(entry(held.key128))) << "the running compile was published";
  // Nothing compiles after the destructor returned.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_FALSE(fs::exists(entry(held.key64))) << "the queued compile ran";
  EXPECT_EQ(held.compiles.load(), 1);
}

TEST_F(AsyncJit, FinishBackgroundCountsAndReportsTheAbandonedCompiles) {
  HeldCompile held(config());
  ASSERT_TRUE(held.compiling.wait(std::chrono::seconds(120)));
  std::thread::id finisher;
  std::thread finish([&] {
    finisher = std::this_thread::get_id();
    held.rt->finish_background();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  held.release.open();
  finish.join();
  const kjit::RuntimeStats s = held.rt->stats();
  EXPECT_EQ(s.background_abandoned, 1u);
  EXPECT_EQ(s.background_compiles, 1u);
  EXPECT_NE(held.rt->metrics_text().find("kjit_background_abandoned_total 1\n"), std::string::npos);
  held.expect_abandoned_64(finisher);
  // Idempotent, and the destructor abandons nothing more.
  held.rt->finish_background();
  held.rt.reset();
  EXPECT_EQ(held.rec.of(EventKind::kBackgroundCompileAbandoned).size(), 1u);
}

TEST_F(AsyncJit, AForkedChildCompilesOnThreadsOfItsOwn) {
  if (kThreadSanitizer) GTEST_SKIP() << "TSan does not start threads in the child of a multi-threaded fork";
  kjit::Runtime rt(config());  // async: its background thread runs in this process only
  auto args = decode_args(128);
  kjit::attention::decode(args, nullptr, 0, nullptr, rt);
  const std::string rows8 = kernel_name(rt, 128, 8);
  push_rows({128}, 16);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child misses: its fallback runs, and the exact program compiles on a thread the child
    // starts (its parent's is not here) and serves the call after. Bits of the exit code: what failed.
    int code = 0;
    kjit::attention::decode(args, nullptr, 0, nullptr, rt);
    if (last_kernel() != rows8) code |= 1;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (rt.stats().background_compiles == 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (rt.stats().background_compiles != 1) code |= 2;
    kjit::attention::decode(args, nullptr, 0, nullptr, rt);
    if (last_kernel() != kernel_name(rt, 128, 16)) code |= 4;
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the miss did not run its fallback; 2: no background compile in the "
                                       "child; 4: the exact program did not serve after it";
}

TEST_F(AsyncJit, AfterFinishBackgroundAMissKeepsItsFallbackAndQueuesNothing) {
  kjit::Runtime rt(config());
  auto args = decode_args(128);
  kjit::attention::decode(args, nullptr, 0, nullptr, rt);
  const std::string rows8 = kernel_name(rt, 128, 8);
  rt.finish_background();
  rt.finish_background();  // idempotent
  push_rows({128}, 16);
  kjit::attention::decode(args, nullptr, 0, nullptr, rt);
  EXPECT_EQ(last_kernel(), rows8);
  const kjit::RuntimeStats s = rt.stats();
  EXPECT_EQ(s.background_queue_full, 1u);
  EXPECT_EQ(s.fallback_launches, 1u);
  EXPECT_EQ(s.compiles, 0u);
  // Without a fallback the call still compiles, on its own thread.
  kjit::attention::decode(decode_args(256), nullptr, 0, nullptr, rt);
  EXPECT_EQ(rt.stats().compiles, 1u);
}

}  // namespace

