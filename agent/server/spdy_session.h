// The server side of a SPDY/3.1 session (kubelet's httpstream over SPDY, as client-go's
// spdystream speaks it) on a ByteStream: the raw connection after a `Upgrade: SPDY/3.1` 101, or
// the binary messages of a `SPDY/3.1+portforward.k8s.io` WebSocket (client-go's tunnelling
// connection, the same byte stream cut into messages).
//
// The client opens streams (SYN_STREAM with headers); the session hands each new stream to a
// handler, which replies (SYN_REPLY) or resets it. Streams carry bytes both ways and are
// half-closed by FIN; PINGs are answered; a GOAWAY ends the session.
//
// Flow control: the session advertises SPDY/3.1's 64 KiB windows and sends WINDOW_UPDATEs as the
// handler consumes data, but bounds memory by itself: once a stream holds `stream_buffer` bytes
// unread, the session stops reading the connection until it is drained (TCP then pushes back on
// the client). The peer's WINDOW_UPDATEs are accepted and not waited for, since spdystream
// neither sends them nor honours ours; sends are bounded by the outgoing queue instead.
//
// Threading: everything runs on the connection's strand (the executor of the coroutine that
// runs the session); SpdyStream's methods must be called there. A protocol error from the peer
// sends a GOAWAY and ends the session; it never throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "agent/server/http_server.h"
#include "agent/server/spdy_frame.h"
#include "base/asio.h"
#include "base/clock.h"

namespace nodeagent::agent {

struct SpdyLimits {
  spdy::DecoderLimits decoder;
  size_t max_streams = 128;                // open at once; more are refused (RST_STREAM)
  size_t stream_buffer = 256 * 1024;       // received and unread, per stream
  size_t max_data_frame = 32 * 1024;       // written per DATA frame
  size_t write_queue = 256 * 1024;         // queued for the connection before writers wait
  size_t max_control_queue = 1024 * 1024;  // control frames the peer makes us queue (PINGs)
  // No frame either way for this long ends the session (kubelet's
  // --streaming-connection-idle-timeout default).
  base::Duration idle_timeout = std::chrono::hours(4);
};

class SpdySession;

// One stream of a session. Held by its handler; it ends when both sides closed, either reset,
// or the session ended.
class SpdyStream {
 public:
  struct State;
  SpdyStream(std::shared_ptr<SpdySession> session, std::shared_ptr<State> state);
  ~SpdyStream();

  uint32_t id() const;
  const spdy::Headers& headers() const;
  // The first header named `name` (case-insensitive), "" when absent.
  std::string_view header(std::string_view name) const;

  // Accepts the stream (a SYN_REPLY with no headers). Call once, before writing.
  void reply();
  // Refuses or cancels the stream (RST_STREAM with `status`); reads and writes then end.
  void reset(uint32_t status = spdy::kCancel);
  // The next bytes the client sent; nullopt once it half-closed (FIN), reset, or the session
  // ended.
  asio::awaitable<std::optional<std::string>> read();
  // Sends `data` (in DATA frames), waiting while the session's queue is full; false once the
  // stream was reset, closed for writing or the session ended.
  asio::awaitable<bool> write(std::string_view data);
  // Half-closes the stream for writing (FIN). Idempotent.
  void closeWrite();
  // True once the client reset it or the session ended.
  bool broken() const;

 private:
  std::shared_ptr<SpdySession> session_;
  std::shared_ptr<State> state_;
};

class SpdySession : public std::enable_shared_from_this<SpdySession> {
 public:
  // Called for each new stream, on the strand; it must reply() or reset() the stream (the
  // client waits for the reply) and keeps the handle for as long as it uses the stream.
  using StreamHandler = std::function<void(std::shared_ptr<SpdyStream>)>;

  // `executor`: the connection's strand.
  SpdySession(std::unique_ptr<ByteStream> transport, asio::any_io_executor executor,
              base::Clock& clock, SpdyLimits limits = {});
  ~SpdySession();
  SpdySession(const SpdySession&) = delete;
  SpdySession& operator=(const SpdySession&) = delete;

  // Runs the session until the client goes away, a protocol error or close(); then every
  // stream ends and the transport is closed. Call once, on the strand, holding the session.
  asio::awaitable<void> run(StreamHandler handler);
  // Ends the session: a GOAWAY, then the transport closes. Idempotent.
  void close();
  // Streams open right now.
  size_t streamCount() const { return streams_.size(); }
  bool ended() const { return ended_; }

 private:
  friend class SpdyStream;
  struct Shared;

  asio::awaitable<void> readLoop(const StreamHandler& handler);
  asio::awaitable<void> writeLoop();
  // Handles one frame; false when the session must end.
  asio::awaitable<bool> onFrame(spdy::Frame frame, const StreamHandler& handler);
  bool onSynStream(spdy::Frame& frame, const StreamHandler& handler);
  // The data for a stream, then: waits while the stream holds too much unread.
  asio::awaitable<void> onData(spdy::Frame& frame);
  void onReset(uint32_t id);
  // Queues a control frame; false (and the session ends) past the control queue's limit.
  bool queueControl(std::string frame);
  // Removes the stream once both sides are done.
  void maybeForget(const std::shared_ptr<SpdyStream::State>& s);
  void endSession(uint32_t goaway_status);
  void consumed(SpdyStream::State& s, size_t n);
  // Pushes the idle deadline back (a frame went one way or the other).
  void active();

  std::unique_ptr<ByteStream> transport_;
  asio::any_io_executor executor_;
  base::TimerPtr idle_;
  SpdyLimits limits_;
  spdy::HeaderCompressor compressor_;
  std::map<uint32_t, std::shared_ptr<SpdyStream::State>> streams_;
  uint32_t last_stream_id_ = 0;
  bool goaway_received_ = false;
  bool ended_ = false;
  bool writer_done_ = false;
  size_t session_unacked_ = 0;  // data consumed since the last session WINDOW_UPDATE
  std::unique_ptr<Shared> shared_;
};

}  // namespace nodeagent::agent
