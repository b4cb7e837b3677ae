#pragma once
/// \file runtime/internal/tuning.hpp
/// What kjit's tools (tools/) need of the internals, one part of runtime/internal/
/// (docs/architecture.md): the tuned-plan registry (runtime/ops/tuned.hpp: each op's TuneOpSpec,
/// TunedChoice, the lookup the planners make) and the tuning tables on disk (cache/tune_table.hpp):
/// the tuner and `kjit tune`.

#include "cache/tune_table.hpp"
#include "runtime/ops/tuned.hpp"
