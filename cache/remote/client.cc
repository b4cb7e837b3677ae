// The fleet tier's Redis connection: bounded timeouts, reconnect, circuit breaker (client.hpp).
#include "cache/remote/client.hpp"

#include "cache/echo.hpp"
#include "cache/warn.hpp"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>

#include <cerrno>

namespace kjit::cache::remote {
namespace {

timeval to_timeval(int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

Reply copy_reply(const redisReply* r) {
  Reply out;
  switch (r->type) {
    case REDIS_REPLY_STRING: out.type = Reply::Type::kString; out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_STATUS: out.type = Reply::Type::kStatus; out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_ERROR: out.type = Reply::Type::kError; out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_INTEGER: out.type = Reply::Type::kInteger; out.integer = r->integer; break;
    case REDIS_REPLY_ARRAY:
      out.type = Reply::Type::kArray;
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(copy_reply(r->element[i]));
      break;
    default: out.type = Reply::Type::kNil; break;
  }
  return out;
}

/// Blocks SIGPIPE on this thread for its lifetime: hiredis writes with write(2), and a server
/// that died between two commands must cost a fault, not the host process. A SIGPIPE raised
/// meanwhile is taken off the thread's pending set before the mask is restored.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~NoSigpipe() {
    if (!blocked_) return;
    if (!was_pending_) {
      const timespec zero{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) > 0) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  NoSigpipe(const NoSigpipe&) = delete;
  NoSigpipe& operator=(const NoSigpipe&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false, blocked_ = false;
};

}  // namespace

RedisClient::RedisClient(RemoteConfig config, Caller caller) : config_(std::move(config)), caller_(caller) {}

RedisClient::~RedisClient() { drop_locked(); }

std::string RedisClient::where() const { return config_.display(); }

std::string RedisClient::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

std::string RedisClient::io_error_locked() const {
  // hiredis reports a socket timeout as an I/O error with errno EAGAIN.
  return context_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)
             ? fmt::format("no answer within {} ms from {}", config_.op_timeout_ms, where())
             : fmt::format("the connection to {} failed: {}", where(), printable(context_->errstr));
}

void RedisClient::drop_locked() {
  if (context_) redisFree(context_);
  context_ = nullptr;
}

bool RedisClient::connect_locked(std::string* error) {
  const timeval connect_tv = to_timeval(config_.connect_timeout_ms);
  context_ = config_.socket_path.empty() ? redisConnectWithTimeout(config_.host.c_str(), config_.port, connect_tv)
                                         : redisConnectUnixWithTimeout(config_.socket_path.c_str(), connect_tv);
  if (!context_ || context_->err) {
    *error = fmt::format("cannot connect to {}: {}", where(), context_ ? printable(context_->errstr) : "out of memory");
    drop_locked();
    return false;
  }
  if (redisSetTimeout(context_, to_timeval(config_.op_timeout_ms)) != REDIS_OK) {
    *error = fmt::format("cannot set the socket timeout of the connection to {}", where());
    drop_locked();
    return false;
  }
  auto setup = [&](std::vector<std::string> args, const char* what) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    round_trips_.fetch_add(1, std::memory_order_relaxed);
    auto* r = static_cast<redisReply*>(redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lens.data()));
    const bool ok = r && r->type != REDIS_REPLY_ERROR;
    if (!ok) {
      *error = r ? fmt::format("{} refused {}: {}", where(), what, printable(std::string_view(r->str, r->len)))
                 : io_error_locked();
    }
    if (r) freeReplyObject(r);
    return ok;
  };
  if (!config_.password.empty()) {
    std::vector<std::string> auth{"AUTH"};
    if (!config_.user.empty()) auth.push_back(config_.user);
    auth.push_back(config_.password);
    if (!setup(auth, "AUTH")) {
      drop_locked();
      return false;
    }
  }
  if (config_.db != 0 && !setup({"SELECT", std::to_string(config_.db)}, "SELECT")) {
    drop_locked();
    return false;
  }
  return true;
}

void RedisClient::fault_locked(const std::string& error) {
  faults_.fetch_add(1, std::memory_order_relaxed);
  last_error_ = error;
  open_until_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.cooldown_ms);
  if (!in_outage_ && caller_ == Caller::kOps) {
    in_outage_ = true;
    const std::string skip = config_.cooldown_ms > 0
                                 ? fmt::format("; skipping it for {} ms at a time until it answers again", config_.cooldown_ms)
                                 : std::string();
    warn(fmt::format("remote cache: {}{} (ops run from the disk cache or a local compile)", error, skip));
  }
}

std::optional<Reply> RedisClient::command(const std::vector<std::string_view>& args) {
  std::lock_guard lock(mutex_);
  std::optional<std::vector<Reply>> replies = run_locked({args});
  if (!replies) return std::nullopt;
  return std::move(replies->front());
}

std::optional<std::vector<Reply>> RedisClient::pipeline(const std::vector<std::vector<std::string_view>>& commands) {
  std::lock_guard lock(mutex_);
  return run_locked(commands);
}

std::optional<std::vector<Reply>> RedisClient::run_locked(const std::vector<std::vector<std::string_view>>& commands) {
  if (std::chrono::steady_clock::now() < open_until_) {
    skipped_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  const NoSigpipe no_sigpipe;
  // A command's caller stops at its first fault (one timeout), so it sends nothing twice.
  const int attempts = caller_ == Caller::kOps ? kBreakerFaults : 1;
  for (int attempt = 1;; ++attempt) {
    std::string error;
    std::vector<Reply> replies;
    bool answered = false;
    if ((context_ || connect_locked(&error)) && send_locked(commands, &replies, &error, &answered)) {
      in_outage_ = false;
      return replies;
    }
    // An error reply is the server's answer; a lost one may only be late (a loaded host): send
    // it again on a fresh connection before calling the server faulty.
    if (answered || attempt >= attempts) {
      fault_locked(error);
      return std::nullopt;
    }
    faults_.fetch_add(1, std::memory_order_relaxed);
  }
}

bool RedisClient::send_locked(const std::vector<std::vector<std::string_view>>& commands, std::vector<Reply>* replies,
                              std::string* error, bool* answered) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& args : commands) {
    argv.clear();
    lens.clear();
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      *error = fmt::format("cannot queue a command for {}: out of memory", where());
      drop_locked();
      return false;
    }
  }
  // One round trip, however many commands it carries (a resend is another).
  round_trips_.fetch_add(1, std::memory_order_relaxed);
  std::string refused;
  for (const auto& args : commands) {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK || !raw) {
      // The connection is unusable after an I/O error or a timeout (a reply may still be in flight).
      *error = io_error_locked();
      drop_locked();
      return false;
    }
    replies->push_back(copy_reply(static_cast<redisReply*>(raw)));
    freeReplyObject(raw);
    // Every reply is read, so the connection stays in step after an error reply.
    if (replies->back().type == Reply::Type::kError && refused.empty()) {
      refused = fmt::format("{} refused {}: {}", where(), args.empty() ? "a command" : std::string(args[0]),
                            printable(replies->back().str));
    }
  }
  if (refused.empty()) return true;
  *error = std::move(refused);
  *answered = true;
  return false;
}

}  // namespace kjit::cache::remote
