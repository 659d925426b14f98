#include "cmd/test-apiserver/store.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "cmd/test-apiserver/api_status.h"
#include "cmd/test-apiserver/config_objects.h"
#include "cmd/test-apiserver/pod_defaults.h"
#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {

using nlohmann::json;

const char* watchEventTypeName(WatchEvent::Type type) {
  switch (type) {
    case WatchEvent::Type::kAdded:
      return "ADDED";
    case WatchEvent::Type::kModified:
      return "MODIFIED";
    case WatchEvent::Type::kDeleted:
      return "DELETED";
  }
  return "ERROR";
}

namespace {

std::optional<uint64_t> parseRv(std::string_view text) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

std::string str(const json& obj, std::initializer_list<const char*> path) {
  const json* cur = &obj;
  for (const char* k : path) {
    if (!cur->is_object()) return "";
    auto it = cur->find(k);
    if (it == cur->end()) return "";
    cur = &*it;
  }
  return cur->is_string() ? cur->get<std::string>() : "";
}

bool validName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.')) {
      return false;
    }
  }
  return std::isalnum(static_cast<unsigned char>(name.front())) &&
         std::isalnum(static_cast<unsigned char>(name.back()));
}

std::string dq(std::string_view s) { return "\"" + std::string(s) + "\""; }

base::Status invalid(const ResourceInfo& res, std::string_view name, const std::string& field,
                     const std::string& detail) {
  return invalidObjectError(res.kind, name, field + ": " + detail);
}

bool hasFinalizers(const json& obj) {
  auto m = obj.find("metadata");
  if (m == obj.end() || !m->is_object()) return false;
  auto f = m->find("finalizers");
  return f != m->end() && f->is_array() && !f->empty();
}

bool isTerminating(const json& obj) {
  return obj.contains("metadata") && obj["metadata"].contains("deletionTimestamp") &&
         !obj["metadata"]["deletionTimestamp"].is_null();
}

// The admission check's verdict on a write of `object` over `old` (either may be null).
base::Status admitWrite(const AdmissionCheck& admit, AdmissionOperation op, const ResourceInfo& res,
                        std::string_view sub, const std::string& ns, const std::string& name,
                        const json* object, const json* old) {
  if (!admit) return base::okStatus();
  return admit({op, res.group, res.plural, std::string(sub), ns, name, object, old});
}

// POST's body must be an object of the resource's kind (when it names one).
base::Status checkCreateBody(const ResourceInfo& res, const json& object) {
  if (!object.is_object()) {
    return base::invalidArgumentError("the body of the request must be a " + res.kind + " object");
  }
  if (object.contains("kind") && object["kind"].is_string() && object["kind"] != res.kind) {
    return base::invalidArgumentError("the kind of the provided object (" +
                                      object["kind"].get<std::string>() +
                                      ") does not match the resource (" + res.kind + ")");
  }
  return base::okStatus();
}

// The object as created: its namespace (the request's must agree with the body's), kind,
// apiVersion and the defaults of pods and namespaces.
base::Status applyCreateDefaults(const ResourceInfo& res, std::string_view ns,
                                 const std::string& namespace_name, json& object) {
  json& meta = object["metadata"];
  const std::string body_ns = str(object, {"metadata", "namespace"});
  if (res.namespaced) {
    if (!ns.empty() && !body_ns.empty() && body_ns != ns) {
      return base::invalidArgumentError(
          "the namespace of the provided object does not match the namespace sent on the "
          "request");
    }
    meta["namespace"] = namespace_name;
  } else {
    meta.erase("namespace");
  }
  object["kind"] = res.kind;
  object["apiVersion"] = res.apiVersion();
  if (res.plural == "pods") defaultPod(object);
  if (res.plural == "namespaces") {
    if (!object.contains("status") || !object["status"].is_object())
      object["status"] = json::object();
    if (!object["status"].contains("phase")) object["status"]["phase"] = "Active";
    if (!object.contains("spec")) object["spec"] = json::object();
  }
  return base::okStatus();
}

// DELETE's preconditions on the object's UID and resourceVersion (409 Conflict).
base::Status checkDeletePreconditions(const DeleteOptions& options, const json& cur,
                                      uint64_t resource_version) {
  if (options.precondition_uid) {
    const std::string uid = str(cur, {"metadata", "uid"});
    if (*options.precondition_uid != uid) {
      return base::abortedError("Precondition failed: UID in precondition: " +
                                *options.precondition_uid + ", UID in object meta: " + uid);
    }
  }
  if (options.precondition_resource_version) {
    const std::string rv = std::to_string(resource_version);
    if (*options.precondition_resource_version != rv) {
      return base::abortedError("Precondition failed: ResourceVersion in precondition: " +
                                *options.precondition_resource_version +
                                ", ResourceVersion in object meta: " + rv);
    }
  }
  return base::okStatus();
}

// The grace period a deletion gets: a pod's own (or the request's), 0 for an unscheduled or
// finished pod and for anything that is not a pod.
int64_t deletionGracePeriod(const ResourceInfo& res, const json& cur,
                            const DeleteOptions& options) {
  if (res.plural != "pods") return 0;
  int64_t grace = cur["spec"].value("terminationGracePeriodSeconds", int64_t{30});
  if (options.grace_period_seconds) grace = *options.grace_period_seconds;
  if (grace < 0) grace = 0;
  // Unscheduled and finished pods have nothing to stop: they go at once.
  const std::string phase = str(cur, {"status", "phase"});
  if (str(cur, {"spec", "nodeName"}).empty() || phase == "Succeeded" || phase == "Failed") {
    grace = 0;
  }
  return grace;
}

// Where a list continues: after the object at `start`, in the snapshot of resourceVersion `rv`.
struct ContinueToken {
  std::pair<std::string, std::string> start;  // namespace, name
  uint64_t rv = 0;
};

base::StatusOr<std::optional<ContinueToken>> decodeContinueToken(const std::string& text) {
  if (text.empty()) return std::optional<ContinueToken>();
  auto decoded = base64Decode(text);
  json token;
  if (decoded) token = json::parse(*decoded, nullptr, false);
  if (!token.is_object() || !token.contains("rv") || !token.contains("start") ||
      !token["rv"].is_number_unsigned() || !token["start"].is_array() ||
      token["start"].size() != 2) {
    return base::invalidArgumentError("continue key is not valid: " + text);
  }
  return std::optional<ContinueToken>(
      ContinueToken{{token["start"][0].get<std::string>(), token["start"][1].get<std::string>()},
                    token["rv"].get<uint64_t>()});
}

bool selected(const json& obj, const LabelSelector& labels, const FieldSelector& fields) {
  if (!fields.empty() && !fields.matches([&](std::string_view f) { return fieldValue(obj, f); })) {
    return false;
  }
  if (!labels.empty()) {
    const json& meta = obj["metadata"];
    if (!labels.matches(meta.contains("labels") ? meta["labels"] : json())) return false;
  }
  return true;
}

// The selected objects of `snapshot` into `result`, at most `options.limit` of them when paged
// (then with a continue token and the count of the selected ones left).
void selectPage(const std::vector<StoredObject>& snapshot, const LabelSelector& labels,
                const FieldSelector& fields, const ListOptions& options, ListResult& result) {
  const bool paged = options.limit > 0 && options.resource_version != "0";
  for (size_t i = 0; i < snapshot.size(); ++i) {
    if (!selected(*snapshot[i].object, labels, fields)) continue;
    if (paged && static_cast<int64_t>(result.items.size()) == options.limit) {
      int64_t remaining = 0;
      for (size_t j = i; j < snapshot.size(); ++j) {
        if (selected(*snapshot[j].object, labels, fields)) ++remaining;
      }
      const json& last = *result.items.back().object;
      json token = {
          {"rv", result.resource_version},
          {"start", {str(last, {"metadata", "namespace"}), str(last, {"metadata", "name"})}}};
      result.continue_token = base64Encode(token.dump());
      result.remaining_item_count = remaining;
      break;
    }
    result.items.push_back(snapshot[i]);
  }
}

const std::vector<std::string> kDefaultNamespaces = {"default", "kube-system", "kube-node-lease",
                                                     "kube-public"};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Store

Store::Store(base::Clock& clock, StoreOptions options)
    : clock_(clock), options_(options), rng_(std::random_device{}()) {
  rv_ = compacted_rv_ = options_.initial_resource_version;
  for (const auto& ns : kDefaultNamespaces) {
    auto created = create("namespaces", "", json{{"metadata", {{"name", ns}}}});
    NA_CHECK(created.ok(), created.status().toString());
  }
}

Store::~Store() { closeAllWatches("server stopped"); }

base::StatusOr<const ResourceInfo*> Store::resolve(std::string_view resource) const {
  const ResourceInfo* res = findResource(resource);
  if (!res) {
    return base::notFoundError("the server could not find the requested resource (" +
                               std::string(resource) + ")");
  }
  return res;
}

std::string Store::effectiveNamespace(const ResourceInfo& res, std::string_view ns,
                                      const json& object) const {
  if (!res.namespaced) return "";
  if (!ns.empty()) return std::string(ns);
  std::string from_object = str(object, {"metadata", "namespace"});
  return from_object.empty() ? "default" : from_object;
}

StoredObject Store::makeStored(json object, uint64_t rv) const {
  object["metadata"]["resourceVersion"] = std::to_string(rv);
  auto text = std::make_shared<const std::string>(object.dump());
  return StoredObject{std::make_shared<const json>(std::move(object)), std::move(text), rv};
}

std::string Store::newUid() {
  std::uniform_int_distribution<int> hex(0, 15);
  std::string uid;
  const char* digits = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) uid += '-';
    int v = hex(rng_);
    if (i == 12) v = 4;
    if (i == 16) v = 8 | (v & 3);
    uid += digits[v];
  }
  return uid;
}

std::string Store::randomSuffix() {
  static constexpr std::string_view kChars = "bcdfghjklmnpqrstvwxz2456789";
  std::uniform_int_distribution<size_t> pick(0, kChars.size() - 1);
  std::string s;
  for (int i = 0; i < 5; ++i) s += kChars[pick(rng_)];
  return s;
}

base::StatusOr<json> Store::create(std::string_view resource, std::string_view ns, json object,
                                   const FieldWrite& write, const AdmissionCheck& admit) {
  ASSIGN_OR_RETURN(const ResourceInfo* res, resolve(resource));
  RETURN_IF_ERROR(checkCreateBody(*res, object));
  if (!object.contains("metadata") || !object["metadata"].is_object()) {
    object["metadata"] = json::object();
  }
  const std::string namespace_name = effectiveNamespace(*res, ns, object);
  RETURN_IF_ERROR(applyCreateDefaults(*res, ns, namespace_name, object));

  std::unique_lock lock(mu_);
  RETURN_IF_ERROR(admitWrite(admit, AdmissionOperation::kCreate, *res, "", namespace_name,
                             str(object, {"metadata", "name"}), &object, nullptr));
  Objects& objects = objects_[res];
  ASSIGN_OR_RETURN(const std::string name,
                   nameForCreateLocked(*res, objects, namespace_name, object));
  if (res->plural == "pods" && options_.validate_pods) RETURN_IF_ERROR(validatePod(*res, object));
  RETURN_IF_ERROR(prepareConfigObject(*res, object, nullptr));
  if (res->namespaced && !namespaceExistsLocked(namespace_name)) {
    return base::notFoundError("namespaces " + dq(namespace_name) + " not found");
  }
  const Key key{namespace_name, name};
  if (objects.contains(key)) {
    return base::alreadyExistsError(res->plural + " " + dq(name) + " already exists");
  }
  if (!write.manager.empty()) trackWrite(nullptr, object, write);
  json created = insertLocked(*res, key, std::move(object));
  if (res->plural == "namespaces") ensureDefaultServiceAccountLocked(name);
  return created;
}

json Store::insertLocked(const ResourceInfo& res, const Key& key, json object) {
  json& meta = object["metadata"];
  meta["uid"] = newUid();
  meta["creationTimestamp"] = formatTime(clock_.wallNow());
  meta.erase("deletionTimestamp");
  meta.erase("deletionGracePeriodSeconds");
  meta.erase("resourceVersion");
  StoredObject stored = makeStored(std::move(object), ++rv_);
  objects_[&res].emplace(key, stored);
  emitLocked(WatchEvent::Type::kAdded, res, stored, nullptr);
  return *stored.object;
}

bool Store::namespaceExistsLocked(const std::string& ns) const {
  auto objs = objects_.find(findResource("namespaces"));
  return objs != objects_.end() && objs->second.contains({"", ns});
}

void Store::ensureDefaultServiceAccountLocked(const std::string& ns) {
  const ResourceInfo* sa = findResource("", "serviceaccounts");
  if (!options_.default_service_accounts || !sa || !namespaceExistsLocked(ns)) return;
  const Key key{ns, "default"};
  if (objects_[sa].contains(key)) return;
  insertLocked(*sa, key,
               json{{"kind", sa->kind},
                    {"apiVersion", sa->apiVersion()},
                    {"metadata", {{"name", "default"}, {"namespace", ns}}}});
}

base::StatusOr<std::string> Store::nameForCreateLocked(const ResourceInfo& res,
                                                       const Objects& objects,
                                                       const std::string& namespace_name,
                                                       json& object) {
  std::string name = str(object, {"metadata", "name"});
  if (name.empty()) {
    const std::string generate = str(object, {"metadata", "generateName"});
    if (generate.empty()) {
      return invalid(res, "", "metadata.name", "Required value: name or generateName is required");
    }
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string candidate = generate + randomSuffix();
      if (!objects.contains({namespace_name, candidate})) {
        name = candidate;
        break;
      }
    }
    object["metadata"]["name"] = name;
  }
  if (res.plural == "certificatesigningrequests") {
    // kube-apiserver does not care what certificate requests are called
    // (ValidateCertificateRequestName): only that the name is one path segment.
    std::string bad;
    if (name == "." || name == "..") {
      bad = "may not be '" + name + "'";
    } else if (name.find('/') != std::string::npos) {
      bad = "may not contain '/'";
    } else if (name.find('%') != std::string::npos) {
      bad = "may not contain '%'";
    }
    if (!bad.empty())
      return invalid(res, name, "metadata.name", "Invalid value: " + dq(name) + ": " + bad);
    return name;
  }
  if (!validName(name)) {
    return invalid(res, name, "metadata.name",
                   "Invalid value: " + dq(name) +
                       ": a lowercase RFC 1123 subdomain must consist of lower case "
                       "alphanumeric characters, '-' or '.', and must start and end with an "
                       "alphanumeric character");
  }
  return name;
}

base::StatusOr<json> Store::get(std::string_view resource, std::string_view ns,
                                std::string_view name) const {
  ASSIGN_OR_RETURN(const ResourceInfo* res, resolve(resource));
  std::lock_guard lock(mu_);
  auto objs = objects_.find(res);
  const Key key{res->namespaced ? std::string(ns) : "", std::string(name)};
  if (objs == objects_.end() || !objs->second.contains(key)) {
    return base::notFoundError(res->plural + " " + dq(name) + " not found");
  }
  return *objs->second.at(key).object;
}

base::StatusOr<json> Store::update(std::string_view resource, std::string_view ns,
                                   std::string_view name, json object, std::string_view subresource,
                                   const FieldWrite& write, const AdmissionCheck& admit) {
  ASSIGN_OR_RETURN(const ResourceInfo* res, resolve(resource));
  if (!subresource.empty() && !res->hasSubresource(subresource)) {
    return base::notFoundError("the server could not find the requested resource");
  }
  if (!object.is_object()) {
    return base::invalidArgumentError("the body of the request must be a " + res->kind + " object");
  }
  const std::string body_name = str(object, {"metadata", "name"});
  if (!body_name.empty() && body_name != name) {
    return base::invalidArgumentError("the name of the object (" + body_name +
                                      ") does not match the name on the URL (" + std::string(name) +
                                      ")");
  }
  std::unique_lock lock(mu_);
  Objects& objects = objects_[res];
  const Key key{res->namespaced ? std::string(ns) : "", std::string(name)};
  auto it = objects.find(key);
  if (it == objects.end()) {
    return base::notFoundError(res->plural + " " + dq(name) + " not found");
  }
  const std::string body_rv = str(object, {"metadata", "resourceVersion"});
  if (!body_rv.empty() && body_rv != std::to_string(it->second.resource_version)) {
    return base::abortedError("Operation cannot be fulfilled on " + res->plural + " " + dq(name) +
                              ": the object has been modified; please apply your changes to the "
                              "latest version and try again");
  }
  const StoredObject current = it->second;
  return commitUpdateLocked(*res, key, current, std::move(object), subresource, write, admit);
}

base::StatusOr<json> Store::patch(std::string_view resource, std::string_view ns,
                                  std::string_view name, PatchType type, const json& patch_doc,
                                  std::string_view subresource, const FieldWrite& write,
                                  const AdmissionCheck& admit) {
  ASSIGN_OR_RETURN(const ResourceInfo* res, resolve(resource));
  if (!subresource.empty() && !res->hasSubresource(subresource)) {
    return base::notFoundError("the server could not find the requested resource");
  }
  std::unique_lock lock(mu_);
  Objects& objects = objects_[res];
  const Key key{res->namespaced ? std::string(ns) : "", std::string(name)};
  auto it = objects.find(key);
  if (it == objects.end()) {
    return base::notFoundError(res->plural + " " + dq(name) + " not found");
  }
  const StoredObject current = it->second;
  ASSIGN_OR_RETURN(json patched, applyPatch(type, *current.object, patch_doc));
  if (!patched.is_object()) {
    return base::invalidArgumentError("the patched " + res->kind + " is not an object");
  }
  const std::string cur_uid = str(*current.object, {"metadata", "uid"});
  const std::string new_uid = str(patched, {"metadata", "uid"});
  if (new_uid != cur_uid) {
    return base::abortedError("Precondition failed: UID in precondition: " + new_uid +
                              ", UID in object meta: " + cur_uid);
  }
  const std::string new_rv = str(patched, {"metadata", "resourceVersion"});
  if (!new_rv.empty() && new_rv != std::to_string(current.resource_version)) {
    return base::abortedError("Operation cannot be fulfilled on " + res->plural + " " + dq(name) +
                              ": the object has been modified; please apply your changes to the "
                              "latest version and try again");
  }
  if (str(patched, {"metadata", "name"}) != name) {
    return base::invalidArgumentError("a patch may not change metadata.name");
  }
  return commitUpdateLocked(*res, key, current, std::move(patched), subresource, write, admit);
}

base::StatusOr<ApplyOutcome> Store::apply(std::string_view resource, std::string_view ns,
                                          std::string_view name, const json& applied,
                                          const FieldWrite& write, bool force,
                                          const AdmissionCheck& admit) {
  ASSIGN_OR_RETURN(const ResourceInfo* res, resolve(resource));
  if (!write.subresource.empty() && !res->hasSubresource(write.subresource)) {
    return base::notFoundError("the server could not find the requested resource");
  }
  RETURN_IF_ERROR(checkApplyBody(*res, name, applied));
  if (res->namespaced && ns.empty()) {
    return base::notFoundError("the server could not find the requested resource");
  }
  FieldWrite stamped = write;
  stamped.time = formatTime(clock_.wallNow());
  std::unique_lock lock(mu_);
  Objects& objects = objects_[res];
  const Key key{res->namespaced ? std::string(ns) : "", std::string(name)};
  auto it = objects.find(key);
  if (it == objects.end()) {
    if (!write.subresource.empty()) {
      return base::notFoundError(res->plural + " " + dq(name) + " not found");
    }
    lock.unlock();
    ApplyResult made = applyConfiguration(nullptr, applied, stamped, force);
    made.object["metadata"]["name"] = std::string(name);
    made.object["metadata"]["namespace"] = std::string(ns);
    auto created = create(resource, ns, std::move(made.object), {}, admit);
    // Created by another writer in the meantime: apply to that one.
    if (created.status().code() == base::StatusCode::kAlreadyExists) {
      return apply(resource, ns, name, applied, write, force, admit);
    }
    if (!created.ok()) return created.status();
    return ApplyOutcome{std::move(*created), true, {}};
  }
  const StoredObject current = it->second;
  ApplyResult result = applyConfiguration(current.object.get(), applied, stamped, force);
  if (!result.conflicts.empty()) return ApplyOutcome{nullptr, false, std::move(result.conflicts)};
  ASSIGN_OR_RETURN(json updated, commitUpdateLocked(*res, key, current, std::move(result.object),
                                                    write.subresource, std::nullopt, admit));
  return ApplyOutcome{std::move(updated), false, {}};
}

base::Status Store::checkApplyBody(const ResourceInfo& res, std::string_view name,
                                   const json& applied) const {
  if (!applied.is_object()) {
    return base::invalidArgumentError("the body of an apply patch must be a " + res.kind +
                                      " object");
  }
  const std::string kind = str(applied, {"kind"});
  const std::string api_version = str(applied, {"apiVersion"});
  if (kind.empty() || api_version.empty()) {
    return base::invalidArgumentError("apiVersion and kind must be set in an apply patch");
  }
  if (kind != res.kind || api_version != res.apiVersion()) {
    return base::invalidArgumentError("the apply patch is a " + api_version + " " + kind +
                                      ", not a " + res.apiVersion() + " " + res.kind);
  }
  if (applied.contains("metadata") && !applied["metadata"].is_object()) {
    return base::invalidArgumentError("metadata of an apply patch must be an object");
  }
  const std::string body_name = str(applied, {"metadata", "name"});
  if (!body_name.empty() && body_name != name) {
    return base::invalidArgumentError("the name of the object (" + body_name +
                                      ") does not match the name on the URL (" + std::string(name) +
                                      ")");
  }
  return base::okStatus();
}

void Store::trackWrite(const json* current, json& next, FieldWrite write) const {
  if (write.manager.empty()) {
    // The stored managedFields stand; a client cannot write them directly.
    json& meta = next["metadata"];
    const json* kept =
        current != nullptr && current->contains("metadata") ? &(*current)["metadata"] : nullptr;
    if (kept != nullptr && kept->contains("managedFields")) {
      meta["managedFields"] = (*kept)["managedFields"];
    } else {
      meta.erase("managedFields");
    }
    return;
  }
  write.time = formatTime(clock_.wallNow());
  recordUpdate(current, next, write);
}

base::StatusOr<json> Store::commitUpdateLocked(const ResourceInfo& res, const Key& key,
                                               const StoredObject& current, json desired,
                                               std::string_view subresource,
                                               const std::optional<FieldWrite>& write,
                                               const AdmissionCheck& admit) {
  const json& cur = *current.object;
  json next;
  if (subresource == "status") {
    next = cur;
    if (desired.contains("status")) {
      next["status"] = desired["status"];
    } else {
      next.erase("status");
    }
    // An apply carries its managedFields in `desired`.
    if (!write && desired.contains("metadata") && desired["metadata"].is_object() &&
        desired["metadata"].contains("managedFields")) {
      next["metadata"]["managedFields"] = desired["metadata"]["managedFields"];
    }
  } else if (subresource == "approval") {
    // A CertificateSigningRequest's approval writes its conditions only.
    next = cur;
    const json* conditions = nullptr;
    if (desired.contains("status") && desired["status"].is_object() &&
        desired["status"].contains("conditions")) {
      conditions = &desired["status"]["conditions"];
    }
    if (!next.contains("status") || !next["status"].is_object()) next["status"] = json::object();
    if (conditions != nullptr) {
      next["status"]["conditions"] = *conditions;
      // As kube-apiserver's approval strategy: a condition's times default to now.
      for (json& c : next["status"]["conditions"]) {
        if (!c.is_object()) continue;
        for (const char* time : {"lastUpdateTime", "lastTransitionTime"}) {
          if (!c.contains(time) || c[time].is_null()) c[time] = formatTime(clock_.wallNow());
        }
      }
    } else {
      next["status"].erase("conditions");
    }
  } else {
    next = std::move(desired);
    // Like kube-apiserver, the main resource ignores status changes of types with a status
    // subresource.
    if (res.hasSubresource("status")) {
      if (cur.contains("status")) {
        next["status"] = cur["status"];
      } else {
        next.erase("status");
      }
    }
  }
  next["kind"] = res.kind;
  next["apiVersion"] = res.apiVersion();
  if (!next.contains("metadata") || !next["metadata"].is_object())
    next["metadata"] = json::object();
  json& meta = next["metadata"];
  const json& cur_meta = cur["metadata"];
  for (const char* immutable : {"name", "namespace", "uid", "creationTimestamp",
                                "deletionTimestamp", "deletionGracePeriodSeconds"}) {
    if (cur_meta.contains(immutable)) {
      meta[immutable] = cur_meta[immutable];
    } else {
      meta.erase(immutable);
    }
  }
  meta["resourceVersion"] = std::to_string(current.resource_version);
  if (subresource.empty()) RETURN_IF_ERROR(prepareConfigObject(res, next, &cur));
  if (write) trackWrite(&cur, next, *write);
  RETURN_IF_ERROR(admitWrite(admit, AdmissionOperation::kUpdate, res, subresource, key.first,
                             key.second, &next, &cur));
  if (next == cur) return cur;  // a no-op write changes nothing and emits nothing
  if (res.plural == "pods" && options_.validate_pods) RETURN_IF_ERROR(validatePod(res, next));

  auto previous = current.object;
  StoredObject stored = makeStored(std::move(next), ++rv_);
  objects_[&res][key] = stored;
  emitLocked(WatchEvent::Type::kModified, res, stored, previous);
  const json& obj = *stored.object;
  // Removing the last finalizer of an object whose deletion is due completes the deletion.
  if (isTerminating(obj) && !hasFinalizers(obj) &&
      obj["metadata"].value("deletionGracePeriodSeconds", int64_t{0}) == 0) {
    json removed = removeLocked(res, key);
    ensureDefaultServiceAccountLocked(key.first);
    return removed;
  }
  return obj;
}

json Store::removeLocked(const ResourceInfo& res, const Key& key) {
  Objects& objects = objects_[&res];
  auto it = objects.find(key);
  json last = *it->second.object;
  objects.erase(it);
  StoredObject stored = makeStored(last, ++rv_);
  emitLocked(WatchEvent::Type::kDeleted, res, stored, nullptr);
  return *stored.object;
}

base::StatusOr<DeleteResult> Store::remove(std::string_view resource, std::string_view ns,
                                           std::string_view name, const DeleteOptions& options,
                                           const AdmissionCheck& admit) {
  ASSIGN_OR_RETURN(const ResourceInfo* res, resolve(resource));
  std::unique_lock lock(mu_);
  Objects& objects = objects_[res];
  const Key key{res->namespaced ? std::string(ns) : "", std::string(name)};
  auto it = objects.find(key);
  if (it == objects.end()) {
    return base::notFoundError(res->plural + " " + dq(name) + " not found");
  }
  const json cur = *it->second.object;
  RETURN_IF_ERROR(checkDeletePreconditions(options, cur, it->second.resource_version));
  RETURN_IF_ERROR(admitWrite(admit, AdmissionOperation::kDelete, *res, "", key.first, key.second,
                             nullptr, &cur));
  if (res->plural == "namespaces") return removeNamespaceLocked(*res, key);

  const int64_t grace = deletionGracePeriod(*res, cur, options);
  const bool finalizers = hasFinalizers(cur);
  if (grace == 0 && !finalizers) {
    DeleteResult result{removeLocked(*res, key), true};
    // The service account controller's work: a namespace always has its default one.
    if (res->plural == "serviceaccounts") ensureDefaultServiceAccountLocked(key.first);
    return result;
  }

  // Graceful deletion: mark, keep the object; a shorter grace period may shorten it further.
  json next = cur;
  json& meta = next["metadata"];
  if (isTerminating(cur)) {
    const int64_t current_grace = meta.value("deletionGracePeriodSeconds", int64_t{0});
    if (grace >= current_grace) return DeleteResult{cur, false};
  }
  meta["deletionTimestamp"] = formatTime(clock_.wallNow() + std::chrono::seconds(grace));
  meta["deletionGracePeriodSeconds"] = grace;
  auto previous = it->second.object;
  StoredObject stored = makeStored(std::move(next), ++rv_);
  it->second = stored;
  emitLocked(WatchEvent::Type::kModified, *res, stored, previous);
  return DeleteResult{*stored.object, false};
}

base::StatusOr<DeleteResult> Store::removeNamespaceLocked(const ResourceInfo& res, const Key& key) {
  const std::string& name = key.second;
  if (name == "default" || name == "kube-system" || name == "kube-public") {
    return base::permissionDeniedError("namespaces " + dq(name) +
                                       " is forbidden: this namespace may not be deleted");
  }
  // The namespace controller's work, done at once: everything in it goes first.
  for (const auto& r : allResources()) {
    if (!r.namespaced) continue;
    Objects& objs = objects_[&r];
    std::vector<Key> doomed;
    for (auto o = objs.lower_bound({name, ""}); o != objs.end() && o->first.first == name; ++o) {
      doomed.push_back(o->first);
    }
    for (const auto& k : doomed) removeLocked(r, k);
  }
  return DeleteResult{removeLocked(res, key), true};
}

base::Status Store::waitForResourceVersionLocked(std::unique_lock<std::mutex>& lock,
                                                 std::string_view rv_text, bool allow_wait) const {
  if (rv_text.empty() || rv_text == "0") return base::okStatus();
  auto rv = parseRv(rv_text);
  if (!rv) {
    return base::invalidArgumentError("invalid resource version " + dq(rv_text));
  }
  if (*rv <= rv_) return base::okStatus();
  if (allow_wait) {
    rv_cv_.wait_for(lock, options_.too_large_resource_version_wait, [&] { return rv_ >= *rv; });
  }
  if (*rv <= rv_) return base::okStatus();
  return base::deadlineExceededError("Too large resource version: " + std::string(rv_text) +
                                     ", current: " + std::to_string(rv_));
}

base::StatusOr<ListResult> Store::list(std::string_view resource, std::string_view ns,
                                       const ListOptions& options) const {
  ASSIGN_OR_RETURN(const ResourceInfo* res, resolve(resource));
  ASSIGN_OR_RETURN(LabelSelector labels, LabelSelector::parse(options.label_selector));
  ASSIGN_OR_RETURN(FieldSelector fields, FieldSelector::parse(options.field_selector));
  for (const auto& term : fields.terms()) {
    if (!res->supportsField(term.field)) {
      return base::invalidArgumentError("field label not supported: " + term.field);
    }
  }
  ASSIGN_OR_RETURN(std::optional<ContinueToken> token, decodeContinueToken(options.continue_token));

  ListResult result;
  std::vector<StoredObject> snapshot;
  {
    std::unique_lock lock(mu_);
    if (!token) RETURN_IF_ERROR(waitForResourceVersionLocked(lock, options.resource_version, true));
    if (token && token->rv < compacted_rv_) {
      return base::outOfRangeError(
          "The provided continue parameter is too old to display a consistent list result. You "
          "can start a new list without the continue parameter, or use the continue token in "
          "this response to retrieve the remainder of the results.");
    }
    result.resource_version = token ? token->rv : rv_;
    snapshot = snapshotLocked(*res, ns, token ? &token->start : nullptr);
  }
  // Selectors run outside the lock: writers never wait for a big list.
  selectPage(snapshot, labels, fields, options, result);
  return result;
}

std::vector<StoredObject> Store::snapshotLocked(const ResourceInfo& res, std::string_view ns,
                                                const Key* start_after) const {
  std::vector<StoredObject> snapshot;
  auto objs = objects_.find(&res);
  if (objs == objects_.end()) return snapshot;
  const Objects& m = objs->second;
  auto begin = m.begin();
  if (start_after) {
    begin = m.upper_bound(*start_after);
  } else if (!ns.empty() && res.namespaced) {
    begin = m.lower_bound({std::string(ns), ""});
  }
  for (auto it = begin; it != m.end(); ++it) {
    if (!ns.empty() && res.namespaced && it->first.first != ns) break;
    snapshot.push_back(it->second);
  }
  return snapshot;
}

base::StatusOr<json> Store::listJson(std::string_view resource, std::string_view ns,
                                     const ListOptions& options) const {
  ASSIGN_OR_RETURN(const ResourceInfo* res, resolve(resource));
  ASSIGN_OR_RETURN(ListResult result, list(resource, ns, options));
  json items = json::array();
  for (const auto& item : result.items) items.push_back(*item.object);
  json meta = {{"resourceVersion", std::to_string(result.resource_version)}};
  if (!result.continue_token.empty()) meta["continue"] = result.continue_token;
  if (result.remaining_item_count) meta["remainingItemCount"] = *result.remaining_item_count;
  return json{{"kind", res->listKind()},
              {"apiVersion", res->apiVersion()},
              {"metadata", meta},
              {"items", items}};
}

uint64_t Store::resourceVersion() const {
  std::lock_guard lock(mu_);
  return rv_;
}

}  // namespace nodeagent::testapiserver
