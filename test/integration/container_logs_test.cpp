// readLogs with follow against real files: inotify wake-ups, the shim's rename-and-recreate
// rotation, the end of the container and a client that goes away.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "agent/logs/container_logs.h"
#include "agent/runtime/cri_log.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;

namespace {

void append(const std::filesystem::path& path, std::string_view text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  std::string rec;
  runtime::appendCriRecord(rec, 1704164645'000000000LL, runtime::LogStream::kStdout, false, text);
  REQUIRE(::write(fd, rec.data(), rec.size()) == static_cast<ssize_t>(rec.size()));
  ::close(fd);
}

// One follower of one log: the io_context runs on its own thread, file reads on a pool. The
// state is shared with the coroutine, which may outlive the object when a check fails.
class Follower {
 public:
  Follower(asio::io_context& ioc, asio::any_io_executor pool, std::filesystem::path log,
           base::Duration period = 1h, bool stop_at_first_piece = false)
      : s_(std::make_shared<State>()) {
    s_->stop_at_first_piece = stop_at_first_piece;
    logs::LogOptions options;
    options.follow = true;
    auto sink = [s = s_](std::string_view data) -> asio::awaitable<bool> {
      std::lock_guard lock(s->mu);
      s->out.append(data);
      co_return !s->stop_at_first_piece;
    };
    auto still_running = [s = s_]() -> asio::awaitable<bool> { co_return s->running.load(); };
    auto task = logs::readLogs(std::move(log), options, sink, still_running, std::move(pool),
                               base::realClock(), period);
    asio::co_spawn(asio::make_strand(ioc), std::move(task),
                   [s = s_](std::exception_ptr e, base::Status status) {
                     std::lock_guard lock(s->mu);
                     s->exception = static_cast<bool>(e);
                     s->status = status;
                     s->done = true;
                   });
  }
  std::string out() {
    std::lock_guard lock(s_->mu);
    return s_->out;
  }
  bool done() {
    std::lock_guard lock(s_->mu);
    return s_->done && !s_->exception;
  }
  base::Status status() {
    std::lock_guard lock(s_->mu);
    return s_->status;
  }
  bool running() const { return s_->running.load(); }
  void stopContainer() { s_->running = false; }
  bool sawOutput(const std::string& expected) {
    return testing::eventually([&] { return out() == expected; });
  }

 private:
  struct State {
    std::atomic<bool> running{true};
    bool stop_at_first_piece = false;
    std::mutex mu;
    std::string out;
    bool done = false;
    bool exception = false;
    base::Status status;
  };
  std::shared_ptr<State> s_;
};

struct Env {
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard{ioc.get_executor()};
  asio::thread_pool pool{1};
  std::thread thread{[this] { ioc.run(); }};
  testing::TempDir dir{"logs-follow"};
  std::filesystem::path log = dir / "0.log";

  ~Env() {
    guard.reset();
    ioc.stop();
    thread.join();
    pool.join();
  }
};

}  // namespace

TEST_CASE("follow: new records, a rotation, and the end once the container stops",
          "[integration][logs]") {
  Env env;
  append(env.log, "a");
  Follower f(env.ioc, env.pool.get_executor(), env.log);
  REQUIRE(f.sawOutput("a\n"));
  append(env.log, "b");
  REQUIRE(f.sawOutput("a\nb\n"));

  // The shim's rotation: rename the live file, (a last record may still reach the old file
  // through the descriptor it holds), then a new live file.
  int old_fd = ::open(env.log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  REQUIRE(old_fd >= 0);
  std::filesystem::rename(env.log, env.dir / "0.log.20240102-030405");
  std::string rec;
  runtime::appendCriRecord(rec, 1704164646'000000000LL, runtime::LogStream::kStdout, false, "c");
  REQUIRE(::write(old_fd, rec.data(), rec.size()) == static_cast<ssize_t>(rec.size()));
  ::close(old_fd);
  append(env.log, "d");
  REQUIRE(f.sawOutput("a\nb\nc\nd\n"));
  append(env.log, "e");
  REQUIRE(f.sawOutput("a\nb\nc\nd\ne\n"));
  CHECK_FALSE(f.done());

  // The container stops after a last record: its event wakes the follow, which reads the
  // record and ends.
  f.stopContainer();
  append(env.log, "f");
  REQUIRE(testing::eventually([&] { return f.done(); }));
  CHECK(f.status().ok());
  CHECK(f.out() == "a\nb\nc\nd\ne\nf\n");
}

TEST_CASE("follow: without file events the periodic check ends it", "[integration][logs]") {
  Env env;
  append(env.log, "a");
  Follower f(env.ioc, env.pool.get_executor(), env.log, 50ms);
  REQUIRE(f.sawOutput("a\n"));
  CHECK_FALSE(f.done());
  f.stopContainer();
  REQUIRE(testing::eventually([&] { return f.done(); }));
  CHECK(f.status().ok());
}

TEST_CASE("follow: a client that goes away stops it at once", "[integration][logs]") {
  Env env;
  append(env.log, "a");
  Follower f(env.ioc, env.pool.get_executor(), env.log, 1h, /*stop_at_first_piece=*/true);
  REQUIRE(testing::eventually([&] { return f.done(); }));
  CHECK(f.status().ok());
  CHECK(f.out() == "a\n");
  CHECK(f.running());  // the container still runs
}

TEST_CASE("follow: fifty followers on one io thread all see new records", "[integration][logs]") {
  Env env;
  append(env.log, "a");
  std::vector<std::unique_ptr<Follower>> followers;
  for (int i = 0; i < 50; ++i) {
    followers.push_back(std::make_unique<Follower>(env.ioc, env.pool.get_executor(), env.log));
  }
  for (auto& f : followers) REQUIRE(f->sawOutput("a\n"));
  append(env.log, "b");
  for (auto& f : followers) REQUIRE(f->sawOutput("a\nb\n"));
  for (auto& f : followers) f->stopContainer();
  append(env.log, "c");
  for (auto& f : followers) {
    REQUIRE(testing::eventually([&] { return f->done(); }));
    CHECK(f->out() == "a\nb\nc\n");
  }
}
