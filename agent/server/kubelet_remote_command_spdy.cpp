#include "agent/server/kubelet_remote_command_spdy.h"

#include <array>
#include <optional>
#include <utility>
#include <vector>

#include "agent/server/spdy_upgrade.h"
#include "agent/server/strand_event.h"
#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("server")

const std::vector<std::string> kProtocols = {"v4.channel.k8s.io", "v3.channel.k8s.io",
                                             "v2.channel.k8s.io", "channel.k8s.io"};
// A resize message longer than this (no newline yet) is dropped.
constexpr size_t kMaxResizeMessage = 4096;

enum Kind : size_t { kError, kStdin, kStdout, kStderr, kResize, kKinds };

std::optional<Kind> streamKind(std::string_view type) {
  static constexpr std::array<std::string_view, kKinds> kNames = {"error", "stdin", "stdout",
                                                                  "stderr", "resize"};
  for (size_t i = 0; i < kKinds; ++i) {
    if (type == kNames[i]) return static_cast<Kind>(i);
  }
  return std::nullopt;
}

class SpdyCommandStreams final : public RemoteCommandStreams,
                                 public std::enable_shared_from_this<SpdyCommandStreams> {
 public:
  SpdyCommandStreams(const asio::any_io_executor& executor, std::shared_ptr<SpdySession> session,
                     const std::string& protocol, const runtime::StreamOptions& options)
      : executor_(executor),
        session_(std::move(session)),
        changed_(executor),
        json_status_(protocol == kProtocols[0]) {
    // kubelet's expected streams: error, those the query asked for, resize for a TTY from v3.
    expected_[kError] = true;
    expected_[kStdin] = options.stdin;
    expected_[kStdout] = options.stdout;
    expected_[kStderr] = options.stderr;
    expected_[kResize] = options.tty && (protocol == kProtocols[0] || protocol == kProtocols[1]);
  }

  // Runs the session until it ends; `self` holds the streams (and so the session) meanwhile.
  static asio::awaitable<void> run(std::shared_ptr<SpdyCommandStreams> self);
  asio::awaitable<bool> waitForStreams();
  void expire() {
    expired_ = true;
    changed_.notify();
  }

  asio::awaitable<void> pumpInput(runtime::StreamSession& session) override;
  asio::awaitable<bool> writeOutput(runtime::LogStream stream, std::string_view data) override;
  bool statusJson() const override { return json_status_; }
  asio::awaitable<void> finish(std::string status) override;

 private:
  void onStream(std::shared_ptr<SpdyStream> stream);
  bool complete() const {
    for (size_t i = 0; i < kKinds; ++i) {
      if (expected_[i] && streams_[i] == nullptr) return false;
    }
    return true;
  }
  static asio::awaitable<void> pumpResize(std::shared_ptr<SpdyCommandStreams> self,
                                          runtime::StreamSession& session);
  asio::awaitable<void> waitForEnd();

  asio::any_io_executor executor_;
  std::shared_ptr<SpdySession> session_;
  StrandEvent changed_;  // a stream arrived, the time is up, the session or the resize pump ended
  const bool json_status_;
  std::array<bool, kKinds> expected_{};
  std::array<std::shared_ptr<SpdyStream>, kKinds> streams_;
  bool setup_done_ = false;
  bool expired_ = false;
  bool ended_ = false;
  bool resize_done_ = true;
};

asio::awaitable<void> SpdyCommandStreams::run(std::shared_ptr<SpdyCommandStreams> self) {
  auto running = self->session_->run(
      [self](std::shared_ptr<SpdyStream> stream) { self->onStream(std::move(stream)); });
  co_await std::move(running);
  self->ended_ = true;
  self->changed_.notify();
}

void SpdyCommandStreams::onStream(std::shared_ptr<SpdyStream> stream) {
  const std::string_view type = stream->header("streamType");
  const auto kind = streamKind(type);
  if (!kind || !expected_[*kind] || streams_[*kind] != nullptr || setup_done_) {
    log()->debug("Remote command stream refused id={} streamType={}", stream->id(), type);
    stream->reset(kind ? spdy::kProtocolError : spdy::kRefusedStream);
    return;
  }
  stream->reply();
  streams_[*kind] = std::move(stream);
  changed_.notify();
}

asio::awaitable<bool> SpdyCommandStreams::waitForStreams() {
  while (!complete() && !expired_ && !ended_) co_await changed_.wait();
  setup_done_ = true;
  co_return complete() && !ended_;
}

asio::awaitable<void> SpdyCommandStreams::pumpInput(runtime::StreamSession& session) {
  if (streams_[kResize] != nullptr) {
    resize_done_ = false;
    asio::co_spawn(executor_, pumpResize(shared_from_this(), session), asio::detached);
  }
  if (const auto& in = streams_[kStdin]; in != nullptr) {
    while (true) {
      auto reading = in->read();
      std::optional<std::string> data = co_await std::move(reading);
      if (!data) break;
      auto writing = sendStdin(session, std::move(*data));
      co_await std::move(writing);
    }
    session.closeStdin();  // the client's FIN (or its reset, or the end of the session)
  }
  // The pumps hold `session` only while this runs: it waits for the resize pump too.
  while (!ended_ || !resize_done_) co_await changed_.wait();
}

asio::awaitable<void> SpdyCommandStreams::pumpResize(std::shared_ptr<SpdyCommandStreams> self,
                                                     runtime::StreamSession& session) {
  std::string pending;
  while (true) {
    auto reading = self->streams_[kResize]->read();
    std::optional<std::string> data = co_await std::move(reading);
    if (!data) break;
    pending += *data;
    for (size_t end = pending.find('\n'); end != std::string::npos; end = pending.find('\n')) {
      applyResize(session, std::string_view(pending).substr(0, end));
      pending.erase(0, end + 1);
    }
    if (pending.size() > kMaxResizeMessage) pending.clear();
  }
  self->resize_done_ = true;
  self->changed_.notify();
}

asio::awaitable<bool> SpdyCommandStreams::writeOutput(runtime::LogStream stream,
                                                      std::string_view data) {
  const auto& out = streams_[stream == runtime::LogStream::kStderr ? kStderr : kStdout];
  if (out == nullptr) co_return !ended_;  // not asked for: dropped
  auto writing = out->write(data);
  co_return co_await std::move(writing);
}

asio::awaitable<void> SpdyCommandStreams::finish(std::string status) {
  if (!status.empty() && streams_[kError] != nullptr) {
    auto writing = streams_[kError]->write(status);
    co_await std::move(writing);
  }
  for (const auto& stream : streams_) {
    if (stream != nullptr) stream->closeWrite();
  }
  auto ending = waitForEnd();
  co_await std::move(ending);
}

// Closes the session (what was queued is written first) and waits until it ended.
asio::awaitable<void> SpdyCommandStreams::waitForEnd() {
  session_->close();
  while (!ended_) co_await changed_.wait();
}

}  // namespace

std::string spdyRemoteCommandProtocols() {
  std::string out;
  for (const auto& p : kProtocols) out += (out.empty() ? "" : ", ") + p;
  return out;
}

asio::awaitable<std::shared_ptr<RemoteCommandStreams>> acceptSpdyCommandStreams(
    HttpCall& call, base::Clock& clock, runtime::StreamOptions options,
    RemoteCommandLimits limits) {
  auto upgrading = acceptSpdyUpgrade(call, kProtocols);
  SpdyUpgrade upgrade = co_await std::move(upgrading);
  if (!upgrade.transport) co_return nullptr;
  auto executor = co_await asio::this_coro::executor;
  auto session =
      std::make_shared<SpdySession>(std::move(upgrade.transport), executor, clock, limits.spdy);
  auto streams = std::make_shared<SpdyCommandStreams>(
      executor, std::move(session), upgrade.protocol.empty() ? kProtocols.back() : upgrade.protocol,
      options);
  asio::co_spawn(executor, SpdyCommandStreams::run(streams), asio::detached);
  auto timer = clock.makeTimer(executor);
  timer->asyncWaitFor(limits.stream_creation_timeout,
                      [weak = std::weak_ptr<SpdyCommandStreams>(streams)] {
                        if (auto self = weak.lock()) self->expire();
                      });
  auto waiting = streams->waitForStreams();
  const bool ready = co_await std::move(waiting);
  timer->cancel();
  if (ready) co_return streams;
  log()->debug("Remote command client did not open its streams in time");
  auto finishing = streams->finish("");
  co_await std::move(finishing);
  co_return nullptr;
}

}  // namespace nodeagent::agent
