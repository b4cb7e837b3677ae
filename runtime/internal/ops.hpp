#pragma once
/// \file runtime/internal/ops.hpp
/// What kjit's tools (tools/) need of the internals, one part of runtime/internal/
/// (docs/architecture.md): the op pipeline (runtime/ops/pipeline.hpp) and every op's pure steps
/// (runtime/ops/<family>/): plan on a simulated device, force a plan, build an op's launch value
/// and replay it (the tuner's harnesses, the runtime benchmark), and the TMA map memo
/// (runtime/ops/tma_map.hpp) the benchmark clears. A new op's header is added here.

#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/entry.hpp"
#include "runtime/ops/attention/paged_append.hpp"
#include "runtime/ops/attention/paged_decode.hpp"
#include "runtime/ops/attention/paged_prefill.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/fp8/quantize.hpp"
#include "runtime/ops/mla/swa_decode.hpp"
#include "runtime/ops/pipeline.hpp"
#include "runtime/ops/rotary/rotary.hpp"
#include "runtime/ops/tma_map.hpp"
#include "runtime/ops/tuned.hpp"
