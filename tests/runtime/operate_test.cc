// What an operator sees of a Runtime, without a GPU: freeze after warm-up (a new miss refused
// or warned, warm programs and disk hits still served, never looser than KJIT_JIT), event
// listeners (compile, disk hit, rejected entry, refused JIT; a throwing listener; removal) and
// the Prometheus text (well-formed, names unique, counters moving with a compile).
#include <kjit/error.hpp>
#include <kjit/events.hpp>
#include <kjit/runtime.hpp>

#include "cache/store.hpp"
#include "tools/testing/prometheus_text.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;

namespace {

const kjit::Target kSm90a = kjit::Target::parse("sm_90a");

kjit::ProgramSpec user_spec(int value = 3) {
  kjit::ProgramSpec s;
  s.family = "myapp.fill";
  s.template_args = "value=" + std::to_string(value);
  s.source_name = "fill.cu";
  s.source_text = "template <int N> __global__ void fill(float* out) { out[threadIdx.x] = N; }\n";
  s.name_expressions = {"fill<" + std::to_string(value) + ">"};
  return s;
}

/// Everything a listener saw, copied out of the views.
struct Seen {
  kjit::EventKind kind;
  std::string key, family, params, target, detail;
  double ms;
  int device;
};

class Recording {
 public:
  kjit::EventListener listener() {
    return [this](const kjit::Event& e) {
      std::lock_guard lock(mutex_);
      seen_.push_back({e.kind, std::string(e.key), std::string(e.family), std::string(e.params),
                       std::string(e.target), std::string(e.detail), e.ms, e.device});
    };
  }
  std::vector<Seen> take() {
    std::lock_guard lock(mutex_);
    return std::move(seen_);
  }

 private:
  std::mutex mutex_;
  std::vector<Seen> seen_;
};

class Operate : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kjit-operate-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  kjit::RuntimeConfig config(kjit::JitMode jit = kjit::JitMode::kOn) const {
    kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
    c.cache_dir = (dir_ / "cache").string();
    c.kernel_dir.clear();
    c.jit = jit;
    c.record_path.clear();
    return c;
  }

  fs::path entry_path(const std::string& key) const {
    return dir_ / "cache" / "v1" / key.substr(0, 2) / (key + ".kjit");
  }

  fs::path dir_;
};

// --- freeze -------------------------------------------------------------------------------------

TEST_F(Operate, FreezeOffRefusesANewMissAndServesWarmAndDiskPrograms) {
  kjit::Runtime rt(config());
  auto warm = rt.compile(user_spec(3), kSm90a);
  EXPECT_FALSE(rt.frozen());
  EXPECT_EQ(rt.jit_mode(), kjit::JitMode::kOn);
  rt.freeze(kjit::JitMode::kOff);
  EXPECT_TRUE(rt.frozen());
  EXPECT_EQ(rt.jit_mode(), kjit::JitMode::kOff);

  EXPECT_EQ(rt.compile(user_spec(3), kSm90a), warm);  // what warm-up obtained keeps running
  try {
    rt.compile(user_spec(4), kSm90a);
    FAIL() << "a miss after freeze(off) compiled";
  } catch (const kjit::JitDisabled& e) {
    EXPECT_EQ(e.family(), "myapp.fill");
    EXPECT_EQ(e.params(), "value=4");
    EXPECT_EQ(e.target(), "sm_90a");
    EXPECT_NE(std::string(e.what()).find("Runtime::freeze(off)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(rt.stats().compiles, 1u);
  EXPECT_EQ(rt.stats().refused, 1u);

  // A disk hit is not a compile: a frozen process still takes what a precompile put there.
  kjit::Runtime(config()).compile(user_spec(5), kSm90a);
  EXPECT_EQ(rt.compile(user_spec(5), kSm90a)->origin, kjit::CompiledProgram::Origin::kDisk);

  rt.unfreeze();
  EXPECT_FALSE(rt.frozen());
  EXPECT_EQ(rt.compile(user_spec(4), kSm90a)->origin, kjit::CompiledProgram::Origin::kCompiled);
}

TEST_F(Operate, FreezeWarnCompilesAndWarnsOncePerKey) {
  kjit::Runtime rt(config());
  rt.freeze(kjit::JitMode::kWarn);
  ::testing::internal::CaptureStderr();
  rt.compile(user_spec(6), kSm90a);
  rt.compile(user_spec(6), kSm90a);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rt.stats().compiles, 1u);
  size_t count = 0;
  for (size_t at = err.find("Runtime::freeze(warn)"); at != std::string::npos;
       at = err.find("Runtime::freeze(warn)", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 1u) << err;
  EXPECT_NE(err.find("myapp.fill value=6 for sm_90a"), std::string::npos) << err;
}

TEST_F(Operate, FreezeNeverLoosensKjitJit) {
  kjit::Runtime off(config(kjit::JitMode::kOff));
  off.freeze(kjit::JitMode::kWarn);
  EXPECT_EQ(off.jit_mode(), kjit::JitMode::kOff);
  try {
    off.compile(user_spec(7), kSm90a);
    FAIL();
  } catch (const kjit::JitDisabled& e) {
    EXPECT_NE(std::string(e.what()).find("KJIT_JIT=off"), std::string::npos) << e.what();
  }
  off.unfreeze();
  EXPECT_EQ(off.jit_mode(), kjit::JitMode::kOff);

  kjit::Runtime warn(config(kjit::JitMode::kWarn));
  warn.freeze(kjit::JitMode::kOff);
  EXPECT_EQ(warn.jit_mode(), kjit::JitMode::kOff);
  EXPECT_THROW(warn.freeze(kjit::JitMode::kOn), kjit::InvalidArgument);
  EXPECT_EQ(warn.jit_mode(), kjit::JitMode::kOff);
  // async sits between warn and off: it compiles on the calling thread only where no fallback is
  // built (and warns then), off never.
  kjit::Runtime async(config(kjit::JitMode::kAsync));
  async.freeze(kjit::JitMode::kWarn);
  EXPECT_EQ(async.jit_mode(), kjit::JitMode::kAsync);
  async.freeze(kjit::JitMode::kOff);
  EXPECT_EQ(async.jit_mode(), kjit::JitMode::kOff);
  kjit::Runtime warn2(config(kjit::JitMode::kWarn));
  warn2.freeze(kjit::JitMode::kAsync);
  EXPECT_EQ(warn2.jit_mode(), kjit::JitMode::kAsync);
  warn2.unfreeze();
  EXPECT_EQ(warn2.jit_mode(), kjit::JitMode::kWarn);
}

TEST(OperateConfig, JitModeSpellings) {
  using kjit::RuntimeConfig;
  EXPECT_EQ(RuntimeConfig::parse_jit_mode("warn", "x"), kjit::JitMode::kWarn);
  EXPECT_EQ(RuntimeConfig::parse_jit_mode("async", "x"), kjit::JitMode::kAsync);
  EXPECT_EQ(RuntimeConfig::parse_jit_mode("false", "x"), kjit::JitMode::kOff);
  EXPECT_EQ(RuntimeConfig::parse_jit_mode("1", "x"), kjit::JitMode::kOn);
  try {
    RuntimeConfig::parse_jit_mode("frozen", "kjit.freeze");
    FAIL();
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("kjit.freeze='frozen'"), std::string::npos) << e.what();
  }
  EXPECT_STREQ(kjit::jit_mode_name(kjit::JitMode::kWarn), "warn");
  ::setenv("KJIT_NVTX", "1", 1);
  EXPECT_TRUE(RuntimeConfig::from_env().nvtx);
  ::unsetenv("KJIT_NVTX");
  EXPECT_FALSE(RuntimeConfig::from_env().nvtx);
}

// --- events -------------------------------------------------------------------------------------

TEST_F(Operate, ListenersSeeCompileDiskHitRejectedAndRefused) {
  Recording rec;
  kjit::Runtime rt(config());
  rt.add_listener(rec.listener());
  const std::string key = rt.key(user_spec(3), kSm90a);
  rt.compile(user_spec(3), kSm90a);
  rt.compile(user_spec(3), kSm90a);  // a memory hit sends nothing
  std::vector<Seen> seen = rec.take();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].kind, kjit::EventKind::kCompile);
  EXPECT_EQ(seen[0].key, key);
  EXPECT_EQ(seen[0].family, "myapp.fill");
  EXPECT_EQ(seen[0].params, "value=3");
  EXPECT_EQ(seen[0].target, "sm_90a");
  EXPECT_GT(seen[0].ms, 0.0);
  EXPECT_EQ(seen[0].device, -1);

  kjit::Runtime second(config());
  second.add_listener(rec.listener());
  second.compile(user_spec(3), kSm90a);
  seen = rec.take();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].kind, kjit::EventKind::kDiskHit);
  EXPECT_EQ(seen[0].key, key);
  EXPECT_GE(seen[0].ms, 0.0);

  // A damaged entry is rejected (with why), then compiled afresh.
  {
    std::fstream f(entry_path(key), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekp(60);
    f.put('\x7f');
  }
  kjit::Runtime third(config());
  third.add_listener(rec.listener());
  ::testing::internal::CaptureStderr();
  third.compile(user_spec(3), kSm90a);
  ::testing::internal::GetCapturedStderr();
  seen = rec.take();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].kind, kjit::EventKind::kRejected);
  EXPECT_EQ(seen[0].detail, "checksum mismatch");
  EXPECT_EQ(seen[1].kind, kjit::EventKind::kCompile);

  third.freeze(kjit::JitMode::kOff);
  EXPECT_THROW(third.compile(user_spec(8), kSm90a), kjit::JitDisabled);
  seen = rec.take();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].kind, kjit::EventKind::kRefused);
  EXPECT_EQ(seen[0].params, "value=8");
  EXPECT_NE(seen[0].detail.find("Runtime::freeze(off)"), std::string::npos) << seen[0].detail;
  EXPECT_STREQ(kjit::event_kind_name(kjit::EventKind::kRefused), "refused");
}

TEST_F(Operate, AThrowingListenerIsReportedOnceAndNeverBreaksTheOp) {
  Recording rec;
  kjit::Runtime rt(config());
  const uint64_t bad = rt.add_listener([](const kjit::Event&) { throw std::runtime_error("listener bug"); });
  rt.add_listener(rec.listener());
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(rt.compile(user_spec(3), kSm90a));
  EXPECT_NO_THROW(rt.compile(user_spec(4), kSm90a));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rec.take().size(), 2u);  // the listener after the throwing one still hears both
  size_t count = 0;
  for (size_t at = err.find("listener bug"); at != std::string::npos; at = err.find("listener bug", at + 1)) ++count;
  EXPECT_EQ(count, 1u) << err;
  EXPECT_NE(err.find("event listener " + std::to_string(bad)), std::string::npos) << err;

  EXPECT_TRUE(rt.remove_listener(bad));
  EXPECT_FALSE(rt.remove_listener(bad));
  EXPECT_THROW(rt.add_listener(kjit::EventListener()), kjit::InvalidArgument);
}

TEST_F(Operate, ListenersComeAndGoWhileThreadsCompile) {
  kjit::Runtime rt(config());
  std::atomic<int> heard{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const uint64_t id = rt.add_listener([&](const kjit::Event&) { heard.fetch_add(1); });
        if (i == 0) rt.compile(user_spec(10 + t), kSm90a);
        EXPECT_TRUE(rt.remove_listener(id));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(rt.stats().compiles, 4u);
  EXPECT_GE(heard.load(), 4);  // each compile heard at least by its own thread's listener
}

TEST_F(Operate, NvtxRangesDoNotChangeTheResult) {
  kjit::RuntimeConfig c = config();
  c.nvtx = true;
  kjit::Runtime rt(c);
  EXPECT_EQ(rt.compile(user_spec(3), kSm90a)->origin, kjit::CompiledProgram::Origin::kCompiled);
  EXPECT_EQ(kjit::Runtime(c).compile(user_spec(3), kSm90a)->origin, kjit::CompiledProgram::Origin::kDisk);
}

// --- key inputs ---------------------------------------------------------------------------------

TEST_F(Operate, KeyInputsNameEveryFileAndTheEntryRecordsThem) {
  kjit::Runtime rt(config());
  kjit::ProgramSpec spec = user_spec(3);
  spec.source_text = "#include \"fill_params.h\"\n" + spec.source_text;
  spec.headers = {{"fill_params.h", "#pragma once\n"}};
  spec.options = {"-DEXTRA=1"};
  const kjit::KeyInputs in = rt.key_inputs(spec, kSm90a);
  EXPECT_EQ(in.key, rt.key(spec, kSm90a));
  EXPECT_EQ(in.format_version, 1u);
  EXPECT_EQ(in.target, "sm_90a");
  EXPECT_EQ(in.nvrtc_version, rt.nvrtc_version());
  EXPECT_EQ(in.cuda_headers_version, rt.cuda_headers_version());
  EXPECT_EQ(in.name_expressions, std::vector<std::string>{"fill<3>"});
  ASSERT_FALSE(in.options.empty());
  EXPECT_EQ(in.options.back(), "-DEXTRA=1");  // the user's options after kjit's, as NVRTC gets them
  ASSERT_GE(in.files.size(), 2u);
  EXPECT_EQ(in.files[0].kind, "source");
  EXPECT_EQ(in.files[0].name, "fill.cu");
  EXPECT_EQ(in.files[1].kind, "header");
  EXPECT_EQ(in.files[1].name, "fill_params.h");

  // An edit to the header changes its digest and nothing else but the key.
  kjit::ProgramSpec edited = spec;
  edited.headers[0].second += "// edit\n";
  const kjit::KeyInputs after = rt.key_inputs(edited, kSm90a);
  EXPECT_NE(after.key, in.key);
  ASSERT_EQ(after.files.size(), in.files.size());
  for (size_t i = 0; i < in.files.size(); ++i) {
    EXPECT_EQ(after.files[i].digest != in.files[i].digest, in.files[i].name == "fill_params.h") << in.files[i].name;
  }

  // The entry a compile publishes records the same files.
  rt.compile(spec, kSm90a);
  const kjit::cache::DiskCache disk((dir_ / "cache").string(), 0);
  kjit::cache::Key key;
  ASSERT_TRUE(kjit::cache::Key::from_hex(in.key, &key));
  const auto entry = disk.lookup(key, false);
  ASSERT_TRUE(entry.has_value());
  ASSERT_EQ(entry->meta.inputs.size(), in.files.size());
  for (size_t i = 0; i < in.files.size(); ++i) {
    EXPECT_EQ(entry->meta.inputs[i].kind, in.files[i].kind);
    EXPECT_EQ(entry->meta.inputs[i].name, in.files[i].name);
    EXPECT_EQ(entry->meta.inputs[i].digest, in.files[i].digest);
  }
}

// --- metrics ------------------------------------------------------------------------------------

std::string problems_of(const kjit::testing::PrometheusText& t) {
  std::string out;
  for (const std::string& p : t.problems) out += p + "\n";
  return out;
}

TEST_F(Operate, MetricsTextIsWellFormedAndCountersMove) {
  kjit::Runtime rt(config());
  const kjit::testing::PrometheusText before = kjit::testing::parse_prometheus(rt.metrics_text());
  EXPECT_TRUE(before.problems.empty()) << problems_of(before);
  EXPECT_EQ(before.types.at("kjit_compiles_total"), "counter");
  EXPECT_EQ(before.types.at("kjit_compile_seconds"), "summary");
  EXPECT_EQ(before.samples.at("kjit_compiles_total"), 0.0);
  EXPECT_EQ(before.samples.at("kjit_jit_mode{mode=\"on\"}"), 1.0);
  EXPECT_EQ(before.samples.count("kjit_cache_entries"), 0u) << "no usage record before the first publish";
  for (const auto& [name, type] : before.types) {
    EXPECT_EQ(name.rfind("kjit_", 0), 0u) << name;
    if (type == "counter") EXPECT_EQ(name.substr(name.size() - 6), "_total") << name;
  }

  rt.compile(user_spec(3), kSm90a);
  rt.compile(user_spec(3), kSm90a);
  rt.freeze(kjit::JitMode::kOff);
  EXPECT_THROW(rt.compile(user_spec(4), kSm90a), kjit::JitDisabled);
  const kjit::testing::PrometheusText after = kjit::testing::parse_prometheus(rt.metrics_text());
  EXPECT_TRUE(after.problems.empty()) << problems_of(after);
  EXPECT_EQ(after.samples.at("kjit_compiles_total"), 1.0);
  EXPECT_EQ(after.samples.at("kjit_compile_seconds_count"), 1.0);
  EXPECT_GT(after.samples.at("kjit_compile_seconds_sum"), 0.0);
  EXPECT_NEAR(after.samples.at("kjit_compile_seconds_sum"), rt.stats().compile_ms / 1000.0, 1e-9);
  EXPECT_EQ(after.samples.at("kjit_memory_hits_total"), 1.0);
  EXPECT_EQ(after.samples.at("kjit_refused_total"), 1.0);
  EXPECT_EQ(after.samples.at("kjit_frozen"), 1.0);
  EXPECT_EQ(after.samples.at("kjit_remote_hits_total"), 0.0);  // no fleet tier configured
  EXPECT_EQ(after.types.at("kjit_remote_publishes_total"), "counter");
  EXPECT_EQ(after.samples.at("kjit_jit_mode{mode=\"off\"}"), 1.0);
  EXPECT_EQ(after.samples.at("kjit_jit_mode{mode=\"on\"}"), 0.0);
  EXPECT_EQ(after.samples.at("kjit_cache_entries"), 1.0);
  EXPECT_GT(after.samples.at("kjit_cache_bytes"), 0.0);
  EXPECT_EQ(after.samples.at("kjit_cache_writable"), 1.0);

  const kjit::RuntimeMetrics m = rt.metrics();
  EXPECT_EQ(m.stats.compiles, 1u);
  EXPECT_TRUE(m.frozen);
  EXPECT_EQ(m.cache_entries, std::optional<uint64_t>(1));
}

TEST(OperateMetrics, TheReaderCatchesMalformedText) {
  // The checks above mean something only if the reader refuses what Prometheus would.
  EXPECT_FALSE(kjit::testing::parse_prometheus("kjit_x 1\n").problems.empty());  // no family
  EXPECT_FALSE(kjit::testing::parse_prometheus("# HELP a h\n# TYPE a gauge\na one\n").problems.empty());
  EXPECT_FALSE(kjit::testing::parse_prometheus("# HELP a h\n# TYPE a gauge\na 1\n# HELP a h\n# TYPE a gauge\n")
                   .problems.empty());
  EXPECT_FALSE(kjit::testing::parse_prometheus("# HELP a h\n# TYPE a gauge\na{l=\"x} 1\n").problems.empty());
  EXPECT_TRUE(kjit::testing::parse_prometheus("# HELP a h\n# TYPE a gauge\na{l=\"x\\\"y\"} 1\n").problems.empty());
}

}  // namespace
