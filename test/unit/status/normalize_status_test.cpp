// kubelet's normalizeStatus: termination messages share 12 KiB per pod.
#include <catch2/catch.hpp>

#include "agent/status/status_manager.h"
#include "test/support/pod_builder.h"

using namespace nodeagent;

TEST_CASE("status: terminated messages are cut to 12 KiB shared by the pod's containers",
          "[unit][status]") {
  auto pod = testing::PodBuilder()
                 .container("a", {"true"})
                 .container("b", {"true"})
                 .initContainer("i", {"true"})
                 .build();
  api::PodStatus status;
  for (const char* name : {"a", "b"}) {
    api::ContainerStatus s;
    s.name = name;
    s.state.terminated = api::ContainerStateTerminated{};
    s.state.terminated->message = std::string(10000, 'x');
    s.last_state.terminated = api::ContainerStateTerminated{};
    s.last_state.terminated->message = "short";
    status.container_statuses.push_back(s);
  }
  api::ContainerStatus init;
  init.name = "i";
  init.state.terminated = api::ContainerStateTerminated{};
  init.state.terminated->message = std::string(5000, 'y');
  status.init_container_statuses.push_back(init);
  agent::normalizeStatus(*pod, status);
  for (const auto& s : status.container_statuses) {
    CHECK(s.state.terminated->message.size() == 12 * 1024 / 3);
    CHECK(s.last_state.terminated->message == "short");
  }
  CHECK(status.init_container_statuses.at(0).state.terminated->message.size() == 12 * 1024 / 3);
}
