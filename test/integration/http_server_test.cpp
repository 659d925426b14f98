// The agent's HTTP server on real loopback sockets: exclusive binds, bounded requests (header
// bytes and lines, body, time), keep-alive, the connection cap, and staying responsive while
// thousands of idle or slow connections are open.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/server/http_server.h"
#include "base/clock.h"
#include "test/support/integration_env.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// A client socket, closed with the object.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

sockaddr_in loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

Fd connectTo(int port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.get() >= 0);
  auto addr = loopback(port);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

bool sendAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// What the peer sent until it closed (EOF or reset), or nullopt if it still had not closed at
// the deadline.
std::optional<std::string> readUntilClosed(int fd, std::chrono::milliseconds deadline) {
  std::string out;
  const auto end = Clock::now() + deadline;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[16384];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return out;  // EOF or reset: closed
    out.append(buf, static_cast<size_t>(n));
  }
}

// Reads until `bytes` have arrived, the peer closes or the deadline passes.
std::string readFor(int fd, size_t bytes, std::chrono::milliseconds deadline) {
  std::string out;
  const auto end = Clock::now() + deadline;
  while (out.size() < bytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[16384];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// True when the peer has closed `fd` (without waiting).
bool closedNow(int fd) { return readUntilClosed(fd, 1ms).has_value(); }

// Raises the soft descriptor limit to at least `need`; skips the test case when the hard limit
// does not allow it.
void ensureDescriptors(rlim_t need) {
  rlimit lim{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &lim) == 0);
  if (lim.rlim_cur >= need) return;
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < need) {
    testing::skipTest("this test needs " + std::to_string(need) +
                      " descriptors; the RLIMIT_NOFILE hard limit is " +
                      std::to_string(lim.rlim_max));
  }
  lim.rlim_cur = need;
  if (::setrlimit(RLIMIT_NOFILE, &lim) != 0)
    testing::skipTest("cannot raise RLIMIT_NOFILE to " + std::to_string(need));
}

// /healthz answers "ok", /pods a large body in many pieces (as the read-only server's /pods).
struct Body {
  std::vector<std::string> parts;
  std::vector<std::string_view> pieces;
  size_t size = 0;
};

std::shared_ptr<const Body> largeBody() {
  auto body = std::make_shared<Body>();
  for (int i = 0; i < 1000; ++i)
    body->parts.push_back(std::string(1500, static_cast<char>('a' + i % 26)));
  for (const auto& p : body->parts) {
    body->pieces.push_back(p);
    body->size += p.size();
  }
  return body;
}

agent::HttpResponse handle(const std::shared_ptr<const Body>& body, const agent::HttpRequest& r) {
  agent::HttpResponse res;
  if (r.path == "/healthz") {
    res.body = "ok";
  } else if (r.path == "/pods") {
    res.content_type = "application/json";
    res.body_pieces = std::shared_ptr<const std::vector<std::string_view>>(body, &body->pieces);
  } else if (r.path == "/echo") {
    res.body = r.method + " " + r.target + " " + std::to_string(r.headers.size()) + " " + r.body;
  } else {
    res.status = 404;
  }
  return res;
}

// An HttpServer on 127.0.0.1:<port 0> served by two threads (as the agent's io_context is).
struct Fixture {
  explicit Fixture(agent::HttpServerOptions options = {}) {
    options.address = "127.0.0.1";
    options.port = 0;
    server = std::make_unique<agent::HttpServer>(
        io.executor(), base::realClock(), options,
        [body = body](const agent::HttpRequest& r) { return handle(body, r); });
    REQUIRE(server->start().ok());
    io.start(2);
  }
  ~Fixture() { server->stop(); }

  // GET `path` with a fresh client; the status, or -1 when it failed within `timeout`.
  int get(const std::string& path, std::string* out = nullptr,
          std::chrono::seconds timeout = 5s) const {
    httplib::Client cli("127.0.0.1", server->port());
    cli.set_connection_timeout(timeout);
    cli.set_read_timeout(timeout);
    cli.set_write_timeout(timeout);
    auto res = cli.Get(path.c_str());
    if (!res) return -1;
    if (out != nullptr) *out = res->body;
    return res->status;
  }

  testing::IoThreads io;
  std::shared_ptr<const Body> body = largeBody();
  std::unique_ptr<agent::HttpServer> server;
};

}  // namespace

TEST_CASE("http server: a second server on the same port fails naming it, the first keeps serving",
          "[integration][http_server]") {
  Fixture first;
  const int port = first.server->port();
  REQUIRE(port > 0);

  testing::IoThreads io;
  agent::HttpServerOptions o;
  o.name = "read-only";
  o.address = "127.0.0.1";
  o.port = port;
  agent::HttpServer second(io.executor(), base::realClock(), o,
                           [](const agent::HttpRequest&) { return agent::HttpResponse{}; });
  auto status = second.start();
  REQUIRE_FALSE(status.ok());
  INFO(status.toString());
  CHECK_THAT(status.message(), Catch::Contains("read-only port 127.0.0.1:" + std::to_string(port)));
  CHECK_THAT(status.message(), Catch::Contains("port " + std::to_string(port) + " is in use"));

  // Not even a listener that asks for SO_REUSEPORT can share it (the server never sets it).
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  REQUIRE(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0);
  REQUIRE(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0);
  auto addr = loopback(port);
  CHECK(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0);

  CHECK(first.get("/healthz") == 200);
}

TEST_CASE("http server: answers keep-alive and pipelined requests on one connection",
          "[integration][http_server]") {
  Fixture f;
  // No cap given: 4096, or a quarter of the descriptor limit.
  rlimit lim{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &lim) == 0);
  CHECK(f.server->maxConnections() ==
        std::clamp<size_t>(static_cast<size_t>(lim.rlim_cur / 4), 16, 4096));

  Fd fd = connectTo(f.server->port());
  const std::string req = "GET /echo?a=b HTTP/1.1\r\nHost: x\r\n\r\n";
  REQUIRE(sendAll(fd.get(), req));
  const std::string one =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 16\r\n\r\n"
      "GET /echo?a=b 1 ";
  CHECK(readFor(fd.get(), one.size(), 2s) == one);
  // Two more in one write, the last with a body and Connection: close.
  REQUIRE(sendAll(fd.get(), req + "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                                  "Connection: close\r\n\r\nhello"));
  auto rest = readUntilClosed(fd.get(), 5s);
  REQUIRE(rest);
  CHECK_THAT(*rest, Catch::StartsWith(one + "HTTP/1.1 200 OK\r\n"));
  CHECK_THAT(*rest, Catch::Contains("Connection: close\r\n"));
  CHECK_THAT(*rest, Catch::EndsWith("POST /echo 3 hello"));

  // A large body of many pieces arrives whole.
  std::string pods;
  REQUIRE(f.get("/pods", &pods) == 200);
  CHECK(pods.size() == f.body->size);
  CHECK(pods.substr(0, 1500) == f.body->parts[0]);
  CHECK(pods.substr(pods.size() - 1500) == f.body->parts.back());
}

TEST_CASE("http server: oversized requests are refused and the connection closed",
          "[integration][http_server]") {
  Fixture f;
  auto refused = [&](const std::string& request) {
    Fd fd = connectTo(f.server->port());
    sendAll(fd.get(), request);  // the server may close before it has read everything
    auto answer = readUntilClosed(fd.get(), 5s);
    REQUIRE(answer);  // closed
    return answer->substr(0, answer->find("\r\n"));
  };
  std::string many = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 200; ++i) many += "X-Line-" + std::to_string(i) + ": v\r\n";
  CHECK(refused(many + "\r\n") == "HTTP/1.1 431 Request Header Fields Too Large");

  // 100 header lines are fine (99 plus Host).
  std::string hundred = "GET /echo HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 99; ++i) hundred += "X-Line-" + std::to_string(i) + ": v\r\n";
  {
    Fd fd = connectTo(f.server->port());
    REQUIRE(sendAll(fd.get(), hundred + "Connection: close\r\n\r\n"));
    // Connection: close makes 101.
    auto answer = readUntilClosed(fd.get(), 5s);
    REQUIRE(answer);
    CHECK_THAT(*answer, Catch::StartsWith("HTTP/1.1 431"));
  }
  {
    Fd fd = connectTo(f.server->port());
    REQUIRE(sendAll(fd.get(), hundred + "\r\n"));
    CHECK_THAT(readFor(fd.get(), 70, 5s), Catch::StartsWith("HTTP/1.1 200 OK"));
  }

  const std::string big(100 * 1024, 'v');
  CHECK(refused("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n") ==
        "HTTP/1.1 431 Request Header Fields Too Large");
  CHECK(refused("GET /" + big + " HTTP/1.1\r\nHost: x\r\n\r\n") ==
        "HTTP/1.1 431 Request Header Fields Too Large");
  CHECK(refused("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 102400\r\n\r\n" + big) ==
        "HTTP/1.1 413 Payload Too Large");
  CHECK(refused("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n19000\r\n" +
                big + "\r\n0\r\n\r\n") == "HTTP/1.1 413 Payload Too Large");
  CHECK(refused("NOT HTTP AT ALL\r\n\r\n") == "HTTP/1.1 400 Bad Request");
  // The server is still fine.
  CHECK(f.get("/healthz") == 200);
}

TEST_CASE("http server: a slowloris connection is closed at its header deadline",
          "[integration][http_server]") {
  agent::HttpServerOptions o;
  o.header_timeout = 2s;
  o.idle_timeout = 1s;
  Fixture f(o);

  SECTION("a header line every 300 ms does not keep it open") {
    Fd fd = connectTo(f.server->port());
    const auto start = Clock::now();
    REQUIRE(sendAll(fd.get(), "GET /healthz HTTP/1.1\r\n"));
    bool closed = false;
    for (int i = 0; i < 40 && !closed; ++i) {
      closed = readUntilClosed(fd.get(), 300ms).has_value() ||
               !sendAll(fd.get(), "X-Slow-" + std::to_string(i) + ": v\r\n");
    }
    const auto open_for = Clock::now() - start;
    REQUIRE(closed);
    CHECK(open_for >= 1500ms);
    CHECK(open_for < 3500ms);
  }
  SECTION("a connection that sends nothing is closed at the deadline") {
    Fd fd = connectTo(f.server->port());
    const auto start = Clock::now();
    auto answer = readUntilClosed(fd.get(), 5s);
    REQUIRE(answer);
    CHECK(answer->empty());
    CHECK(Clock::now() - start >= 1500ms);
  }
  SECTION(
      "a keep-alive connection is closed when idle, and a request's deadline starts at its "
      "first byte") {
    Fd fd = connectTo(f.server->port());
    // Past the accept's deadline, but each request is quick.
    for (int i = 0; i < 5; ++i) {
      REQUIRE(sendAll(fd.get(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
      CHECK_THAT(readFor(fd.get(), 66, 2s), Catch::EndsWith("\r\n\r\nok"));
      REQUIRE_FALSE(readUntilClosed(fd.get(), 600ms).has_value());
    }
    const auto start = Clock::now();
    auto answer = readUntilClosed(fd.get(), 5s);
    REQUIRE(answer);
    CHECK(answer->empty());
    CHECK(Clock::now() - start < 1500ms);
  }
  CHECK(testing::eventually([&] { return f.server->connectionCount() == 0; }, 5s));
}

TEST_CASE("http server: past the connection cap the oldest idle connection is dropped first",
          "[integration][http_server]") {
  agent::HttpServerOptions o;
  o.max_connections = 10;
  o.header_timeout = 60s;
  o.idle_timeout = 60s;
  Fixture f(o);
  const int port = f.server->port();
  auto accepted = [&](size_t n) {
    return testing::eventually([&] { return f.server->connectionCount() == n; }, 5s);
  };

  // The oldest is in the middle of a request, the others wait for one.
  std::vector<Fd> conns;
  conns.push_back(connectTo(port));
  REQUIRE(accepted(1));
  REQUIRE(sendAll(conns[0].get(), "GET /healthz HTTP/1.1\r\n"));
  for (size_t i = 1; i < 10; ++i) {
    conns.push_back(connectTo(port));
    REQUIRE(accepted(i + 1));
  }
  // conns[1] answers a request: idle again, it is now the newest idle one.
  REQUIRE(sendAll(conns[1].get(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
  REQUIRE_THAT(readFor(conns[1].get(), 66, 2s), Catch::EndsWith("ok"));
  // The answer may reach the client before the server has the connection back among the idle.
  auto idle = [&](size_t n) {
    return testing::eventually([&] { return f.server->idleConnectionCount() == n; }, 5s);
  };
  REQUIRE(idle(9));

  Fd extra = connectTo(port);
  CHECK(readUntilClosed(conns[2].get(), 5s).has_value());
  REQUIRE(sendAll(extra.get(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
  CHECK_THAT(readFor(extra.get(), 66, 2s), Catch::EndsWith("ok"));
  REQUIRE(idle(9));  // conns[1], conns[3..9] and extra
  CHECK(f.server->connectionCount() == 10);
  CHECK_FALSE(closedNow(conns[0].get()));
  CHECK_FALSE(closedNow(conns[1].get()));
  CHECK_FALSE(closedNow(conns[3].get()));

  // Then the next oldest idle ones in order, conns[1] last; the one in the middle of a request
  // stays while any connection is idle.
  std::vector<Fd> more;
  for (size_t i : {3, 4, 5, 6, 7, 8, 9, 1}) {
    more.push_back(connectTo(port));
    INFO(i);
    CHECK(readUntilClosed(conns[i].get(), 5s).has_value());
  }
  CHECK_FALSE(closedNow(conns[0].get()));
  CHECK_FALSE(closedNow(extra.get()));
  CHECK(f.server->connectionCount() == 10);
}

TEST_CASE(
    "http server: /healthz and /pods answer while 2,000 idle and several slowloris "
    "connections are open",
    "[integration][http_server]") {
  constexpr int kIdle = 2000;
  constexpr int kSlow = 8;
  // Both ends of every connection are in this process.
  ensureDescriptors(2 * (kIdle + kSlow) + 512);
  agent::HttpServerOptions o;  // default limits: 5 s header deadline
  o.max_connections = 4096;
  Fixture f(o);
  const int port = f.server->port();

  std::vector<Fd> idle;
  for (int i = 0; i < kIdle; ++i) idle.push_back(connectTo(port));
  std::vector<Fd> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(connectTo(port));
    REQUIRE(sendAll(slow.back().get(), "GET /pods HTTP/1.1\r\n"));
  }
  REQUIRE(testing::eventually(
      [&] { return f.server->connectionCount() >= static_cast<size_t>(kIdle + kSlow); }, 10s));

  // For the first seconds the attackers are all open; each poll must answer promptly.
  const auto start = Clock::now();
  int polls = 0;
  int line = 0;
  auto last_line = start - 1s;
  while (Clock::now() - start < 4s) {
    if (Clock::now() - last_line >= 1s) {
      for (auto& s : slow) sendAll(s.get(), "X-Slow-" + std::to_string(line) + ": v\r\n");
      ++line;
      last_line = Clock::now();
    }
    const auto before = Clock::now();
    std::string pods;
    CHECK(f.get("/healthz", nullptr, 2s) == 200);
    CHECK(f.get("/pods", &pods, 2s) == 200);
    CHECK(pods.size() == f.body->size);
    CHECK(Clock::now() - before < 1500ms);
    ++polls;
  }
  CHECK(polls >= 3);
  // The header deadline then closes every one of them.
  CHECK(testing::eventually([&] { return f.server->connectionCount() == 0; }, 10s));
  CHECK(readUntilClosed(slow[0].get(), 1s).has_value());
  CHECK(readUntilClosed(idle[kIdle - 1].get(), 1s).has_value());
}
