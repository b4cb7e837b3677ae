#pragma once
/// \file runtime/internal/driver.hpp
/// What kjit's tools (tools/) need of the internals, one part of runtime/internal/
/// (docs/architecture.md): the CUDA Driver API entry-point table (runtime/driver.hpp): raw launches
/// to time the op overhead against, device memory, contexts and events for tests and benchmarks,
/// the driver version for `kjit devices`.

#include "runtime/driver.hpp"
