// Conversions between nodeagent's CRI structs (cri_types.h) and the messages protoc generates
// from api.proto. Internal to nodeagent_cri: only the CRI .cpp files include it. The messages are
// forward-declared, so this header pulls in no protobuf header either.
#pragma once

#include "agent/runtime/cri/cri_client.h"
#include "agent/runtime/cri/cri_types.h"

namespace runtime::v1 {
class ContainerConfig;
class ContainerFilter;
class ContainerStatus;
class Container;
class Image;
class AuthConfig;
class PodSandbox;
class PodSandboxConfig;
class PodSandboxFilter;
class PodSandboxStatus;
}  // namespace runtime::v1

namespace nodeagent::runtime::cri {

void toProto(const PodSandboxConfig& in, ::runtime::v1::PodSandboxConfig* out);
void toProto(const PodSandboxFilter& in, ::runtime::v1::PodSandboxFilter* out);
void toProto(const ContainerConfig& in, ::runtime::v1::ContainerConfig* out);
void toProto(const ContainerFilter& in, ::runtime::v1::ContainerFilter* out);
void toProto(const AuthConfig& in, ::runtime::v1::AuthConfig* out);

PodSandbox fromProto(const ::runtime::v1::PodSandbox& in);
PodSandboxStatus fromProto(const ::runtime::v1::PodSandboxStatus& in);
Container fromProto(const ::runtime::v1::Container& in);
ContainerStatus fromProto(const ::runtime::v1::ContainerStatus& in);
ImageInfo fromProto(const ::runtime::v1::Image& in);

}  // namespace nodeagent::runtime::cri
