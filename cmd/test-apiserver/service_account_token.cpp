#include "cmd/test-apiserver/service_account_token.h"

#include <algorithm>
#include <chrono>

#include "cmd/test-apiserver/api_status.h"
#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {
namespace {

using nlohmann::json;

constexpr char kTokenRequestKind[] = "TokenRequest.authentication.k8s.io";
// kube-apiserver's limits on expirationSeconds (validation.ValidateTokenRequest).
constexpr int64_t kMinExpirationSeconds = 10 * 60;
constexpr int64_t kMaxExpirationSeconds = int64_t{1} << 32;
constexpr int64_t kDefaultExpirationSeconds = 60 * 60;
// token.WarnOnlyBoundTokenExpirationSeconds and ExpirationExtensionSeconds.
constexpr int64_t kWarnOnlyExpirationSeconds = 60 * 60 + 7;
constexpr int64_t kExtendedExpirationSeconds = 24 * 365 * 60 * 60;
// go-jose's jwt.DefaultLeeway, and how long after its deletion a bound object still holds.
constexpr int64_t kLeewaySeconds = 60;

constexpr char kPodNameKey[] = "authentication.kubernetes.io/pod-name";
constexpr char kPodUidKey[] = "authentication.kubernetes.io/pod-uid";
constexpr char kNodeNameKey[] = "authentication.kubernetes.io/node-name";
constexpr char kNodeUidKey[] = "authentication.kubernetes.io/node-uid";
constexpr char kCredentialIdKey[] = "authentication.kubernetes.io/credential-id";
constexpr char kInvalidated[] = "service account token has been invalidated";

int64_t unixSeconds(base::SystemTime t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

std::string str(const json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains(key) || !obj[key].is_string()) return "";
  return obj[key].get<std::string>();
}

std::string uidOf(const json& obj) {
  return obj.contains("metadata") ? str(obj["metadata"], "uid") : "";
}

// Go's %q of a []string: ["a" "b"].
std::string quotedList(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ' ';
    out += json(items[i]).dump();
  }
  return out + "]";
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// The 422 kube-apiserver answers for a TokenRequest field, naming the service account (or
// nothing, for a failed validation of the spec).
std::pair<int, json> invalid(const std::string& name, const std::string& field,
                             const std::string& value, const std::string& detail) {
  const std::string error = field + ": Invalid value: " + value + ": " + detail;
  json details = {{"group", "authentication.k8s.io"},
                  {"kind", "TokenRequest"},
                  {"causes",
                   {{{"reason", "FieldValueInvalid"},
                     {"message", "Invalid value: " + value + ": " + detail},
                     {"field", field}}}}};
  if (!name.empty()) details["name"] = name;
  return {422, statusObject(
                   422, std::string(kTokenRequestKind) + " \"" + name + "\" is invalid: " + error,
                   "Invalid", std::move(details))};
}

std::pair<int, json> badRequest(const std::string& message) {
  return {400, statusObject(400, message)};
}

std::pair<int, json> storeError(const base::Status& error, const std::string& name,
                                const std::string& resource) {
  json status = statusFromError(error, name, resource);
  return {status["code"].get<int>(), std::move(status)};
}

// A TokenRequest's spec as kube-apiserver decodes it (defaults applied); an error message when a
// field has the wrong type.
struct TokenRequestSpec {
  std::vector<std::string> audiences;
  int64_t expiration_seconds = kDefaultExpirationSeconds;
  std::optional<json> bound_object_ref;
};

std::string decodeSpec(const json& request, TokenRequestSpec& spec) {
  if (!request.contains("spec") || request["spec"].is_null()) return "";
  const json& s = request["spec"];
  if (!s.is_object()) return "spec must be an object";
  if (s.contains("audiences") && !s["audiences"].is_null()) {
    if (!s["audiences"].is_array()) return "spec.audiences must be an array of strings";
    for (const json& a : s["audiences"]) {
      if (!a.is_string()) return "spec.audiences must be an array of strings";
      spec.audiences.push_back(a.get<std::string>());
    }
  }
  if (s.contains("expirationSeconds") && !s["expirationSeconds"].is_null()) {
    if (!s["expirationSeconds"].is_number_integer()) {
      return "spec.expirationSeconds must be an integer";
    }
    spec.expiration_seconds = s["expirationSeconds"].get<int64_t>();
  }
  if (s.contains("boundObjectRef") && !s["boundObjectRef"].is_null()) {
    const json& ref = s["boundObjectRef"];
    if (!ref.is_object()) return "spec.boundObjectRef must be an object";
    for (const char* key : {"kind", "apiVersion", "name", "uid"}) {
      if (ref.contains(key) && !ref[key].is_string()) {
        return std::string("spec.boundObjectRef.") + key + " must be a string";
      }
    }
    spec.bound_object_ref = ref;
  }
  return "";
}

// A kind a token can be bound to: where its objects are and the claim naming one.
struct BindableKind {
  const char* kind;
  const char* resource;
  const char* claim;
  bool namespaced;
};

constexpr BindableKind kBindableKinds[] = {
    {"Pod", "pods", "pod", true},
    {"Secret", "secrets", "secret", true},
    {"Node", "nodes", "node", false},
};

const BindableKind* bindableKind(const std::string& kind) {
  for (const auto& k : kBindableKinds) {
    if (kind == k.kind) return &k;
  }
  return nullptr;
}

// schema.FromAPIVersionAndKind(apiVersion, kind).String().
std::string gvkString(const std::string& api_version, const std::string& kind, std::string& group) {
  std::string version;
  const size_t slash = api_version.find('/');
  if (slash == std::string::npos) {
    version = api_version;
  } else if (api_version.find('/', slash + 1) == std::string::npos) {
    group = api_version.substr(0, slash);
    version = api_version.substr(slash + 1);
  }
  return group + "/" + version + ", Kind=" + kind;
}

std::vector<std::string> audiencesOf(const json& claims) {
  std::vector<std::string> out;
  if (!claims.contains("aud")) return out;
  const json& aud = claims["aud"];
  if (aud.is_string()) out.push_back(aud.get<std::string>());
  if (aud.is_array()) {
    for (const json& a : aud) {
      if (a.is_string()) out.push_back(a.get<std::string>());
    }
  }
  return out;
}

// A NumericDate claim; nullopt when absent or not a number.
std::optional<int64_t> secondsClaim(const json& claims, const char* key) {
  if (!claims.contains(key) || !claims[key].is_number()) return std::nullopt;
  return static_cast<int64_t>(claims[key].get<double>());
}

// True when the object was deleted (deletionTimestamp set) before `before`.
bool deletedBefore(const json& obj, int64_t before) {
  const std::string deleted =
      obj.contains("metadata") ? str(obj["metadata"], "deletionTimestamp") : "";
  if (deleted.empty()) return false;
  std::optional<base::SystemTime> t = parseTime(deleted);
  return t && unixSeconds(*t) < before;
}

}  // namespace

ServiceAccountTokens::ServiceAccountTokens(Store& store, std::unique_ptr<JwtKey> key,
                                           ServiceAccountTokenOptions options)
    : store_(store), key_(std::move(key)), options_(std::move(options)) {
  if (options_.api_audiences.empty()) options_.api_audiences = {options_.issuer};
}

std::pair<int, json> ServiceAccountTokens::requestToken(const std::string& ns,
                                                        const std::string& name,
                                                        const json& request) const {
  if (!request.is_object()) return badRequest("the body of a TokenRequest must be an object");
  TokenRequestSpec spec;
  if (std::string error = decodeSpec(request, spec); !error.empty()) {
    return badRequest("TokenRequest in version \"v1\" cannot be handled as a TokenRequest: " +
                      error);
  }
  const json meta = request.contains("metadata") && request["metadata"].is_object()
                        ? request["metadata"]
                        : json{};
  const std::string given_name = str(meta, "name");
  const std::string given_ns = str(meta, "namespace");
  if (!given_name.empty() && given_name != name) {
    return invalid(name, "metadata.name", json(given_name).dump(),
                   "must match the service account name if specified");
  }
  if (!given_ns.empty() && given_ns != ns) {
    return invalid(name, "metadata.namespace", json(given_ns).dump(),
                   "must match the service account namespace if specified");
  }
  auto account = store_.get("serviceaccounts", ns, name);
  if (!account.ok()) return storeError(account.status(), name, "serviceaccounts");
  if (spec.audiences.empty()) spec.audiences = options_.api_audiences;
  const base::SystemTime now = store_.clock().wallNow();
  if (spec.expiration_seconds < kMinExpirationSeconds) {
    return invalid("", "spec.expirationSeconds", std::to_string(spec.expiration_seconds),
                   "may not specify a duration less than 10 minutes");
  }
  if (spec.expiration_seconds > kMaxExpirationSeconds) {
    return invalid("", "spec.expirationSeconds", std::to_string(spec.expiration_seconds),
                   "may not specify a duration larger than 2^32 seconds");
  }

  json kubernetes = {{"namespace", ns},
                     {"serviceaccount", {{"name", name}, {"uid", uidOf(*account)}}}};
  bool pod_bound = false;
  if (spec.bound_object_ref) {
    const json& ref = *spec.bound_object_ref;
    const std::string kind = str(ref, "kind");
    const std::string ref_name = str(ref, "name");
    const std::string ref_uid = str(ref, "uid");
    std::string group;
    const std::string gvk = gvkString(str(ref, "apiVersion"), kind, group);
    const BindableKind* bindable = group.empty() ? bindableKind(kind) : nullptr;
    if (!bindable) {
      return badRequest("cannot bind token for serviceaccount \"" + name + "\" to object of type " +
                        gvk + ".");
    }
    auto object = store_.get(bindable->resource, bindable->namespaced ? ns : "", ref_name);
    if (!object.ok()) return storeError(object.status(), ref_name, bindable->resource);
    const std::string uid = uidOf(*object);
    if (bindable->claim == std::string("pod")) {
      pod_bound = true;
      const json& pod_spec = (*object).contains("spec") ? (*object)["spec"] : json::object();
      std::string pod_account = str(pod_spec, "serviceAccountName");
      // What kube-apiserver's ServiceAccount admission would have set.
      if (pod_account.empty()) pod_account = "default";
      if (pod_account != name) {
        return badRequest("cannot bind token for serviceaccount \"" + name +
                          "\" to pod running with different serviceaccount name.");
      }
    }
    if (!ref_uid.empty() && ref_uid != uid) {
      return {409, statusObject(409,
                                "Operation cannot be fulfilled on " + kind + " \"" + ref_name +
                                    "\": the UID in the bound object reference (" + ref_uid +
                                    ") does not match the UID in record. The object might have "
                                    "been deleted and then recreated",
                                "Conflict", {{"name", ref_name}, {"kind", kind}})};
    }
    kubernetes[bindable->claim] = {{"name", ref_name}, {"uid", uid}};
    if (pod_bound) {
      // The pod's node, by name alone when it is not (or no longer) known.
      const std::string node_name = str((*object)["spec"], "nodeName");
      if (!node_name.empty()) {
        json node_ref = {{"name", node_name}};
        auto node = store_.get("nodes", "", node_name);
        if (node.ok() && !uidOf(*node).empty()) node_ref["uid"] = uidOf(*node);
        kubernetes["node"] = std::move(node_ref);
      }
    }
  }

  int64_t lifetime = spec.expiration_seconds;
  const int64_t iat = unixSeconds(now);
  const bool api_audiences_only =
      std::all_of(spec.audiences.begin(), spec.audiences.end(),
                  [this](const std::string& a) { return contains(options_.api_audiences, a); });
  if (options_.extend_expiration && pod_bound && lifetime == kWarnOnlyExpirationSeconds &&
      api_audiences_only) {
    kubernetes["warnafter"] = iat + lifetime;
    lifetime = kExtendedExpirationSeconds;
  }
  json claims = {{"iss", options_.issuer},
                 {"sub", "system:serviceaccount:" + ns + ":" + name},
                 {"iat", iat},
                 {"nbf", iat},
                 {"exp", iat + lifetime},
                 {"jti", randomUuid()},
                 {"kubernetes.io", std::move(kubernetes)}};
  // go-jose writes a single audience as a string.
  claims["aud"] = spec.audiences.size() == 1 ? json(spec.audiences[0]) : json(spec.audiences);
  auto token = key_->sign(claims);
  if (!token.ok())
    return {500, statusObject(500, "failed to generate token: " + token.status().message())};

  json bound = spec.bound_object_ref ? *spec.bound_object_ref : json(nullptr);
  json out = {
      {"kind", "TokenRequest"},
      {"apiVersion", "authentication.k8s.io/v1"},
      {"metadata", {{"name", name}, {"namespace", ns}, {"creationTimestamp", formatTime(now)}}},
      {"spec",
       {{"audiences", spec.audiences},
        {"expirationSeconds", spec.expiration_seconds},
        {"boundObjectRef", std::move(bound)}}},
      {"status",
       {{"token", *token},
        {"expirationTimestamp", formatTime(now + std::chrono::seconds(spec.expiration_seconds))}}}};
  return {201, std::move(out)};
}

std::optional<TokenVerdict> ServiceAccountTokens::authenticate(
    const std::string& token, const std::vector<std::string>& audiences) const {
  std::optional<json> unverified = JwtKey::unverifiedClaims(token);
  if (!unverified || str(*unverified, "iss") != options_.issuer) return std::nullopt;
  TokenVerdict verdict;
  auto claims = key_->verify(token);
  if (!claims.ok()) {
    verdict.error = claims.status().message();
    return verdict;
  }
  std::vector<std::string> token_audiences = audiencesOf(*claims);
  if (token_audiences.empty()) token_audiences = options_.api_audiences;
  for (const std::string& a : audiences) {
    if (contains(token_audiences, a)) verdict.audiences.push_back(a);
  }
  if (verdict.audiences.empty()) {
    verdict.error = "token audiences " + quotedList(token_audiences) +
                    " is invalid for the target audiences " + quotedList(audiences);
    return verdict;
  }
  auto user = validate(*claims);
  if (!user.ok()) {
    verdict.audiences.clear();
    verdict.error = user.status().message();
    return verdict;
  }
  verdict.authenticated = true;
  verdict.user = std::move(*user);
  return verdict;
}

base::StatusOr<ReviewUser> ServiceAccountTokens::validate(const json& claims) const {
  const int64_t now = unixSeconds(store_.clock().wallNow());
  const auto exp = secondsClaim(claims, "exp");
  const auto nbf = secondsClaim(claims, "nbf");
  const auto iat = secondsClaim(claims, "iat");
  if (exp && now - kLeewaySeconds > *exp) {
    return base::unauthenticatedError("service account token has expired");
  }
  if ((nbf && now + kLeewaySeconds < *nbf) || (iat && now + kLeewaySeconds < *iat)) {
    return base::unauthenticatedError(
        "service account token could not be validated due to unexpected validation error");
  }
  const json k8s = claims.contains("kubernetes.io") ? claims["kubernetes.io"] : json();
  const std::string ns = str(k8s, "namespace");
  const json account_ref =
      k8s.is_object() && k8s.contains("serviceaccount") ? k8s["serviceaccount"] : json::object();
  const std::string account_name = str(account_ref, "name");
  if (ns.empty() || account_name.empty()) {
    return base::unauthenticatedError("service account token claims could not be validated");
  }
  auto account = store_.get("serviceaccounts", ns, account_name);
  if (!account.ok()) return base::unauthenticatedError(account.status().message());
  if (uidOf(*account) != str(account_ref, "uid")) {
    return base::unauthenticatedError("service account UID (" + uidOf(*account) +
                                      ") does not match claim (" + str(account_ref, "uid") + ")");
  }
  ReviewUser user{"system:serviceaccount:" + ns + ":" + account_name,
                  uidOf(*account),
                  {"system:serviceaccounts", "system:serviceaccounts:" + ns},
                  {}};
  const bool pod_bound = k8s.contains("pod");
  for (const BindableKind& kind : kBindableKinds) {
    if (!k8s.contains(kind.claim)) continue;
    const json& ref = k8s[kind.claim];
    const std::string ref_name = str(ref, "name");
    const std::string ref_uid = str(ref, "uid");
    // A pod-bound token names the pod's node for information only.
    const bool check = !(pod_bound && kind.claim == std::string("node"));
    if (check) {
      auto object = store_.get(kind.resource, kind.namespaced ? ns : "", ref_name);
      if (!object.ok() || deletedBefore(*object, now - kLeewaySeconds)) {
        return base::unauthenticatedError(kInvalidated);
      }
      if (uidOf(*object) != ref_uid) {
        return base::unauthenticatedError(std::string(kind.claim) + " UID (" + uidOf(*object) +
                                          ") does not match service account " + kind.claim +
                                          " ref claim (" + ref_uid + ")");
      }
    }
    if (kind.claim == std::string("pod")) {
      user.extra[kPodNameKey] = {ref_name};
      user.extra[kPodUidKey] = {ref_uid};
    } else if (kind.claim == std::string("node")) {
      user.extra[kNodeNameKey] = {ref_name};
      if (!ref_uid.empty()) user.extra[kNodeUidKey] = {ref_uid};
    }
  }
  const std::string jti = str(claims, "jti");
  if (!jti.empty()) user.extra[kCredentialIdKey] = {"JTI=" + jti};
  return user;
}

}  // namespace nodeagent::testapiserver
