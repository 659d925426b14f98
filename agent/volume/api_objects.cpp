#include "agent/volume/api_objects.h"

#include <optional>

#include <nlohmann/json.hpp>

#include "api/api_errors.h"
#include "api/kubeconfig.h"
#include "api/time.h"

namespace nodeagent::agent {

std::string_view apiObjectKindName(ApiObjectKind kind) {
  return kind == ApiObjectKind::kConfigMap ? "configmap" : "secret";
}

std::string apiObjectCollectionPath(ApiObjectKind kind, std::string_view ns) {
  std::string path = "/api/v1/namespaces/";
  return path.append(ns).append(kind == ApiObjectKind::kConfigMap ? "/configmaps" : "/secrets");
}

std::string apiObjectPath(ApiObjectKind kind, std::string_view ns, std::string_view name) {
  return apiObjectCollectionPath(kind, ns).append("/").append(name);
}

base::Status apiObjectNotFound(ApiObjectKind kind, std::string_view name) {
  return base::notFoundError(std::string(apiObjectKindName(kind)) + " \"" + std::string(name) +
                             "\" not found");
}

base::StatusOr<std::map<std::string, std::string>> apiObjectData(ApiObjectKind kind,
                                                                 const nlohmann::json& object) {
  std::map<std::string, std::string> out;
  auto read = [&](const char* field, bool base64) -> base::Status {
    auto it = object.find(field);
    if (it == object.end() || it->is_null()) return base::okStatus();
    if (!it->is_object()) return base::invalidArgumentError(std::string(field) + " is not a map");
    for (const auto& [key, value] : it->items()) {
      if (!value.is_string()) {
        return base::invalidArgumentError(std::string(field) + "[" + key + "] is not a string");
      }
      if (!base64) {
        out[key] = value.get<std::string>();
        continue;
      }
      auto decoded = api::decodeBase64(value.get_ref<const std::string&>());
      if (!decoded.ok()) {
        return base::invalidArgumentError(std::string(field) + "[" + key + "] is not base64");
      }
      out[key] = std::move(*decoded);
    }
    return base::okStatus();
  };
  if (kind == ApiObjectKind::kConfigMap) {
    RETURN_IF_ERROR(read("data", false));
    RETURN_IF_ERROR(read("binaryData", true));
  } else {
    RETURN_IF_ERROR(read("data", true));
  }
  return out;
}

std::string stringMember(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return {};
  auto it = object.find(key);
  return it == object.end() || !it->is_string() ? std::string() : it->get<std::string>();
}

bool isTrueMember(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return false;
  auto it = object.find(key);
  return it != object.end() && it->is_boolean() && it->get<bool>();
}

CachingApiObjectSource::CachingApiObjectSource(base::Clock& clock, Fetch fetch, base::Duration ttl,
                                               Create create)
    : clock_(clock), fetch_(std::move(fetch)), ttl_(ttl), create_(std::move(create)) {}

bool CachingApiObjectSource::needsRenewal(const Token& token, base::SystemTime now) {
  const auto lifetime = token.expires - token.issued;
  return now >= token.issued + std::chrono::hours(24) || now >= token.expires - lifetime / 5;
}

base::StatusOr<std::string> CachingApiObjectSource::serviceAccountToken(
    const ServiceAccountTokenRequest& request) {
  const auto now = clock_.wallNow();
  std::optional<Token> cached;
  {
    std::lock_guard lock(mu_);
    // Tokens past their expiry are of no use to anyone: dropped (their pods are gone or renew).
    std::erase_if(tokens_, [&](const auto& kv) { return kv.second.expires <= now; });
    auto it = tokens_.find(request);
    if (it != tokens_.end()) cached = it->second;
  }
  if (cached && !needsRenewal(*cached, now)) return cached->token;
  if (!create_) return base::unimplementedError("service account tokens are not available");
  nlohmann::json spec = {{"expirationSeconds", request.expiration_seconds},
                         {"boundObjectRef",
                          {{"apiVersion", "v1"},
                           {"kind", "Pod"},
                           {"name", request.pod_name},
                           {"uid", request.pod_uid}}}};
  if (!request.audience.empty()) spec["audiences"] = {request.audience};
  const nlohmann::json body = {
      {"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenRequest"}, {"spec", spec}};
  const std::string path =
      "/api/v1/namespaces/" + request.ns + "/serviceaccounts/" + request.service_account + "/token";
  auto answer = create_(path, body);
  base::Status failed;
  Token token;
  if (!answer.ok()) {
    failed = answer.status();
  } else {
    const auto status = answer->value("status", nlohmann::json::object());
    token.token = status.value("token", "");
    auto expires = api::parseTime(status.value("expirationTimestamp", ""));
    if (token.token.empty() || !expires.ok()) {
      failed = base::internalError("the apiserver's TokenRequest answer has no token or expiry");
    } else {
      token.issued = now;
      token.expires = std::chrono::time_point_cast<base::SystemTime::duration>(*expires);
    }
  }
  if (!failed.ok()) {
    // kubelet keeps serving a token that has not expired yet when its renewal fails.
    if (cached) return cached->token;
    return failed.withContext("cannot get a token for service account " + request.ns + "/" +
                              request.service_account);
  }
  std::lock_guard lock(mu_);
  tokens_[request] = token;
  return token.token;
}

base::StatusOr<std::shared_ptr<const nlohmann::json>> CachingApiObjectSource::get(
    ApiObjectKind kind, const std::string& ns, const std::string& name,
    const std::string& pod_uid) {
  Key key{kind, ns, name};
  {
    std::lock_guard lock(mu_);
    const auto now = clock_.now();
    sweepLocked(now);
    auto it = entries_.find(key);
    if (it != entries_.end() && now - it->second.fetched < ttl_ &&
        it->second.seen_by.count(pod_uid) > 0) {
      return it->second.object;
    }
    ++fetches_;
  }
  // The apiserver is read without the lock: a slow answer holds up no other object.
  auto fetched = fetch_(apiObjectPath(kind, ns, name));
  const std::string what = std::string(apiObjectKindName(kind)) + " \"" + name + "\"";
  if (!fetched.ok()) {
    std::lock_guard lock(mu_);
    entries_.erase(key);
    if (api::isNotFound(fetched.status())) return apiObjectNotFound(kind, name);
    return fetched.status().withContext("cannot read " + what + " of namespace " + ns);
  }
  if (!fetched->is_object()) {
    return base::internalError("cannot read " + what + " of namespace " + ns +
                               ": the apiserver's answer is not an object");
  }
  auto object = std::make_shared<const nlohmann::json>(std::move(*fetched));
  std::lock_guard lock(mu_);
  auto& entry = entries_[key];
  entry.object = object;
  entry.fetched = clock_.now();
  entry.seen_by.insert(pod_uid);  // those that saw the older copy may have this one too
  return object;
}

void CachingApiObjectSource::sweepLocked(base::MonotonicTime now) {
  if (now - last_sweep_ < ttl_) return;
  last_sweep_ = now;
  std::erase_if(entries_, [&](const auto& kv) { return now - kv.second.fetched >= ttl_; });
}

size_t CachingApiObjectSource::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

uint64_t CachingApiObjectSource::fetches() const {
  std::lock_guard lock(mu_);
  return fetches_;
}

}  // namespace nodeagent::agent
