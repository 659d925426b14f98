// NodeStatusController::computeStatus: capacity/allocatable with ephemeral-storage, and the
// pressure conditions from the eviction manager with kubelet's reasons and their own transition
// times. No apiserver is contacted (computeStatus only).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "agent/node_status.h"
#include "api/rest_client.h"
#include "test/support/fake_clock.h"

using namespace nodeagent;
using namespace std::chrono_literals;

namespace {

nlohmann::json condition(const nlohmann::json& status, const std::string& type) {
  for (const auto& c : status["conditions"]) {
    if (c["type"] == type) return c;
  }
  FAIL("no condition " << type);
  return {};
}

}  // namespace

TEST_CASE(
    "node status: pressure conditions follow the eviction manager, each with its own "
    "transition time",
    "[unit][agent]") {
  asio::io_context ioc;
  testing::FakeClock clock;
  clock.setWallTime(base::SystemTime(std::chrono::seconds(1700000000)));
  api::RestConfig rc;
  rc.server = "http://127.0.0.1:1";
  auto rest = api::RestClient::create(rc, {}, clock);
  REQUIRE(rest.ok());
  eviction::PressureConditions pressure;
  agent::NodeStatusOptions o;
  o.node_name = "n1";
  o.capacity = {4000, int64_t{8} << 30, int64_t{100} << 30, 32768};
  o.allocatable = {"n1", 3500, int64_t{7} << 30, 110, int64_t{90} << 30};
  o.pressure = [&] { return pressure; };
  auto controller = std::make_shared<agent::NodeStatusController>(
      ioc.get_executor(), clock, api::AsyncRestClient(**rest, ioc.get_executor()), o);

  auto status = controller->computeStatus();
  CHECK(status["capacity"]["ephemeral-storage"] == "100Gi");
  CHECK(status["allocatable"]["ephemeral-storage"] == "90Gi");
  CHECK(status["allocatable"]["memory"] == "7Gi");
  CHECK(status["allocatable"]["cpu"] == "3500m");
  auto mem = condition(status, "MemoryPressure");
  CHECK(mem["status"] == "False");
  CHECK(mem["reason"] == "KubeletHasSufficientMemory");
  CHECK(mem["message"] == "kubelet has sufficient memory available");
  const std::string t0 = mem["lastTransitionTime"];
  CHECK(condition(status, "DiskPressure")["reason"] == "KubeletHasNoDiskPressure");
  CHECK(condition(status, "PIDPressure")["reason"] == "KubeletHasSufficientPID");

  clock.advance(10s);
  clock.setWallTime(base::SystemTime(std::chrono::seconds(1700000010)));
  pressure.memory = true;
  status = controller->computeStatus();
  mem = condition(status, "MemoryPressure");
  CHECK(mem["status"] == "True");
  CHECK(mem["reason"] == "KubeletHasInsufficientMemory");
  CHECK(mem["message"] == "kubelet has insufficient memory available");
  CHECK(mem["lastTransitionTime"] != t0);
  CHECK(condition(status, "DiskPressure")["lastTransitionTime"] == t0);
  CHECK(condition(status, "Ready")["status"] == "True");

  clock.setWallTime(base::SystemTime(std::chrono::seconds(1700000020)));
  pressure.disk = true;
  pressure.pid = true;
  status = controller->computeStatus();
  auto disk = condition(status, "DiskPressure");
  CHECK(disk["status"] == "True");
  CHECK(disk["reason"] == "KubeletHasDiskPressure");
  CHECK(disk["message"] == "kubelet has disk pressure");
  auto pid = condition(status, "PIDPressure");
  CHECK(pid["status"] == "True");
  CHECK(pid["reason"] == "KubeletHasInsufficientPID");
  CHECK(pid["message"] == "kubelet has insufficient PID available");
  CHECK(disk["lastTransitionTime"] != condition(status, "MemoryPressure")["lastTransitionTime"]);
  CHECK(condition(status, "MemoryPressure")["lastTransitionTime"] == mem["lastTransitionTime"]);
}

TEST_CASE("node status: images as kubelet lists them, at most --node-status-max-images",
          "[unit][agent]") {
  asio::io_context ioc;
  testing::FakeClock clock;
  api::RestConfig rc;
  rc.server = "http://127.0.0.1:1";
  auto rest = api::RestClient::create(rc, {}, clock);
  REQUIRE(rest.ok());
  std::optional<std::vector<agent::NodeImage>> images;
  agent::NodeStatusOptions o;
  o.node_name = "n1";
  o.images = [&] { return images; };
  o.max_images = 2;
  auto controller = std::make_shared<agent::NodeStatusController>(
      ioc.get_executor(), clock, api::AsyncRestClient(**rest, ioc.get_executor()), o);

  // Not listed yet: no images member.
  CHECK_FALSE(controller->computeStatus().contains("images"));
  // Listed, none: null, so that the merge patch clears what the Node had.
  images.emplace();
  auto none = controller->computeStatus();
  REQUIRE(none.contains("images"));
  CHECK(none["images"].is_null());

  images =
      std::vector<agent::NodeImage>{{{"reg.test/big@sha256:1", "reg.test/big:1", "reg.test/big:2",
                                      "reg.test/big:3", "reg.test/big:4", "reg.test/big:5"},
                                     300},
                                    {{"reg.test/mid:1"}, 200},
                                    {{"reg.test/small:1"}, 100}};
  auto status = controller->computeStatus();
  REQUIRE(status["images"].size() == 2);
  CHECK(status["images"][0]["sizeBytes"] == 300);
  CHECK(status["images"][0]["names"].size() == agent::kMaxNamesPerImageInNodeStatus);
  CHECK(status["images"][0]["names"][0] == "reg.test/big@sha256:1");
  CHECK(status["images"][1]["names"] == nlohmann::json::array({"reg.test/mid:1"}));
}
