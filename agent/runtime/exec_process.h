// What ProcessRuntime's commands in a container's context share (private to the process runtime
// parts): exec probes and hooks (process_runtime_exec.cpp) and interactive exec sessions
// (process_runtime_stream.cpp) both start `nodeagent-shim exec <dir> command...` and read its
// output pipes on one strand, giving up the rest shortly after the command exited.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::runtime {

// How long an exec'd command's output may still arrive after the command exited, while nothing
// waits for its reader: children left in the background may hold a pipe open for ever.
inline constexpr std::chrono::milliseconds kExecOutputGrace{200};

// Which descriptors of the command are connected to the agent (others are /dev/null).
struct ExecStdio {
  bool in = false;
  bool out = false;
  bool err = false;
  bool merged = false;  // stderr goes to stdout's pipe (exec probes: output as it came)
  bool tty = false;     // one pseudo-terminal as stdin, stdout and stderr
};

// A started `nodeagent-shim exec`: our child (unreaped; its pid is also its process group and
// session), its pidfd, and the agent's ends of its stdio, non-blocking and close-on-exec (-1:
// not connected). With a TTY, `in` and `out` are two descriptors of the terminal's master.
struct ExecChild {
  pid_t pid = 0;
  int pidfd = -1;
  int in = -1;
  int out = -1;
  int err = -1;
};

// Blocking (posix_spawn): on the runtime's file pool. Starts `shim exec dir command...`.
base::StatusOr<ExecChild> spawnExecShim(const std::string& shim, const std::string& dir,
                                        const std::vector<std::string>& command,
                                        const ExecStdio& stdio);

// The exit code of a waitid result (128+signal for a signal death).
int execExitCode(const siginfo_t& info);

// One output pipe (or terminal master) of an exec'd command, read by pump() on one strand: every
// piece read goes to `sink`, which returns false when its reader is behind; the pump then waits
// for resume() before reading more.
class OutputPipe {
 public:
  using Sink = std::function<bool(std::string_view)>;
  // `on_end` runs once the pipe ended (end of file, an error, or close()).
  OutputPipe(asio::any_io_executor ex, int fd, Sink sink, std::function<void()> on_end = {});

  // Reads until the end; co_spawn it on the pipe's strand, holding the pipe.
  static asio::awaitable<void> pump(std::shared_ptr<OutputPipe> pipe);
  // The reader caught up: a paused pump reads again.
  void resume() { room_.cancel(); }
  // Gives `sink` what the pipe holds right now (the descriptor is non-blocking).
  void drain();
  // Stops reading and closes the descriptor.
  void close();
  bool done() const { return done_; }
  bool paused() const { return paused_; }

 private:
  friend asio::awaitable<void> finishOutput(std::vector<std::shared_ptr<OutputPipe>> pipes,
                                            base::Clock& clock, base::Duration grace);
  void finish();

  asio::posix::stream_descriptor sd_;
  Sink sink_;
  std::function<void()> on_end_;
  // Events, never deadlines: cancelled when the pump resumes or ended (changed_), when the reader
  // made room (room_).
  asio::steady_timer changed_;
  asio::steady_timer room_;
  bool done_ = false;
  bool paused_ = false;
  bool closed_ = false;
  char buf_[16 * 1024];
};

// Once the command exited: waits for the end of every pipe, giving up once `grace` passed with
// no pump waiting for its reader (the reader's pace is not the command's fault; a pipe still open
// only because a background child holds it is), then drains and closes them.
asio::awaitable<void> finishOutput(std::vector<std::shared_ptr<OutputPipe>> pipes,
                                   base::Clock& clock, base::Duration grace);

}  // namespace nodeagent::runtime
