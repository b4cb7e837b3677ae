#pragma once
/// \file runtime/fleet.hpp
/// A runtime's one door into the fleet tier. A Runtime builds one RemoteTier from
/// RuntimeConfig::remote (one connection, one circuit breaker, one set of counters); everything
/// of that process that talks to the fleet's Redis (the compile path, the tuning tables the
/// planners read, `kjit tune`'s push) goes through it, so RuntimeStats and the Prometheus text
/// count all of it.

#include <kjit/runtime.hpp>

#include "cache/remote/tier.hpp"

namespace kjit::detail {

/// `runtime`'s fleet tier, or nullptr when KJIT_REMOTE is not set. Lives as long as `runtime`.
cache::remote::RemoteTier* fleet_tier(const Runtime& runtime) noexcept;

}  // namespace kjit::detail
