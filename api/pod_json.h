// The one decode path for pods: JSON (from YAML via api/yaml.h, or from the apiserver) ->
// decodePod -> typed Pod with its canonical raw JSON and hashes. Pods decoded with the same
// containers (replicas, static pods written from one template) share one copy of them
// (api::SharedList); the rest of each pod is its own. Includes nlohmann/json: include it from .cpp
// files only.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::api {

// Builds the typed view of a v1 Pod. Wrong types and malformed values are InvalidArgument errors
// naming the field path ("spec.containers[0].ports[1].containerPort: expected an integer").
// Does not default or validate (config/ does that for static pods). Never throws.
base::StatusOr<Pod> decodePod(const nlohmann::json& object);
base::StatusOr<PodPtr> decodePodPtr(const nlohmann::json& object);
// A resourceFieldRef object (a downwardAPI volume item's); errors name `path` and the field.
base::StatusOr<ResourceFieldSelector> decodeResourceFieldSelector(const nlohmann::json& object,
                                                                  std::string_view path);
// Parses JSON text then decodes.
base::StatusOr<Pod> decodePodJson(std::string_view json_text);

// The pod as JSON: exactly the object it was decoded from (unknown fields included).
nlohmann::json encodePod(const Pod& pod);

// New pods derived from an old one (the old is untouched): the keys in `set` are set, the keys in
// `remove` removed.
base::StatusOr<PodPtr> withAnnotations(const Pod& pod, const StringMap& set,
                                       const std::vector<std::string>& remove = {});
// Replaces `status` wholesale with the typed status.
base::StatusOr<PodPtr> withStatus(const Pod& pod, const PodStatus& status);
// Applies an arbitrary edit to the pod's JSON and decodes the result.
base::StatusOr<PodPtr> withJsonEdit(const Pod& pod,
                                    const std::function<void(nlohmann::json&)>& edit);

nlohmann::json encodePodStatus(const PodStatus& status);

// Appends the pod's JSON with `status` (when given) in place of its own status: the same object
// as encodePod plus withStatus would give, written from the pod's raw text without parsing it
// (the read-only /pods endpoint writes every pod this way).
void appendPodJsonWithStatus(const Pod& pod, const PodStatus* status, std::string& out);
// The same with the status given as its JSON text (empty: keep the pod's own).
void appendPodJsonWithStatusJson(const Pod& pod, std::string_view status_json, std::string& out);

// Where a status goes in a pod's text (the status member always sorts after the spec, so into
// its last piece, PodText::tail): the head and spec pieces, tail[0, head), then ("," when
// comma_before) "status":<status> ("," when comma_after), then tail[tail, end). The pod's own
// status member is replaced in place; without one the new member goes where canonical key order
// puts it. Found once per text, so writing many pods with new statuses does not scan them again.
struct StatusSlot {
  size_t head = 0;
  size_t tail = 0;
  bool comma_before = false;
  bool comma_after = false;
};
// nullopt when `raw` is not a JSON object.
std::optional<StatusSlot> findStatusSlot(const PodText& raw);
void appendWithStatusAt(const PodText& raw, const StatusSlot& slot, std::string_view status_json,
                        std::string& out);
// What appendWithStatusAt appends, as the pieces in order (empty ones included): for writers
// that send texts in slices instead of copying them into one string.
std::array<std::string_view, 8> withStatusAtPieces(const PodText& raw, const StatusSlot& slot,
                                                   std::string_view status_json);
base::StatusOr<PodStatus> decodePodStatus(const nlohmann::json& status);

}  // namespace nodeagent::api
