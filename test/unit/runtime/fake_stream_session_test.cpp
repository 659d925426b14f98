// FakeRuntime's scripted exec and attach sessions (what the kubelet API handlers' tests use).
#include <catch2/catch.hpp>
#include <memory>
#include <optional>

#include "agent/runtime/fake_runtime.h"
#include "test/support/fake_clock.h"

using namespace nodeagent;
using namespace nodeagent::runtime;

namespace {

class Harness {
 public:
  Harness() : runtime(ioc.get_executor(), clock) {
    auto pod = std::make_shared<api::Pod>();
    pod->metadata.name = "pod";
    pod->metadata.namespace_ = "default";
    pod->metadata.uid = "u1";
    api::Container c;
    c.name = "main";
    pod->spec->containers.push_back(c);
    auto started = run(runtime.startContainer(pod, c, 0, {}));
    REQUIRE(started.has_value());
    REQUIRE(started->ok());
    id = **started;
  }

  // Runs `aw` as far as it gets without blocking; nullopt when it is still waiting.
  template <typename T>
  std::optional<T> run(asio::awaitable<T> aw) {
    auto out = std::make_shared<std::optional<T>>();
    auto body = [out, aw = std::move(aw)]() mutable -> asio::awaitable<void> {
      out->emplace(co_await std::move(aw));
    };
    asio::co_spawn(ioc, std::move(body), asio::detached);
    ioc.restart();
    ioc.poll();
    return std::move(*out);
  }

  StreamSessionPtr exec(std::vector<std::string> command, StreamOptions options) {
    auto s = run(runtime.execStream(id, std::move(command), options));
    REQUIRE(s.has_value());
    REQUIRE(s->ok());
    return std::move(**s);
  }

  // Everything read until the output ended.
  std::string readAll(StreamSession& s) {
    std::string all;
    while (true) {
      auto piece = run(s.read());
      REQUIRE(piece.has_value());  // never waits once the output ended
      if (!*piece) return all;
      all += (*piece)->data;
    }
  }

  asio::io_context ioc;
  testing::FakeClock clock;
  FakeRuntime runtime;
  ContainerId id;
};

}  // namespace

TEST_CASE("fake runtime: an exec session prints its command and ends with exit N",
          "[unit][runtime][stream]") {
  Harness h;
  auto s = h.exec({"exit", "3"}, {});
  CHECK(h.readAll(*s) == "exit 3\n");
  auto code = h.run(s->wait());
  REQUIRE(code.has_value());
  CHECK(**code == 3);
  CHECK(h.runtime.streamExecs().size() == 1);
}

TEST_CASE("fake runtime: an exec session with stdin echoes it until stdin is closed",
          "[unit][runtime][stream]") {
  Harness h;
  auto s = h.exec({"cat", "-"}, StreamOptions{.stdin = true, .stdout = true, .stderr = true});
  auto first = h.run(s->read());
  REQUIRE(first.has_value());
  CHECK((*first)->data == "cat -\n");
  auto wrote = h.run(s->writeStdin("abc"));
  REQUIRE(wrote.has_value());
  CHECK(wrote->ok());
  CHECK_FALSE(h.run(s->wait()).has_value());
  s->closeStdin();
  CHECK(h.readAll(*s) == "abc");
  auto code = h.run(s->wait());
  REQUIRE(code.has_value());
  CHECK(**code == 0);
  auto after = h.run(s->writeStdin("x"));
  CHECK_FALSE(after->ok());
}

TEST_CASE("fake runtime: TTY resizes are written out, cancel kills, errors as a runtime's",
          "[unit][runtime][stream]") {
  Harness h;
  auto s =
      h.exec({"sh"}, StreamOptions{.stdin = true, .stdout = true, .stderr = false, .tty = true});
  s->resize({80, 24});
  s->cancel();
  CHECK(h.readAll(*s).empty());  // cancel drops what was pending
  auto code = h.run(s->wait());
  CHECK(**code == 137);

  auto bad = h.run(h.runtime.execStream(h.id, {"sh"}, StreamOptions{.tty = true}));
  CHECK(bad->status().code() == base::StatusCode::kInvalidArgument);
  auto unknown = h.run(h.runtime.attach(ContainerId{"fake", "nope"}, {}));
  CHECK(unknown->status().code() == base::StatusCode::kNotFound);

  auto attach =
      h.run(h.runtime.attach(h.id, StreamOptions{.stdin = true, .stdout = true, .stderr = false}));
  REQUIRE(attach->ok());
  auto& a = **attach;
  CHECK(h.run(a->writeStdin("hi"))->ok());
  a->closeStdin();
  CHECK(h.readAll(*a) == "hi");
}
