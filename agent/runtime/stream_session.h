// Interactive streams into a container, as kubelet's remotecommand (exec, attach) carries them:
// a command exec'd in the container's context, or an attach to the container's own stdio. The
// kubelet API's /exec and /attach handlers pump a session's output to the client and the
// client's input to it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "agent/runtime/cri_log.h"
#include "base/asio.h"
#include "base/status.h"

namespace nodeagent::runtime {

// Which streams a session connects (kubelet's StreamOptions / remotecommand query).
struct StreamOptions {
  bool stdin = false;
  bool stdout = true;
  bool stderr = true;
  // One terminal: the command gets a pseudo-terminal as stdin, stdout and stderr; everything it
  // writes arrives as stdout. stderr must then be false.
  bool tty = false;
};

// InvalidArgument for tty with stderr, or for no stream at all.
base::Status checkStreamOptions(const StreamOptions& options);

struct TerminalSize {
  uint16_t width = 0;   // columns
  uint16_t height = 0;  // rows
};

// One exec'd command or one attach.
//
// Threading: every method is called from one strand (the caller's); one read() and one
// writeStdin() may be outstanding at the same time, and wait() alongside them. Destroying the
// session ends it: an exec'd command still running is killed (its whole process group, and for
// a container with a cgroup everything the command started is left to the container); an attach
// detaches and leaves the container running.
class StreamSession {
 public:
  virtual ~StreamSession() = default;

  struct Output {
    LogStream stream = LogStream::kStdout;
    std::string data;
  };
  // The next piece of output, stdout and stderr as they come (with a TTY all of it is stdout);
  // nullopt once the output ended: for exec, when the command exited and its output was read
  // (output still held open by children left in the background is given up shortly after the
  // exit, as for exec probes); for attach, when the container exited or the runtime ended the
  // attach.
  virtual asio::awaitable<std::optional<Output>> read() = 0;
  // Writes `data` to stdin (all of it, waiting while the pipe is full); an error once stdin is
  // closed, was not asked for, or the command ended.
  virtual asio::awaitable<base::Status> writeStdin(std::string data) = 0;
  // End of input: the command reads end of file.
  virtual void closeStdin() = 0;
  // The terminal's size (TTY sessions only; ignored otherwise).
  virtual void resize(TerminalSize size) = 0;
  // Completes once the command ended, with its exit code (128+signal when a signal ended it).
  // For an attach: once the container exited, with its exit code.
  virtual asio::awaitable<base::StatusOr<int>> wait() = 0;
  // Ends the session now (the client went away): an exec'd command is killed (its process
  // group) and reaped, an attach detaches. Outstanding and later read() calls complete with
  // nullopt, writeStdin() with an error, and wait() completes (for exec with the killed
  // command's exit code). Idempotent; the session stays valid until destroyed.
  virtual void cancel() = 0;
};
using StreamSessionPtr = std::unique_ptr<StreamSession>;

}  // namespace nodeagent::runtime
