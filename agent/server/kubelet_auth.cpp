#include "agent/server/kubelet_auth.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>

#include "api/async_rest_client.h"
#include "api/rest_client.h"
#include "base/log.h"
#include "base/strings.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("server");

constexpr char kTokenReviewPath[] = "/apis/authentication.k8s.io/v1/tokenreviews";
constexpr char kSubjectAccessReviewPath[] = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
constexpr char kAllAuthenticated[] = "system:authenticated";
constexpr char kAllUnauthenticated[] = "system:unauthenticated";
constexpr char kAnonymousUser[] = "system:anonymous";
// client-go's caches hold about this many answers (older entries make room).
constexpr size_t kMaxTokenEntries = 4096;
constexpr size_t kMaxAuthzEntries = 8192;
// Webhook calls waiting at once, and how long one may take.
constexpr int kMaxReviewsInFlight = 32;
constexpr std::chrono::seconds kReviewTimeout{10};

// kubelet's isSubpath: `path` itself or anything below it, never "/statsfoo".
bool isSubpath(std::string_view subpath, std::string_view path) {
  if (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (subpath == path) return true;
  return subpath.size() > path.size() && subpath.substr(0, path.size()) == path &&
         subpath[path.size()] == '/';
}

std::string apiVerb(std::string_view method) {
  if (method == "POST") return "create";
  if (method == "GET") return "get";
  if (method == "PUT") return "update";
  if (method == "PATCH") return "patch";
  if (method == "DELETE") return "delete";
  return "";
}

// The token of "Bearer <token>" (scheme case-insensitive), else "" (as kubelet's bearer token
// authenticator: anything else is no token at all).
std::string bearerToken(std::string_view header) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!header.empty() && is_space(header.front())) header.remove_prefix(1);
  while (!header.empty() && is_space(header.back())) header.remove_suffix(1);
  size_t sp = header.find(' ');
  if (sp == std::string_view::npos) return "";
  if (!base::iequals(header.substr(0, sp), "bearer")) return "";
  std::string_view rest = header.substr(sp + 1);
  return std::string(rest.substr(0, rest.find(' ')));
}

UserInfo withAuthenticatedGroup(UserInfo user) {
  for (const auto& g : user.groups) {
    if (g == kAllAuthenticated || g == kAllUnauthenticated) return user;
  }
  user.groups.push_back(kAllAuthenticated);
  return user;
}

std::string statusBody(int code, std::string_view reason, const std::string& message) {
  nlohmann::ordered_json status = {
      {"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
      {"status", "Failure"}, {"message", message}, {"reason", reason},
      {"code", code}};
  return status.dump();
}

std::string attributesText(const RequestAttributes& a) {
  return "(user=" + a.user.name + ", verb=" + a.verb + ", resource=" + a.resource +
         ", subresource=" + a.subresource + ")";
}

// A bounded map of answers that expire. Any thread; the lock is never held across a co_await.
template <typename V>
class ExpiringCache {
 public:
  explicit ExpiringCache(size_t max_entries) : max_entries_(max_entries) {}

  std::optional<V> get(const std::string& key, base::MonotonicTime now) {
    std::lock_guard lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    if (it->second.first <= now) {
      entries_.erase(it);
      return std::nullopt;
    }
    return it->second.second;
  }

  void put(const std::string& key, V value, base::MonotonicTime expires, base::MonotonicTime now) {
    std::lock_guard lock(mu_);
    if (entries_.size() >= max_entries_ && !entries_.contains(key)) makeRoom(now);
    entries_[key] = {expires, std::move(value)};
  }

 private:
  void makeRoom(base::MonotonicTime now) {
    std::erase_if(entries_, [now](const auto& e) { return e.second.first <= now; });
    if (entries_.size() < max_entries_) return;
    auto soonest = std::min_element(entries_.begin(), entries_.end(), [](auto& a, auto& b) {
      return a.second.first < b.second.first;
    });
    entries_.erase(soonest);
  }

  const size_t max_entries_;
  std::mutex mu_;
  std::map<std::string, std::pair<base::MonotonicTime, V>> entries_;
};

}  // namespace

RequestAttributes requestAttributes(UserInfo user, std::string_view method, std::string_view path,
                                    std::string_view node_name) {
  path = path.substr(0, path.find('?'));
  RequestAttributes a;
  a.user = std::move(user);
  a.verb = apiVerb(method);
  a.name = std::string(node_name);
  a.path = std::string(path);
  a.subresource = "proxy";
  if (isSubpath(path, "/stats/")) {
    a.subresource = "stats";
  } else if (isSubpath(path, "/metrics")) {
    a.subresource = "metrics";
  } else if (isSubpath(path, "/logs/")) {
    a.subresource = "log";  // as the other log subresources (pods/log)
  } else if (isSubpath(path, "/spec/")) {
    a.subresource = "spec";
  }
  return a;
}

std::string unauthorizedBody() { return statusBody(401, "Unauthorized", "Unauthorized"); }

std::string forbiddenBody(const RequestAttributes& attributes, const std::string& /*reason*/) {
  return statusBody(403, "Forbidden", "Forbidden " + attributesText(attributes));
}

std::string authorizationErrorBody(const RequestAttributes& attributes) {
  return statusBody(500, "InternalError", "Authorization error " + attributesText(attributes));
}

struct KubeletAuth::Impl {
  AuthOptions options;
  const api::AsyncRestClient* client;
  base::Clock& clock;
  // Tokens are cached under an HMAC with a key of this process, never as themselves.
  std::array<unsigned char, 32> hmac_key{};
  ExpiringCache<AuthnResult> tokens{kMaxTokenEntries};
  ExpiringCache<AuthzResult> decisions{kMaxAuthzEntries};
  // Reviews waiting for the apiserver. Past kMaxReviewsInFlight a request is refused at once: a
  // flood of made-up tokens must not queue up behind it (or in front of the node's own calls).
  std::atomic<int> in_flight{0};

  // Holds a place among the reviews in flight, if one is free.
  struct Slot {
    std::atomic<int>* count = nullptr;
    explicit Slot(std::atomic<int>& c) {
      if (c.fetch_add(1) < kMaxReviewsInFlight) {
        count = &c;
      } else {
        c.fetch_sub(1);
      }
    }
    ~Slot() {
      if (count != nullptr) count->fetch_sub(1);
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    bool held() const { return count != nullptr; }
  };
  // A webhook call on the API pool, ended after kReviewTimeout.
  template <typename Call>
  asio::awaitable<base::StatusOr<std::string>> callWebhook(const Call& call) {
    const base::StatusOr<std::string> timed_out = base::deadlineExceededError(
        "the apiserver did not answer within " + std::to_string(kReviewTimeout.count()) + "s");
    return api::runWithTimeout(*client, clock, kReviewTimeout, call, timed_out);
  }

  std::string tokenKey(const std::string& token) const;
  asio::awaitable<AuthnResult> reviewToken(std::string token);
  asio::awaitable<AuthzResult> reviewAccess(RequestAttributes attributes);
};

KubeletAuth::KubeletAuth(AuthOptions options, const api::AsyncRestClient* client,
                         base::Clock& clock)
    : impl_(new Impl{std::move(options), client, clock}) {
  NA_CHECK(
      client != nullptr || (!impl_->options.token_webhook && !impl_->options.authorize_webhook),
      "the kubelet API's webhooks need an apiserver client");
  NA_CHECK(RAND_bytes(impl_->hmac_key.data(), static_cast<int>(impl_->hmac_key.size())) == 1,
           "no random bytes for the token cache key");
}

KubeletAuth::~KubeletAuth() = default;

const AuthOptions& KubeletAuth::options() const { return impl_->options; }

asio::awaitable<AuthnResult> KubeletAuth::authenticate(std::optional<UserInfo> client_cert_user,
                                                       std::string authorization) {
  if (client_cert_user && !client_cert_user->name.empty()) {
    co_return AuthnResult{withAuthenticatedGroup(std::move(*client_cert_user)), ""};
  }
  std::string token = bearerToken(authorization);
  if (!token.empty() && impl_->options.token_webhook) {
    AuthnResult reviewed = co_await impl_->reviewToken(std::move(token));
    co_return reviewed;
  }
  if (impl_->options.anonymous) {
    co_return AuthnResult{UserInfo{kAnonymousUser, "", {kAllUnauthenticated}}, ""};
  }
  co_return AuthnResult{std::nullopt,
                        "no client certificate or bearer token, and anonymous "
                        "requests are not allowed"};
}

asio::awaitable<AuthzResult> KubeletAuth::authorize(RequestAttributes attributes) {
  if (!impl_->options.authorize_webhook) co_return AuthzResult{true, "", ""};
  AuthzResult reviewed = co_await impl_->reviewAccess(std::move(attributes));
  co_return reviewed;
}

std::string KubeletAuth::Impl::tokenKey(const std::string& token) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  NA_CHECK(HMAC(EVP_sha256(), hmac_key.data(), static_cast<int>(hmac_key.size()),
                reinterpret_cast<const unsigned char*>(token.data()), token.size(), mac,
                &len) != nullptr,
           "HMAC-SHA256 failed");
  return std::string(reinterpret_cast<const char*>(mac), len);
}

namespace {

// A member of the peer's JSON, of the expected type, else the fallback (an answer of the wrong
// shape is no answer, never an exception).
bool boolField(const nlohmann::json& o, const char* name) {
  auto it = o.find(name);
  return it != o.end() && it->is_boolean() && it->get<bool>();
}
std::string stringField(const nlohmann::json& o, const char* name) {
  auto it = o.find(name);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The TokenReview answer as kubelet's webhook authenticator reads it. `cacheable` is false for
// an answer carrying status.error (client-go caches no errors).
AuthnResult tokenReviewResult(const std::string& body, bool& cacheable) {
  cacheable = false;
  nlohmann::json review = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!review.is_object() || !review.contains("status") || !review["status"].is_object()) {
    return AuthnResult{std::nullopt, "token review: the answer holds no status"};
  }
  const nlohmann::json& status = review["status"];
  if (!boolField(status, "authenticated")) {
    std::string error = stringField(status, "error");
    cacheable = error.empty();
    return AuthnResult{std::nullopt,
                       error.empty() ? "invalid bearer token" : "token review: " + error};
  }
  UserInfo user;
  auto found = status.find("user");
  const nlohmann::json user_json =
      found != status.end() && found->is_object() ? *found : nlohmann::json::object();
  user.name = stringField(user_json, "username");
  user.uid = stringField(user_json, "uid");
  if (user_json.contains("groups") && user_json["groups"].is_array()) {
    for (const auto& g : user_json["groups"]) {
      if (g.is_string()) user.groups.push_back(g.get<std::string>());
    }
  }
  cacheable = true;
  return AuthnResult{withAuthenticatedGroup(std::move(user)), ""};
}

}  // namespace

asio::awaitable<AuthnResult> KubeletAuth::Impl::reviewToken(std::string token) {
  const std::string key = tokenKey(token);
  if (auto hit = tokens.get(key, clock.now())) co_return *hit;
  // kubelet sends no audiences (the apiserver checks its own).
  nlohmann::json review = {{"apiVersion", "authentication.k8s.io/v1"},
                           {"kind", "TokenReview"},
                           {"spec", {{"token", std::move(token)}}}};
  auto body = std::make_shared<const std::string>(review.dump());
  auto call = [body](api::RestClient& c) {
    return c.request("POST", kTokenReviewPath, {}, *body, "application/json");
  };
  Slot slot(in_flight);
  if (!slot.held()) co_return AuthnResult{std::nullopt, "too many token reviews in flight"};
  auto task = callWebhook(call);
  auto answer = co_await std::move(task);
  if (!answer.ok()) {
    log()->warn("Token review failed err={}", answer.status().toString());
    co_return AuthnResult{std::nullopt, "token review failed: " + answer.status().toString()};
  }
  bool cacheable = false;
  AuthnResult result = tokenReviewResult(*answer, cacheable);
  if (cacheable && options.token_cache_ttl > base::Duration::zero()) {
    const auto now = clock.now();
    tokens.put(key, result, now + options.token_cache_ttl, now);
  }
  co_return result;
}

namespace {

// spec of a SubjectAccessReview as kubelet's webhook authorizer sends it (empty fields omitted).
nlohmann::json accessReviewSpec(const RequestAttributes& a) {
  nlohmann::json resource = nlohmann::json::object();
  auto set = [](nlohmann::json& j, const char* field, const std::string& value) {
    if (!value.empty()) j[field] = value;
  };
  set(resource, "verb", a.verb);
  set(resource, "version", "v1");
  set(resource, "resource", a.resource);
  set(resource, "subresource", a.subresource);
  set(resource, "name", a.name);
  nlohmann::json spec = {{"resourceAttributes", std::move(resource)}};
  set(spec, "user", a.user.name);
  set(spec, "uid", a.user.uid);
  if (!a.user.groups.empty()) spec["groups"] = a.user.groups;
  return spec;
}

// The decision of a SubjectAccessReview answer; `cacheable` is false for a nonsensical one.
AuthzResult accessReviewResult(const std::string& body, bool& cacheable) {
  cacheable = false;
  nlohmann::json review = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!review.is_object() || !review.contains("status") || !review["status"].is_object()) {
    return AuthzResult{false, "", "subject access review: the answer holds no status"};
  }
  const nlohmann::json& status = review["status"];
  bool allowed = boolField(status, "allowed");
  bool denied = boolField(status, "denied");
  std::string reason = stringField(status, "reason");
  if (allowed && denied) {
    return AuthzResult{false, reason,
                       "webhook subject access review returned both allow and deny response"};
  }
  cacheable = true;
  return AuthzResult{allowed, std::move(reason), ""};
}

}  // namespace

asio::awaitable<AuthzResult> KubeletAuth::Impl::reviewAccess(RequestAttributes attributes) {
  nlohmann::json spec = accessReviewSpec(attributes);
  const std::string key = spec.dump();
  if (auto hit = decisions.get(key, clock.now())) co_return *hit;
  nlohmann::json review = {{"apiVersion", "authorization.k8s.io/v1"},
                           {"kind", "SubjectAccessReview"},
                           {"spec", std::move(spec)}};
  auto body = std::make_shared<const std::string>(review.dump());
  auto call = [body](api::RestClient& c) {
    return c.request("POST", kSubjectAccessReviewPath, {}, *body, "application/json");
  };
  Slot slot(in_flight);
  if (!slot.held()) {
    co_return AuthzResult{false, "", "too many subject access reviews in flight"};
  }
  auto task = callWebhook(call);
  auto answer = co_await std::move(task);
  if (!answer.ok()) {
    log()->warn("Subject access review failed user={} verb={} subresource={} err={}",
                attributes.user.name, attributes.verb, attributes.subresource,
                answer.status().toString());
    co_return AuthzResult{false, "", "subject access review failed: " + answer.status().toString()};
  }
  bool cacheable = false;
  AuthzResult result = accessReviewResult(*answer, cacheable);
  base::Duration ttl = result.allowed ? options.authorized_ttl : options.unauthorized_ttl;
  if (cacheable && ttl > base::Duration::zero()) {
    const auto now = clock.now();
    decisions.put(key, result, now + ttl, now);
  }
  co_return result;
}

}  // namespace nodeagent::agent
