#include "agent/prober/probe_handler.h"

#include <boost/asio/ssl.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <variant>

#include "agent/status/pod_status.h"
#include "base/printable.h"
#include "base/strings.h"

namespace nodeagent::agent {

using base::goQuote;  // Go's %q, as kubelet formats probe and hook output

namespace {

using tcp = asio::ip::tcp;
namespace ssl = asio::ssl;

// kubelet's maxRespBodyLength for HTTP probes.
constexpr size_t kMaxHttpBody = 10 * 1024;
constexpr size_t kMaxHttpHeader = 64 * 1024;
// Go's http.Client stops after 10 redirects.
constexpr int kMaxRedirects = 10;
constexpr std::string_view kUserAgent = "kube-probe/1.18";

std::string joinArgs(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

// kubelet's extractPort: a name is looked up among the container's ports (a numeric string is
// taken as the number), then the number must be a valid port.
base::StatusOr<int> resolvePort(const api::IntOrString& port,
                                const std::vector<api::ContainerPort>& ports) {
  int value = port.int_value;
  if (port.is_string) {
    auto it = std::find_if(ports.begin(), ports.end(), [&](const api::ContainerPort& p) {
      return p.name == port.string_value;
    });
    if (it != ports.end()) {
      value = it->container_port;
    } else {
      const auto& s = port.string_value;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
      if (ec != std::errc() || end != s.data() + s.size()) {
        return base::invalidArgumentError("couldn't find port: " + s + " in container");
      }
    }
  }
  if (value <= 0 || value > 65535) {
    return base::invalidArgumentError("invalid port number: " + std::to_string(value));
  }
  return value;
}

// An address literal ("[::1]" too) or nullopt for a name to resolve.
std::optional<asio::ip::address> parseAddress(std::string host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) return std::nullopt;
  return address;
}

std::string hostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

struct HttpResponse {
  int code = 0;
  std::string location;
  std::string body;
};

// One connection (TCP, or TLS without verification as kubelet's probes) and the deadline that
// closes it. Lives in a coroutine frame on a strand; the timer's callback runs on that strand.
class Connection {
 public:
  Connection(asio::any_io_executor ex, base::Clock& clock)
      : ex_(ex), resolver_(ex), socket_(ex), timer_(clock.makeTimer(ex)) {}
  ~Connection() { timer_->cancel(); }

  void arm(base::Duration timeout) {
    timer_->asyncWaitFor(timeout, [this] {
      expired_ = true;
      boost::system::error_code ec;
      resolver_.cancel();
      socket_.close(ec);
      if (tls_) tls_->lowest_layer().close(ec);
    });
  }
  bool expired() const { return expired_; }

  // Resolves and connects; an error text ("dial tcp host:port: ...") on failure.
  asio::awaitable<std::optional<std::string>> connect(std::string host, int port) {
    const std::string where = "dial tcp " + hostPort(host, port) + ": ";
    boost::system::error_code ec;
    std::vector<tcp::endpoint> endpoints;
    if (auto address = parseAddress(host)) {
      endpoints.emplace_back(*address, static_cast<uint16_t>(port));
    } else {
      auto results = co_await resolver_.async_resolve(
          host, std::to_string(port), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return where + (expired_ ? "i/o timeout" : "lookup " + host + ": " + ec.message());
      for (const auto& r : results) endpoints.push_back(r.endpoint());
    }
    if (expired_) co_return where + "i/o timeout";
    co_await asio::async_connect(socket_, endpoints, asio::redirect_error(asio::use_awaitable, ec));
    if (expired_) co_return where + "i/o timeout";
    if (ec) co_return where + "connect: " + ec.message();
    co_return std::nullopt;
  }

  asio::awaitable<std::optional<std::string>> handshake(std::string host) {
    ssl_ctx_ = std::make_unique<ssl::context>(ssl::context::tls_client);
    ssl_ctx_->set_verify_mode(ssl::verify_none);
    tls_ = std::make_unique<ssl::stream<tcp::socket&>>(socket_, *ssl_ctx_);
    if (!parseAddress(host)) SSL_set_tlsext_host_name(tls_->native_handle(), host.c_str());
    boost::system::error_code ec;
    co_await tls_->async_handshake(ssl::stream_base::client,
                                   asio::redirect_error(asio::use_awaitable, ec));
    if (expired_) co_return "net/http: TLS handshake timeout";
    if (ec) co_return "tls handshake: " + ec.message();
    co_return std::nullopt;
  }

  asio::awaitable<boost::system::error_code> write(std::string data) {
    boost::system::error_code ec;
    if (tls_) {
      co_await asio::async_write(*tls_, asio::buffer(data),
                                 asio::redirect_error(asio::use_awaitable, ec));
    } else {
      co_await asio::async_write(socket_, asio::buffer(data),
                                 asio::redirect_error(asio::use_awaitable, ec));
    }
    co_return ec;
  }

  // `buf` and `ec` are the awaiting coroutine's, which awaits this at once: they outlive it.
  asio::awaitable<size_t> readSome(char* buf, size_t size, boost::system::error_code& ec) {
    size_t n = 0;
    if (tls_) {
      n = co_await tls_->async_read_some(asio::buffer(buf, size),
                                         asio::redirect_error(asio::use_awaitable, ec));
    } else {
      n = co_await socket_.async_read_some(asio::buffer(buf, size),
                                           asio::redirect_error(asio::use_awaitable, ec));
    }
    co_return n;
  }

 private:
  asio::any_io_executor ex_;
  tcp::resolver resolver_;
  tcp::socket socket_;
  std::unique_ptr<ssl::context> ssl_ctx_;
  std::unique_ptr<ssl::stream<tcp::socket&>> tls_;
  base::TimerPtr timer_;
  bool expired_ = false;
};

std::string timeoutText(const std::string& url, base::Duration timeout) {
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout).count();
  return "Get \"" + url +
         "\": context deadline exceeded (Client.Timeout exceeded while awaiting "
         "headers; timeout " +
         std::to_string(secs) + "s)";
}

// The request line and headers of a GET: the probe's headers, and Host, User-Agent and Accept
// unless it gives them.
std::string requestText(const std::string& host, int port, const std::string& path,
                        const std::vector<api::HTTPHeader>& headers) {
  std::string request = "GET " + path + " HTTP/1.1\r\n";
  bool have_host = false, have_agent = false, have_accept = false;
  std::string extra;
  for (const auto& h : headers) {
    if (base::iequals(h.name, "Host")) have_host = true;
    if (base::iequals(h.name, "User-Agent")) have_agent = true;
    if (base::iequals(h.name, "Accept")) have_accept = true;
    extra += h.name + ": " + h.value + "\r\n";
  }
  if (!have_host) request += "Host: " + hostPort(host, port) + "\r\n";
  if (!have_agent) request += "User-Agent: " + std::string(kUserAgent) + "\r\n";
  if (!have_accept) request += "Accept: */*\r\n";
  request += extra + "Connection: close\r\n\r\n";
  return request;
}

// A response's status line and the headers a probe uses.
struct ResponseHead {
  int code = 0;
  std::string location;
  // How much of the body to read: up to 10 KiB, and no more than its Content-Length.
  size_t body_limit = kMaxHttpBody;
};

// One header line: Location and Content-Length are kept.
void parseHeaderLine(std::string_view line, ResponseHead& head) {
  auto colon = line.find(':');
  if (colon == std::string_view::npos) return;
  auto name = line.substr(0, colon);
  auto value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  if (base::iequals(name, "Location")) head.location = std::string(value);
  if (base::iequals(name, "Content-Length")) {
    size_t length = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
    if (ec == std::errc()) head.body_limit = std::min(head.body_limit, length);
  }
}

// The status line and headers of a response whose head ends at `header_end`, or an error text.
std::variant<ResponseHead, std::string> parseHead(const std::string& data, size_t header_end) {
  ResponseHead head;
  // "HTTP/1.1 200 OK"
  if (data.rfind("HTTP/", 0) != 0 || data.size() < 12) return "malformed HTTP response";
  size_t sp = data.find(' ');
  auto [end, cerr] = std::from_chars(data.data() + sp + 1, data.data() + sp + 4, head.code);
  if (cerr != std::errc() || end != data.data() + sp + 4) return "malformed HTTP status line";
  size_t pos = data.find("\r\n") + 2;
  while (pos < header_end) {
    size_t eol = data.find("\r\n", pos);
    parseHeaderLine(std::string_view(data.data() + pos, eol - pos), head);
    pos = eol + 2;
  }
  return head;
}

// Reads the response to the request written on `conn`: the response or an error text. `conn` is
// in the frame of the coroutine that awaits this at once, so it outlives the call.
asio::awaitable<std::variant<HttpResponse, std::string>> readResponse(Connection& conn,
                                                                      std::string url,
                                                                      base::Duration timeout) {
  boost::system::error_code ec;
  std::string data;
  char buf[4096];
  size_t header_end = std::string::npos;
  while (header_end == std::string::npos) {
    size_t n = co_await conn.readSome(buf, sizeof buf, ec);
    data.append(buf, n);
    header_end = data.find("\r\n\r\n");
    if (header_end != std::string::npos) break;
    if (ec || data.size() > kMaxHttpHeader) {
      if (conn.expired()) co_return timeoutText(url, timeout);
      co_return "Get \"" + url + "\": " + (ec ? ec.message() : "malformed HTTP response");
    }
  }
  auto parsed = parseHead(data, header_end);
  if (auto* err = std::get_if<std::string>(&parsed)) co_return "Get \"" + url + "\": " + *err;
  auto& head = std::get<ResponseHead>(parsed);
  HttpResponse response{head.code, std::move(head.location), ""};
  // The body only makes the probe's output: up to 10 KiB, and a read error or the deadline
  // while reading it leaves the result as the status code says.
  response.body = data.substr(header_end + 4, head.body_limit);
  while (response.body.size() < head.body_limit && !ec) {
    size_t n = co_await conn.readSome(buf, sizeof buf, ec);
    response.body.append(buf, std::min(n, head.body_limit - response.body.size()));
  }
  co_return response;
}

// One GET (no redirects), bounded by `timeout`: the response or an error text. `clock` is the
// agent's, which outlives every probe.
asio::awaitable<std::variant<HttpResponse, std::string>> getOnce(
    base::Clock& clock, bool https, std::string host, int port, std::string path,
    std::vector<api::HTTPHeader> headers, base::Duration timeout) {
  const std::string url = std::string(https ? "https://" : "http://") + hostPort(host, port) + path;
  Connection conn(co_await asio::this_coro::executor, clock);
  conn.arm(timeout);
  // Awaitables live in named variables: GCC 12 destroys temporaries of a co_await expression
  // twice.
  auto connecting = conn.connect(host, port);
  if (auto err = co_await std::move(connecting)) {
    co_return conn.expired() ? timeoutText(url, timeout) : "Get \"" + url + "\": " + *err;
  }
  if (https) {
    auto handshake = conn.handshake(host);
    if (auto err = co_await std::move(handshake)) co_return "Get \"" + url + "\": " + *err;
  }
  auto writing = conn.write(requestText(host, port, path, headers));
  if (auto ec = co_await std::move(writing)) {
    co_return conn.expired() ? timeoutText(url, timeout) : "Get \"" + url + "\": " + ec.message();
  }
  auto reading = readResponse(conn, url, timeout);
  co_return co_await std::move(reading);
}

struct Url {
  bool https = false;
  std::string host;
  int port = 0;
  std::string path;
};

// Where a redirect goes: a path on the same server, or an absolute URL.
std::optional<Url> redirectTarget(const Url& from, const std::string& location) {
  if (location.empty()) return std::nullopt;
  if (location.front() == '/' && location.rfind("//", 0) != 0) {
    Url to = from;
    to.path = location;
    return to;
  }
  Url to;
  std::string_view rest = location;
  if (rest.rfind("http://", 0) == 0) {
    rest.remove_prefix(7);
  } else if (rest.rfind("https://", 0) == 0) {
    to.https = true;
    rest.remove_prefix(8);
  } else {
    return std::nullopt;
  }
  auto slash = rest.find('/');
  std::string authority(rest.substr(0, slash));
  to.path = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  to.port = to.https ? 443 : 80;
  auto colon = authority.rfind(':');
  if (colon != std::string::npos && authority.find(']', colon) == std::string::npos) {
    int port = 0;
    auto [end, ec] =
        std::from_chars(authority.data() + colon + 1, authority.data() + authority.size(), port);
    if (ec != std::errc() || end != authority.data() + authority.size()) return std::nullopt;
    to.port = port;
    authority.resize(colon);
  }
  if (authority.size() > 2 && authority.front() == '[')
    authority = authority.substr(1, authority.size() - 2);
  to.host = authority;
  return to;
}

// kubelet's DoHTTPProbe with followNonLocalRedirects=false: redirects on the same host are
// followed, a redirect elsewhere ends the probe with a Warning (a success). `clock` is the
// agent's, which outlives every probe.
asio::awaitable<ProbeOutcome> httpProbe(base::Clock& clock, Url url,
                                        std::vector<api::HTTPHeader> headers,
                                        base::Duration timeout) {
  const auto deadline = clock.now() + timeout;
  for (int redirects = 0;; ++redirects) {
    auto left = std::max<base::Duration>(deadline - clock.now(), base::Duration::zero());
    auto get = getOnce(clock, url.https, url.host, url.port, url.path, headers, left);
    auto result = co_await std::move(get);
    if (auto* err = std::get_if<std::string>(&result)) {
      co_return ProbeOutcome{ProbeOutcome::Kind::kFailure, *err};
    }
    auto& response = std::get<HttpResponse>(result);
    const int code = response.code;
    if (code >= 300 && code < 400 && !response.location.empty()) {
      auto to = redirectTarget(url, response.location);
      if (to && (to->host != url.host)) {
        co_return ProbeOutcome{ProbeOutcome::Kind::kWarning,
                               "Probe terminated redirects, Response body: " + response.body};
      }
      if (to) {
        if (redirects + 1 >= kMaxRedirects) {
          co_return ProbeOutcome{ProbeOutcome::Kind::kFailure,
                                 "Get \"" + response.location + "\": stopped after 10 redirects"};
        }
        url = *to;
        continue;
      }
    }
    if (code >= 200 && code < 400) {
      co_return ProbeOutcome{ProbeOutcome::Kind::kSuccess, response.body};
    }
    co_return ProbeOutcome{ProbeOutcome::Kind::kFailure,
                           "HTTP probe failed with statuscode: " + std::to_string(code)};
  }
}

base::StatusOr<Url> httpUrl(const api::HTTPGetAction& get, const ProbeTarget& target) {
  auto port = resolvePort(get.port, target.ports);
  if (!port.ok()) return port.status();
  Url url;
  url.https = base::iequals(get.scheme, "HTTPS");
  url.host = get.host.empty() ? target.pod_ip : get.host;
  if (url.host.empty()) url.host = "127.0.0.1";
  url.port = *port;
  url.path = get.path.empty() ? "/" : get.path;
  if (url.path.front() != '/') url.path = "/" + url.path;
  return url;
}

}  // namespace

std::string_view probeTypeName(ProbeType type) {
  switch (type) {
    case ProbeType::kLiveness:
      return "Liveness";
    case ProbeType::kReadiness:
      return "Readiness";
    case ProbeType::kStartup:
      return "Startup";
  }
  return "Unknown";
}

std::string formatPod(const api::Pod& pod) {
  return pod.metadata.name + "_" + pod.metadata.namespace_ + "(" + pod.metadata.uid + ")";
}

std::string hookFailureMessage(const api::Handler& handler, const std::string& container,
                               const api::Pod& pod, const HookFailure& failure) {
  std::string what = handler.exec
                         ? "Exec lifecycle hook (" + goStringList(handler.exec->command) + ")"
                     : handler.http_get ? "Http lifecycle hook (" + handler.http_get->path + ")"
                                        : "lifecycle hook";
  return what + " for Container " + goQuote(container) + " in Pod " + goQuote(formatPod(pod)) +
         " failed - error: " + failure.error + ", message: " + goQuote(failure.output);
}

asio::awaitable<ProbeOutcome> RealProbeHandler::probe(ProbeTarget target) {
  using Kind = ProbeOutcome::Kind;
  const auto& h = target.handler;
  if (h.exec) {
    auto exec = runtime_.execInContainer(target.container_id, h.exec->command, target.timeout);
    auto result = co_await std::move(exec);
    if (!result.ok()) co_return ProbeOutcome{Kind::kUnknown, result.status().message()};
    if (result->timed_out) {
      auto secs = std::chrono::duration_cast<std::chrono::seconds>(target.timeout).count();
      co_return ProbeOutcome{Kind::kFailure, "command " + goQuote(joinArgs(h.exec->command)) +
                                                 " timed out after " + std::to_string(secs) + "s"};
    }
    co_return ProbeOutcome{result->exit_code == 0 ? Kind::kSuccess : Kind::kFailure,
                           std::move(result->output)};
  }
  if (h.http_get) {
    auto url = httpUrl(*h.http_get, target);
    if (!url.ok()) co_return ProbeOutcome{Kind::kUnknown, url.status().message()};
    auto http = httpProbe(clock_, *url, h.http_get->http_headers, target.timeout);
    auto outcome = co_await std::move(http);
    co_return outcome;
  }
  if (h.tcp_socket) {
    auto port = resolvePort(h.tcp_socket->port, target.ports);
    if (!port.ok()) co_return ProbeOutcome{Kind::kUnknown, port.status().message()};
    std::string host = h.tcp_socket->host.empty() ? target.pod_ip : h.tcp_socket->host;
    if (host.empty()) host = "127.0.0.1";
    Connection conn(co_await asio::this_coro::executor, clock_);
    conn.arm(target.timeout);
    auto connecting = conn.connect(host, *port);
    auto err = co_await std::move(connecting);
    if (err) co_return ProbeOutcome{Kind::kFailure, *err};
    co_return ProbeOutcome{Kind::kSuccess, ""};
  }
  co_return ProbeOutcome{Kind::kUnknown, "missing probe handler"};
}

asio::awaitable<std::optional<HookFailure>> RealProbeHandler::runHook(ProbeTarget target) {
  const auto& h = target.handler;
  if (h.exec) {
    auto exec = runtime_.execInContainer(target.container_id, h.exec->command, target.timeout);
    auto result = co_await std::move(exec);
    if (!result.ok()) co_return HookFailure{result.status().message(), ""};
    if (result->timed_out) {
      co_return HookFailure{"command '" + joinArgs(h.exec->command) + "' timed out",
                            result->output};
    }
    if (result->exit_code != 0) {
      co_return HookFailure{"command '" + joinArgs(h.exec->command) + "' exited with " +
                                std::to_string(result->exit_code) + ": " + result->output,
                            result->output};
    }
    co_return std::nullopt;
  }
  if (h.http_get) {
    auto url = httpUrl(*h.http_get, target);
    if (!url.ok()) co_return HookFailure{url.status().message(), ""};
    auto get = getOnce(clock_, url->https, url->host, url->port, url->path,
                       h.http_get->http_headers, target.timeout);
    auto result = co_await std::move(get);
    if (auto* err = std::get_if<std::string>(&result)) co_return HookFailure{*err, ""};
    co_return std::nullopt;
  }
  co_return HookFailure{"a lifecycle hook needs exec or httpGet", ""};
}

}  // namespace nodeagent::agent
