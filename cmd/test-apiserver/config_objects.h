// ConfigMaps and Secrets as kube-apiserver decodes, defaults and validates them, for the store's
// create, update and patch (pkg/apis/core/v1 conversion and defaults, pkg/apis/core/validation):
//
// - a Secret's `type` defaults to Opaque and cannot change later; its `stringData` is folded into
//   `data` (base64, winning over a `data` value of the same key) and is never stored;
// - `data` of a Secret and `binaryData` of a ConfigMap must be base64 (Go's StdEncoding) and are
//   stored re-encoded; every key is a config key ([-._a-zA-Z0-9]+, not "." or "..", at most 253
//   characters), and a ConfigMap key is in `data` or `binaryData`, not both;
// - the decoded values total at most 1 MiB;
// - `immutable: true` freezes the data (and binaryData), and cannot be set back;
// - the secret types kube-apiserver checks need their keys: service-account-token the
//   kubernetes.io/service-account.name annotation, dockercfg/dockerconfigjson a .dockercfg /
//   .dockerconfigjson of valid JSON, basic-auth a username or password, ssh-auth an
//   ssh-privatekey, tls a tls.crt and a tls.key. Other types (bootstrap.kubernetes.io/token,
//   custom ones) are stored as given, as kube-apiserver does.
//
// Errors: InvalidArgument (400 BadRequest) for a field of the wrong JSON type, as kube-apiserver's
// decoder answers; FailedPrecondition (422 Invalid) worded as its field errors otherwise
// (`Secret "s" is invalid: data[k]: Invalid value: ...`). Only the first problem is reported.
// Pure functions: any thread.
#pragma once

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "cmd/test-apiserver/resources.h"

namespace nodeagent::testapiserver {

// kube-apiserver's core.MaxSecretSize, which also bounds a ConfigMap.
inline constexpr int64_t kMaxConfigObjectBytes = 1024 * 1024;

// Normalizes and validates `object` (a ConfigMap or Secret; anything else is left alone) in place.
// `previous` is the stored object on update and patch, nullptr on create.
base::Status prepareConfigObject(const ResourceInfo& res, nlohmann::json& object,
                                 const nlohmann::json* previous);

}  // namespace nodeagent::testapiserver
