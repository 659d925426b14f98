// Just enough of Kubernetes' protobuf encoding for the kubectl commands that send it to the
// resources we serve: `kubectl create namespace|configmap|secret|serviceaccount|token` POST an
// `application/vnd.kubernetes.protobuf` object. The envelope ("k8s\0" + runtime.Unknown) is
// decoded, then the object's ObjectMeta (name, generateName, namespace, labels, annotations,
// finalizers) and the fields of its kind: a ConfigMap's data, binaryData and immutable, a
// Secret's data, stringData, type and immutable, a ServiceAccount's secrets, imagePullSecrets and
// automountServiceAccountToken (map<string, bytes> values become base64 strings, as in JSON), a
// TokenRequest's spec (audiences, expirationSeconds, boundObjectRef), and the spec of the self
// reviews `kubectl auth can-i` and `whoami` send (SelfSubjectAccessReview's resource or
// non-resource attributes, SelfSubjectRulesReview's namespace; SelfSubjectReview has none).
// Anything else is left out.
#pragma once

#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace nodeagent::testapiserver {

inline constexpr std::string_view kProtobufContentType = "application/vnd.kubernetes.protobuf";

// InvalidArgument for a malformed body; Unimplemented for a kind other than those.
base::StatusOr<nlohmann::json> decodeProtobufObject(std::string_view body);

}  // namespace nodeagent::testapiserver
