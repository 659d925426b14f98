// Helpers shared by the PodStorage, PodConfig and checkpoint tests: kubelet's config_test.go
// fixtures (CreateValidPod, expectPodUpdate) over JSON-built pods.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "api/pod.h"
#include "api/pod_json.h"
#include "api/pod_update.h"
#include "config/pod_storage.h"
#include "test/support/pod_builder.h"

namespace nodeagent::config::testhelpers {

using nlohmann::json;

// kubelet's CreateValidPod(name, namespace): UID = name + namespace.
inline json validPodJson(const std::string& name, const std::string& ns) {
  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", ns}, {"uid", name + ns}}},
              {"spec",
               {{"restartPolicy", "Always"},
                {"dnsPolicy", "ClusterFirst"},
                {"containers", json::array({{{"name", "ctr"},
                                             {"image", "image"},
                                             {"imagePullPolicy", "IfNotPresent"},
                                             {"terminationMessagePolicy", "File"},
                                             {"securityContext", {{"privileged", false}}}}})}}}};
}

// Through the shared test decoder, like every test pod (fails the test on a decode error).
inline api::PodPtr podFrom(const json& j) {
  api::PodPtr pod = testing::podFromJson(j.dump());
  REQUIRE(pod);
  return pod;
}

inline api::PodPtr validPod(const std::string& name, const std::string& ns) {
  return podFrom(validPodJson(name, ns));
}

inline api::PodPtr validPodWith(const std::string& name, const std::string& ns,
                                const std::function<void(json&)>& edit) {
  json j = validPodJson(name, ns);
  edit(j);
  return podFrom(j);
}

// The spec change kubelet's tests use: a single container "bar" with image "test".
inline void changeContainers(json& j) {
  j["spec"]["containers"] = json::array({{{"name", "bar"},
                                          {"image", "test"},
                                          {"imagePullPolicy", "IfNotPresent"},
                                          {"terminationMessagePolicy", "File"}}});
}

inline api::PodUpdate makeUpdate(api::PodOperation op, const std::string& source,
                                 std::vector<api::PodPtr> pods) {
  return api::PodUpdate{std::move(pods), op, source};
}

inline std::string annotation(const api::Pod& pod, std::string_view key) {
  return std::string(pod.metadata.annotations.get(key, "<none>"));
}

// The UIDs of the pods, sorted (kubelet's expectPodUpdate sorts before comparing).
inline std::vector<std::string> sortedUids(const api::ChunkedPods& pods) {
  std::vector<std::string> uids;
  for (const auto& p : pods) uids.push_back(p->metadata.uid);
  std::sort(uids.begin(), uids.end());
  return uids;
}

inline std::vector<std::string> uids(const api::ChunkedPods& pods) {
  std::vector<std::string> out;
  for (const auto& p : pods) out.push_back(p->metadata.uid);
  return out;
}

// kubelet's expectPodUpdate for one update: op and source equal, and the pods equal as a set,
// each compared with podsDifferSemantically plus status.
inline void checkUpdate(const api::PodUpdate& got, api::PodOperation op, const std::string& source,
                        std::vector<api::PodPtr> expected) {
  CHECK(api::podOperationName(got.op) == api::podOperationName(op));
  CHECK(got.source == source);
  auto by_uid = [](const api::PodPtr& a, const api::PodPtr& b) {
    return a->metadata.namespace_ + "/" + a->metadata.uid <
           b->metadata.namespace_ + "/" + b->metadata.uid;
  };
  std::vector<api::PodPtr> actual = got.pods.toVector();
  std::sort(actual.begin(), actual.end(), by_uid);
  std::sort(expected.begin(), expected.end(), by_uid);
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("pod " << i << " uid=" << actual[i]->metadata.uid);
    CHECK(actual[i]->metadata.uid == expected[i]->metadata.uid);
    CHECK_FALSE(podsDifferSemantically(*expected[i], *actual[i]));
    CHECK_FALSE(podStatusesDiffer(*expected[i], *actual[i]));
  }
}

// "ADD", "REMOVE", ... of each update, in order.
inline std::vector<std::string> opNames(const std::vector<api::PodUpdate>& updates) {
  std::vector<std::string> out;
  for (const auto& u : updates) out.emplace_back(api::podOperationName(u.op));
  return out;
}

}  // namespace nodeagent::config::testhelpers
