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

}  // namespace kjit
