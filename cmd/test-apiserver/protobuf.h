// Just enough of Kubernetes' protobuf encoding for the one kubectl command that sends it to the
// resources we serve: `kubectl create namespace` POSTs an `application/vnd.kubernetes.protobuf`
// Namespace. The envelope ("k8s\0" + runtime.Unknown) is decoded and, for a Namespace, its
// ObjectMeta name, generateName, labels and annotations; everything else is left out.
#pragma once

#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace nodeagent::testapiserver {

inline constexpr std::string_view kProtobufContentType = "application/vnd.kubernetes.protobuf";

// InvalidArgument for a malformed body; Unimplemented for a kind other than Namespace.
base::StatusOr<nlohmann::json> decodeProtobufObject(std::string_view body);

}  // namespace nodeagent::testapiserver
