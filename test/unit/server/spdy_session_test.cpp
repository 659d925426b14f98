// The SPDY session on an in-memory byte stream: streams handed to the handler, replies and data
// both ways, half-closes, PINGs, resets, backpressure, limits, protocol errors and the idle
// timeout (fake clock).
#include "agent/server/spdy_session.h"

#include <catch2/catch.hpp>

#include <vector>

#include "test/support/fake_clock.h"
#include "test/support/memory_byte_stream.h"

using namespace nodeagent;
using namespace nodeagent::agent;
using namespace std::chrono_literals;

namespace {

struct Fixture {
  explicit Fixture(SpdyLimits limits = {}) {
    session = std::make_shared<SpdySession>(std::make_unique<testing::MemoryByteStream>(wire),
                                            ioc.get_executor(), clock, limits);
    asio::co_spawn(ioc, session->run([this](std::shared_ptr<SpdyStream> s) {
      streams.push_back(s);
      if (auto_reply) s->reply();
    }),
                   [this](std::exception_ptr) { done = true; });
    ioc.poll();
  }
  ~Fixture() {
    streams.clear();
    session->close();
    ioc.poll();
  }
  void open(uint32_t id, spdy::Headers headers, uint8_t flags = 0) {
    wire->send(spdy::encodeSynStream(out, id, 0, 0, flags, headers));
    ioc.poll();
  }
  // Every frame the session wrote since the last call.
  std::vector<spdy::Frame> frames() {
    decoder.feed(wire->written);
    wire->written.clear();
    std::vector<spdy::Frame> all;
    while (true) {
      auto next = decoder.next();
      REQUIRE(next.ok());
      if (!next->has_value()) return all;
      all.push_back(std::move(**next));
    }
  }
  std::string readAll(SpdyStream& s) {
    std::string got;
    bool finished = false;
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          while (true) {
            auto reading = s.read();
            auto chunk = co_await std::move(reading);
            if (!chunk) break;
            got += *chunk;
          }
          finished = true;
        },
        asio::detached);
    ioc.poll();
    REQUIRE(finished);
    return got;
  }

  asio::io_context ioc;
  testing::FakeClock clock;
  std::shared_ptr<testing::MemoryWire> wire = std::make_shared<testing::MemoryWire>(ioc);
  std::shared_ptr<SpdySession> session;
  std::vector<std::shared_ptr<SpdyStream>> streams;
  bool auto_reply = true;
  bool done = false;
  spdy::HeaderCompressor out;
  spdy::FrameDecoder decoder;
};

}  // namespace

TEST_CASE("A stream is replied to and carries data both ways until both sides finish", "[spdy]") {
  Fixture f;
  f.open(1, {{"streamtype", "data"}, {"port", "80"}});
  REQUIRE(f.streams.size() == 1);
  SpdyStream& s = *f.streams[0];
  CHECK(s.id() == 1);
  CHECK(s.header("streamType") == "data");
  f.wire->send(spdy::encodeData(1, 0, "hello ") + spdy::encodeData(1, spdy::kFlagFin, "world"));
  f.ioc.poll();
  CHECK(f.readAll(s) == "hello world");
  asio::co_spawn(f.ioc, s.write("pong"), asio::detached);
  f.ioc.poll();
  s.closeWrite();
  f.ioc.poll();
  auto frames = f.frames();
  REQUIRE(frames.size() == 3);
  CHECK(frames[0].type == spdy::FrameType::kSynReply);
  CHECK((frames[1].type == spdy::FrameType::kData && frames[1].data == "pong"));
  CHECK((frames[2].data.empty() && frames[2].fin()));
  CHECK(f.session->streamCount() == 0);  // both sides closed
  f.wire->hangUp();
  f.ioc.poll();
  CHECK(f.done);
  CHECK(f.wire->closed);
}

TEST_CASE("PINGs are answered and a client reset ends the stream's reads and writes", "[spdy]") {
  Fixture f;
  f.wire->send(spdy::encodePing(1));
  f.open(3, {{"a", "b"}});
  f.wire->send(spdy::encodeRstStream(3, spdy::kCancel));
  f.ioc.poll();
  auto frames = f.frames();
  REQUIRE(frames.size() == 2);
  CHECK((frames[0].type == spdy::FrameType::kPing && frames[0].ping_id == 1));
  CHECK(f.readAll(*f.streams[0]).empty());
  CHECK(f.streams[0]->broken());
  CHECK(f.session->streamCount() == 0);
  // Late data for the reset stream is dropped.
  f.wire->send(spdy::encodeData(3, 0, "late"));
  f.ioc.poll();
  CHECK_FALSE(f.done);
}

TEST_CASE("A stream that holds too much unread data stops the session's reading", "[spdy]") {
  SpdyLimits limits;
  limits.stream_buffer = 64 * 1024;
  Fixture f(limits);
  f.open(1, {});
  const std::string chunk(32 * 1024, 'x');
  for (int i = 0; i < 6; ++i) f.wire->send(spdy::encodeData(1, 0, chunk));
  f.wire->send(spdy::encodePing(5));
  f.ioc.poll();
  // 96 KiB buffered at most (the frame that went past the limit), the rest waits unread.
  CHECK(f.wire->in.size() >= 3);
  f.frames();
  std::string got;
  asio::co_spawn(
      f.ioc,
      [&]() -> asio::awaitable<void> {
        while (got.size() < 6 * chunk.size()) {
          auto reading = f.streams[0]->read();
          auto c = co_await std::move(reading);
          if (!c) break;
          got += *c;
        }
      },
      asio::detached);
  f.ioc.poll();
  CHECK(got.size() == 6 * chunk.size());
  CHECK(f.wire->in.empty());
  // Consumption is acknowledged per stream and for the session, and the PING answered.
  bool stream_update = false, session_update = false, ping = false;
  for (const auto& frame : f.frames()) {
    if (frame.type == spdy::FrameType::kWindowUpdate) {
      (frame.stream_id == 0 ? session_update : stream_update) = true;
    }
    ping = ping || frame.type == spdy::FrameType::kPing;
  }
  CHECK(stream_update);
  CHECK(session_update);
  CHECK(ping);
}

TEST_CASE("Streams past the limit are refused and out-of-order ids end the session", "[spdy]") {
  SpdyLimits limits;
  limits.max_streams = 2;
  Fixture f(limits);
  f.open(1, {});
  f.open(3, {});
  f.open(5, {});
  CHECK(f.streams.size() == 2);
  auto frames = f.frames();
  REQUIRE(frames.size() == 3);
  CHECK((frames[2].type == spdy::FrameType::kRstStream && frames[2].stream_id == 5 &&
         frames[2].status == spdy::kRefusedStream));
  f.open(3, {});  // reused id
  frames = f.frames();
  REQUIRE(frames.size() == 1);
  CHECK((frames[0].type == spdy::FrameType::kGoAway &&
         frames[0].status == spdy::kGoAwayProtocolError));
  CHECK(f.done);
  CHECK(f.wire->closed);
  CHECK(f.streams[0]->broken());
}

TEST_CASE("Garbage from the client ends the session with a GOAWAY", "[spdy]") {
  Fixture f;
  f.wire->send(std::string("\x80\x02\x00\x01\x00\x00\x00\x00", 8));  // SPDY/2
  f.ioc.poll();
  auto frames = f.frames();
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].type == spdy::FrameType::kGoAway);
  CHECK(f.done);
}

TEST_CASE("A session idle past its timeout is closed", "[spdy]") {
  SpdyLimits limits;
  limits.idle_timeout = 10s;
  Fixture f(limits);
  f.open(1, {});
  f.clock.advance(9s);
  f.ioc.poll();
  CHECK_FALSE(f.done);
  f.wire->send(spdy::encodePing(3));  // activity pushes the deadline back
  f.ioc.poll();
  f.clock.advance(9s);
  f.ioc.poll();
  CHECK_FALSE(f.done);
  f.clock.advance(2s);
  f.ioc.poll();
  CHECK(f.done);
  CHECK(f.wire->closed);
}
