// FakeRuntime's scripted exec and attach sessions (see fake_runtime.h).
#include <deque>

#include "agent/runtime/fake_runtime.h"

namespace nodeagent::runtime {
namespace {

// Used from the caller's strand only (StreamSession's contract): an event timer on its executor
// wakes read() and wait().
class FakeStreamSession final : public StreamSession {
 public:
  FakeStreamSession(asio::any_io_executor ex, StreamOptions options, bool exec)
      : options_(options), exec_(exec), event_(ex) {
    event_.expires_at(asio::steady_timer::time_point::max());
  }

  void output(std::string data) {
    if (options_.stdout && !data.empty()) queue_.push_back({LogStream::kStdout, std::move(data)});
    event_.cancel();
  }
  void end(int exit_code) {
    exit_code_ = exit_code;
    event_.cancel();
  }

  asio::awaitable<std::optional<Output>> read() override {
    while (queue_.empty() && !exit_code_) {
      boost::system::error_code ec;
      co_await event_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (queue_.empty()) co_return std::nullopt;
    Output out = std::move(queue_.front());
    queue_.pop_front();
    co_return out;
  }
  asio::awaitable<base::Status> writeStdin(std::string data) override {
    if (!options_.stdin) co_return base::failedPreconditionError("the session has no stdin");
    if (exit_code_) co_return base::failedPreconditionError("stdin is closed");
    output(std::move(data));
    co_return base::okStatus();
  }
  void closeStdin() override {
    if (options_.stdin && !exit_code_) end(0);
  }
  void resize(TerminalSize size) override {
    if (options_.tty && !exit_code_) {
      output("resize " + std::to_string(size.width) + "x" + std::to_string(size.height) + "\n");
    }
  }
  asio::awaitable<base::StatusOr<int>> wait() override {
    while (!exit_code_) {
      boost::system::error_code ec;
      co_await event_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (cancelled_ && !exec_) co_return base::cancelledError("the attach was cancelled");
    co_return *exit_code_;
  }
  // An exec is "killed" (exit code 137), an attach detaches; pending output is dropped.
  void cancel() override {
    queue_.clear();
    if (exit_code_) return;
    cancelled_ = true;
    end(exec_ ? 137 : 0);
  }

 private:
  StreamOptions options_;
  bool exec_;
  bool cancelled_ = false;
  asio::steady_timer event_;
  std::deque<Output> queue_;
  std::optional<int> exit_code_;
};

// `exit N`: N; otherwise nullopt.
std::optional<int> exitCommand(const std::vector<std::string>& command) {
  if (command.size() != 2 || command[0] != "exit") return std::nullopt;
  try {
    return std::stoi(command[1]);
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

base::Status FakeRuntime::checkRunningLocked(const ContainerId& id) {
  const ContainerStatus* c = findLocked(id.id, nullptr);
  if (c == nullptr) return base::notFoundError("container " + id.toString() + " not found");
  if (c->state != ContainerState::kRunning) {
    return base::failedPreconditionError("container " + id.toString() + " is not running");
  }
  return base::okStatus();
}

asio::awaitable<base::StatusOr<StreamSessionPtr>> FakeRuntime::execStream(
    ContainerId id, std::vector<std::string> command, StreamOptions options) {
  if (auto valid = checkStreamOptions(options); !valid.ok()) co_return valid;
  if (command.empty()) co_return base::invalidArgumentError("empty command");
  {
    std::lock_guard lock(mu_);
    if (auto running = checkRunningLocked(id); !running.ok()) co_return running;
    stream_execs_.emplace_back(findLocked(id.id, nullptr)->name, command);
  }
  auto ex = co_await asio::this_coro::executor;
  auto session = std::make_unique<FakeStreamSession>(ex, options, true);
  std::string line;
  for (const auto& word : command) line += (line.empty() ? "" : " ") + word;
  session->output(line + "\n");
  if (auto code = exitCommand(command)) {
    session->end(*code);
  } else if (!options.stdin) {
    session->end(0);
  }
  co_return StreamSessionPtr(std::move(session));
}

asio::awaitable<base::StatusOr<StreamSessionPtr>> FakeRuntime::attach(ContainerId id,
                                                                      StreamOptions options) {
  if (auto valid = checkStreamOptions(options); !valid.ok()) co_return valid;
  {
    std::lock_guard lock(mu_);
    if (auto running = checkRunningLocked(id); !running.ok()) co_return running;
  }
  auto ex = co_await asio::this_coro::executor;
  auto session = std::make_unique<FakeStreamSession>(ex, options, false);
  if (!options.stdin) session->end(0);
  co_return StreamSessionPtr(std::move(session));
}

std::vector<std::pair<std::string, std::vector<std::string>>> FakeRuntime::streamExecs() const {
  std::lock_guard lock(mu_);
  return stream_execs_;
}

}  // namespace nodeagent::runtime
