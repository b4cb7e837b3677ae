#pragma once
// The emulators' entry from the stand-in driver (tests/support/simulated_driver.cc): it hands
// every kernel launch to a hook that runs the kernel text on the host.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace emu {

/// Installs `hook` as the stand-in driver's launch hook. Returns false, with a line on stderr
/// naming `environment` (what the process needs: the driver's folder on LD_LIBRARY_PATH,
/// KJIT_SIM_HOST_PATH=1, …), when the process does not run on the stand-in.
inline bool install_launch_hook(void (*hook)(const char*, const CUlaunchConfig*, void**), const char* environment) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW);
  using SetHook = void (*)(void (*)(const char*, const CUlaunchConfig*, void**));
  const auto set_hook = lib != nullptr ? reinterpret_cast<SetHook>(dlsym(lib, "kjitSimSetLaunchHook")) : nullptr;
  if (set_hook == nullptr || std::getenv("KJIT_SIM_HOST_PATH") == nullptr) {
    std::fprintf(stderr, "needs the stand-in driver (%s)\n", environment);
    return false;
  }
  set_hook(hook);
  return true;
}

}  // namespace emu
