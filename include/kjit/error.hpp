#pragma once
/// \file error.hpp
/// The one exception hierarchy kjit throws. Every error message names what was wrong and where
/// (the tensor, the kernel file and line, the driver call), so a log line alone is actionable.

#include <stdexcept>
#include <string>
#include <vector>

namespace kjit {

/// Base of everything kjit throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// NVRTC rejected a kernel source. `what()` carries the NVRTC log (whose locations name the
/// kernel_sources file and line), the options and the NVRTC version.
class CompileError : public Error {
 public:
  CompileError(const std::string& message, std::string log, std::vector<std::string> options)
      : Error(message), log_(std::move(log)), options_(std::move(options)) {}
  /// The raw NVRTC program log.
  const std::string& log() const noexcept { return log_; }
  /// The normalized NVRTC options of the failed compile.
  const std::vector<std::string>& options() const noexcept { return options_; }

 private:
  std::string log_;
  std::vector<std::string> options_;
};

/// A CUDA Driver API call failed, or the driver could not be loaded. `what()` names the call
/// and the CUresult's name and text.
class DriverError : public Error {
 public:
  DriverError(const std::string& message, int code) : Error(message), code_(code) {}
  /// The CUresult value (0 when the driver library itself is missing).
  int code() const noexcept { return code_; }

 private:
  int code_;
};

/// The disk cache could not be used as asked (the CLI raises it for an unusable cache dir;
/// the library instead warns once and caches in memory only).
class CacheError : public Error {
 public:
  using Error::Error;
};

/// An argument (tensor shape, dtype, stride, alignment, device, parameter value) is invalid.
/// `what()` names the argument and what was expected.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// The device, the arch or the build lacks something the call needs (e.g. FP8 MMA on sm_80).
class Unsupported : public Error {
 public:
  using Error::Error;
};

/// A specialization was needed that is not in the disk cache while JIT compilation is off
/// (KJIT_JIT=off): nothing was compiled. `what()` names the family, parameters and target and the
/// exact `kjit compile` command that would build it (for a host application's own kernel, which
/// no command can rebuild, what to run instead).
class JitDisabled : public Error {
 public:
  JitDisabled(const std::string& message, std::string family, std::string params, std::string target,
              std::string command)
      : Error(message),
        family_(std::move(family)),
        params_(std::move(params)),
        target_(std::move(target)),
        command_(std::move(command)) {}
  /// "attention.decode" (ProgramSpec::family).
  const std::string& family() const noexcept { return family_; }
  /// "head_dim=128 rows=8" (ProgramSpec::template_args).
  const std::string& params() const noexcept { return params_; }
  /// "sm_90a", "compute_120".
  const std::string& target() const noexcept { return target_; }
  /// The shell command that builds it into this process's cache, pasteable as printed (words
  /// shell-quoted, KJIT_JIT=on so a shell that exports KJIT_JIT=off runs it too):
  /// "KJIT_CACHE_DIR=/var/cache/kjit KJIT_JIT=on kjit compile attention.decode head_dim=128 rows=8
  /// --arch sm_90a"; "" for a host application's own kernel.
  const std::string& command() const noexcept { return command_; }

 private:
  std::string family_, params_, target_, command_;
};

/// A specialization not yet loaded in this process was needed while the op's stream is being
/// captured into a CUDA graph. kjit neither compiles nor loads a module during a capture (see
/// Runtime::load); `what()` names the specialization. The capture itself is left as it was: end
/// it, run the op once outside a capture (or precompile and load it), and capture again.
class CaptureMiss : public Error {
 public:
  using Error::Error;
};

}  // namespace kjit
