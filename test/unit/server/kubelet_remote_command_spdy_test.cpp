// exec and attach over a plain SPDY upgrade, against FakeRuntime's scripted sessions: the
// protocol handshake, the wait for the streams the query asked for (and its timeout), stdin,
// resize, the status on the error stream as each protocol version writes it, refusals.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "agent/runtime/fake_runtime.h"
#include "agent/server/kubelet_remote_command.h"
#include "agent/server/spdy_frame.h"
#include "test/support/fake_clock.h"
#include "test/support/memory_byte_stream.h"
#include "test/support/pod_builder.h"
#include "test/support/run_awaitable.h"

using namespace nodeagent;
using namespace nodeagent::agent;
using namespace std::chrono_literals;

namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

// A request handed to the handler: answered, or upgraded to a MemoryWire.
class FakeCall final : public HttpCall {
 public:
  FakeCall(HttpRequest request, std::string upgrade, std::shared_ptr<testing::MemoryWire> wire)
      : request_(std::move(request)), upgrade_(std::move(upgrade)), wire_(std::move(wire)) {}
  const HttpRequest& request() const override { return request_; }
  asio::awaitable<void> respond(HttpResponse response) override {
    answer = std::move(response);
    co_return;
  }
  asio::awaitable<bool> beginStream(int, std::string) override { co_return false; }
  asio::awaitable<bool> writeStream(std::string_view) override { co_return false; }
  bool isWebSocketRequest() const override { return false; }
  asio::awaitable<std::unique_ptr<WebSocket>> acceptWebSocket(std::vector<std::string>) override {
    co_return nullptr;
  }
  std::string upgradeProtocol() const override { return upgrade_; }
  asio::awaitable<std::unique_ptr<ByteStream>> acceptUpgrade(Headers headers) override {
    upgrade_headers = std::move(headers);
    co_return std::make_unique<testing::MemoryByteStream>(wire_);
  }
  asio::awaitable<std::unique_ptr<ByteStream>> takeOver() override { co_return nullptr; }
  bool closed() const override { return false; }

  std::optional<HttpResponse> answer;
  std::optional<Headers> upgrade_headers;

 private:
  HttpRequest request_;
  std::string upgrade_;
  std::shared_ptr<testing::MemoryWire> wire_;
};

// What the server sent, per stream.
struct Seen {
  std::set<uint32_t> replied;
  std::set<uint32_t> finished;
  std::map<uint32_t, uint32_t> reset;
  std::map<uint32_t, std::string> data;
  bool goaway = false;
};

struct Client {
  Client() : runtime(ioc.get_executor(), clock) {
    auto pod = testing::PodBuilder().name("pod").uid("u1").container("main").build();
    auto start = [&]() -> asio::awaitable<base::Status> {
      auto starting = runtime.startContainer(pod, pod->spec->containers[0], 0, {});
      auto started = co_await std::move(starting);
      if (started.ok()) id = *started;
      co_return started.status();
    };
    REQUIRE(testing::runAwaitable(ioc, start()).ok());
  }

  // Serves `query` for `command` (empty: an attach), the client offering `protocols`.
  void start(const std::string& query, std::vector<std::string> command,
             const std::vector<std::string>& protocols, std::string upgrade = "SPDY/3.1") {
    HttpRequest request;
    request.method = "POST";
    request.path = "/exec/default/pod/main";
    request.query = query;
    for (const auto& p : protocols) request.headers.emplace_back("X-Stream-Protocol-Version", p);
    auto options = remoteCommandOptions(request);
    REQUIRE(options.ok());
    call = std::make_shared<FakeCall>(request, std::move(upgrade), wire);
    asio::co_spawn(ioc, serveRemoteCommand(call, clock, runtime, id, std::move(command), *options),
                   [this](std::exception_ptr e) {
                     done = true;
                     failed = e != nullptr;
                   });
    poll();
  }
  void open(uint32_t stream, const std::string& type) {
    wire->send(spdy::encodeSynStream(compressor, stream, 0, 0, 0, {{"streamtype", type}}));
    poll();
  }
  void send(uint32_t stream, std::string_view data, bool fin = false) {
    wire->send(spdy::encodeData(stream, fin ? spdy::kFlagFin : 0, data));
    poll();
  }
  // Runs what is ready (the context stops whenever it runs out of work).
  void poll() {
    ioc.restart();
    ioc.poll();
  }
  // Decodes what the server wrote since the last call.
  Seen& seen() {
    decoder.feed(wire->written);
    wire->written.clear();
    while (true) {
      auto next = decoder.next();
      REQUIRE(next.ok());
      if (!next->has_value()) return seen_;
      const spdy::Frame& f = **next;
      if (f.type == spdy::FrameType::kSynReply) seen_.replied.insert(f.stream_id);
      if (f.type == spdy::FrameType::kRstStream) seen_.reset[f.stream_id] = f.status;
      if (f.type == spdy::FrameType::kGoAway) seen_.goaway = true;
      if (f.type == spdy::FrameType::kData) {
        seen_.data[f.stream_id] += f.data;
        if (f.fin()) seen_.finished.insert(f.stream_id);
      }
    }
  }
  std::string protocolAnswered() const {
    REQUIRE(call->upgrade_headers.has_value());
    for (const auto& [name, value] : *call->upgrade_headers) {
      if (name == "X-Stream-Protocol-Version") return value;
    }
    return "";
  }

  asio::io_context ioc;
  testing::FakeClock clock;
  runtime::FakeRuntime runtime;
  runtime::ContainerId id;
  std::shared_ptr<testing::MemoryWire> wire = std::make_shared<testing::MemoryWire>(ioc);
  std::shared_ptr<FakeCall> call;
  spdy::HeaderCompressor compressor;
  spdy::FrameDecoder decoder;
  Seen seen_;
  bool done = false;
  bool failed = false;
};

const std::vector<std::string> kKubectlProtocols = {"v5.channel.k8s.io", "v4.channel.k8s.io",
                                                    "v3.channel.k8s.io", "v2.channel.k8s.io",
                                                    "channel.k8s.io"};

}  // namespace

TEST_CASE(
    "SPDY exec: v4 is agreed, the command waits for every stream, the exit code comes "
    "as a Status on the error stream",
    "[unit][server][remotecommand]") {
  Client c;
  c.start("command=exit&command=3&output=1&error=1", {"exit", "3"}, kKubectlProtocols);
  CHECK(c.protocolAnswered() == "v4.channel.k8s.io");
  c.open(1, "error");
  c.open(3, "stdout");
  CHECK(c.runtime.streamExecs().empty());  // stderr is still missing
  CHECK(c.seen().replied == std::set<uint32_t>{1, 3});
  c.open(5, "stderr");
  REQUIRE(c.done);
  CHECK_FALSE(c.failed);
  CHECK(c.runtime.streamExecs().size() == 1);
  Seen& s = c.seen();
  CHECK(s.data[3] == "exit 3\n");
  CHECK_THAT(s.data[1], Catch::Contains("\"reason\":\"NonZeroExitCode\""));
  CHECK_THAT(s.data[1],
             Catch::Contains("\"causes\":[{\"message\":\"3\",\"reason\":\"ExitCode\"}]"));
  CHECK(s.finished == std::set<uint32_t>{1, 3, 5});
  CHECK(s.goaway);
  CHECK(c.wire->closed);
}

TEST_CASE("SPDY exec: stdin reaches the command and its FIN ends the input",
          "[unit][server][remotecommand]") {
  Client c;
  c.start("command=cat&input=1&output=1", {"cat"}, {"v4.channel.k8s.io"});
  c.open(1, "error");
  c.open(3, "stdin");
  c.open(5, "stdout");
  REQUIRE(c.runtime.streamExecs().size() == 1);
  c.send(3, "hello\n");
  CHECK(c.seen().data[5] == "cat\nhello\n");
  CHECK_FALSE(c.done);
  c.send(3, "", /*fin=*/true);
  REQUIRE(c.done);
  Seen& s = c.seen();
  CHECK(s.data[1] == R"({"metadata":{},"status":"Success"})");
  CHECK(s.finished.count(1) == 1);
}

TEST_CASE(
    "SPDY exec: before v4 the error stream has a failure's message only, and a client "
    "naming no protocol gets channel.k8s.io",
    "[unit][server][remotecommand]") {
  SECTION("v2, exit 3") {
    Client c;
    c.start("command=exit&command=3&output=1", {"exit", "3"}, {"v2.channel.k8s.io"});
    CHECK(c.protocolAnswered() == "v2.channel.k8s.io");
    c.open(1, "error");
    c.open(3, "stdout");
    REQUIRE(c.done);
    CHECK(c.seen().data[1] ==
          "command terminated with non-zero exit code: error executing command [exit 3], exit "
          "code 3");
  }
  SECTION("no protocol, exit 0") {
    Client c;
    c.start("command=true&output=1", {"true"}, {});
    CHECK(c.protocolAnswered().empty());
    c.open(1, "error");
    c.open(3, "stdout");
    REQUIRE(c.done);
    Seen& s = c.seen();
    CHECK(s.data[1].empty());
    CHECK(s.finished.count(1) == 1);
    CHECK(s.data[3] == "true\n");
  }
}

TEST_CASE(
    "SPDY attach with a TTY: from v3 the resize stream carries sizes one JSON per line, "
    "v2 has none",
    "[unit][server][remotecommand]") {
  SECTION("v3") {
    Client c;
    c.start("input=1&output=1&tty=1", {}, {"v3.channel.k8s.io"});
    c.open(1, "error");
    c.open(3, "stdin");
    c.open(5, "stdout");
    CHECK(c.seen().data[5].empty());
    c.open(7, "resize");
    c.send(7, "{\"Width\":80,\"Height\":24}\n{\"Width\":100,");
    c.send(7, "\"Height\":30}\nnot json\n");
    c.send(3, "typed");
    CHECK(c.seen().data[5] == "resize 80x24\nresize 100x30\ntyped");
    c.send(3, "", /*fin=*/true);
    REQUIRE(c.done);
  }
  SECTION("v2") {
    Client c;
    c.start("input=1&output=1&tty=1", {}, {"v2.channel.k8s.io"});
    c.open(1, "error");
    c.open(3, "stdin");
    c.open(5, "resize");
    c.open(7, "stdout");
    CHECK(c.seen().reset.count(5) == 1);
    c.send(3, "x", /*fin=*/true);
    REQUIRE(c.done);
    CHECK(c.seen().data[7] == "x");
  }
}

TEST_CASE(
    "SPDY exec: streams not asked for are reset, and a client that does not open its "
    "streams in time is disconnected without running anything",
    "[unit][server][remotecommand]") {
  Client c;
  c.start("command=true&output=1", {"true"}, kKubectlProtocols);
  c.open(1, "error");
  c.open(3, "stdin");  // not asked for
  c.open(5, "bogus");  // no such type
  c.open(7, "error");  // twice
  Seen& s = c.seen();
  CHECK(s.reset == std::map<uint32_t, uint32_t>{{3, spdy::kProtocolError},
                                                {5, spdy::kRefusedStream},
                                                {7, spdy::kProtocolError}});
  c.clock.advance(29s);
  c.poll();
  CHECK_FALSE(c.done);
  c.clock.advance(1s);
  c.poll();
  REQUIRE(c.done);
  CHECK(c.wire->closed);
  CHECK(c.runtime.streamExecs().empty());
}

TEST_CASE("SPDY exec: a client that goes away ends the command", "[unit][server][remotecommand]") {
  Client c;
  c.start("command=cat&input=1&output=1", {"cat"}, kKubectlProtocols);
  c.open(1, "error");
  c.open(3, "stdin");
  c.open(5, "stdout");
  REQUIRE(c.runtime.streamExecs().size() == 1);
  c.wire->hangUp();
  c.poll();
  CHECK(c.done);
}

TEST_CASE(
    "SPDY exec refusals: no protocol in common is a 403, neither WebSocket nor SPDY a 400 "
    "naming both",
    "[unit][server][remotecommand]") {
  SECTION("protocols") {
    Client c;
    c.start("command=true&output=1", {"true"}, {"v5.channel.k8s.io"});
    REQUIRE(c.call->answer.has_value());
    CHECK(c.call->answer->status == 403);
    CHECK_THAT(c.call->answer->body, Catch::Contains("v4.channel.k8s.io"));
    CHECK_FALSE(c.call->upgrade_headers.has_value());
  }
  SECTION("no upgrade") {
    Client c;
    c.start("command=true&output=1", {"true"}, {}, /*upgrade=*/"");
    REQUIRE(c.call->answer.has_value());
    CHECK(c.call->answer->status == 400);
    CHECK_THAT(c.call->answer->body, Catch::Contains("SPDY/3.1"));
    CHECK_THAT(c.call->answer->body, Catch::Contains("v5.channel.k8s.io"));
  }
  CHECK(true);
}
