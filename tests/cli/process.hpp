#pragma once
/// \file process.hpp
/// Running a command from a test: its exit status, stdout and stderr (captured in files, so the
/// two streams stay apart), and where the build tree's pieces are.

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace kjit::test {

namespace fs = std::filesystem;

struct ProcessResult {
  int code = -1;  ///< exit status; 128 + signal when killed by one
  std::string out;
  std::string err;
  std::string command;

  /// The lines of stderr, without empty ones.
  std::vector<std::string> err_lines() const {
    std::vector<std::string> lines;
    std::istringstream in(err);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) lines.push_back(line);
    }
    return lines;
  }
  /// For assertion messages.
  std::string describe() const {
    return "command: " + command + "\nexit: " + std::to_string(code) + "\n--- stdout ---\n" +
           out + "\n--- stderr ---\n" + err;
  }
};

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Single-quotes `s` for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

/// Runs `argv` through /bin/sh with `env` added to the environment; stdin is /dev/null.
inline ProcessResult run_process(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& env,
                                 const fs::path& scratch) {
  fs::create_directories(scratch);
  const fs::path out = scratch / "stdout.txt";
  const fs::path err = scratch / "stderr.txt";
  std::string command;
  for (const auto& [name, value] : env) command += name + "=" + shell_quote(value) + " ";
  for (const std::string& a : argv) command += shell_quote(a) + " ";
  ProcessResult r;
  r.command = command;
  command += "</dev/null >" + shell_quote(out.string()) + " 2>" + shell_quote(err.string());
  const int status = std::system(command.c_str());
  if (status == -1) {
    r.code = -1;
  } else if (WIFEXITED(status)) {
    r.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.code = 128 + WTERMSIG(status);
  }
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

/// The test's binary folder (build/tests), from KJIT_TEST_BINARY_DIR that CTest sets.
inline fs::path test_binary_dir() {
  const char* dir = std::getenv("KJIT_TEST_BINARY_DIR");
  return dir && *dir ? fs::path(dir) : fs::current_path();
}

/// The top of the build tree (the parent of build/tests).
inline fs::path build_dir() { return test_binary_dir().parent_path(); }

/// A value from the build tree's CMakeCache.txt ("" when absent).
inline std::string cmake_cache_value(const std::string& name) {
  std::ifstream in(build_dir() / "CMakeCache.txt");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + ":", 0) != 0) continue;
    const size_t eq = line.find('=');
    if (eq != std::string::npos) return line.substr(eq + 1);
  }
  return "";
}

/// A fresh, empty folder for one test under the test binary dir.
inline fs::path fresh_dir(const std::string& name) {
  const fs::path dir = test_binary_dir() / "cli-work" / name;
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  return dir;
}

}  // namespace kjit::test
