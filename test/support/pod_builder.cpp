#include "test/support/pod_builder.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "api/pod_json.h"
#include "api/time.h"
#include "api/yaml.h"

namespace nodeagent::testing {

using Json = nlohmann::json;

api::PodPtr podFromJson(std::string_view json_or_yaml) {
  auto j = api::yamlToJson(json_or_yaml);
  if (!j.ok()) FAIL("podFromJson: cannot parse: " << j.status().toString());
  auto pod = api::decodePodPtr(*j);
  if (!pod.ok()) FAIL("podFromJson: cannot decode: " << pod.status().toString());
  return *pod;
}

PodBuilder::PodBuilder()
    : j_(std::make_unique<Json>(Json{{"apiVersion", "v1"},
                                     {"kind", "Pod"},
                                     {"metadata", {{"name", "pod"}, {"namespace", "default"}}},
                                     {"spec", {{"containers", Json::array()}}}})) {}

PodBuilder::~PodBuilder() = default;

PodBuilder::PodBuilder(const PodBuilder& other) : j_(std::make_unique<Json>(*other.j_)) {}

PodBuilder& PodBuilder::operator=(const PodBuilder& other) {
  if (this != &other) *j_ = *other.j_;
  return *this;
}

PodBuilder& PodBuilder::name(const std::string& name) {
  (*j_)["metadata"]["name"] = name;
  return *this;
}

PodBuilder& PodBuilder::ns(const std::string& ns) {
  (*j_)["metadata"]["namespace"] = ns;
  return *this;
}

PodBuilder& PodBuilder::uid(const std::string& uid) {
  (*j_)["metadata"]["uid"] = uid;
  return *this;
}

PodBuilder& PodBuilder::resourceVersion(const std::string& rv) {
  (*j_)["metadata"]["resourceVersion"] = rv;
  return *this;
}

PodBuilder& PodBuilder::annotation(const std::string& key, const std::string& value) {
  (*j_)["metadata"]["annotations"][key] = value;
  return *this;
}

PodBuilder& PodBuilder::label(const std::string& key, const std::string& value) {
  (*j_)["metadata"]["labels"][key] = value;
  return *this;
}

PodBuilder& PodBuilder::nodeName(const std::string& node) {
  (*j_)["spec"]["nodeName"] = node;
  return *this;
}

PodBuilder& PodBuilder::creationTimestamp(api::Timestamp t) {
  (*j_)["metadata"]["creationTimestamp"] = api::formatTime(t);
  return *this;
}

PodBuilder& PodBuilder::deletionTimestamp(api::Timestamp t) {
  (*j_)["metadata"]["deletionTimestamp"] = api::formatTime(t);
  return *this;
}

PodBuilder& PodBuilder::deletionGracePeriodSeconds(int64_t seconds) {
  (*j_)["metadata"]["deletionGracePeriodSeconds"] = seconds;
  return *this;
}

PodBuilder& PodBuilder::container(const std::string& name, const std::vector<std::string>& command,
                                  const std::string& image) {
  Json c = {{"name", name}, {"image", image}};
  if (!command.empty()) c["command"] = command;
  (*j_)["spec"]["containers"].push_back(std::move(c));
  return *this;
}

PodBuilder& PodBuilder::initContainer(const std::string& name,
                                      const std::vector<std::string>& command,
                                      const std::string& image) {
  Json c = {{"name", name}, {"image", image}};
  if (!command.empty()) c["command"] = command;
  (*j_)["spec"]["initContainers"].push_back(std::move(c));
  return *this;
}

PodBuilder& PodBuilder::restartPolicy(const std::string& policy) {
  (*j_)["spec"]["restartPolicy"] = policy;
  return *this;
}

PodBuilder& PodBuilder::terminationGracePeriodSeconds(int64_t seconds) {
  (*j_)["spec"]["terminationGracePeriodSeconds"] = seconds;
  return *this;
}

PodBuilder& PodBuilder::activeDeadlineSeconds(int64_t seconds) {
  (*j_)["spec"]["activeDeadlineSeconds"] = seconds;
  return *this;
}

PodBuilder& PodBuilder::priority(int32_t priority) {
  (*j_)["spec"]["priority"] = priority;
  return *this;
}

PodBuilder& PodBuilder::hostNetwork(bool on) {
  (*j_)["spec"]["hostNetwork"] = on;
  return *this;
}

PodBuilder& PodBuilder::phase(const std::string& phase) {
  (*j_)["status"]["phase"] = phase;
  return *this;
}

PodBuilder& PodBuilder::edit(const std::function<void(Json&)>& fn) {
  fn(*j_);
  return *this;
}

Json PodBuilder::toJson() const { return *j_; }

std::string PodBuilder::jsonText() const { return j_->dump(); }

api::PodPtr PodBuilder::build() const {
  auto pod = api::decodePodPtr(*j_);
  if (!pod.ok())
    FAIL("PodBuilder: cannot decode: " << pod.status().toString() << "\n" << j_->dump());
  return *pod;
}

api::Pod PodBuilder::buildPod() const { return *build(); }

}  // namespace nodeagent::testing
