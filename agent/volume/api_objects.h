// The ConfigMaps and Secrets that pods use in volumes and environment variables (kubelet's
// configmap and secret managers). The caching source is kubelet's "Cache" change detection
// strategy: an object read from the apiserver is served from memory for `ttl`, and a pod that has
// not seen the cached copy yet (a new pod, or one that references the object for the first time)
// gets it fresh from the apiserver. A ttl of zero is the "Get" strategy (always read).
//
// Threading: get() blocks on the apiserver; call it on the blocking pool. Thread-safe.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include <nlohmann/json_fwd.hpp>

#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::api {
struct Pod;
}

namespace nodeagent::agent {

enum class ApiObjectKind { kConfigMap, kSecret };
// "configmap" or "secret", as kubelet names them in its messages.
std::string_view apiObjectKindName(ApiObjectKind kind);
// The collection's path on the apiserver: /api/v1/namespaces/<ns>/configmaps.
std::string apiObjectCollectionPath(ApiObjectKind kind, std::string_view ns);
// The object's path on the apiserver: /api/v1/namespaces/<ns>/configmaps/<name>.
std::string apiObjectPath(ApiObjectKind kind, std::string_view ns, std::string_view name);

// kubelet's NotFound for an object the apiserver does not have: `configmap "app" not found`.
base::Status apiObjectNotFound(ApiObjectKind kind, std::string_view name);

// The data of a ConfigMap (data, and binaryData decoded) or Secret (data decoded); an error names
// the field that is not a map of strings or not base64.
base::StatusOr<std::map<std::string, std::string>> apiObjectData(ApiObjectKind kind,
                                                                 const nlohmann::json& object);

// A TokenRequest for a projected serviceAccountToken volume source, bound to its pod.
struct ServiceAccountTokenRequest {
  std::string ns;
  std::string service_account;
  std::string audience;  // "" for the apiserver's own
  int64_t expiration_seconds = 3600;
  std::string pod_name;
  std::string pod_uid;
  auto operator<=>(const ServiceAccountTokenRequest&) const = default;
};

// Members of a source's JSON (the pod skipped validation, so any type may be there): a string
// member, or "" when absent or not a string; whether a member is `true`.
std::string stringMember(const nlohmann::json& object, const char* key);
bool isTrueMember(const nlohmann::json& object, const char* key);

class ApiObjectSource {
 public:
  virtual ~ApiObjectSource() = default;
  // kubelet's RegisterPod/UnregisterPod: a pod the agent now has (added or updated, not in a
  // terminal phase), or one it no longer needs objects for. A source that watches objects watches
  // those its registered pods reference; the others ignore this. Any thread; never blocks.
  virtual void registerPod(const api::Pod& pod) { (void)pod; }
  virtual void unregisterPod(const std::string& pod_uid) { (void)pod_uid; }
  // A service account token for `request` (the TokenRequest API), renewed as kubelet's token
  // manager renews it: when 80 % of its lifetime or 24 hours have passed; a failed renewal keeps
  // serving the old token until it expires. Blocking.
  virtual base::StatusOr<std::string> serviceAccountToken(
      const ServiceAccountTokenRequest& request) {
    (void)request;
    return base::unimplementedError("service account tokens are not available");
  }
  // The object as the apiserver has it, fresh enough for pod `pod_uid`. NotFound worded as
  // kubelet's ("configmap \"app\" not found") when the apiserver has no such object; any other
  // error names the object. Blocking.
  virtual base::StatusOr<std::shared_ptr<const nlohmann::json>> get(ApiObjectKind kind,
                                                                    const std::string& ns,
                                                                    const std::string& name,
                                                                    const std::string& pod_uid) = 0;
};

class CachingApiObjectSource final : public ApiObjectSource {
 public:
  // Reads one object (a GET of apiObjectPath); errors as api::RestClient gives them.
  using Fetch = std::function<base::StatusOr<nlohmann::json>(const std::string& path)>;
  // Creates one object (a POST to a collection, here a serviceaccount's token subresource) and
  // returns the answer.
  using Create = std::function<base::StatusOr<nlohmann::json>(const std::string& path,
                                                              const nlohmann::json& body)>;
  CachingApiObjectSource(base::Clock& clock, Fetch fetch, base::Duration ttl,
                         Create create = nullptr);

  base::StatusOr<std::string> serviceAccountToken(
      const ServiceAccountTokenRequest& request) override;

  base::StatusOr<std::shared_ptr<const nlohmann::json>> get(ApiObjectKind kind,
                                                            const std::string& ns,
                                                            const std::string& name,
                                                            const std::string& pod_uid) override;

  // Tests: the number of objects held and of reads from the apiserver.
  size_t size() const;
  uint64_t fetches() const;

 private:
  using Key = std::tuple<ApiObjectKind, std::string, std::string>;
  struct Entry {
    std::shared_ptr<const nlohmann::json> object;
    base::MonotonicTime fetched;
    std::set<std::string> seen_by;  // pod UIDs given this copy
  };
  // Drops the entries older than the ttl (at most once per ttl). Holds mu_.
  void sweepLocked(base::MonotonicTime now);

  struct Token {
    std::string token;
    base::SystemTime issued;
    base::SystemTime expires;
  };
  // Whether kubelet's token manager would renew `token` now.
  static bool needsRenewal(const Token& token, base::SystemTime now);

  base::Clock& clock_;
  Fetch fetch_;
  base::Duration ttl_;
  Create create_;
  mutable std::mutex mu_;
  std::map<Key, Entry> entries_;
  std::map<ServiceAccountTokenRequest, Token> tokens_;
  base::MonotonicTime last_sweep_{};
  uint64_t fetches_ = 0;
};

}  // namespace nodeagent::agent
