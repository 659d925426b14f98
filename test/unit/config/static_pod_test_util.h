// Helpers shared by the static-pod unit tests.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/static_pod.h"

namespace nodeagent::config::test {

inline constexpr std::string_view kNode = "node1";
inline constexpr std::string_view kSource = "/etc/nodeagent/manifests/pod.yaml";

inline DecodeResult decodeFile(std::string_view text, std::string_view node = kNode,
                               std::string_view source = kSource) {
  return decodeManifest(text, ManifestSource{std::string(node), std::string(source), true}, false);
}

inline DecodeResult decodeHttp(std::string_view text, std::string_view url = "http://10.0.0.1/pods",
                               bool allow_list = true) {
  return decodeManifest(text, ManifestSource{std::string(kNode), std::string(url), false},
                        allow_list);
}

// The errors as "field: message" lines.
inline std::vector<std::string> errorLines(const DecodeResult& result) {
  std::vector<std::string> out;
  for (const auto& e : result.errors) out.push_back(e.toString());
  return out;
}

// The single decoded pod's raw JSON, parsed.
inline nlohmann::json rawOf(const DecodeResult& result, size_t i = 0) {
  return nlohmann::json::parse(result.pods.at(i)->raw->str());
}

// A minimal valid manifest with one container, with `spec_extra` (YAML at the spec's
// indentation, after the containers) and `container_extra` (at the container's indentation).
inline std::string manifest(std::string_view name = "web", std::string_view container_extra = "",
                            std::string_view spec_extra = "", std::string_view meta_extra = "") {
  std::string out = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ";
  out += name;
  out += "\n";
  out += meta_extra;
  out += "spec:\n  containers:\n  - name: main\n    image: nginx:1.25\n";
  out += container_extra;
  out += spec_extra;
  return out;
}

}  // namespace nodeagent::config::test
