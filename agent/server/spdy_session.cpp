// The SPDY/3.1 server session (see spdy_session.h).
#include "agent/server/spdy_session.h"

#include <deque>
#include <utility>

#include "agent/server/strand_event.h"
#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("server")

using Event = StrandEvent;

asio::awaitable<void> runWriter(std::shared_ptr<SpdySession> session,
                                asio::awaitable<void> (SpdySession::*loop)()) {
  auto task = ((*session).*loop)();
  co_await std::move(task);
}

}  // namespace

struct SpdyStream::State {
  explicit State(const asio::any_io_executor& ex) : readable(ex), drained(ex) {}
  uint32_t id = 0;
  spdy::Headers headers;
  std::deque<std::string> in;
  size_t in_bytes = 0;
  size_t unacked = 0;  // consumed since this stream's last WINDOW_UPDATE
  bool remote_closed = false;
  bool local_closed = false;
  bool replied = false;
  bool reset = false;  // either side, or the session ended
  Event readable;      // data, FIN or reset
  Event drained;       // the handler consumed data, or reset
};

struct SpdySession::Shared {
  explicit Shared(const asio::any_io_executor& ex) : out_ready(ex), out_room(ex), writer_done(ex) {}
  std::deque<std::string> out;
  size_t out_bytes = 0;
  Event out_ready;
  Event out_room;
  Event writer_done;
};

SpdyStream::SpdyStream(std::shared_ptr<SpdySession> session, std::shared_ptr<State> state)
    : session_(std::move(session)), state_(std::move(state)) {}

SpdyStream::~SpdyStream() {
  // Nobody reads what the client may still send: the stream is cancelled rather than left to
  // fill up.
  if (!state_->reset && !state_->remote_closed) reset(spdy::kCancel);
}

uint32_t SpdyStream::id() const { return state_->id; }
const spdy::Headers& SpdyStream::headers() const { return state_->headers; }
std::string_view SpdyStream::header(std::string_view name) const {
  return spdy::headerValue(state_->headers, name);
}
bool SpdyStream::broken() const { return state_->reset || session_->ended_; }

void SpdyStream::reply() {
  if (state_->replied || broken()) return;
  state_->replied = true;
  session_->queueControl(spdy::encodeSynReply(session_->compressor_, state_->id, 0, {}));
}

void SpdyStream::reset(uint32_t status) {
  if (state_->reset) return;
  state_->reset = true;
  if (!session_->ended_) session_->queueControl(spdy::encodeRstStream(state_->id, status));
  state_->readable.notify();
  state_->drained.notify();
  session_->maybeForget(state_);
}

asio::awaitable<std::optional<std::string>> SpdyStream::read() {
  while (state_->in.empty()) {
    if (broken() || state_->remote_closed) co_return std::nullopt;
    co_await state_->readable.wait();
  }
  std::string data = std::move(state_->in.front());
  state_->in.pop_front();
  state_->in_bytes -= data.size();
  session_->consumed(*state_, data.size());
  state_->drained.notify();
  co_return data;
}

asio::awaitable<bool> SpdyStream::write(std::string_view data) {
  auto& shared = *session_->shared_;
  while (!data.empty()) {
    while (!broken() && !state_->local_closed &&
           shared.out_bytes >= session_->limits_.write_queue) {
      co_await shared.out_room.wait();
    }
    if (broken() || state_->local_closed) co_return false;
    const std::string_view piece = data.substr(0, session_->limits_.max_data_frame);
    data.remove_prefix(piece.size());
    std::string frame = spdy::encodeData(state_->id, 0, piece);
    shared.out_bytes += frame.size();
    shared.out.push_back(std::move(frame));
    shared.out_ready.notify();
  }
  co_return !broken();
}

void SpdyStream::closeWrite() {
  if (state_->local_closed || broken()) return;
  state_->local_closed = true;
  auto& shared = *session_->shared_;
  std::string frame = spdy::encodeData(state_->id, spdy::kFlagFin, {});
  shared.out_bytes += frame.size();
  shared.out.push_back(std::move(frame));
  shared.out_ready.notify();
  session_->maybeForget(state_);
}

SpdySession::SpdySession(std::unique_ptr<ByteStream> transport, asio::any_io_executor executor,
                         base::Clock& clock, SpdyLimits limits)
    : transport_(std::move(transport)),
      executor_(std::move(executor)),
      idle_(clock.makeTimer(executor_)),
      limits_(limits),
      shared_(std::make_unique<Shared>(executor_)) {}

SpdySession::~SpdySession() = default;

asio::awaitable<void> SpdySession::run(StreamHandler handler) {
  asio::co_spawn(executor_, runWriter(shared_from_this(), &SpdySession::writeLoop), asio::detached);
  active();
  auto reading = readLoop(handler);
  co_await std::move(reading);
  endSession(spdy::kGoAwayOk);
  while (!writer_done_) co_await shared_->writer_done.wait();
  idle_->cancel();
}

void SpdySession::close() { endSession(spdy::kGoAwayOk); }

void SpdySession::active() {
  idle_->asyncWaitFor(limits_.idle_timeout, [weak = weak_from_this()] {
    if (auto self = weak.lock()) {
      log()->info("Closing an idle SPDY session");
      self->close();
    }
  });
}

asio::awaitable<void> SpdySession::readLoop(const StreamHandler& handler) {
  spdy::FrameDecoder decoder(limits_.decoder);
  while (!ended_) {
    auto reading = transport_->read();
    std::optional<std::string> chunk = co_await std::move(reading);
    if (!chunk) co_return;  // the client went away
    decoder.feed(*chunk);
    while (!ended_) {
      auto next = decoder.next();
      if (!next.ok()) {
        log()->debug("SPDY protocol error from the client err={}", next.status().message());
        endSession(spdy::kGoAwayProtocolError);
        co_return;
      }
      if (!next->has_value()) break;
      active();
      auto handling = onFrame(std::move(**next), handler);
      const bool go_on = co_await std::move(handling);
      if (!go_on) co_return;
    }
  }
}

asio::awaitable<bool> SpdySession::onFrame(spdy::Frame frame, const StreamHandler& handler) {
  switch (frame.type) {
    case spdy::FrameType::kData: {
      auto task = onData(frame);
      co_await std::move(task);
      co_return !ended_;
    }
    case spdy::FrameType::kSynStream:
      co_return onSynStream(frame, handler);
    case spdy::FrameType::kSynReply:  // the server opens no streams
      co_return queueControl(spdy::encodeRstStream(frame.stream_id, spdy::kProtocolError));
    case spdy::FrameType::kRstStream:
      onReset(frame.stream_id);
      co_return true;
    case spdy::FrameType::kPing:
      // Odd: the client's (answered); even would be ours, and the server sends none.
      if (frame.ping_id % 2 == 1) co_return queueControl(spdy::encodePing(frame.ping_id));
      co_return true;
    case spdy::FrameType::kGoAway:
      goaway_received_ = true;  // no new streams; those open finish
      co_return true;
    default:  // SETTINGS, HEADERS, WINDOW_UPDATE: nothing the session needs
      co_return true;
  }
}

bool SpdySession::onSynStream(spdy::Frame& frame, const StreamHandler& handler) {
  if (frame.stream_id % 2 == 0 || frame.stream_id <= last_stream_id_) {
    log()->debug("SPDY stream id out of order id={} last={}", frame.stream_id, last_stream_id_);
    endSession(spdy::kGoAwayProtocolError);
    return false;
  }
  last_stream_id_ = frame.stream_id;
  if (goaway_received_ || streams_.size() >= limits_.max_streams) {
    return queueControl(spdy::encodeRstStream(frame.stream_id, spdy::kRefusedStream));
  }
  auto state = std::make_shared<SpdyStream::State>(executor_);
  state->id = frame.stream_id;
  state->headers = std::move(frame.headers);
  state->remote_closed = frame.fin();
  state->local_closed = (frame.flags & spdy::kFlagUnidirectional) != 0;
  streams_.emplace(state->id, state);
  handler(std::make_shared<SpdyStream>(shared_from_this(), state));
  return !ended_;
}

asio::awaitable<void> SpdySession::onData(spdy::Frame& frame) {
  auto it = streams_.find(frame.stream_id);
  // Data for a stream already reset or finished may cross the reset: dropped.
  if (it == streams_.end() || it->second->remote_closed) co_return;
  auto state = it->second;
  if (!frame.data.empty()) {
    state->in_bytes += frame.data.size();
    state->in.push_back(std::move(frame.data));
  }
  if (frame.fin()) state->remote_closed = true;
  state->readable.notify();
  maybeForget(state);
  // Backpressure: the connection is not read until the handler caught up.
  while (!ended_ && !state->reset && state->in_bytes > limits_.stream_buffer) {
    co_await state->drained.wait();
  }
}

void SpdySession::onReset(uint32_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  auto state = it->second;
  state->reset = true;
  state->readable.notify();
  state->drained.notify();
  streams_.erase(it);
}

void SpdySession::consumed(SpdyStream::State& s, size_t n) {
  if (ended_) return;
  s.unacked += n;
  session_unacked_ += n;
  if (!s.reset && !s.remote_closed && s.unacked >= spdy::kDefaultWindow / 2) {
    queueControl(spdy::encodeWindowUpdate(s.id, static_cast<uint32_t>(s.unacked)));
    s.unacked = 0;
  }
  if (session_unacked_ >= spdy::kDefaultWindow / 2) {
    queueControl(spdy::encodeWindowUpdate(0, static_cast<uint32_t>(session_unacked_)));
    session_unacked_ = 0;
  }
}

bool SpdySession::queueControl(std::string frame) {
  if (ended_) return false;
  if (shared_->out_bytes > limits_.write_queue + limits_.max_control_queue) {
    log()->debug("SPDY client does not read its control frames; ending the session");
    endSession(spdy::kGoAwayProtocolError);
    return false;
  }
  shared_->out_bytes += frame.size();
  shared_->out.push_back(std::move(frame));
  shared_->out_ready.notify();
  return true;
}

void SpdySession::maybeForget(const std::shared_ptr<SpdyStream::State>& s) {
  if (s->reset || (s->local_closed && s->remote_closed)) streams_.erase(s->id);
}

void SpdySession::endSession(uint32_t goaway_status) {
  if (ended_) return;
  std::string goaway = spdy::encodeGoAway(last_stream_id_, goaway_status);
  shared_->out_bytes += goaway.size();
  shared_->out.push_back(std::move(goaway));
  ended_ = true;
  for (auto& [id, s] : streams_) {
    s->reset = true;
    s->readable.notify();
    s->drained.notify();
  }
  streams_.clear();
  shared_->out_ready.notify();
  shared_->out_room.notify();
}

asio::awaitable<void> SpdySession::writeLoop() {
  auto& shared = *shared_;
  constexpr size_t kCoalesce = 64 * 1024;
  while (true) {
    while (shared.out.empty() && !ended_) co_await shared.out_ready.wait();
    if (shared.out.empty()) break;  // ended, and everything queued was written
    // Small frames go out together: fewer writes, and fewer messages on a WebSocket.
    std::string batch = std::move(shared.out.front());
    shared.out.pop_front();
    while (!shared.out.empty() && batch.size() + shared.out.front().size() <= kCoalesce) {
      batch += shared.out.front();
      shared.out.pop_front();
    }
    shared.out_bytes -= std::min(shared.out_bytes, batch.size());
    shared.out_room.notify();
    auto writing = transport_->write(batch);
    const bool ok = co_await std::move(writing);
    if (!ok) {
      endSession(spdy::kGoAwayInternalError);
      break;
    }
    active();
  }
  shared.out.clear();
  shared.out_bytes = 0;
  auto closing = transport_->close();
  co_await std::move(closing);
  writer_done_ = true;
  shared.writer_done.notify();
}

}  // namespace nodeagent::agent
