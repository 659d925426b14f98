// Field ownership as kube-apiserver keeps it in metadata.managedFields, and server-side apply on
// top of it, at a coarser granularity than kube-apiserver's structured merge: a field is a key
// of metadata.labels or metadata.annotations, metadata.finalizers or metadata.ownerReferences as
// a whole, a key of a top-level object (.spec.containers, .spec.restartPolicy, .data.<key>,
// .status.conditions), or a top-level value that is no object (.type, .immutable). A list such
// as .spec.containers is one field: two managers that set different containers conflict. An
// applied value is laid over the live one (objects merged key by key, lists with a strategic
// merge key element by element), so the server's defaults inside it stay and applying the values
// that are already there is no conflict; a key a manager stops applying inside such a value is
// not removed.
//
// Each manager's entry is kube-apiserver's ManagedFieldsEntry (manager, operation Apply or
// Update, apiVersion, time, fieldsType FieldsV1, fieldsV1 with "f:" keys, subresource), so
// `kubectl get --show-managed-fields` shows who owns what.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nodeagent::testapiserver {

using FieldPath = std::vector<std::string>;
using FieldSet = std::set<FieldPath>;

// The fields `object` sets: only those under .status when `status_only`, else those outside
// .status when `skip_status`, else all.
FieldSet fieldsOf(const nlohmann::json& object, bool status_only = false, bool skip_status = false);
// ".spec.containers", ".metadata.labels.app.kubernetes.io/name".
std::string fieldPathString(const FieldPath& path);
// {"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:containers":{}}}, and back.
nlohmann::json toFieldsV1(const FieldSet& fields);
FieldSet fromFieldsV1(const nlohmann::json& fields_v1);

// Who writes: the field manager (kube-apiserver's fieldManager parameter, else the User-Agent up
// to its first '/'), the object's apiVersion, the subresource ("" or "status") and the time.
// An empty manager tracks nothing: the object keeps the managedFields it had.
// A write to the main resource of a type with a status subresource leaves .status alone, as a
// write to "status" leaves everything else (kube-apiserver's reset fields).
struct FieldWrite {
  std::string manager;
  std::string api_version;
  std::string subresource;
  std::string time;  // metav1.Time
  bool has_status_subresource = false;

  bool statusOnly() const { return subresource == "status"; }
  bool skipStatus() const { return subresource.empty() && has_status_subresource; }
};

// An Update (create, update, non-apply patch) from `old` (nullptr for a create) to `next`: the
// writer owns every field (of its part of the object) it set or changed, which other managers no
// longer own, and a field gone from `next` is no one's. Writes next.metadata.managedFields from
// old's (what the client sent there is replaced).
void recordUpdate(const nlohmann::json* old, nlohmann::json& next, const FieldWrite& write);

struct ApplyConflict {
  std::string manager;  // as kube-apiserver prints it: "m", or "m" using v1 at <time> (Update)
  std::string field;    // fieldPathString
};

struct ApplyResult {
  nlohmann::json object;  // the object to store (null when there are conflicts)
  std::vector<ApplyConflict> conflicts;
};

// Server-side apply of the configuration `applied` by `write.manager` to `live` (nullptr: the
// object is created from it). A field another manager owns conflicts when the applied value
// differs from the live one; with `force` the writer takes it over instead. Fields the writer
// applied before but no longer does are removed unless another manager owns them.
ApplyResult applyConfiguration(const nlohmann::json* live, const nlohmann::json& applied,
                               const FieldWrite& write, bool force);

// kube-apiserver's 409 Conflict Status for `conflicts` ("Apply failed with 1 conflict: conflict
// with \"kubectl\": .spec.containers", one FieldManagerConflict cause per field).
nlohmann::json applyConflictStatus(const std::vector<ApplyConflict>& conflicts);

}  // namespace nodeagent::testapiserver
