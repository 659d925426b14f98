// PodsByUid: pods found by their UID, with the pod itself as the key.
#include <catch2/catch.hpp>

#include <string>

#include "api/pods_by_uid.h"
#include "test/support/pod_builder.h"

using namespace nodeagent;

TEST_CASE("pods by UID: found by UID, replaced in place, erased", "[unit][api]") {
  api::PodsByUid pods;
  const api::PodPtr a = testing::PodBuilder().name("a").uid("uid-a").build();
  const api::PodPtr b = testing::PodBuilder().name("b").uid("uid-b").build();
  CHECK(api::putPod(pods, a));
  CHECK(api::putPod(pods, b));
  CHECK(api::findPod(pods, "uid-a") == a);
  CHECK(api::findPod(pods, std::string("uid-b")) == b);
  CHECK(api::findPod(pods, "uid-c") == nullptr);

  // A new copy of a pod takes the old one's place: one entry per UID, the newest copy.
  const api::PodPtr a2 = testing::PodBuilder().name("a").uid("uid-a").label("v", "2").build();
  CHECK_FALSE(api::putPod(pods, a2));
  CHECK(pods.size() == 2);
  CHECK(api::findPod(pods, "uid-a") == a2);

  api::erasePod(pods, "uid-a");
  api::erasePod(pods, "uid-none");
  CHECK(pods.size() == 1);
  CHECK(api::findPod(pods, "uid-a") == nullptr);
  CHECK(api::findPod(pods, "uid-b") == b);
}
