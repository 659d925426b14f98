// ProcessRuntime::recover() over prepared state directories: no processes are started.
#include <catch2/catch.hpp>

#include <filesystem>
#include <optional>

#include "agent/runtime/process_runtime.h"
#include "agent/runtime/state_file.h"
#include "test/support/fake_clock.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace nodeagent::runtime;
namespace fs = std::filesystem;

namespace {

ShimConfig config(const std::string& id, const std::string& name, int attempt, int64_t created) {
  ShimConfig c;
  c.container_id = id;
  c.pod_uid = "uid-1";
  c.pod_name = "web";
  c.pod_namespace = "default";
  c.container_name = name;
  c.attempt = attempt;
  c.hash = "000000000000000a000000000000000b";
  c.image = "busybox";
  c.created_at = created;
  c.argv = {"/bin/true"};
  return c;
}

void writeContainer(const fs::path& root, const ShimConfig& c, const std::optional<ShimState>& s) {
  fs::path dir = root / "containers" / c.container_id;
  fs::create_directories(dir);
  testing::writeFile(dir / "config", encodeShimConfig(c));
  if (s) testing::writeFile(dir / "state", encodeShimState(*s));
}

template <typename T>
T run(asio::io_context& ioc, asio::awaitable<T> aw) {
  std::optional<T> out;
  asio::co_spawn(
      ioc, [&]() -> asio::awaitable<void> { out.emplace(co_await std::move(aw)); }, asio::detached);
  ioc.poll();
  REQUIRE(out.has_value());
  return std::move(*out);
}

// Recovers `root` with a new runtime; the status of the one container of pod uid-1.
ContainerStatus recoverOne(asio::io_context& ioc, base::Clock& clock, const fs::path& root,
                           const fs::path& logs) {
  ProcessRuntimeOptions options;
  options.file_executor = ioc.get_executor();  // the test drains one io_context
  options.root_dir = root;
  options.pod_log_dir = logs;
  ProcessRuntime runtime(ioc.get_executor(), clock, options);
  REQUIRE(runtime.recover().ok());
  auto status = run(ioc, runtime.getPodStatus("uid-1", "web", "default"));
  REQUIRE(status.ok());
  REQUIRE(status->container_statuses.size() == 1);
  return status->container_statuses[0];
}

}  // namespace

TEST_CASE("process runtime recover: recorded exits, dead shims and incomplete directories",
          "[unit][runtime]") {
  testing::TempDir tmp;
  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  const fs::path root = tmp / "root";

  ShimState exited;
  exited.status = ShimStatus::kExited;
  exited.boot_id = currentBootId();
  exited.started_at = 1'000;
  exited.finished_at = 2'000;
  exited.exit_code = 7;
  exited.reason = "Error";
  writeContainer(root, config("aaa", "main", 0, 100), exited);

  // A "running" container whose shim is gone (pid 0 never matches): reported lost.
  ShimState lost;
  lost.status = ShimStatus::kRunning;
  lost.boot_id = currentBootId();
  lost.started_at = 3'000;
  writeContainer(root, config("bbb", "main", 1, 200), lost);

  // Configured but the shim never wrote a state: it never started.
  writeContainer(root, config("ccc", "side", 0, 300), std::nullopt);

  // A directory without a config (the agent stopped in the middle of a start) is removed.
  fs::create_directories(root / "containers" / "ddd");

  // A corrupt config is skipped and kept for an operator to look at.
  fs::create_directories(root / "containers" / "eee");
  testing::writeFile(root / "containers" / "eee" / "config", "version=1\ngarbage\n");

  ProcessRuntimeOptions options;
  options.file_executor = ioc.get_executor();  // the test drains one io_context
  options.root_dir = root;
  options.pod_log_dir = tmp / "logs";
  options.shim_path = "/nonexistent/nodeagent-shim";
  ProcessRuntime runtime(ioc.get_executor(), clock, options);
  REQUIRE(runtime.recover().ok());

  CHECK_FALSE(fs::exists(root / "containers" / "ddd"));
  CHECK(fs::exists(root / "containers" / "eee"));

  auto status = run(ioc, runtime.getPodStatus("uid-1", "web", "default"));
  REQUIRE(status.ok());
  REQUIRE(status->container_statuses.size() == 3);
  // Newest first by creation time.
  const auto& side = status->container_statuses[0];
  const auto& lost_cs = status->container_statuses[1];
  const auto& exited_cs = status->container_statuses[2];
  CHECK(side.id.id == "ccc");
  CHECK(side.state == ContainerState::kExited);
  CHECK(side.reason == "ContainerCannotRun");
  CHECK(lost_cs.id.id == "bbb");
  CHECK(lost_cs.state == ContainerState::kExited);
  CHECK(lost_cs.exit_code == 255);
  CHECK(lost_cs.restart_count == 1);
  CHECK(lost_cs.message.find("shim") != std::string::npos);
  CHECK(exited_cs.id.id == "aaa");
  CHECK(exited_cs.exit_code == 7);
  CHECK(exited_cs.reason == "Error");
  CHECK(exited_cs.hash == api::Hash128{10, 11});
  CHECK(exited_cs.image == "busybox");
  CHECK(exited_cs.started_at.time_since_epoch() == std::chrono::nanoseconds(1'000));
  CHECK(exited_cs.finished_at.time_since_epoch() == std::chrono::nanoseconds(2'000));
  CHECK(status->findContainerStatusByName("main")->id.id == "bbb");

  // The loss is written down, so the next agent does not have to guess again.
  ShimState reread;
  std::string error;
  REQUIRE(decodeShimState(testing::readFile(root / "containers" / "bbb" / "state"), reread, error));
  CHECK(reread.status == ShimStatus::kExited);
  CHECK(reread.exit_code == 255);

  auto running = run(ioc, runtime.getPods(false));
  REQUIRE(running.ok());
  CHECK(running->empty());
  auto all = run(ioc, runtime.getPods(true));
  REQUIRE(all.ok());
  REQUIRE(all->size() == 1);
  CHECK((*all)[0].containers.size() == 3);

  // Killing an exited container is a no-op; removing one drops its state directory.
  CHECK(run(ioc, runtime.killContainer(nullptr, ContainerId{"process", "aaa"},
                                       KillOptions::graceOverride(0), "test"))
            .ok());
  CHECK(run(ioc, runtime.removeContainer(ContainerId{"process", "aaa"})).ok());
  CHECK_FALSE(fs::exists(root / "containers" / "aaa"));
  CHECK(run(ioc, runtime.removeContainer(ContainerId{"process", "aaa"})).code() ==
        base::StatusCode::kNotFound);
}

TEST_CASE("process runtime recover: an unusable state file and no live shim is an unknown exit",
          "[unit][runtime]") {
  testing::TempDir tmp;
  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  const fs::path root = tmp / "root";
  writeContainer(root, config("ggg", "main", 2, 1), std::nullopt);
  SECTION("garbled") { testing::writeFile(root / "containers" / "ggg" / "state", "\x01\x02"); }
  SECTION("empty") { testing::writeFile(root / "containers" / "ggg" / "state", ""); }
  SECTION("no status") { testing::writeFile(root / "containers" / "ggg" / "state", "version=1\n"); }
  const ContainerStatus cs = recoverOne(ioc, clock, root, tmp / "logs");
  CHECK(cs.state == ContainerState::kExited);
  CHECK(cs.reason == "ContainerStatusUnknown");
  CHECK(cs.exit_code == 137);
  CHECK(cs.restart_count == 2);
  CHECK(cs.message.find("unknown") != std::string::npos);
  // Written down for the next agent.
  ShimState reread;
  std::string error;
  REQUIRE(decodeShimState(testing::readFile(root / "containers" / "ggg" / "state"), reread, error));
  CHECK(reread.reason == "ContainerStatusUnknown");
}

TEST_CASE("process runtime recover: a state from another boot is a lost container",
          "[unit][runtime]") {
  testing::TempDir tmp;
  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  const fs::path root = tmp / "root";
  ShimState st;
  st.status = ShimStatus::kRunning;
  st.boot_id = "some-other-boot";
  st.shim_pid = 1;  // init exists, but on this boot it is not our shim
  st.started_at = 5;
  writeContainer(root, config("fff", "main", 0, 1), st);
  const ContainerStatus cs = recoverOne(ioc, clock, root, tmp / "logs");
  CHECK(cs.state == ContainerState::kExited);
  CHECK(cs.message.find("rebooted") != std::string::npos);
}

TEST_CASE("process runtime: an empty command is a config error before anything is created",
          "[unit][runtime]") {
  testing::TempDir tmp;
  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  ProcessRuntimeOptions options;
  options.file_executor = ioc.get_executor();  // the test drains one io_context
  options.root_dir = tmp / "root";
  options.pod_log_dir = tmp / "logs";
  ProcessRuntime runtime(ioc.get_executor(), clock, options);
  REQUIRE(runtime.recover().ok());
  auto pod = std::make_shared<api::Pod>();
  pod->metadata.name = "web";
  pod->metadata.namespace_ = "default";
  pod->metadata.uid = "uid-1";
  api::Container c;
  c.name = "main";
  c.image = "nginx";
  pod->spec->containers.push_back(c);
  auto id = run(ioc, runtime.startContainer(pod, pod->spec->containers[0], 0, {}));
  REQUIRE_FALSE(id.ok());
  CHECK(startErrorReason(id.status()) == kCreateContainerConfigError);
  CHECK(id.status().message().find("\"main\"") != std::string::npos);
  CHECK(id.status().message().find("default/web") != std::string::npos);
  CHECK(fs::is_empty(tmp / "root" / "containers"));
  CHECK(runtime.containerLogsPath("default", "web", "uid-1", "main", 3) ==
        tmp / "logs" / "default_web_uid-1" / "main" / "3.log");
}
