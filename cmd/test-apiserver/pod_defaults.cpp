#include "cmd/test-apiserver/pod_defaults.h"

#include <set>

#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/api_status.h"
#include "cmd/test-apiserver/util.h"
#include "config/field_validation.h"

namespace nodeagent::testapiserver {
namespace {

using nlohmann::json;

base::Status invalid(const std::string& kind, std::string_view name, const std::string& field,
                     const std::string& detail) {
  return invalidObjectError(kind, name, field + ": " + detail);
}

// kube-apiserver's rule for a container or volume name (a DNS-1123 label), as its message.
std::string labelNameProblem(std::string_view value) {
  if (value.empty()) return "Required value";
  auto problems = config::validation::isDns1123Label(value);
  if (problems.empty()) return {};
  return "Invalid value: " + config::validation::goQuote(value) + ": " + problems.front();
}

}  // namespace

void defaultPod(json& pod) {
  json& spec = pod["spec"];
  if (!spec.contains("restartPolicy")) spec["restartPolicy"] = "Always";
  if (!spec.contains("terminationGracePeriodSeconds")) spec["terminationGracePeriodSeconds"] = 30;
  if (!spec.contains("dnsPolicy")) spec["dnsPolicy"] = "ClusterFirst";
  if (!spec.contains("schedulerName")) spec["schedulerName"] = "default-scheduler";
  if (!spec.contains("securityContext")) spec["securityContext"] = json::object();
  if (!spec.contains("enableServiceLinks")) spec["enableServiceLinks"] = true;
  if (!spec.contains("priority")) spec["priority"] = 0;
  for (const char* list : {"containers", "initContainers"}) {
    if (!spec.contains(list) || !spec[list].is_array()) continue;
    for (auto& c : spec[list]) {
      if (!c.is_object()) continue;
      if (!c.contains("terminationMessagePath"))
        c["terminationMessagePath"] = "/dev/termination-log";
      if (!c.contains("terminationMessagePolicy")) c["terminationMessagePolicy"] = "File";
      if (!c.contains("resources")) c["resources"] = json::object();
      if (!c.contains("imagePullPolicy") && c.contains("image") && c["image"].is_string()) {
        std::string image = c["image"];
        auto slash = image.rfind('/');
        std::string last = slash == std::string::npos ? image : image.substr(slash + 1);
        bool latest = last.find('@') == std::string::npos &&
                      (last.find(':') == std::string::npos || last.ends_with(":latest"));
        c["imagePullPolicy"] = latest ? "Always" : "IfNotPresent";
      }
      if (c.contains("ports") && c["ports"].is_array()) {
        for (auto& p : c["ports"]) {
          if (p.is_object() && !p.contains("protocol")) p["protocol"] = "TCP";
        }
      }
    }
  }
  // Like kube-apiserver, a created pod starts with a fresh status; writers set it through
  // pods/status.
  pod["status"] = {{"phase", "Pending"}, {"qosClass", "BestEffort"}};
}

base::Status validatePod(const ResourceInfo& res, const json& pod) {
  const std::string name = stringAt(pod.value("metadata", json::object()), "name");
  const json* spec = pod.contains("spec") ? &pod["spec"] : nullptr;
  if (!spec || !spec->is_object() || !spec->contains("containers") ||
      !(*spec)["containers"].is_array() || (*spec)["containers"].empty()) {
    return invalid(res.kind, name, "spec.containers", "Required value");
  }
  if (spec->contains("volumes") && (*spec)["volumes"].is_array()) {
    std::set<std::string> volumes;
    const json& list = (*spec)["volumes"];
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string field = "spec.volumes[" + std::to_string(i) + "].name";
      const std::string vname = stringAt(list[i], "name");
      if (auto problem = labelNameProblem(vname); !problem.empty()) {
        return invalid(res.kind, name, field, problem);
      }
      if (!volumes.insert(vname).second) {
        return invalid(res.kind, name, field,
                       "Duplicate value: " + config::validation::goQuote(vname));
      }
    }
  }
  std::set<std::string> names;
  for (const char* list_name : {"containers", "initContainers"}) {
    if (!spec->contains(list_name) || !(*spec)[list_name].is_array()) continue;
    const json& containers = (*spec)[list_name];
    for (size_t i = 0; i < containers.size(); ++i) {
      const json& c = containers[i];
      const std::string field = std::string("spec.") + list_name + "[" + std::to_string(i) + "]";
      if (!c.is_object()) return invalid(res.kind, name, field, "Invalid value: must be an object");
      const std::string cname = stringAt(c, "name");
      if (auto problem = labelNameProblem(cname); !problem.empty()) {
        return invalid(res.kind, name, field + ".name", problem);
      }
      if (!names.insert(cname).second) {
        return invalid(res.kind, name, field + ".name",
                       "Duplicate value: " + config::validation::goQuote(cname));
      }
      if (stringAt(c, "image").empty())
        return invalid(res.kind, name, field + ".image", "Required value");
    }
  }
  return base::okStatus();
}

}  // namespace nodeagent::testapiserver
