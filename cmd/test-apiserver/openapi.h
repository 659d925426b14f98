// The OpenAPI schema of the served types (openapi_types.cpp) and what is made of it: the documents
// kube-apiserver serves at /openapi/v2 (swagger 2.0, JSON or protobuf) and /openapi/v3[/<group
// version>] (OpenAPI 3.0), which kubectl explain, kubectl apply's patch computation and kubectl's
// check for server-side field validation read; and that field validation of request bodies
// (fieldValidation=Strict|Warn|Ignore), worded as kube-apiserver's strict decoding.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "cmd/test-apiserver/resources.h"

namespace nodeagent::testapiserver {

// One field of a served type. `type` is a small grammar: an optional leading '!' marks a required
// field, then one of "string", "int32", "int64", "boolean", "number", "byte" (a base64 string),
// "Quantity", "Time", "MicroTime", "IntOrString", "Object" (any JSON, kept as it is),
// "[]<type>", "map[<type>]" (string keys) or a type name such as "core.v1.Container".
// `patch` is the strategic merge patch strategy and merge key, "merge:name",
// "merge,retainKeys:name" or "merge", when the field has one. `enum_values` are the values of a
// string enum, sorted and separated by '|' ("Always|IfNotPresent|Never"). `list` is how
// server-side apply treats a list: "map:<key>[,<key>]" (items identified by those fields), "set"
// (by their value) or "" (atomic). A field with an empty name stands for all the fields of the
// type it names (Go's inline embedding).
struct SchemaField {
  constexpr SchemaField(std::string_view field_name, std::string_view field_type,
                        std::string_view field_description, std::string_view field_patch = {},
                        std::string_view field_enum = {}, std::string_view field_list = {})
      : name(field_name),
        type(field_type),
        description(field_description),
        patch(field_patch),
        enum_values(field_enum),
        list(field_list) {}

  std::string_view name;
  std::string_view type;
  std::string_view description;
  std::string_view patch;
  std::string_view enum_values;
  std::string_view list;
};

struct SchemaType {
  std::string_view name;  // "core.v1.Pod"; openApiName() gives kube's full name
  std::string_view description;
  std::vector<SchemaField> fields;

  // The field named `field_name`, inline ones looked into; nullptr when there is none.
  const SchemaField* field(std::string_view field_name) const;
  // Calls `fn` with every field, inline ones replaced by their type's fields.
  void forEachField(const std::function<void(const SchemaField&)>& fn) const;
};

// Every type the served kinds are made of, sorted by name.
const std::vector<SchemaType>& servedTypes();
// nullptr when `name` ("core.v1.Container") is not a served type.
const SchemaType* findType(std::string_view name);
// kube's definition name: "core.v1.Pod" -> "io.k8s.api.core.v1.Pod", "meta.v1.ObjectMeta" ->
// "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "Quantity" ->
// "io.k8s.apimachinery.pkg.api.resource.Quantity".
std::string openApiName(std::string_view name);
// The type of a served kind ("core.v1.Pod"); empty when the kind has no schema.
std::string kindTypeName(const ResourceInfo& resource);

enum class FieldValidation { kIgnore, kWarn, kStrict };

// The fieldValidation query parameter's value as kube-apiserver reads it: "" is Warn (its
// default since 1.27); nullopt for anything but "", Ignore, Warn and Strict.
std::optional<FieldValidation> parseFieldValidation(std::string_view value);

// kube-apiserver's message for a fieldValidation value it does not know (the 422 Invalid of
// `options_kind`, "CreateOptions", "UpdateOptions" or "PatchOptions").
nlohmann::json invalidFieldValidationStatus(std::string_view value, std::string_view options_kind);

// The unknown and duplicate fields of the JSON document `body` decoded as type `type`, in the
// order they appear and each once, worded as sigs.k8s.io/json's strict decoding does:
// `unknown field "spec.containers[0].imagex"`, `duplicate field "metadata.name"` (fields joined
// with '.', list items as [i], map keys as .key). Values of unknown fields and of "Object"
// fields are not looked into. `patch`: a strategic merge patch, whose directives ($patch,
// $setElementOrder/..., $retainKeys, $deleteFromPrimitiveList/...) are known everywhere. Nothing
// when `type` is not served or `body` is not JSON (the caller answers that).
std::vector<std::string> fieldProblems(std::string_view type, std::string_view body,
                                       bool patch = false);

// The fields of an applied configuration (server-side apply) that `type` does not have, as
// kube-apiserver's structured-merge-diff names them: ".spec.foo: field not declared in schema",
// list items by their keys (`.spec.containers[name="c"].imagex`), by value (`[="x"]`) or by
// index (`[0]`).
std::vector<std::string> applyProblems(std::string_view type, const nlohmann::json& object);

// The OpenAPI 3.0 index: {"paths": {"api/v1": {"serverRelativeURL":
// "/openapi/v3/api/v1?hash=<HASH>"}, "apis/coordination.k8s.io/v1": {...}, ...}}.
const nlohmann::json& openApiV3Index();
// The document of one group version ("api/v1", "apis/coordination.k8s.io/v1"); nullptr when
// it is not served.
const nlohmann::json* openApiV3Document(std::string_view group_version);
// The document's hash as kube-apiserver computes it (SHA-512, upper-case hex), its ETag.
const std::string& openApiV3Hash(std::string_view group_version);
// The swagger 2.0 document of all served group versions.
const nlohmann::json& openApiV2Document();
// Its definitions as the gnostic protobuf client-go reads (openapi_v2.Document; no paths).
const std::string& openApiV2Protobuf();

}  // namespace nodeagent::testapiserver
