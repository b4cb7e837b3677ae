#pragma once
// Host emulation of kernel_sources/kjit/config.cuh for the fp8 sliding-window decode emulator
// (tests/emulation/swa/swa_decode_emulator.cc): the shared CUDA built-ins of
// tests/emulation/include/emu_runtime.hpp plus the ones the swa kernels use on top.
#include "emu_runtime.hpp"
#include "swa_emu_builtins.hpp"

#include "kjit/types.h"

#define KJIT_DEVICE inline
#define KJIT_PARAMS const
#define KJIT_HAS_SM80 1
