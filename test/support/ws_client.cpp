#include "test/support/ws_client.h"

#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>

#include "base/asio.h"

namespace nodeagent::testing {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace ws = beast::websocket;
using boost::system::error_code;

}  // namespace

struct WsClient::Impl {
  asio::io_context ioc;
  asio::ssl::context ssl{asio::ssl::context::tls_client};
  std::optional<ws::stream<beast::ssl_stream<beast::tcp_stream>>> tls_ws;
  std::optional<ws::stream<beast::tcp_stream>> plain_ws;
  std::chrono::milliseconds timeout{10'000};
  std::string protocol, error, body;
  int status = 0;

  template <typename Stream>
  bool upgrade(Stream& stream, const std::string& target, const WsClientOptions& o) {
    stream.set_option(ws::stream_base::decorator([&o](ws::request_type& req) {
      std::string protocols;
      for (const auto& p : o.protocols) protocols += (protocols.empty() ? "" : ",") + p;
      if (!protocols.empty()) req.set(http::field::sec_websocket_protocol, protocols);
      if (!o.bearer_token.empty()) req.set(http::field::authorization, "Bearer " + o.bearer_token);
    }));
    ws::response_type response;
    bool done = false;
    error_code ec;
    stream.async_handshake(response, "127.0.0.1", target, [&](error_code e) {
      ec = e;
      done = true;
    });
    ioc.restart();
    ioc.run_for(timeout);
    status = static_cast<int>(response.result_int());
    body = response.body();
    if (!done || ec) {
      error = done ? ec.message() : "timed out";
      return false;
    }
    protocol = std::string(response[http::field::sec_websocket_protocol]);
    stream.binary(true);
    return true;
  }
};

WsClient::WsClient() : impl_(std::make_unique<Impl>()) {}
WsClient::~WsClient() = default;

bool WsClient::connect(int port, const std::string& target, const WsClientOptions& o) {
  Impl& i = *impl_;
  i.timeout = o.timeout;
  const asio::ip::tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"),
                                         static_cast<unsigned short>(port));
  error_code ec;
  if (!o.tls) {
    i.plain_ws.emplace(i.ioc);
    beast::get_lowest_layer(*i.plain_ws).connect(endpoint, ec);
    if (ec) return i.error = ec.message(), false;
    return i.upgrade(*i.plain_ws, target, o);
  }
  i.ssl.set_verify_mode(asio::ssl::verify_none);
  if (!o.client_cert.empty()) {
    i.ssl.use_certificate_chain_file(o.client_cert.string(), ec);
    if (!ec) i.ssl.use_private_key_file(o.client_key.string(), asio::ssl::context::pem, ec);
    if (ec) return i.error = ec.message(), false;
  }
  i.tls_ws.emplace(i.ioc, i.ssl);
  beast::get_lowest_layer(*i.tls_ws).connect(endpoint, ec);
  if (ec) return i.error = ec.message(), false;
  bool done = false;
  i.tls_ws->next_layer().async_handshake(asio::ssl::stream_base::client, [&](error_code e) {
    ec = e;
    done = true;
  });
  i.ioc.restart();
  i.ioc.run_for(i.timeout);
  if (!done || ec) return i.error = done ? ec.message() : "TLS handshake timed out", false;
  return i.upgrade(*i.tls_ws, target, o);
}

const std::string& WsClient::protocol() const { return impl_->protocol; }
int WsClient::httpStatus() const { return impl_->status; }
const std::string& WsClient::httpBody() const { return impl_->body; }
const std::string& WsClient::error() const { return impl_->error; }

bool WsClient::send(const std::string& message) {
  error_code ec;
  if (impl_->tls_ws) {
    impl_->tls_ws->write(asio::buffer(message), ec);
  } else {
    impl_->plain_ws->write(asio::buffer(message), ec);
  }
  return !ec;
}

std::optional<std::string> WsClient::read() {
  Impl& i = *impl_;
  beast::flat_buffer buffer;
  bool done = false;
  error_code ec;
  auto handler = [&](error_code e, size_t) {
    ec = e;
    done = true;
  };
  if (i.tls_ws) {
    i.tls_ws->async_read(buffer, handler);
  } else {
    i.plain_ws->async_read(buffer, handler);
  }
  i.ioc.restart();
  i.ioc.run_for(i.timeout);
  if (!done) {
    if (i.tls_ws) beast::get_lowest_layer(*i.tls_ws).close();
    if (i.plain_ws) beast::get_lowest_layer(*i.plain_ws).close();
    i.ioc.restart();
    i.ioc.run_for(std::chrono::seconds(1));
    i.error = "read timed out";
    return std::nullopt;
  }
  if (ec) return std::nullopt;
  return beast::buffers_to_string(buffer.data());
}

void WsClient::close() {
  error_code ec;
  if (impl_->tls_ws) beast::get_lowest_layer(*impl_->tls_ws).close();
  if (impl_->plain_ws) beast::get_lowest_layer(*impl_->plain_ws).close();
}

ChannelOutput readChannels(WsClient& client) {
  ChannelOutput out;
  while (auto message = client.read()) {
    if (message->empty()) continue;
    const std::string data = message->substr(1);
    switch ((*message)[0]) {
      case 1:
        out.stdout_data += data;
        break;
      case 2:
        out.stderr_data += data;
        break;
      case 3:
        out.error += data;
        break;
      default:
        break;
    }
  }
  out.closed = client.error().empty();
  return out;
}

}  // namespace nodeagent::testing
