// The container log manager's rotation of one log on real files: under the limit nothing
// happens; at the limit the log is renamed and the runtime asked to reopen it; a reopen that
// fails undoes the rename; rotated files beyond the limit go, oldest first.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "agent/logs/container_log_manager.h"
#include "agent/runtime/fake_runtime.h"
#include "agent/runtime/instrumented_runtime.h"
#include "test/support/fake_clock.h"
#include "test/support/run_awaitable.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// A runtime whose ReopenContainerLog answers what the test says, and records its calls.
class ReopenRuntime : public runtime::InstrumentedRuntime {
 public:
  explicit ReopenRuntime(runtime::Runtime& inner) : InstrumentedRuntime(inner) {}
  asio::awaitable<base::Status> reopenContainerLog(runtime::ContainerId id) override {
    reopened.push_back(id.id);
    co_return answer;
  }
  base::Status answer = base::okStatus();
  std::vector<std::string> reopened;
};

struct Harness {
  explicit Harness(int max_files = 5) {
    fs::create_directories(dir / "main");
    logs::ContainerLogManagerOptions o;
    o.max_size = 100;
    o.max_files = max_files;
    o.blocking_executor = pool.get_executor();
    manager = std::make_shared<logs::ContainerLogManager>(ioc.get_executor(), clock, runtime, o);
  }
  ~Harness() { pool.join(); }

  logs::RotateOutcome rotate() {
    return testing::runAwaitable(ioc, manager->rotateLog({"containerd", "c1"}, log));
  }
  std::vector<std::string> rotatedFiles() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir / "main")) {
      const auto name = e.path().filename().string();
      if (name.starts_with("0.log.")) out.push_back(name);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  testing::TempDir dir{"nodeagent-log-manager"};
  fs::path log = dir / "main" / "0.log";
  asio::io_context ioc;
  asio::thread_pool pool{1};
  testing::FakeClock clock;
  runtime::FakeRuntime fake{ioc.get_executor(), clock};
  ReopenRuntime runtime{fake};
  std::shared_ptr<logs::ContainerLogManager> manager;
};

}  // namespace

TEST_CASE("container log manager: a log under the limit is left alone", "[unit][logs]") {
  Harness h;
  testing::writeFile(h.log, std::string(99, 'x'));
  CHECK(h.rotate() == logs::RotateOutcome::kNotNeeded);
  CHECK(h.runtime.reopened.empty());
  CHECK(fs::file_size(h.log) == 99);
  fs::remove(h.log);  // not written yet: nothing to do either
  CHECK(h.rotate() == logs::RotateOutcome::kNotNeeded);
}

TEST_CASE("container log manager: a full log is renamed and reopened", "[unit][logs]") {
  Harness h;
  testing::writeFile(h.log, std::string(100, 'x'));
  CHECK(h.rotate() == logs::RotateOutcome::kRotated);
  CHECK(h.runtime.reopened == std::vector<std::string>{"c1"});
  CHECK_FALSE(fs::exists(h.log));  // the runtime makes it anew when it reopens
  const auto rotated = h.rotatedFiles();
  REQUIRE(rotated.size() == 1);
  CHECK(testing::readFile(h.dir / "main" / rotated[0]) == std::string(100, 'x'));
  CHECK(h.manager->rotations() == 1);
}

TEST_CASE("container log manager: a failed reopen gives the log its name back", "[unit][logs]") {
  Harness h;
  h.runtime.answer = base::notFoundError("no such container");
  testing::writeFile(h.log, std::string(150, 'y'));
  CHECK(h.rotate() == logs::RotateOutcome::kFailed);
  CHECK(fs::file_size(h.log) == 150);
  CHECK(h.rotatedFiles().empty());
  CHECK(h.manager->rotations() == 0);
}

TEST_CASE("container log manager: rotated files beyond the limit go, oldest first",
          "[unit][logs]") {
  Harness h(/*max_files=*/3);
  for (int i = 0; i < 4; ++i) {
    testing::writeFile(h.log, std::string(100, static_cast<char>('a' + i)));
    REQUIRE(h.rotate() == logs::RotateOutcome::kRotated);
    h.clock.setWallTime(h.clock.wallNow() + 1s);  // a distinct timestamp each time
  }
  const auto rotated = h.rotatedFiles();
  REQUIRE(rotated.size() == 2);  // with the live log: 3 files
  CHECK(testing::readFile(h.dir / "main" / rotated[0]) == std::string(100, 'c'));
  CHECK(testing::readFile(h.dir / "main" / rotated[1]) == std::string(100, 'd'));
}
