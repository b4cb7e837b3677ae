#pragma once
/// \file runtime/internal/fleet.hpp
/// What kjit's tools (tools/) need of the internals, one part of runtime/internal/
/// (docs/architecture.md): the fleet tier (cache/remote/: the tier, its records, signing, shared
/// tuning tables) and a runtime's own tier (runtime/fleet.hpp): `kjit remote`, `kjit precompile
/// --remote`, the tuner's table sharing and the remote benchmark.

#include "cache/remote/record.hpp"
#include "cache/remote/signing.hpp"
#include "cache/remote/tier.hpp"
#include "cache/remote/tune_share.hpp"
#include "runtime/fleet.hpp"
