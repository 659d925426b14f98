// The OpenAPI documents made of the served types' schema (openapi.h): one swagger 2.0 document
// for /openapi/v2 and an OpenAPI 3.0 document per group version for /openapi/v3/..., both built
// once from the same type table and the served resources.
#include <openssl/sha.h>

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/openapi.h"

namespace nodeagent::testapiserver {

using nlohmann::json;

namespace {

// The kinds that are only ever created (reviews and token requests) and where they are posted.
struct CreateOnlyKind {
  std::string group_version;  // of the path: "api/v1", "apis/authentication.k8s.io/v1"
  std::string path;           // below the group version
  std::string type;           // "authentication.v1.TokenReview"
  std::string operation;      // kube's operationId
};

const std::vector<CreateOnlyKind>& createOnlyKinds() {
  static const std::vector<CreateOnlyKind> kKinds = {
      {"api/v1", "namespaces/{namespace}/serviceaccounts/{name}/token",
       "authentication.v1.TokenRequest", "createCoreV1NamespacedServiceAccountToken"},
      {"apis/authentication.k8s.io/v1", "tokenreviews", "authentication.v1.TokenReview",
       "createAuthenticationV1TokenReview"},
      {"apis/authorization.k8s.io/v1", "subjectaccessreviews",
       "authorization.v1.SubjectAccessReview", "createAuthorizationV1SubjectAccessReview"},
  };
  return kKinds;
}

std::string groupVersionKey(const std::string& group, const std::string& version) {
  return group.empty() ? "api/" + version : "apis/" + group + "/" + version;
}

// "core.v1.Pod" -> {"group": "", "kind": "Pod", "version": "v1"}.
json groupVersionKind(std::string_view type) {
  std::string package(type.substr(0, type.find('.')));
  std::string group = package == "core" || package == "meta" ? "" : package + ".k8s.io";
  return {{"group", group}, {"kind", type.substr(type.rfind('.') + 1)}, {"version", "v1"}};
}

// "core.v1.Pod" -> "core.v1.PodList": list types are made here (SchemaWriter::list), not tabled.
std::string listTypeName(std::string_view type) { return std::string(type) + "List"; }

// "Always|IfNotPresent|Never" split at '|' -> ["Always", "IfNotPresent", "Never"].
json splitList(std::string_view values, char separator) {
  json out = json::array();
  size_t start = 0;
  while (true) {
    size_t end = values.find(separator, start);
    out.push_back(values.substr(start, end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

class SchemaWriter {
 public:
  explicit SchemaWriter(bool v3) : v3_(v3) {}

  json ref(std::string_view type) const {
    return {{"$ref",
             std::string(v3_ ? "#/components/schemas/" : "#/definitions/") + openApiName(type)}};
  }

  json typeOf(std::string_view type) const {
    if (type == "string") return {{"type", "string"}};
    if (type == "int32" || type == "int64") return {{"type", "integer"}, {"format", type}};
    if (type == "boolean") return {{"type", "boolean"}};
    if (type == "number") return {{"type", "number"}, {"format", "double"}};
    if (type == "byte") return {{"type", "string"}, {"format", "byte"}};
    if (type == "Object")
      return {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}};
    if (type.starts_with("[]")) return {{"type", "array"}, {"items", typeOf(type.substr(2))}};
    if (type.starts_with("map[")) {
      return {{"type", "object"},
              {"additionalProperties", typeOf(type.substr(4, type.size() - 5))}};
    }
    return ref(type);
  }

  // A field: its type with its description beside it (OpenAPI 3.0 allows nothing beside a $ref,
  // so kube wraps the reference in allOf there) and its patch strategy.
  json field(const SchemaField& f) const {
    std::string_view type = f.type.starts_with('!') ? f.type.substr(1) : f.type;
    json out = typeOf(type);
    if (v3_ && out.contains("$ref")) out = {{"allOf", json::array({out})}};
    if (!f.description.empty()) out["description"] = f.description;
    if (!f.enum_values.empty()) out["enum"] = splitList(f.enum_values, '|');
    if (f.list == "set") out["x-kubernetes-list-type"] = "set";
    if (f.list.starts_with("map:")) {
      out["x-kubernetes-list-type"] = "map";
      out["x-kubernetes-list-map-keys"] = splitList(f.list.substr(4), ',');
    }
    if (!f.patch.empty()) {
      std::string_view patch = f.patch;
      size_t colon = patch.find(':');
      out["x-kubernetes-patch-strategy"] = patch.substr(0, colon);
      if (colon != std::string_view::npos) {
        out["x-kubernetes-patch-merge-key"] = patch.substr(colon + 1);
      }
    }
    return out;
  }

  json type(const SchemaType& t) const {
    json properties = json::object();
    json required = json::array();
    t.forEachField([&](const SchemaField& f) {
      properties[std::string(f.name)] = field(f);
      if (f.type.starts_with('!')) required.push_back(f.name);
    });
    json out = {{"description", t.description}, {"type", "object"}, {"properties", properties}};
    if (!required.empty()) out["required"] = required;
    if (t.field("apiVersion") && t.field("kind") && t.field("metadata")) {
      out["x-kubernetes-group-version-kind"] = json::array({groupVersionKind(t.name)});
    }
    return out;
  }

  json list(std::string_view item_type) const {
    json gvk = groupVersionKind(item_type);
    std::string kind = gvk["kind"];
    gvk["kind"] = kind + "List";
    json properties = {
        {"apiVersion", {{"type", "string"}, {"description", "APIVersion of this list."}}},
        {"items",
         {{"type", "array"}, {"items", ref(item_type)}, {"description", "List of " + kind + "s."}}},
        {"kind", {{"type", "string"}, {"description", "Kind of this list."}}},
        {"metadata", field({"metadata", "meta.v1.ListMeta", "Standard list metadata."})}};
    return {{"description", kind + "List is a list of " + kind + "s."},
            {"type", "object"},
            {"required", {"items"}},
            {"properties", properties},
            {"x-kubernetes-group-version-kind", json::array({gvk})}};
  }

  // The JSON-serialized scalars kube defines as named types.
  json builtins() const {
    json time = {{"description",
                  "Time is a wrapper around time.Time which supports correct "
                  "marshaling to YAML and JSON."},
                 {"type", "string"},
                 {"format", "date-time"}};
    json quantity = {{"description", "Quantity is a fixed-point representation of a number."}};
    json int_or_string = {
        {"description", "IntOrString is a type that can hold an int32 or a string."}};
    if (v3_) {
      quantity["oneOf"] = {{{"type", "string"}}, {{"type", "number"}}};
      int_or_string["oneOf"] = {{{"type", "integer"}}, {{"type", "string"}}};
      int_or_string["x-kubernetes-int-or-string"] = true;
    } else {
      quantity["type"] = "string";
      int_or_string["type"] = "string";
      int_or_string["format"] = "int-or-string";
    }
    json micro_time = time;
    micro_time["description"] = "MicroTime is version of Time with microsecond level precision.";
    micro_time["format"] = "date-time";
    return {{openApiName("Quantity"), quantity},
            {openApiName("Time"), time},
            {openApiName("MicroTime"), micro_time},
            {openApiName("IntOrString"), int_or_string},
            {"io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
             {{"description",
               "Patch is provided to give a concrete name and type to the "
               "Kubernetes PATCH request body."},
              {"type", "object"}}}};
  }

 private:
  bool v3_;
};

// The table types `type` is made of, itself included.
void addReachable(std::string_view type, std::set<std::string_view>& out) {
  const SchemaType* spec = findType(type);
  if (!spec || !out.insert(spec->name).second) return;
  for (const auto& f : spec->fields) {
    std::string_view t = f.type;
    while (!t.empty() && (t[0] == '!' || t.starts_with("[]") || t.starts_with("map["))) {
      if (t[0] == '!') t.remove_prefix(1);
      if (t.starts_with("[]")) t.remove_prefix(2);
      if (t.starts_with("map[")) t = t.substr(4, t.size() - 5);
    }
    addReachable(t, out);
  }
}

// One group version's kinds: the stored ones (with list types) and the create-only ones.
struct GroupVersionKinds {
  std::vector<const ResourceInfo*> stored;
  std::vector<const CreateOnlyKind*> created;
};

std::map<std::string, GroupVersionKinds> servedGroupVersions() {
  std::map<std::string, GroupVersionKinds> out;
  for (const auto& r : allResources()) {
    if (!kindTypeName(r).empty()) out[groupVersionKey(r.group, r.version)].stored.push_back(&r);
  }
  for (const auto& k : createOnlyKinds()) out[k.group_version].created.push_back(&k);
  return out;
}

json schemasOf(const GroupVersionKinds& kinds, const SchemaWriter& writer) {
  std::set<std::string_view> types;
  for (const auto* r : kinds.stored) addReachable(kindTypeName(*r), types);
  for (const auto* k : kinds.created) addReachable(k->type, types);
  addReachable("meta.v1.Status", types);
  json schemas = writer.builtins();
  for (std::string_view t : types) schemas[openApiName(t)] = writer.type(*findType(t));
  for (const auto* r : kinds.stored) {
    std::string type = kindTypeName(*r);
    schemas[openApiName(listTypeName(type))] = writer.list(type);
  }
  return schemas;
}

// An operation's query parameter.
json queryParameter(const std::string& name, const std::string& description, bool v3) {
  json p = {{"name", name}, {"in", "query"}, {"description", description}, {"uniqueItems", true}};
  if (v3) {
    p["schema"] = {{"type", "string"}};
  } else {
    p["type"] = "string";
  }
  return p;
}

json writeParameters(bool v3, bool patch) {
  json params = json::array(
      {queryParameter("dryRun",
                      "When present, indicates that modifications should not be persisted.", v3),
       queryParameter("fieldManager",
                      "fieldManager is a name associated with the actor or entity "
                      "that is making these changes.",
                      v3),
       queryParameter("fieldValidation",
                      "fieldValidation instructs the server on how to handle objects in the "
                      "request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid "
                      "values are: - Ignore - Warn (the default) - Strict",
                      v3)});
  if (patch) {
    params.push_back(queryParameter(
        "force",
        "Force is going to \"force\" Apply requests. It must be unset for non-apply patch "
        "requests.",
        v3));
  }
  return params;
}

// One operation of a path. `body` is the request body's type ("" for none, "Patch" for the
// patch types); `response` the answer's.
struct OperationSpec {
  std::string id;
  std::string action;  // x-kubernetes-action
  std::string description;
  std::string body;
  std::string response;
  json gvk;
};

json operation(const OperationSpec& op, const SchemaWriter& writer, bool v3) {
  json out = {{"operationId", op.id},
              {"description", op.description},
              {"x-kubernetes-action", op.action},
              {"x-kubernetes-group-version-kind", op.gvk}};
  const bool patch = op.body == "Patch";
  json params = op.body.empty() ? json::array() : writeParameters(v3, patch);
  json body_schema =
      patch ? json{{"$ref", std::string(v3 ? "#/components/schemas/" : "#/definitions/") +
                                "io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}}
            : writer.ref(op.body);
  std::vector<std::string> consumes = {"*/*"};
  if (patch) {
    consumes = {"application/apply-patch+yaml", "application/json-patch+json",
                "application/merge-patch+json", "application/strategic-merge-patch+json"};
  }
  std::vector<std::string> produces = {"application/json", "application/yaml",
                                       "application/vnd.kubernetes.protobuf"};
  json response = writer.ref(op.response);
  if (v3) {
    if (!op.body.empty()) {
      json content = json::object();
      for (const auto& c : consumes) content[c] = {{"schema", body_schema}};
      out["requestBody"] = {{"content", content}, {"required", true}};
    }
    json content = json::object();
    for (const auto& p : produces) content[p] = {{"schema", response}};
    out["responses"] = {{"200", {{"description", "OK"}, {"content", content}}}};
  } else {
    if (!op.body.empty()) {
      params.push_back(
          {{"name", "body"}, {"in", "body"}, {"required", true}, {"schema", body_schema}});
    }
    out["consumes"] = consumes;
    out["produces"] = produces;
    out["schemes"] = {"https"};
    out["responses"] = {{"200", {{"description", "OK"}, {"schema", response}}}};
  }
  out["parameters"] = params;
  return out;
}

json pathParameters(bool with_namespace, bool with_name, bool v3) {
  json params = json::array();
  auto add = [&](const std::string& name, const std::string& description) {
    json p = {{"name", name},
              {"in", "path"},
              {"required", true},
              {"description", description},
              {"uniqueItems", true}};
    if (v3) {
      p["schema"] = {{"type", "string"}};
    } else {
      p["type"] = "string";
    }
    params.push_back(p);
  };
  if (with_name) add("name", "name of the object");
  if (with_namespace)
    add("namespace", "object name and auth scope, such as for teams and projects");
  params.push_back(queryParameter("pretty", "If 'true', then the output is pretty printed.", v3));
  return params;
}

// "coordination.k8s.io" -> "CoordinationV1", "" -> "CoreV1".
std::string operationGroup(const std::string& group) {
  std::string name = group.empty() ? "core" : group.substr(0, group.find('.'));
  name[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(name[0])));
  return name + "V1";
}

// The paths of one stored resource: its collection, its objects and their subresources.
void addResourcePaths(const ResourceInfo& r, const std::string& prefix, const SchemaWriter& writer,
                      bool v3, json& paths) {
  const std::string type = kindTypeName(r);
  const json gvk = groupVersionKind(type);
  const std::string scope = r.namespaced ? "Namespaced" : "";
  const std::string id = operationGroup(r.group) + scope + r.kind;
  const std::string base = prefix + (r.namespaced ? "/namespaces/{namespace}/" : "/") + r.plural;
  auto op = [&](const std::string& verb, const std::string& action, const std::string& what,
                const std::string& body, const std::string& response, const std::string& suffix) {
    return operation({verb + id + suffix, action, what + " " + r.kind, body, response, gvk}, writer,
                     v3);
  };
  json collection = {
      {"parameters", pathParameters(r.namespaced, false, v3)},
      {"get", op("list", "list", "list or watch objects of kind", "", listTypeName(type), "")},
      {"post", op("create", "post", "create a", type, type, "")}};
  paths[base] = collection;
  json item = {{"parameters", pathParameters(r.namespaced, true, v3)},
               {"get", op("read", "get", "read the specified", "", type, "")},
               {"put", op("replace", "put", "replace the specified", type, type, "")},
               {"patch", op("patch", "patch", "partially update the specified", "Patch", type, "")},
               {"delete", op("delete", "delete", "delete a", "", type, "")}};
  paths[base + "/{name}"] = item;
  for (const auto& sub : r.subresources) {
    std::string suffix = sub;
    suffix[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0])));
    paths[base + "/{name}/" + sub] = {
        {"parameters", pathParameters(r.namespaced, true, v3)},
        {"get", op("read", "get", "read " + sub + " of the specified", "", type, suffix)},
        {"put", op("replace", "put", "replace " + sub + " of the specified", type, type, suffix)},
        {"patch", op("patch", "patch", "partially update " + sub + " of the specified", "Patch",
                     type, suffix)}};
  }
  if (r.namespaced) {
    paths[prefix + "/" + r.plural] = {
        {"parameters", pathParameters(false, false, v3)},
        {"get", operation({"list" + operationGroup(r.group) + r.kind + "ForAllNamespaces", "list",
                           "list or watch objects of kind " + r.kind, "", listTypeName(type), gvk},
                          writer, v3)}};
  }
}

json pathsOf(const std::string& key, const GroupVersionKinds& kinds, const SchemaWriter& writer,
             bool v3) {
  const std::string prefix = "/" + key;
  json paths = json::object();
  for (const auto* r : kinds.stored) addResourcePaths(*r, prefix, writer, v3, paths);
  for (const auto* k : kinds.created) {
    bool named = k->path.find("{name}") != std::string::npos;
    bool namespaced = k->path.find("{namespace}") != std::string::npos;
    paths[prefix + "/" + k->path] = {
        {"parameters", pathParameters(namespaced, named, v3)},
        {"post", operation({k->operation, "post",
                            "create a " + std::string(groupVersionKind(k->type)["kind"]), k->type,
                            k->type, groupVersionKind(k->type)},
                           writer, v3)}};
  }
  return paths;
}

json info() { return {{"title", "Kubernetes"}, {"version", "v1.32.0"}}; }

struct V3Documents {
  std::map<std::string, json, std::less<>> documents;
  std::map<std::string, std::string, std::less<>> hashes;
  json index;
};

std::string sha512Hex(const std::string& text) {
  unsigned char digest[SHA512_DIGEST_LENGTH];
  SHA512(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : digest) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

const V3Documents& v3Documents() {
  static const V3Documents kDocuments = [] {
    V3Documents out;
    SchemaWriter writer(true);
    json index_paths = json::object();
    for (const auto& [key, kinds] : servedGroupVersions()) {
      json doc = {{"openapi", "3.0.0"},
                  {"info", info()},
                  {"paths", pathsOf(key, kinds, writer, true)},
                  {"components",
                   {{"schemas", schemasOf(kinds, writer)},
                    {"securitySchemes",
                     {{"BearerToken",
                       {{"type", "apiKey"},
                        {"name", "authorization"},
                        {"in", "header"},
                        {"description", "Bearer Token authentication"}}}}}}}};
      std::string hash = sha512Hex(doc.dump());
      index_paths[key] = {{"serverRelativeURL", "/openapi/v3/" + key + "?hash=" + hash}};
      out.hashes[key] = hash;
      out.documents[key] = std::move(doc);
    }
    out.index = {{"paths", index_paths}};
    return out;
  }();
  return kDocuments;
}

}  // namespace

const json& openApiV3Index() { return v3Documents().index; }

const json* openApiV3Document(std::string_view group_version) {
  const auto& docs = v3Documents().documents;
  auto it = docs.find(group_version);
  return it == docs.end() ? nullptr : &it->second;
}

const std::string& openApiV3Hash(std::string_view group_version) {
  static const std::string kNone;
  const auto& hashes = v3Documents().hashes;
  auto it = hashes.find(group_version);
  return it == hashes.end() ? kNone : it->second;
}

const json& openApiV2Document() {
  static const json kDocument = [] {
    SchemaWriter writer(false);
    json paths = json::object();
    json definitions = json::object();
    for (const auto& [key, kinds] : servedGroupVersions()) {
      paths.update(pathsOf(key, kinds, writer, false));
      definitions.update(schemasOf(kinds, writer));
    }
    return json{{"swagger", "2.0"},
                {"info", info()},
                {"paths", paths},
                {"definitions", definitions},
                {"securityDefinitions",
                 {{"BearerToken",
                   {{"type", "apiKey"},
                    {"name", "authorization"},
                    {"in", "header"},
                    {"description", "Bearer Token authentication"}}}}},
                {"security", {{{"BearerToken", json::array()}}}}};
  }();
  return kDocument;
}

}  // namespace nodeagent::testapiserver
