#pragma once
/// \file nvrtc.hpp
/// One NVRTC compile: source closure + name expressions + options → cubin or PTX, the lowered
/// names and what ptxas reported per kernel. Also finds the CUDA headers NVRTC needs.

#include <kjit/runtime.hpp>

#include "runtime/kernel_sources.hpp"

#include <string>
#include <vector>

namespace kjit::detail {

/// The CUDA include directory handed to NVRTC and the version its cuda.h declares.
struct CudaHeaders {
  std::string include_dir;  ///< e.g. /usr/local/cuda/include
  std::string version;      ///< CUDA_VERSION from cuda.h, e.g. "13000"
  std::vector<std::string> include_options;  ///< -I<dir> (and -I<dir>/cccl when present)
};

/// Searches `configured` (KJIT_CUDA_HOME / CUDA_HOME / CUDA_PATH), the toolkit beside the loaded
/// NVRTC, then /usr/local/cuda, for an include dir holding cuda_bf16.h. Throws Unsupported naming
/// every place it looked when none has it (NVRTC has no built-in bf16/fp8 headers).
CudaHeaders find_cuda_headers(const std::string& configured);

/// "13.0".
std::string nvrtc_version();

struct NvrtcResult {
  std::string binary;               ///< cubin or PTX
  std::vector<KernelInfo> kernels;  ///< per name expression, with ptxas' resource report
  std::string log;
  double ms = 0;
};

/// Compiles `sources` for `target` with `options` (already normalized, without include paths)
/// plus `include_options`. Throws CompileError with the NVRTC log, whose locations name the
/// kernel_sources file and line, the options and the NVRTC version.
NvrtcResult nvrtc_compile(const SourceClosure& sources, const std::vector<std::string>& name_expressions,
                          const Target& target, const std::vector<std::string>& options,
                          const std::vector<std::string>& include_options);

/// kjit's own NVRTC options for `target` (language standard, arch, ptxas report) merged with
/// `extra`, trimmed, deduplicated and sorted: the canonical option set that enters the key.
std::vector<std::string> normalize_options(const Target& target, const std::vector<std::string>& extra);

}  // namespace kjit::detail
