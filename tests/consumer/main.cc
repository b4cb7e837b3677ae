// A host application's use of kjit without a GPU: JIT-compile its own kernel source (with a
// params header it supplies) through the public API and check what comes back. Exits 0 and
// prints "kjit consumer: ok" when every check holds; prints the failed check and exits 1 otherwise.
#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/runtime.hpp>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

namespace {

// The params header both the host (here, by copy) and the kernel see.
const char* const kParamsHeader = R"(
#pragma once
struct ScaleParams {
  float* x;
  float alpha;
  int n;
};
)";

// A templated kernel that includes kjit's device config (found in kjit's embedded sources) and
// the host-supplied header above.
const char* const kSource = R"(
#include "kjit/config.cuh"
#include "scale_params.h"

template <int kUnroll>
__global__ void scale(KJIT_PARAMS ScaleParams p) {
  const int base = (blockIdx.x * blockDim.x + threadIdx.x) * kUnroll;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    if (base + u < p.n) p.x[base + u] *= p.alpha;
  }
}
)";

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "kjit consumer: FAILED: " << what << '\n';
    ++failures;
  }
}

bool is_hex32(const std::string& s) {
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

int main() {
  try {
    kjit::ProgramSpec spec;
    spec.family = "consumer.scale";
    spec.template_args = "unroll=4";
    spec.source_name = "scale.cu";
    spec.source_text = kSource;
    spec.headers = {{"scale_params.h", kParamsHeader}};
    spec.name_expressions = {"scale<4>"};

    kjit::Runtime& runtime = kjit::Runtime::global();
    const kjit::Target target = kjit::Target::parse("sm_80");

    const std::string key = runtime.key(spec, target);
    check(is_hex32(key), "key is 32 hex digits: " + key);
    check(runtime.key(spec, target) == key, "key is stable");

    kjit::ProgramSpec changed = spec;
    changed.headers[0].second += "\n// a changed header changes the binary's inputs\n";
    check(runtime.key(changed, target) != key, "a header's text is part of the key");
    check(runtime.key(spec, kjit::Target::parse("sm_90a")) != key, "the target is part of the key");

    auto program = runtime.compile(spec, target);
    check(program->key == key, "compile() uses key(): " + program->key + " vs " + key);
    check(program->binary.size() > 4 && program->binary.compare(0, 4, "\x7f" "ELF") == 0,
          "an sm_80 compile yields an ELF cubin");
    check(program->kernels.size() == 1, "one kernel per name expression");
    if (!program->kernels.empty()) {
      check(!program->kernels[0].lowered_name.empty(), "the lowered name is reported");
    }
    check(program->target == target, "the program is for sm_80");

    const uint64_t hits = runtime.stats().memory_hits;
    auto again = runtime.compile(spec, target);
    check(again->key == key && runtime.stats().memory_hits == hits + 1,
          "a second compile is answered from the in-process table");

    kjit::ProgramSpec broken = spec;
    broken.source_text += "\nthis is not C++;\n";
    bool threw = false;
    try {
      runtime.compile(broken, target);
    } catch (const kjit::CompileError& e) {
      threw = !e.log().empty();
    }
    check(threw, "a broken source throws CompileError with the NVRTC log");

    std::cout << "key " << key << ", " << program->binary.size() << " byte cubin, "
              << kjit::device_count() << " device(s)\n";
  } catch (const std::exception& e) {
    std::cerr << "kjit consumer: FAILED: " << e.what() << '\n';
    return 1;
  }
  if (failures > 0) return 1;
  std::cout << "kjit consumer: ok\n";
  return 0;
}
