// An in-memory ByteStream for tests of what runs on an upgraded connection (the SPDY session,
// exec and attach over SPDY): the test plays the client on a MemoryWire. What the test sends is
// read by the server in the chunks it was sent in; what the server writes collects in
// `written`. The wire outlives the stream (the server owns and destroys the stream).
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "agent/server/http_server.h"

namespace nodeagent::testing {

struct MemoryWire {
  explicit MemoryWire(asio::io_context& ioc) : event(ioc) {
    event.expires_at(asio::steady_timer::time_point::max());
  }
  void send(std::string bytes) {
    in.push_back(std::move(bytes));
    event.cancel();
  }
  // The client's end of the connection.
  void hangUp() {
    eof = true;
    event.cancel();
  }

  std::deque<std::string> in;
  std::string written;
  bool eof = false;
  bool closed = false;  // the server closed it
  asio::steady_timer event;
};

class MemoryByteStream final : public agent::ByteStream {
 public:
  explicit MemoryByteStream(std::shared_ptr<MemoryWire> wire) : wire_(std::move(wire)) {}
  asio::awaitable<std::optional<std::string>> read() override {
    while (wire_->in.empty() && !wire_->eof) {
      boost::system::error_code ec;
      co_await wire_->event.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (wire_->in.empty()) co_return std::nullopt;
    std::string chunk = std::move(wire_->in.front());
    wire_->in.pop_front();
    co_return chunk;
  }
  asio::awaitable<bool> write(std::string_view data) override {
    if (wire_->closed) co_return false;
    wire_->written.append(data);
    co_return true;
  }
  asio::awaitable<void> close() override {
    wire_->closed = true;
    wire_->hangUp();
    co_return;
  }

 private:
  std::shared_ptr<MemoryWire> wire_;
};

}  // namespace nodeagent::testing
