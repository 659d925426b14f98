// An ApiObjectSource that answers from a map the test fills.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "agent/volume/api_objects.h"

namespace nodeagent::testing {

class FakeApiObjects final : public agent::ApiObjectSource {
 public:
  void put(agent::ApiObjectKind kind, const std::string& ns, const std::string& name,
           nlohmann::json object) {
    objects_[{kind, ns, name}] = std::make_shared<const nlohmann::json>(std::move(object));
  }
  base::StatusOr<std::shared_ptr<const nlohmann::json>> get(agent::ApiObjectKind kind,
                                                            const std::string& ns,
                                                            const std::string& name,
                                                            const std::string&) override {
    auto it = objects_.find({kind, ns, name});
    if (it == objects_.end()) {
      return base::notFoundError(std::string(agent::apiObjectKindName(kind)) + " \"" + name +
                                 "\" not found");
    }
    return it->second;
  }
  // "token:<service account>:<audience>:<pod uid>".
  base::StatusOr<std::string> serviceAccountToken(
      const agent::ServiceAccountTokenRequest& request) override {
    return "token:" + request.service_account + ":" + request.audience + ":" + request.pod_uid;
  }

 private:
  std::map<std::tuple<agent::ApiObjectKind, std::string, std::string>,
           std::shared_ptr<const nlohmann::json>>
      objects_;
};

}  // namespace nodeagent::testing
