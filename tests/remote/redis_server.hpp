#pragma once
/// \file redis_server.hpp
/// A real redis-server for a test: started on a unix socket in a temp folder (and, when asked, on
/// a TCP port of one address too), with persistence off, and killed when the object goes. Tests
/// stop, pause (SIGSTOP) and restart it to play a server that dies or hangs.

#include "cache/remote/client.hpp"

#include <kjit/remote.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kjit::test {

class RedisServer {
 public:
  /// Starts redis-server with its socket, log and working folder in `dir` (created); with a
  /// `tcp_address` ("::1", "127.0.0.1") it also listens there on `tcp_port`.
  explicit RedisServer(std::filesystem::path dir, std::string tcp_address = "", int tcp_port = 0)
      : dir_(std::move(dir)), tcp_address_(std::move(tcp_address)), tcp_port_(tcp_port) {
    std::filesystem::create_directories(dir_);
    start();
  }
  ~RedisServer() { stop(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  /// KJIT_REMOTE for this server.
  std::string url() const { return "unix://" + socket().string(); }
  std::filesystem::path socket() const { return dir_ / "redis.sock"; }
  pid_t pid() const { return pid_; }

  /// Starts the server (again) and waits until it answers PING (at most 10 s).
  void start() {
    std::vector<std::string> args = {"redis-server", "--port", std::to_string(tcp_port_), "--unixsocket", socket().string(),
                                     "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
                                     "--dir", dir_.string(), "--logfile", (dir_ / "redis.log").string()};
    if (!tcp_address_.empty()) args.insert(args.end(), {"--bind", tcp_address_});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::filesystem::remove(socket());
    ASSERT_EQ(posix_spawnp(&pid_, "redis-server", nullptr, nullptr, argv.data(), environ), 0)
        << "cannot start redis-server (Debian package redis-server; tools/setup.sh installs it)";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (std::filesystem::exists(socket())) {
        auto r = client().command({"PING"});
        if (r && r->str == "PONG") return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    FAIL() << "redis-server did not answer on " << socket() << " within 10 s";
  }
  /// SIGKILLs the server and reaps it.
  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  void pause() { kill(pid_, SIGSTOP); }
  void resume() { kill(pid_, SIGCONT); }

  /// A fresh client of this server with generous timeouts and no breaker: the test's own view.
  cache::remote::RedisClient& client() {
    if (!client_ || client_pid_ != pid_) {
      RemoteConfig c;
      c.parse_url(url());
      c.connect_timeout_ms = 2000;
      c.op_timeout_ms = 2000;
      c.cooldown_ms = 0;
      client_ = std::make_unique<cache::remote::RedisClient>(c);
      client_pid_ = pid_;
    }
    return *client_;
  }
  /// DBSIZE.
  long long keys() {
    auto r = client().command({"DBSIZE"});
    return r ? r->integer : -1;
  }

 private:
  std::filesystem::path dir_;
  std::string tcp_address_;
  int tcp_port_ = 0;
  pid_t pid_ = -1;
  std::unique_ptr<cache::remote::RedisClient> client_;
  pid_t client_pid_ = -1;
};

}  // namespace kjit::test
