// Test pods built from JSON, so the raw JSON and the typed view always agree (both go through
// api::decodePod like every real pod).
//
//   auto pod = PodBuilder().name("web").ns("default").uid("u1")
//                  .container("c", {"sleep", "10"}).annotation("k", "v").build();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "api/pod.h"

namespace nodeagent::testing {

// Decodes a pod from JSON or YAML text; fails the current test (Catch2 FAIL) with the decode error.
api::PodPtr podFromJson(std::string_view json_or_yaml);

class PodBuilder {
 public:
  // Starts from {"apiVersion":"v1","kind":"Pod","metadata":{"name":"pod","namespace":"default"},
  // "spec":{"containers":[]}}.
  PodBuilder();
  ~PodBuilder();
  PodBuilder(const PodBuilder& other);
  PodBuilder& operator=(const PodBuilder& other);

  PodBuilder& name(const std::string& name);
  PodBuilder& ns(const std::string& ns);
  PodBuilder& uid(const std::string& uid);
  PodBuilder& resourceVersion(const std::string& rv);
  PodBuilder& annotation(const std::string& key, const std::string& value);
  PodBuilder& label(const std::string& key, const std::string& value);
  PodBuilder& nodeName(const std::string& node);
  PodBuilder& creationTimestamp(api::Timestamp t);
  PodBuilder& deletionTimestamp(api::Timestamp t);
  PodBuilder& deletionGracePeriodSeconds(int64_t seconds);
  // Appends a container with this command (image "busybox" unless given).
  PodBuilder& container(const std::string& name, const std::vector<std::string>& command = {},
                        const std::string& image = "busybox");
  PodBuilder& initContainer(const std::string& name, const std::vector<std::string>& command = {},
                            const std::string& image = "busybox");
  PodBuilder& restartPolicy(const std::string& policy);
  PodBuilder& terminationGracePeriodSeconds(int64_t seconds);
  PodBuilder& activeDeadlineSeconds(int64_t seconds);
  PodBuilder& priority(int32_t priority);
  PodBuilder& hostNetwork(bool on = true);
  PodBuilder& phase(const std::string& phase);
  // Any other change: edits the JSON directly (e.g. j["spec"]["containers"][0]["env"] = ...).
  PodBuilder& edit(const std::function<void(nlohmann::json&)>& fn);

  nlohmann::json toJson() const;
  std::string jsonText() const;
  // Decodes the JSON; fails the current test on a decode error.
  api::PodPtr build() const;
  api::Pod buildPod() const;

 private:
  std::unique_ptr<nlohmann::json> j_;
};

}  // namespace nodeagent::testing
