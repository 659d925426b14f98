#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "agent/api_state_loss.h"
#include "test/support/fake_clock.h"

using namespace std::chrono_literals;
using nodeagent::agent::ApiStateLoss;

TEST_CASE("api state loss: every listener runs once per loss, repeats within the quiet period fold",
          "[unit][agent]") {
  nodeagent::testing::FakeClock clock;
  ApiStateLoss loss(clock, 5s);
  std::vector<std::string> calls;
  loss.subscribe([&](const std::string& r) { calls.push_back("source:" + r); });
  loss.subscribe([&](const std::string& r) { calls.push_back("node:" + r); });

  CHECK(loss.report("Lease kube-node-lease/n1 not found"));
  CHECK(calls == std::vector<std::string>{"source:Lease kube-node-lease/n1 not found",
                                          "node:Lease kube-node-lease/n1 not found"});
  // The same loss, met by the Node a moment later.
  clock.advance(4999ms);
  CHECK_FALSE(loss.report("Node n1 not found"));
  CHECK(calls.size() == 2);
  CHECK(loss.losses() == 1);
  // A later loss is a new one.
  clock.advance(1ms);
  CHECK(loss.report("resourceVersion went backwards in a list from 40 to 3"));
  CHECK(calls.size() == 4);
  CHECK(loss.losses() == 2);
}
