// ProcessRuntime's interactive streams: exec sessions (`nodeagent-shim exec` with pipes or a
// pseudo-terminal, read and written on a strand of their own) and attaches (a connection to the
// container shim's attach socket, state_file.h: kAttachSocketName).
#include <sys/ioctl.h>

#include <deque>

#include "agent/runtime/exec_process.h"
#include "agent/runtime/process_runtime_state.h"

namespace nodeagent::runtime {
namespace {

// Output queued for a session's reader beyond which the command's pipes are not read (the
// command then blocks on a full pipe, as with a slow terminal).
constexpr size_t kSessionQueueLimit = 256 * 1024;
// Ctrl-D: the end of input on a terminal in canonical mode.
constexpr char kTerminalEof = 4;

// An exec session's state, on its strand: the pipes' pumps, the exit watcher and the public
// methods (which hop onto the strand) share it; it lives until the command was reaped.
class ExecCore : public std::enable_shared_from_this<ExecCore> {
 public:
  ExecCore(asio::any_io_executor ex, base::Clock& clock, std::shared_ptr<ProcessRuntime::State> rt,
           const ExecChild& child, const StreamOptions& options)
      : strand_(asio::make_strand(ex)),
        clock_(clock),
        runtime_(std::move(rt)),
        pid_(child.pid),
        pidfd_(strand_, child.pidfd),
        tty_(options.tty),
        stdin_(options.stdin),
        output_event_(strand_),
        exit_event_(strand_) {
    output_event_.expires_at(asio::steady_timer::time_point::max());
    exit_event_.expires_at(asio::steady_timer::time_point::max());
    if (child.in >= 0) in_.emplace(strand_, child.in);
  }

  // A terminal's output is read even when not asked for (dropped), so the command never blocks.
  void start(const ExecChild& child, const StreamOptions& options) {
    addPipe(child.out, LogStream::kStdout, options.stdout);
    addPipe(child.err, LogStream::kStderr, true);
    for (const auto& p : pipes_) asio::co_spawn(strand_, OutputPipe::pump(p), asio::detached);
    asio::co_spawn(strand_, watchExit(shared_from_this()), asio::detached);
  }

  asio::strand<asio::any_io_executor>& strand() { return strand_; }

  asio::awaitable<std::optional<StreamSession::Output>> read() {
    while (queue_.empty() && !outputEnded() && !cancelled_) {
      boost::system::error_code ec;
      co_await output_event_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (queue_.empty()) co_return std::nullopt;
    StreamSession::Output out = std::move(queue_.front());
    queue_.pop_front();
    queued_ -= out.data.size();
    if (queued_ < kSessionQueueLimit) {
      for (const auto& p : pipes_) p->resume();
    }
    co_return out;
  }

  asio::awaitable<base::Status> writeStdin(std::string data) {
    if (!stdin_) co_return base::failedPreconditionError("the exec has no stdin");
    if (!in_ || !in_->is_open() || stdin_closed_) {
      co_return base::failedPreconditionError("stdin is closed");
    }
    boost::system::error_code ec;
    co_await asio::async_write(*in_, asio::buffer(data),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return base::unavailableError("write to the command's stdin: " + ec.message());
    co_return base::okStatus();
  }

  void closeStdin() {
    if (!stdin_ || stdin_closed_ || !in_ || !in_->is_open()) return;
    stdin_closed_ = true;
    if (tty_) {
      // The terminal stays (it is the output too): the command reads end of file.
      (void)!::write(in_->native_handle(), &kTerminalEof, 1);
      return;
    }
    boost::system::error_code ec;
    in_->close(ec);
  }

  void resize(TerminalSize size) {
    if (!tty_ || !in_ || !in_->is_open()) return;
    struct winsize ws {};
    ws.ws_col = size.width;
    ws.ws_row = size.height;
    ::ioctl(in_->native_handle(), TIOCSWINSZ, &ws);
  }

  asio::awaitable<std::optional<base::StatusOr<int>>> wait() {
    while (!exit_code_ && !lost_) {
      boost::system::error_code ec;
      co_await exit_event_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (!exit_code_) co_return base::StatusOr<int>(base::abortedError("the exec was abandoned"));
    co_return base::StatusOr<int>(*exit_code_);
  }

  // The session went: stops reading and writing, kills the command's process group if it runs
  // (the exit watcher then reaps it).
  void shutdown() {
    cancelled_ = true;
    queue_.clear();
    output_event_.cancel();
    boost::system::error_code ec;
    if (in_) in_->close(ec);
    for (const auto& p : pipes_) p->close();
    // Unreaped until the exit watcher's waitid: the pid (= its process group) is still ours.
    if (!exit_code_) ::kill(-pid_, SIGKILL);
  }

 private:
  // The pipes' pumps may end after the core (their last completion comes after the command was
  // reaped): they hold it weakly.
  void addPipe(int fd, LogStream stream, bool wanted) {
    if (fd < 0) return;
    std::weak_ptr<ExecCore> weak = weak_from_this();
    auto sink = [weak, stream, wanted](std::string_view piece) {
      auto self = weak.lock();
      if (!wanted || !self) return true;
      self->queue_.push_back({stream, std::string(piece)});
      self->queued_ += piece.size();
      self->output_event_.cancel();
      return self->queued_ < kSessionQueueLimit;
    };
    auto on_end = [weak] {
      if (auto self = weak.lock()) self->output_event_.cancel();
    };
    pipes_.push_back(std::make_shared<OutputPipe>(strand_, fd, std::move(sink), std::move(on_end)));
  }

  bool outputEnded() const {
    return std::all_of(pipes_.begin(), pipes_.end(), [](const auto& p) { return p->done(); });
  }

  static asio::awaitable<void> watchExit(std::shared_ptr<ExecCore> self) {
    const boost::system::error_code ec = co_await base::waitReadable(self->pidfd_);
    siginfo_t info{};
    if (ec ||
        ::waitid(kPPidfd, static_cast<id_t>(self->pidfd_.native_handle()), &info,
                 WEXITED | WNOHANG) != 0 ||
        info.si_pid == 0) {
      self->lost_ = true;
      self->exit_event_.cancel();
      co_return;
    }
    self->exit_code_ = execExitCode(info);
    self->exit_event_.cancel();
    boost::system::error_code close_ec;
    if (self->in_ && !self->tty_) self->in_->close(close_ec);
    auto finish = finishOutput(self->pipes_, self->clock_, kExecOutputGrace);
    co_await std::move(finish);
    if (self->in_) self->in_->close(close_ec);
    self->output_event_.cancel();
    self->pidfd_.close(close_ec);
  }

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  // Keeps the runtime's state (its clock's owner's contract) for as long as the command runs.
  std::shared_ptr<ProcessRuntime::State> runtime_;
  pid_t pid_;
  asio::posix::stream_descriptor pidfd_;
  bool tty_;
  bool stdin_;
  bool stdin_closed_ = false;
  // The stdin pipe, or with a TTY the terminal's master (for input and resizes).
  std::optional<asio::posix::stream_descriptor> in_;
  std::vector<std::shared_ptr<OutputPipe>> pipes_;
  std::deque<StreamSession::Output> queue_;
  size_t queued_ = 0;
  asio::steady_timer output_event_;  // cancelled when output came or ended
  asio::steady_timer exit_event_;    // cancelled when the command ended
  std::optional<int> exit_code_;
  bool lost_ = false;       // the exit could not be seen (shutdown)
  bool cancelled_ = false;  // cancel() or the session's end
};

class ExecSession final : public StreamSession {
 public:
  explicit ExecSession(std::shared_ptr<ExecCore> core) : core_(std::move(core)) {}
  ~ExecSession() override { cancel(); }

  void cancel() override {
    asio::post(core_->strand(), [core = core_] { core->shutdown(); });
  }

  // Each call runs on the core's strand (the awaitable is made here, started there) and resumes
  // the caller on its own executor.
  asio::awaitable<std::optional<Output>> read() override {
    auto task = core_->read();
    auto out = co_await asio::co_spawn(core_->strand(), std::move(task), asio::use_awaitable);
    co_return out;
  }
  asio::awaitable<base::Status> writeStdin(std::string data) override {
    auto task = core_->writeStdin(std::move(data));
    auto status = co_await asio::co_spawn(core_->strand(), std::move(task), asio::use_awaitable);
    co_return status;
  }
  void closeStdin() override {
    asio::post(core_->strand(), [core = core_] { core->closeStdin(); });
  }
  void resize(TerminalSize size) override {
    asio::post(core_->strand(), [core = core_, size] { core->resize(size); });
  }
  asio::awaitable<base::StatusOr<int>> wait() override {
    auto task = core_->wait();
    auto result = co_await asio::co_spawn(core_->strand(), std::move(task), asio::use_awaitable);
    co_return std::move(*result);
  }

 private:
  std::shared_ptr<ExecCore> core_;
};

// A connection to the container shim's attach socket: frames of output in, stdin out. Used from
// the caller's strand only (one read and one write may be outstanding on the socket at once).
class AttachSession final : public StreamSession {
 public:
  AttachSession(std::shared_ptr<ProcessRuntime::State> rt, std::string id,
                asio::local::stream_protocol::socket socket, StreamOptions options)
      : runtime_(std::move(rt)),
        id_(std::move(id)),
        socket_(std::move(socket)),
        options_(options),
        exit_event_(std::make_shared<asio::steady_timer>(socket_.get_executor())) {
    exit_event_->expires_at(asio::steady_timer::time_point::max());
  }

  asio::awaitable<std::optional<Output>> read() override {
    while (true) {
      unsigned char header[kAttachFrameHeader];
      boost::system::error_code ec;
      co_await asio::async_read(socket_, asio::buffer(header),
                                asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return std::nullopt;
      const size_t size = (size_t{header[1]} << 24) | (size_t{header[2]} << 16) |
                          (size_t{header[3]} << 8) | size_t{header[4]};
      if (size > kAttachClientBuffer) co_return std::nullopt;  // not the shim's framing
      Output out;
      out.stream = header[0] == kAttachStderr ? LogStream::kStderr : LogStream::kStdout;
      out.data.resize(size);
      co_await asio::async_read(socket_, asio::buffer(out.data),
                                asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return std::nullopt;
      const bool wanted = out.stream == LogStream::kStderr ? options_.stderr : options_.stdout;
      if (wanted) co_return out;
    }
  }

  asio::awaitable<base::Status> writeStdin(std::string data) override {
    if (!options_.stdin) co_return base::failedPreconditionError("the attach has no stdin");
    if (stdin_closed_) co_return base::failedPreconditionError("stdin is closed");
    boost::system::error_code ec;
    co_await asio::async_write(socket_, asio::buffer(data),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return base::unavailableError("write to the container's stdin: " + ec.message());
    co_return base::okStatus();
  }

  // The shim sees the end of this client's input (with stdinOnce it closes the container's stdin).
  void closeStdin() override {
    if (stdin_closed_) return;
    stdin_closed_ = true;
    boost::system::error_code ec;
    socket_.shutdown(asio::local::stream_protocol::socket::shutdown_send, ec);
  }

  void resize(TerminalSize) override {}

  asio::awaitable<base::StatusOr<int>> wait() override {
    auto ex = co_await asio::this_coro::executor;
    while (!cancelled_) {
      {
        std::lock_guard lock(runtime_->mu_);
        auto it = runtime_->records_.find(id_);
        if (it == runtime_->records_.end()) {
          co_return base::notFoundError("container " + id_ + " was removed");
        }
        if (it->second.state.status == ShimStatus::kExited) co_return it->second.state.exit_code;
        if (!waiting_) {
          // The runtime's exit bookkeeping wakes this wait on the caller's executor.
          it->second.exit_waiters.push_back(
              [ex, event = exit_event_] { asio::post(ex, [event] { event->cancel(); }); });
          waiting_ = true;
        }
      }
      boost::system::error_code ec;
      co_await exit_event_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    co_return base::cancelledError("the attach to container " + id_ + " was cancelled");
  }

  // Detaches: the socket closes (outstanding reads end, writes fail), wait() completes.
  void cancel() override {
    cancelled_ = true;
    stdin_closed_ = true;
    boost::system::error_code ec;
    socket_.close(ec);
    exit_event_->cancel();
  }

 private:
  std::shared_ptr<ProcessRuntime::State> runtime_;
  std::string id_;
  asio::local::stream_protocol::socket socket_;
  StreamOptions options_;
  bool stdin_closed_ = false;
  bool cancelled_ = false;
  bool waiting_ = false;  // an exit waiter is registered
  std::shared_ptr<asio::steady_timer> exit_event_;
};

}  // namespace

asio::awaitable<base::StatusOr<StreamSessionPtr>> ProcessRuntime::State::execStream(
    std::string id, std::vector<std::string> command, StreamOptions options) {
  if (auto valid = checkStreamOptions(options); !valid.ok()) co_return valid;
  if (command.empty()) co_return base::invalidArgumentError("empty command");
  if (auto running = runningConfig(id); !running.ok()) co_return running.status();
  const ExecStdio stdio{
      .in = options.stdin, .out = options.stdout, .err = options.stderr, .tty = options.tty};
  auto child = co_await spawnExec(id, std::move(command), stdio);
  if (!child.ok()) co_return child.status();
  auto ex = co_await asio::this_coro::executor;
  auto core = std::make_shared<ExecCore>(ex, clock_, shared_from_this(), *child, options);
  core->start(*child, options);
  co_return StreamSessionPtr(std::make_unique<ExecSession>(std::move(core)));
}

}  // namespace nodeagent::runtime

namespace nodeagent::runtime {

asio::awaitable<base::StatusOr<StreamSessionPtr>> ProcessRuntime::State::attach(
    std::string id, StreamOptions options) {
  if (auto valid = checkStreamOptions(options); !valid.ok()) co_return valid;
  auto config = runningConfig(id);
  if (!config.ok()) co_return config.status();
  if (options.tty) {
    co_return base::invalidArgumentError(
        "container " + id +
        " has no terminal: the process runtime runs containers without one "
        "(tty: true is not supported), attach without a TTY");
  }
  if (options.stdin && !config->stdin) {
    co_return base::invalidArgumentError("container " + id +
                                         " was not started with stdin: true: attach without stdin");
  }
  auto ex = co_await asio::this_coro::executor;
  asio::local::stream_protocol::socket socket(ex);
  // Connected through the directory's descriptor: a deep root dir may not fit in sun_path.
  const fs::path dir = containerDir(id);
  Fd dir_fd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  const std::string via =
      "/proc/self/fd/" + std::to_string(dir_fd.fd) + "/" + std::string(kAttachSocketName);
  boost::system::error_code ec;
  co_await socket.async_connect(asio::local::stream_protocol::endpoint(via),
                                asio::redirect_error(asio::use_awaitable, ec));
  const unsigned char hello = options.stdin ? kAttachWantsStdin : 0;
  if (!ec) {
    co_await asio::async_write(socket, asio::buffer(&hello, 1),
                               asio::redirect_error(asio::use_awaitable, ec));
  }
  if (dir_fd.fd < 0 || ec) {
    // The container ended meanwhile, or its shim predates attaching.
    auto now = runningConfig(id);
    if (!now.ok()) co_return now.status();
    co_return base::unavailableError("cannot attach to container " + id + " at " +
                                     (dir / std::string(kAttachSocketName)).string() + ": " +
                                     (dir_fd.fd < 0 ? std::strerror(errno) : ec.message()));
  }
  co_return StreamSessionPtr(
      std::make_unique<AttachSession>(shared_from_this(), id, std::move(socket), options));
}

asio::awaitable<base::StatusOr<StreamSessionPtr>> ProcessRuntime::execStream(
    ContainerId id, std::vector<std::string> command, StreamOptions options) {
  auto state = state_;
  auto task = state->execStream(std::move(id.id), std::move(command), options);
  co_return co_await std::move(task);
}

asio::awaitable<base::StatusOr<StreamSessionPtr>> ProcessRuntime::attach(ContainerId id,
                                                                         StreamOptions options) {
  auto state = state_;
  auto task = state->attach(std::move(id.id), options);
  co_return co_await std::move(task);
}

}  // namespace nodeagent::runtime
