// The shim's attach socket (state_file.h: kAttachSocketName and the frame format): clients that
// connect get the container's output as the shim reads it, and those that ask for stdin write to
// the container's stdin pipe. Plain non-blocking descriptors served from the shim's poll loop:
// nothing here ever blocks the loop, so a slow or stuck client never holds up the container's
// output or its log (its queue is bounded; past kAttachClientBuffer it is dropped).
#pragma once

#include <poll.h>

#include <memory>
#include <string>
#include <vector>

namespace nodeagent::shim {

class AttachServer {
 public:
  AttachServer() = default;
  ~AttachServer() { close(); }
  AttachServer(const AttachServer&) = delete;
  AttachServer& operator=(const AttachServer&) = delete;

  // Listens on `<dir>/attach.sock` (replacing a stale one), mode 0600. False with `error` set.
  bool listen(const std::string& dir, std::string& error);
  // Takes the write end of the container's stdin pipe. With `once`, it is closed once the first
  // client that asked for stdin has ended its input (or detached).
  void setStdin(int fd, bool once);
  // Appends the descriptors to poll (the socket, the clients, the stdin pipe while input waits).
  void addPollFds(std::vector<pollfd>& fds);
  // Serves the events of what addPollFds appended at `fds[first]` onwards.
  void handle(const std::vector<pollfd>& fds, size_t first);
  // Queues one piece of output (kAttachStdout or kAttachStderr) for every client.
  void broadcast(unsigned char stream, const char* data, size_t n);
  // The container ended: one last non-blocking try to send what is queued, then the clients, the
  // stdin pipe and the socket go. Idempotent.
  void close();

 private:
  struct Client {
    int fd = -1;
    bool hello = false;  // the flags byte was read
    bool wants_stdin = false;
    bool input_open = true;
    bool dead = false;
    std::string out;
  };

  void accept();
  void readClient(Client& c);
  void inputEnded(Client& c);
  void flushClient(Client& c);
  void flushStdin();
  void closeStdin();
  void sweep();

  int listen_fd_ = -1;
  std::string path_;
  int stdin_fd_ = -1;
  bool stdin_once_ = false;
  bool stdin_closing_ = false;  // close once stdin_buf_ is written
  std::string stdin_buf_;
  std::vector<std::unique_ptr<Client>> clients_;
};

}  // namespace nodeagent::shim
