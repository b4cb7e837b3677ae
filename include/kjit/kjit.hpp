#pragma once
/// \file kjit.hpp
/// Everything a host application needs: the runtime, launching, devices, device buffers, tensors,
/// errors, the family registry and the typed ops.

#include <kjit/device.hpp>
#include <kjit/device_buffer.hpp>
#include <kjit/error.hpp>
#include <kjit/families.hpp>
#include <kjit/launch.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/ops/fp8.hpp>
#include <kjit/ops/rotary.hpp>
#include <kjit/ops/swa_decode.hpp>
#include <kjit/runtime.hpp>
#include <kjit/tensor.hpp>
