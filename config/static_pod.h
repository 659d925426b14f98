// Decoding, defaulting and validation of pod manifests from the file and HTTP sources (kubelet's
// config/common.go): bytes (YAML or JSON) -> one Pod or a PodList -> Kubernetes API defaults ->
// static-pod defaults (UID, name-<node>, namespace, nodeName, config.hash, toleration, phase) ->
// validation with kube-apiserver's rules -> immutable pods.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/pod.h"
#include "base/clock.h"
#include "config/manifest_errors.h"

namespace nodeagent::config {

// One problem with a manifest: `field` is a path like "spec.containers[1].name" ("" for problems
// of the whole document, such as a YAML syntax error).
struct FieldError {
  std::string field;
  std::string message;
  // "field: message", or just the message when there is no field.
  std::string toString() const;
  bool operator==(const FieldError&) const = default;
};

struct ManifestSource {
  std::string node_name;  // the node's name as given (lower-cased where kubelet does)
  std::string source;     // the file path or URL the bytes came from
  bool is_file = true;    // file source (gets the NoExecute toleration) or HTTP
  // When set, each pod also gets PodConfig's local annotations, config.source ("file" or "http")
  // and config.seen (this time), so that PodConfig can keep the decoded pod as it is instead of
  // copying it to annotate it (see api::PodUpdate::source_annotated). The UID and config.hash do
  // not depend on them.
  std::string seen_time = {};
};

// config.seen's value for now (Go's RFC3339Nano, as kubelet's NewTimestamp).
std::string seenTime(base::Clock& clock);

struct DecodeResult {
  std::vector<api::PodPtr> pods;   // one for a Pod, each item for a PodList; empty on error
  std::vector<FieldError> errors;  // every problem found; empty on success
  // The pods whose name could be read but that failed to decode or validate (with defaults
  // applied: name-<node>, namespace, UID), for events about them.
  std::vector<ManifestPodRef> invalid_pods;
  bool ok() const { return errors.empty(); }
  // The errors as "field: message" lines joined by '\n'.
  std::string errorText() const;
};

// Decodes one manifest. `allow_list` accepts a PodList too (the HTTP source); a list with any
// invalid item is rejected whole, as kubelet does. Never throws, never crashes on hostile input.
DecodeResult decodeManifest(std::string_view bytes, const ManifestSource& source, bool allow_list);

// Reads the manifest file `path`. NOT_FOUND when it does not exist, INVALID_ARGUMENT for a
// directory, RESOURCE_EXHAUSTED as soon as it holds more than `max_bytes` (a huge file is not
// read whole), UNAVAILABLE with the reason for other failures.
base::StatusOr<std::string> readManifestFile(const std::string& path, size_t max_bytes);

// Validation alone (kube-apiserver's rules for what the model covers), every problem reported.
std::vector<FieldError> validatePod(const api::Pod& pod);

}  // namespace nodeagent::config
