// Runtime costs on a GPU machine (runtime_bench --help lists the figures and options):
//   hot   host time of a cached op call vs raw cuLaunchKernelEx of the same kernels and Params
//         (rotary, decode, the wgmma prefill, the wgmma paged prefill, the wgmma FP8 GEMM), and of
//         the call with its
//         per-thread memo (TMA maps, split search) emptied before each call
//   warm  a new process: context creation → first launch of a disk-cached kernel, and its compiles
//   cold  NVRTC time of every default specialization for this device's target
// Prints a table and, with --json PATH, writes the figures.
#include <kjit/families.hpp>
#include <kjit/kjit.hpp>

#include "runtime/internal/driver.hpp"
#include "runtime/internal/ops.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

using Clock = std::chrono::steady_clock;

namespace {

// Median host µs per call over `rounds` batches of `calls` calls, each batch ended by a sync so
// the GPU queue never throttles the host for long (a batch must stay below the launch queue's
// depth when the kernels take longer on the GPU than their launches on the host).
double host_us_per_call(const std::function<void()>& call, int calls = 2000, int rounds = 15) {
  std::vector<double> per_call;
  for (int r = 0; r < rounds; ++r) {
    kjit::testing::synchronize();
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) call();
    const auto t1 = Clock::now();
    kjit::testing::synchronize();
    per_call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

struct Row {
  std::string name;
  double value;
  std::string unit;
  std::string note;
};

// The op every figure here times: rotary of one token, 8 heads of 128 (the smallest real call).
struct OneTokenRotary {
  static constexpr int kTokens = 1, kHeads = 8, kDim = 128;
  kjit::testing::DeviceBuffer q{kTokens * kHeads * kDim * 2}, cos{kDim / 2 * 4}, sin{kDim / 2 * 4}, pos{8};
  kjit::RotaryArgs args;
  OneTokenRotary() {
    q.fill(0x3c);
    cos.fill(0);
    sin.fill(0);
    pos.fill(0);
    args.q = kjit::TensorRef(q.get(), kjit::DType::kBF16, {kTokens, kHeads, kDim});
    args.cos = kjit::TensorRef(cos.get(), kjit::DType::kF32, {1, kDim / 2});
    args.sin = kjit::TensorRef(sin.get(), kjit::DType::kF32, {1, kDim / 2});
    args.positions = kjit::TensorRef(pos.get(), kjit::DType::kI64, {kTokens});
  }
};

// An op's launch value replayed through the raw driver: per step with a kernel, the
// CUlaunchConfig and attributes (cluster, programmatic dependent launch) launch_raw builds and
// the Params the op built, each launched with one cuLaunchKernelEx. Build it after one op call
// (which raises the kernels' shared-memory limits).
template <class Launch>
class RawReplay {
 public:
  explicit RawReplay(Launch launch) : launch_(std::move(launch)) {
    raws_.reserve(std::tuple_size_v<decltype(launch_.steps)>);  // no reallocation: configs point into raws_
    std::apply([this](auto&... step) { (add(step), ...); }, launch_.steps);
  }
  RawReplay(const RawReplay&) = delete;
  RawReplay& operator=(const RawReplay&) = delete;

  void operator()() const {
    const auto& d = kjit::detail::driver();
    for (const Raw& r : raws_) {
      void* args[] = {r.params};
      d.cuLaunchKernelEx(&r.config, r.function, args, nullptr);
    }
  }
  size_t kernels() const { return raws_.size(); }

 private:
  struct Raw {
    CUlaunchConfig config{};
    CUlaunchAttribute attrs[2] = {};
    CUfunction function = nullptr;
    void* params = nullptr;
  };
  template <class Step>
  void add(Step& step) {
    if (step.kernel == nullptr) return;
    Raw& r = raws_.emplace_back();
    const kjit::LaunchConfig& c = step.config;
    r.config.gridDimX = c.grid[0];
    r.config.gridDimY = c.grid[1];
    r.config.gridDimZ = c.grid[2];
    r.config.blockDimX = c.block[0];
    r.config.blockDimY = c.block[1];
    r.config.blockDimZ = c.block[2];
    r.config.sharedMemBytes = c.dynamic_smem_bytes;
    unsigned n = 0;
    if (c.cluster[0] * c.cluster[1] * c.cluster[2] > 1) {
      r.attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      r.attrs[n].value.clusterDim.x = c.cluster[0];
      r.attrs[n].value.clusterDim.y = c.cluster[1];
      r.attrs[n].value.clusterDim.z = c.cluster[2];
      ++n;
    }
    if (c.overlap_previous) {
      r.attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      r.attrs[n].value.programmaticStreamSerializationAllowed = 1;
      ++n;
    }
    r.config.attrs = n > 0 ? r.attrs : nullptr;
    r.config.numAttrs = n;
    r.function = step.kernel->function();
    r.params = &step.params;
  }

  Launch launch_;
  std::vector<Raw> raws_;
};

// One hot-call comparison: the raw replay and the op call interleaved five times (drift in
// clocks and queue state cancels), the median of each; with `cold`, the op call with its
// per-thread memo emptied first, the same way.
void hot_rows(std::vector<Row>& rows, const std::string& op_name, const std::string& shape, size_t kernels,
              const std::function<void()>& raw, const std::function<void()>& op, const std::function<void()>& cold,
              const char* cold_what, int calls, int rounds, int per_pass = 1) {
  std::vector<double> raw_us, op_us, cold_us;
  for (int i = 0; i < 5; ++i) {
    raw_us.push_back(host_us_per_call(raw, calls, rounds));
    op_us.push_back(host_us_per_call(op, calls, rounds));
    if (cold) cold_us.push_back(host_us_per_call(cold, calls, rounds));
  }
  std::sort(raw_us.begin(), raw_us.end());
  std::sort(op_us.begin(), op_us.end());
  std::sort(cold_us.begin(), cold_us.end());
  // A pass of `per_pass` op calls (layers in turn) is timed as one call: per op call.
  const double r = raw_us[2] / per_pass, o = op_us[2] / per_pass;
  rows.push_back({fmt::format("raw cuLaunchKernelEx x{} ({})", kernels / per_pass, op_name), r, "us/call", shape});
  rows.push_back({fmt::format("{} hot call", op_name), o, "us/call",
                  fmt::format("{:.3f}x raw, +{:.3f} us (target <= 1.05x)", o / r, o - r)});
  if (cold) {
    const double c = cold_us[2] / per_pass;
    rows.push_back({fmt::format("{}, {} emptied each call", op_name, cold_what), c, "us/call",
                    fmt::format("{:.3f}x raw; the memo saves {:.3f} us a call", c / r, c - o)});
  }
}

// The hot op calls beyond rotary, on shapes whose kernels take a few µs of GPU time at most, so
// the host side is what is timed (batches of 200 calls stay below the launch queue's depth).
constexpr int kHotCalls = 200, kHotRounds = 25;

// decode, B1 Hq32 Hkv8 D128 with a 32768-token cache of which 64 tokens are live (kv_lens): the
// planner searches its split over 512 KV tiles (the serving shape: cache capacity ≫ length);
// split, so the merge kernel runs too (two launches, the second with PDL).
struct HotDecodeCall {
  static constexpr int64_t kB = 1, kL = 32768, kHq = 32, kHkv = 8, kD = 128;
  kjit::testing::DeviceBuffer q{kB * kHq * kD * 2}, k{kB * kL * kHkv * kD * 2}, v{kB * kL * kHkv * kD * 2},
      out{kB * kHq * kD * 2}, lens{16}, ws;
  kjit::attention::DecodeArgs a;
  size_t ws_bytes = 0;
  int splits = 0;
  std::optional<RawReplay<kjit::attention::detail::DecodeOp::Launch>> raw;

  HotDecodeCall() {
    q.fill(0x3c);
    k.fill(0);
    v.fill(0);
    lens.upload(std::vector<int32_t>(kB, 64));
    a.q = kjit::TensorRef(q.get(), kjit::DType::kBF16, {kB, 1, kHq, kD});
    a.k = kjit::TensorRef(k.get(), kjit::DType::kBF16, {kB, kL, kHkv, kD});
    a.v = kjit::TensorRef(v.get(), kjit::DType::kBF16, {kB, kL, kHkv, kD});
    a.out = kjit::TensorRef(out.get(), kjit::DType::kBF16, {kB, 1, kHq, kD});
    a.kv_lens = kjit::TensorRef(lens.get(), kjit::DType::kI32, {kB});
    ws_bytes = kjit::attention::decode_workspace_bytes(a);
    ws = kjit::testing::DeviceBuffer(std::max<size_t>(ws_bytes, 16));
    call();
    kjit::testing::synchronize();
    splits = kjit::detail::plan<kjit::attention::detail::DecodeOp>(a).plan.num_splits;
    raw.emplace(kjit::detail::launch_value<kjit::attention::detail::DecodeOp>(a, {ws.get(), ws_bytes},
                                                                              kjit::Runtime::global()));
  }
  void call() const { kjit::attention::decode(a, ws.get(), ws_bytes, nullptr); }
};

void hot_decode(std::vector<Row>& rows) {
  const HotDecodeCall d;
  auto cold = [&] {
    kjit::detail::forget_op_calls();  // else the call memo answers before the split search
    kjit::attention::detail::split_chunk_memo().clear();
    d.call();
  };
  hot_rows(rows, "kjit::attention::decode", fmt::format("B1 Hq32 Hkv8 D128 L32768 (64 live), {} splits", d.splits),
           d.raw->kernels(), std::cref(*d.raw), [&] { d.call(); }, cold, "op call and split memos", kHotCalls, kHotRounds);
}

// A model layer's calls in turn on one thread: rotary (one token) then decode (as above). Each
// op's kernel table keeps its own last hit, so neither call takes the shared lock.
void hot_layer(std::vector<Row>& rows) {
  OneTokenRotary rotary_call;
  const kjit::RotaryArgs& r = rotary_call.args;
  kjit::rotary(r, nullptr);
  kjit::testing::synchronize();
  const RawReplay rotary_raw(kjit::detail::launch_value<kjit::detail::RotaryOp>(r, {}, kjit::Runtime::global()));
  const HotDecodeCall d;
  auto raw = [&] {
    rotary_raw();
    (*d.raw)();
  };
  auto op = [&] {
    kjit::rotary(r, nullptr);
    d.call();
  };
  hot_rows(rows, "rotary then decode", "the two calls above in turn", rotary_raw.kernels() + d.raw->kernels(), raw, op,
           nullptr, "", kHotCalls, kHotRounds);
}

// The wgmma prefill (sm_90a), B1 L128 H8 D128 causal: 8 CTAs, four TMA maps a call.
void hot_prefill_sm90(std::vector<Row>& rows) {
  constexpr int64_t kB = 1, kL = 128, kH = 8, kD = 128;
  kjit::testing::DeviceBuffer q{kB * kL * kH * kD * 2}, k{kB * kL * kH * kD * 2}, v{kB * kL * kH * kD * 2},
      out{kB * kL * kH * kD * 2};
  q.fill(0x3c);
  k.fill(0x3c);
  v.fill(0x3c);
  kjit::attention::PrefillArgs a;
  a.q = kjit::TensorRef(q.get(), kjit::DType::kBF16, {kB, kL, kH, kD});
  a.k = kjit::TensorRef(k.get(), kjit::DType::kBF16, {kB, kL, kH, kD});
  a.v = kjit::TensorRef(v.get(), kjit::DType::kBF16, {kB, kL, kH, kD});
  a.out = kjit::TensorRef(out.get(), kjit::DType::kBF16, {kB, kL, kH, kD});
  a.causal = true;
  a.variant = kjit::attention::AttentionVariant::kWgmma;
  kjit::attention::prefill(a, nullptr);
  kjit::testing::synchronize();
  RawReplay raw(kjit::detail::launch_value<kjit::attention::detail::PrefillOp>(a, {}, kjit::Runtime::global()));
  auto op = [&] { kjit::attention::prefill(a, nullptr); };
  auto cold = [&] {
    kjit::detail::forget_op_calls();  // else the op call memo answers before the maps are asked
    kjit::detail::tma_call_memo().clear();
    kjit::detail::tma_map_memo().clear();
    op();
  };
  hot_rows(rows, "kjit::attention::prefill (wgmma)", "B1 L128 H8 D128 causal, 4 TMA maps", raw.kernels(),
           std::cref(raw), op, cold, "op call and TMA map memos", kHotCalls, kHotRounds);
}

// The wgmma prefill as a model's layers call it: one q and out buffer, each layer its own K and V
// (B1 L128 H8 D128 causal), the layers in turn. With more layers than the per-thread memos hold
// (64 calls, 64 maps) the calls miss them and encode: what the memos cost a model that large.
void hot_prefill_sm90_layers(std::vector<Row>& rows, int layers) {
  constexpr int64_t kB = 1, kL = 128, kH = 8, kD = 128, kBytes = kB * kL * kH * kD * 2;
  kjit::testing::DeviceBuffer q{kBytes}, out{kBytes};
  q.fill(0x3c);
  std::vector<std::unique_ptr<kjit::testing::DeviceBuffer>> kv;
  std::vector<kjit::attention::PrefillArgs> args(static_cast<size_t>(layers));
  std::vector<std::unique_ptr<RawReplay<kjit::attention::detail::PrefillOp::Launch>>> raws;
  for (kjit::attention::PrefillArgs& a : args) {
    kv.push_back(std::make_unique<kjit::testing::DeviceBuffer>(2 * kBytes));
    kv.back()->fill(0x3c);
    char* base = static_cast<char*>(kv.back()->get());
    a.q = kjit::TensorRef(q.get(), kjit::DType::kBF16, {kB, kL, kH, kD});
    a.k = kjit::TensorRef(base, kjit::DType::kBF16, {kB, kL, kH, kD});
    a.v = kjit::TensorRef(base + kBytes, kjit::DType::kBF16, {kB, kL, kH, kD});
    a.out = kjit::TensorRef(out.get(), kjit::DType::kBF16, {kB, kL, kH, kD});
    a.causal = true;
    a.variant = kjit::attention::AttentionVariant::kWgmma;
    kjit::attention::prefill(a, nullptr);
    raws.push_back(std::make_unique<RawReplay<kjit::attention::detail::PrefillOp::Launch>>(
        kjit::detail::launch_value<kjit::attention::detail::PrefillOp>(a, {}, kjit::Runtime::global())));
  }
  kjit::testing::synchronize();
  auto raw = [&] {
    for (const auto& r : raws) (*r)();
  };
  auto op = [&] {
    for (const kjit::attention::PrefillArgs& a : args) kjit::attention::prefill(a, nullptr);
  };
  hot_rows(rows, fmt::format("kjit::attention::prefill (wgmma), {} layers in turn", layers),
           "as above, each layer its own K and V; per layer", static_cast<size_t>(layers), raw, op, nullptr, "",
           std::max(kHotCalls / layers, 1), kHotRounds, layers);
}

// The ragged paged prefill on its Hopper kernel (sm_90a, no TMA maps: its producer gathers),
// B2 q 64 + 64 over kv 128 each, page 16, Hq8 Hkv8 D128 causal: one 128-row work item per request
// and head (16 CTAs). The plan (work map) is built and uploaded once, outside the timed calls.
void hot_paged_prefill_sm90(std::vector<Row>& rows) {
  constexpr int64_t kB = 2, kQ = 64, kKv = 128, kPage = 16, kH = 8, kD = 128;
  constexpr int64_t kPages = kB * kKv / kPage;
  kjit::testing::DeviceBuffer q{kB * kQ * kH * kD * 2}, out{kB * kQ * kH * kD * 2},
      pool_k{kPages * kPage * kH * kD * 2}, pool_v{kPages * kPage * kH * kD * 2}, qo{(kB + 1) * 4},
      kv_indptr{(kB + 1) * 4}, pages{kPages * 4}, last{kB * 4};
  q.fill(0x3c);
  pool_k.fill(0x3c);
  pool_v.fill(0x3c);
  const std::vector<int32_t> qo_host{0, kQ, 2 * kQ}, kv_host{0, kKv / kPage, 2 * kKv / kPage},
      last_host(kB, static_cast<int32_t>(kPage));
  std::vector<int32_t> page_ids(kPages);
  for (int64_t i = 0; i < kPages; ++i) page_ids[i] = static_cast<int32_t>(i);
  qo.upload(qo_host);
  kv_indptr.upload(kv_host);
  pages.upload(page_ids);
  last.upload(last_host);
  kjit::attention::PagedPrefillArgs a;
  a.q = kjit::TensorRef(q.get(), kjit::DType::kBF16, {kB * kQ, kH, kD});
  a.out = kjit::TensorRef(out.get(), kjit::DType::kBF16, {kB * kQ, kH, kD});
  a.qo_indptr = kjit::TensorRef(qo.get(), kjit::DType::kI32, {kB + 1});
  a.cache.k = kjit::TensorRef(pool_k.get(), kjit::DType::kBF16, {kPages, kPage, kH, kD});
  a.cache.v = kjit::TensorRef(pool_v.get(), kjit::DType::kBF16, {kPages, kPage, kH, kD});
  a.cache.indptr = kjit::TensorRef(kv_indptr.get(), kjit::DType::kI32, {kB + 1});
  a.cache.page_indices = kjit::TensorRef(pages.get(), kjit::DType::kI32, {kPages});
  a.cache.last_page_len = kjit::TensorRef(last.get(), kjit::DType::kI32, {kB});
  a.causal = true;
  kjit::attention::PagedPrefillPlan plan = kjit::attention::plan_paged_prefill(qo_host.data(), kB, kD, 128);
  plan.variant = kjit::attention::AttentionVariant::kWgmma;
  kjit::testing::DeviceBuffer ws{std::max<size_t>(plan.workspace_bytes, 16)};
  kjit::attention::upload_paged_prefill_plan(plan, ws.get(), plan.workspace_bytes);
  auto op = [&] { kjit::attention::paged_prefill(a, plan, ws.get(), plan.workspace_bytes, nullptr); };
  op();
  kjit::testing::synchronize();
  const kjit::attention::detail::PagedPrefillOp::Args call{a, plan, ws.get(), plan.workspace_bytes};
  RawReplay raw(kjit::detail::launch_value<kjit::attention::detail::PagedPrefillOp>(call, {}, kjit::Runtime::global()));
  hot_rows(rows, "kjit::attention::paged_prefill (wgmma)",
           fmt::format("B2 q64+64 kv128 page16 H8 D128 causal, {} work items", plan.num_work()), raw.kernels(),
           std::cref(raw), op, nullptr, "", kHotCalls, kHotRounds);
}

// The wgmma FP8 GEMM (sm_90a), M1 N256 K1024 e4m3 → bf16: split-K over clusters of 4 (the
// planner's second phase reads the cluster capacities), TMA maps of A, B and D.
void hot_fp8_gemm(std::vector<Row>& rows) {
  constexpr int64_t kM = 1, kN = 256, kK = 1024;
  kjit::testing::DeviceBuffer a{kM * kK}, b{kN * kK}, d{kM * kN * 2}, sa{16}, sb{16};
  a.fill(0x38);
  b.fill(0x38);
  const std::vector<float> one{1.f};
  sa.upload(one);
  sb.upload(one);
  kjit::fp8::GemmArgs g;
  g.a = kjit::TensorRef(a.get(), kjit::DType::kE4M3, {kM, kK});
  g.b = kjit::TensorRef(b.get(), kjit::DType::kE4M3, {kN, kK});
  g.d = kjit::TensorRef(d.get(), kjit::DType::kBF16, {kM, kN});
  g.scale_a = kjit::TensorRef(sa.get(), kjit::DType::kF32, {1});
  g.scale_b = kjit::TensorRef(sb.get(), kjit::DType::kF32, {1});
  g.kernel = kjit::fp8::GemmKernel::kWgmma;
  kjit::fp8::gemm(g, nullptr);
  kjit::testing::synchronize();
  auto launch = kjit::fp8::detail::GemmOp::launch_value(g, kjit::Runtime::global());
  const int splits = launch.step<1>().params.splits;
  RawReplay raw(std::move(launch));
  auto op = [&] { kjit::fp8::gemm(g, nullptr); };
  auto cold = [&] {
    kjit::detail::forget_op_calls();  // else the op call memo answers before the maps are asked
    kjit::detail::tma_call_memo().clear();
    kjit::detail::tma_map_memo().clear();
    op();
  };
  hot_rows(rows, "kjit::fp8::gemm (wgmma)", fmt::format("M1 N256 K1024 e4m3->bf16, {} splits, 3 TMA maps", splits),
           raw.kernels(), std::cref(raw), op, cold, "op call and TMA map memos", kHotCalls, kHotRounds);
}

int warm_child() {
  // Measured from context creation, as the target says: a process that starts serving.
  const auto t0 = Clock::now();
  kjit::detail::ensure_context(0);
  const auto t1 = Clock::now();
  OneTokenRotary rotary_call;
  const kjit::RotaryArgs& a = rotary_call.args;
  const auto t2 = Clock::now();
  kjit::rotary(a, nullptr);
  kjit::testing::synchronize();
  const auto t3 = Clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  const auto s = kjit::Runtime::global().stats();
  fmt::print("{{\"context_ms\": {:.3f}, \"first_launch_ms\": {:.3f}, \"compiles\": {}, \"disk_hits\": {}}}\n",
             ms(t0, t1), ms(t2, t3), s.compiles, s.disk_hits);
  return 0;
}

// The warm start in phases, in a new process with a populated cache: each phase is one call of
// the public API, timed alone. Without a GPU only the host phases run (the rest print -1).
int warm_phases_child() {
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  const auto t0 = Clock::now();
  kjit::Runtime& rt = kjit::Runtime::global();
  const auto t1 = Clock::now();
  const std::string nvrtc = rt.nvrtc_version();
  const auto t2 = Clock::now();
  const kjit::Family* rotary = nullptr;
  for (const kjit::Family& f : kjit::families()) {
    if (f.name == "rotary") rotary = &f;
  }
  const kjit::ProgramSpec spec = rotary->spec(rotary->defaults.front());
  const bool gpu = kjit::testing::has_gpu();
  const auto t2d = Clock::now();
  const kjit::Target target = spec.target_on(gpu ? kjit::device_info(0).target() : kjit::Target::parse("sm_90"));
  const auto t3h = Clock::now();
  const std::string headers = rt.cuda_headers_version();
  const auto t3 = Clock::now();
  const std::string key = rt.key(spec, target);
  const auto t4 = Clock::now();
  rt.compile(spec, target);
  const auto t5 = Clock::now();
  double context = -1, load = -1, op = -1;
  if (gpu) {
    const auto c0 = Clock::now();
    const CUcontext ctx = kjit::detail::ensure_context(0);
    const auto c1 = Clock::now();
    rt.load(spec, ctx);
    const auto c2 = Clock::now();
    OneTokenRotary rotary_call;
    const kjit::RotaryArgs& a = rotary_call.args;
    kjit::testing::synchronize();
    const auto c3 = Clock::now();
    kjit::rotary(a, nullptr);
    kjit::testing::synchronize();
    const auto c4 = Clock::now();
    context = ms(c0, c1);
    load = ms(c1, c2);
    op = ms(c3, c4);
  }
  const auto s = rt.stats();
  fmt::print(
      "{{\"runtime_ms\": {:.3f}, \"nvrtc_version_ms\": {:.3f}, \"driver_ms\": {:.3f}, \"device_info_ms\": {:.3f}, \"headers_ms\": {:.3f}, \"key_ms\": {:.3f}, "
      "\"disk_hit_ms\": {:.3f}, \"context_ms\": {:.3f}, \"load_ms\": {:.3f}, \"first_op_ms\": {:.3f}, "
      "\"disk_hits\": {}, \"compiles\": {}}}\n",
      ms(t0, t1), ms(t1, t2), ms(t2, t2d), ms(t2d, t3h), ms(t3h, t3), ms(t3, t4), ms(t4, t5), context, load, op, s.disk_hits, s.compiles);
  return key.empty() || nvrtc.empty() || headers.empty();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kjit runtime costs on a GPU (device 0). Rows printed:\n"
      "  hot   host us per call of a cached op call beside raw cuLaunchKernelEx of the same kernels and Params\n"
      "        (the op's launch value replayed), and for ops with a per-thread memo the call with that memo\n"
      "        emptied each time (what the memo saves a call):\n"
      "          rotary        one token, 8 heads of 128 (2000-call batches)\n"
      "          decode        B1 Hq32 Hkv8 D128, 32768-token cache, 64 live (kv_lens): decode + merge;\n"
      "                        memo: the split search\n"
      "          prefill_sm90  the wgmma prefill (sm_90a), B1 L128 H8 D128 causal; memo: its 4 TMA maps\n"
      "          prefill_sm90_layers  the wgmma prefill over 16 and then 96 layers in turn (one q and out,\n"
      "                        each layer its own K and V), per call: the memos hold 64 calls, 64 maps\n"
      "          paged_prefill_sm90  the wgmma ragged paged prefill (sm_90a), B2 q64+64 kv128 page 16 H8 D128\n"
      "                        causal (gathers: no TMA maps); the plan uploaded once before\n"
      "          fp8_gemm      the wgmma FP8 GEMM (sm_90a), M1 N256 K1024, split-K clusters; memo: its 3 TMA maps\n"
      "          layer         rotary then decode in turn on one thread (each op keeps its own kernel-table memo)\n"
      "        (200-call batches: the GPU side of these is a few us, below the host's)\n"
      "  warm  context creation and first launch in 7 new processes with the cache populated, then 5\n"
      "        processes timing the warm-start phases one by one\n"
      "  cold  NVRTC time of every default specialization for the device's target",
      "runtime_bench"};
  std::string json_path;
  std::vector<std::string> hot_ops{"rotary",   "decode", "prefill_sm90", "prefill_sm90_layers", "paged_prefill_sm90",
                                   "fp8_gemm", "layer"};
  bool hot_only = false, warm_child_mode = false, warm_phases_mode = false;
  app.add_option("--json", json_path, "Also write the rows as JSON to this file");
  app.add_option("--hot", hot_ops, "The hot-call ops to time (prefill_sm90, prefill_sm90_layers, paged_prefill_sm90 and fp8_gemm need sm_90a; skipped elsewhere)")
      ->delimiter(',')
      ->check(CLI::IsMember({"rotary", "decode", "prefill_sm90", "prefill_sm90_layers", "paged_prefill_sm90", "fp8_gemm",
                             "layer"}))
      ->capture_default_str();
  app.add_flag("--hot-only", hot_only, "Only the hot calls (no warm-start processes, no NVRTC compiles): seconds");
  // The child processes of the warm figures.
  app.add_flag("--warm-child", warm_child_mode)->group("");
  app.add_flag("--warm-phases", warm_phases_mode)->group("");
  CLI11_PARSE(app, argc, argv);
  if (warm_child_mode) return warm_child();
  if (warm_phases_mode) return warm_phases_child();
  auto hot = [&](const char* op) { return std::find(hot_ops.begin(), hot_ops.end(), op) != hot_ops.end(); };
  if (!kjit::testing::has_gpu()) {
    fmt::print(stderr, "runtime_bench: error: no CUDA device: runtime_bench needs a GPU ({})\n",
               kjit::driver_available() ? "the driver lists no device" : kjit::driver_unavailable_reason());
    return 2;
  }
  const kjit::DeviceInfo& dev = kjit::device_info(0);
  std::vector<Row> rows;

  // --- hot: the rotary op on one token vs a raw launch of its kernel -------------------------
  if (hot("rotary")) {
    OneTokenRotary rotary_call;
    const kjit::RotaryArgs& a = rotary_call.args;
    kjit::rotary(a, nullptr);  // compile/load once
    kjit::testing::synchronize();
    // The raw launch replays what the op launches: its plan gives the kernel, grid and Params.
    const auto launch = kjit::detail::launch_value<kjit::detail::RotaryOp>(a, {}, kjit::Runtime::global());
    const auto& step = launch.step<0>();
    const auto& d = kjit::detail::driver();
    CUlaunchConfig config{};
    config.gridDimX = step.config.grid[0];
    config.gridDimY = step.config.grid[1];
    config.gridDimZ = step.config.grid[2];
    config.blockDimX = step.config.block[0];
    config.blockDimY = step.config.block[1];
    config.blockDimZ = step.config.block[2];
    config.sharedMemBytes = step.config.dynamic_smem_bytes;
    auto params = step.params;
    const CUfunction function = step.kernel->function();
    auto raw = [&] {
      void* args[] = {&params};
      d.cuLaunchKernelEx(&config, function, args, nullptr);
    };
    auto op = [&] { kjit::rotary(a, nullptr); };
    // Interleave to cancel drift (clocks, queue state); take the median of each.
    std::vector<double> raw_us, op_us;
    for (int i = 0; i < 5; ++i) {
      raw_us.push_back(host_us_per_call(raw));
      op_us.push_back(host_us_per_call(op));
    }
    std::sort(raw_us.begin(), raw_us.end());
    std::sort(op_us.begin(), op_us.end());
    const double r = raw_us[2], o = op_us[2];
    rows.push_back({"raw cuLaunchKernelEx (rotary kernel)", r, "us/call", ""});
    rows.push_back({"kjit::rotary hot call", o, "us/call", fmt::format("{:.3f}x raw (target <= 1.05x)", o / r)});
  }

  // --- hot: decode, the wgmma prefill, the wgmma FP8 GEMM --------------------------------------
  if (hot("decode")) hot_decode(rows);
  const bool sm90a = dev.target().has_wgmma();
  for (const char* op : {"prefill_sm90", "prefill_sm90_layers", "paged_prefill_sm90", "fp8_gemm"}) {
    if (!hot(op)) continue;
    if (!sm90a) {
      fmt::print("hot {}: skipped, {} has no wgmma (sm_90a)\n", op, dev.target().str());
    } else if (std::string(op) == "prefill_sm90") {
      hot_prefill_sm90(rows);
    } else if (std::string(op) == "prefill_sm90_layers") {
      hot_prefill_sm90_layers(rows, 16);
      hot_prefill_sm90_layers(rows, 96);
    } else if (std::string(op) == "paged_prefill_sm90") {
      hot_paged_prefill_sm90(rows);
    } else {
      hot_fp8_gemm(rows);
    }
  }
  if (hot("layer")) hot_layer(rows);

  // --- warm: a new process with the cache populated by the call above ------------------------
  // Seven processes (the figure varies by a few tenths of a ms between them): the median, and the
  // range. Then five processes timing the phases one by one (printed as they come).
  if (!hot_only) {
    {
      OneTokenRotary rotary_call;  // the kernel the children load (compiled here if --hot skipped rotary)
      kjit::rotary(rotary_call.args, nullptr);
      kjit::testing::synchronize();
    }
    auto child = [&](const char* mode) {
      std::string out;
      FILE* p = popen(fmt::format("'{}' {}", argv[0], mode).c_str(), "r");
      char buf[1024] = {};
      while (p && fgets(buf, sizeof(buf), p)) out += buf;
      if (p) pclose(p);
      return out;
    };
    std::vector<double> ctxs, firsts;
    int compiles = -1;
    for (int i = 0; i < 7; ++i) {
      double ctx = -1, first = -1;
      std::sscanf(child("--warm-child").c_str(), "{\"context_ms\": %lf, \"first_launch_ms\": %lf, \"compiles\": %d",
                  &ctx, &first, &compiles);
      ctxs.push_back(ctx);
      firsts.push_back(first);
    }
    std::sort(ctxs.begin(), ctxs.end());
    std::sort(firsts.begin(), firsts.end());
    rows.push_back({"warm start: context creation", ctxs[3], "ms", "median of 7 processes"});
    rows.push_back({"warm start: first launch after context", firsts[3], "ms",
                    fmt::format("median of 7 (range {:.3f}-{:.3f}); {} compiles (target <= 1 ms, 0 compiles; "
                                "jitify2 86 ms, CuPy 28 ms)",
                                firsts.front(), firsts.back(), compiles)});
    for (int i = 0; i < 5; ++i) fmt::print("warm phases: {}", child("--warm-phases"));
  }

  // --- cold: NVRTC per default specialization for this device ---------------------------------
  if (!hot_only) {
    kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
    c.disk_cache = false;
    kjit::Runtime cold(c);
    for (const kjit::Family& f : kjit::families()) {
      for (const auto& params : f.defaults) {
        kjit::ProgramSpec spec = f.spec(params);
        const auto t0 = Clock::now();
        cold.compile(spec, spec.target_on(dev.target()));
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        rows.push_back({fmt::format("cold NVRTC {} [{}]", f.name, spec.template_args), ms, "ms", spec.target_on(dev.target()).str()});
      }
    }
  }

  fmt::print("device: {} ({}, {} SMs)\n", dev.name, dev.target().str(), dev.sm_count);
  for (const Row& r : rows) fmt::print("{:<58} {:>10.3f} {:<8} {}\n", r.name, r.value, r.unit, r.note);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << "[\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      out << fmt::format("  {{\"name\": \"{}\", \"value\": {:.4f}, \"unit\": \"{}\", \"note\": \"{}\"}}{}\n", rows[i].name,
                         rows[i].value, rows[i].unit, rows[i].note, i + 1 < rows.size() ? "," : "");
    }
    out << "]\n";
  }
  return 0;
}
