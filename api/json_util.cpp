#include "api/json_util.h"

#include <cmath>
#include <limits>

namespace nodeagent::api::json_util {
namespace {

const char* typeName(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "object";
    case json::value_t::array:
      return "array";
    case json::value_t::string:
      return "string";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    default:
      return "unsupported value";
  }
}

// An integral JSON number as int64 (integral floats too: YAML's 1e3 is 1000).
base::StatusOr<int64_t> toInt64(const json& j, const Path& p) {
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return fieldError(p, "integer " + j.dump() + " is out of range");
    }
    return static_cast<int64_t>(u);
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) {
    double d = j.get<double>();
    if (std::trunc(d) != d) return fieldError(p, "expected an integer, got " + j.dump());
    if (d < -9.2233720368547758e18 || d >= 9.2233720368547758e18) {
      return fieldError(p, "integer " + j.dump() + " is out of range");
    }
    return static_cast<int64_t>(d);
  }
  return typeError(p, "an integer", j);
}

base::StatusOr<int32_t> toInt32(const json& j, const Path& p) {
  ASSIGN_OR_RETURN(int64_t v, toInt64(j, p));
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    return fieldError(p, "integer " + std::to_string(v) + " is out of the 32-bit range");
  }
  return static_cast<int32_t>(v);
}

const json* find(const json& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

void render(const Path* p, std::string& out) {
  if (p == nullptr) return;
  render(p->parent, out);
  if (p->index >= 0) {
    out += '[';
    out += std::to_string(p->index);
    out += ']';
  } else if (!p->key.empty()) {
    if (!out.empty()) out += '.';
    out += p->key;
  }
}

}  // namespace

std::string Path::str() const {
  std::string out;
  render(this, out);
  return out.empty() ? "<root>" : out;
}

base::Status fieldError(const Path& path, const std::string& message) {
  return base::invalidArgumentError(path.str() + ": " + message);
}

base::Status typeError(const Path& path, const char* what, const json& j) {
  return fieldError(path, std::string("expected ") + what + ", got " + typeName(j));
}

base::Status checkObject(const json& j, const Path& p) {
  if (!j.is_object()) return typeError(p, "an object", j);
  return base::okStatus();
}

base::StatusOr<const json*> member(const json& obj, const Path&, std::string_view key) {
  return find(obj, key);
}

base::StatusOr<const json*> objectMember(const json& obj, const Path& p, std::string_view key) {
  const json* m = find(obj, key);
  if (m != nullptr && !m->is_object()) return typeError(p.field(key), "an object", *m);
  return m;
}

base::StatusOr<const json*> arrayMember(const json& obj, const Path& p, std::string_view key) {
  const json* m = find(obj, key);
  if (m != nullptr && !m->is_array()) return typeError(p.field(key), "an array", *m);
  return m;
}

base::Status readString(const json& obj, const Path& p, std::string_view key, std::string* out) {
  const json* m = find(obj, key);
  if (m == nullptr) return base::okStatus();
  if (!m->is_string()) return typeError(p.field(key), "a string", *m);
  *out = m->get_ref<const std::string&>();
  return base::okStatus();
}

base::Status readBool(const json& obj, const Path& p, std::string_view key, bool* out) {
  const json* m = find(obj, key);
  if (m == nullptr) return base::okStatus();
  if (!m->is_boolean()) return typeError(p.field(key), "a boolean", *m);
  *out = m->get<bool>();
  return base::okStatus();
}

base::Status readBool(const json& obj, const Path& p, std::string_view key,
                      std::optional<bool>* out) {
  const json* m = find(obj, key);
  if (m == nullptr) return base::okStatus();
  if (!m->is_boolean()) return typeError(p.field(key), "a boolean", *m);
  *out = m->get<bool>();
  return base::okStatus();
}

base::Status readInt32(const json& obj, const Path& p, std::string_view key, int32_t* out) {
  const json* m = find(obj, key);
  if (m == nullptr) return base::okStatus();
  ASSIGN_OR_RETURN(*out, toInt32(*m, p.field(key)));
  return base::okStatus();
}

base::Status readInt32(const json& obj, const Path& p, std::string_view key,
                       std::optional<int32_t>* out) {
  const json* m = find(obj, key);
  if (m == nullptr) return base::okStatus();
  ASSIGN_OR_RETURN(*out, toInt32(*m, p.field(key)));
  return base::okStatus();
}

base::Status readInt64(const json& obj, const Path& p, std::string_view key, int64_t* out) {
  const json* m = find(obj, key);
  if (m == nullptr) return base::okStatus();
  ASSIGN_OR_RETURN(*out, toInt64(*m, p.field(key)));
  return base::okStatus();
}

base::Status readInt64(const json& obj, const Path& p, std::string_view key,
                       std::optional<int64_t>* out) {
  const json* m = find(obj, key);
  if (m == nullptr) return base::okStatus();
  ASSIGN_OR_RETURN(*out, toInt64(*m, p.field(key)));
  return base::okStatus();
}

base::Status readStringList(const json& obj, const Path& p, std::string_view key,
                            std::vector<std::string>* out) {
  ASSIGN_OR_RETURN(const json* m, arrayMember(obj, p, key));
  if (m == nullptr) return base::okStatus();
  Path fp = p.field(key);
  out->clear();
  out->reserve(m->size());
  for (size_t i = 0; i < m->size(); ++i) {
    const json& e = (*m)[i];
    if (!e.is_string()) return typeError(fp.at(i), "a string", e);
    out->push_back(e.get<std::string>());
  }
  return base::okStatus();
}

base::Status readInt64List(const json& obj, const Path& p, std::string_view key,
                           std::vector<int64_t>* out) {
  ASSIGN_OR_RETURN(const json* m, arrayMember(obj, p, key));
  out->clear();
  if (m == nullptr) return base::okStatus();
  Path fp = p.field(key);
  out->reserve(m->size());
  for (size_t i = 0; i < m->size(); ++i) {
    ASSIGN_OR_RETURN(int64_t v, toInt64((*m)[i], fp.at(i)));
    out->push_back(v);
  }
  return base::okStatus();
}

base::Status readStringMap(const json& obj, const Path& p, std::string_view key, StringMap* out) {
  ASSIGN_OR_RETURN(const json* m, objectMember(obj, p, key));
  if (m == nullptr) return base::okStatus();
  Path fp = p.field(key);
  out->clear();
  for (const auto& [k, v] : m->items()) {
    if (!v.is_string()) return typeError(fp.field(k), "a string", v);
    out->emplace(k, v.get<std::string>());
  }
  return base::okStatus();
}

base::Status readStringMap(const json& obj, const Path& p, std::string_view key,
                           StringTable* out) {
  ASSIGN_OR_RETURN(const json* m, objectMember(obj, p, key));
  if (m == nullptr) return base::okStatus();
  Path fp = p.field(key);
  std::vector<StringTable::value_type> items;
  items.reserve(m->size());
  for (const auto& [k, v] : m->items()) {
    if (!v.is_string()) return typeError(fp.field(k), "a string", v);
    items.emplace_back(k, v.get_ref<const std::string&>());
  }
  *out = StringTable(std::move(items));
  return base::okStatus();
}

base::Status readTime(const json& obj, const Path& p, std::string_view key,
                      std::optional<Timestamp>* out) {
  const json* m = find(obj, key);
  if (m == nullptr) return base::okStatus();
  if (!m->is_string()) return typeError(p.field(key), "an RFC 3339 time string", *m);
  auto t = parseTime(m->get_ref<const std::string&>());
  if (!t.ok()) return fieldError(p.field(key), t.status().message());
  *out = *t;
  return base::okStatus();
}

namespace {

base::StatusOr<Quantity> toQuantity(const json& j, const Path& p) {
  std::string text;
  if (j.is_string()) {
    text = j.get<std::string>();
  } else if (j.is_number()) {
    // resource.Quantity accepts bare JSON numbers (YAML "cpu: 2").
    text = j.dump();
  } else {
    return typeError(p, "a quantity string", j);
  }
  auto q = Quantity::parse(text);
  if (!q.ok()) return fieldError(p, q.status().message());
  return *q;
}

}  // namespace

base::Status readQuantity(const json& obj, const Path& p, std::string_view key,
                          std::optional<Quantity>* out) {
  const json* m = find(obj, key);
  if (m == nullptr) return base::okStatus();
  ASSIGN_OR_RETURN(*out, toQuantity(*m, p.field(key)));
  return base::okStatus();
}

base::Status readQuantityMap(const json& obj, const Path& p, std::string_view key,
                             std::map<std::string, Quantity>* out) {
  ASSIGN_OR_RETURN(const json* m, objectMember(obj, p, key));
  if (m == nullptr) return base::okStatus();
  Path fp = p.field(key);
  out->clear();
  for (const auto& [k, v] : m->items()) {
    ASSIGN_OR_RETURN(Quantity q, toQuantity(v, fp.field(k)));
    out->emplace(k, std::move(q));
  }
  return base::okStatus();
}

base::StatusOr<ObjectMeta> decodeObjectMeta(const json& j, const Path& p) {
  RETURN_IF_ERROR(checkObject(j, p));
  ObjectMeta m;
  RETURN_IF_ERROR(readString(j, p, "name", &m.name));
  RETURN_IF_ERROR(readString(j, p, "generateName", &m.generate_name));
  RETURN_IF_ERROR(readString(j, p, "namespace", &m.namespace_));
  RETURN_IF_ERROR(readString(j, p, "uid", &m.uid));
  RETURN_IF_ERROR(readString(j, p, "resourceVersion", &m.resource_version));
  RETURN_IF_ERROR(readInt64(j, p, "generation", &m.generation));
  RETURN_IF_ERROR(readTime(j, p, "creationTimestamp", &m.creation_timestamp));
  RETURN_IF_ERROR(readTime(j, p, "deletionTimestamp", &m.deletion_timestamp));
  RETURN_IF_ERROR(readInt64(j, p, "deletionGracePeriodSeconds", &m.deletion_grace_period_seconds));
  RETURN_IF_ERROR(readStringMap(j, p, "labels", &m.labels));
  RETURN_IF_ERROR(readStringMap(j, p, "annotations", &m.annotations));
  ASSIGN_OR_RETURN(const json* owners, arrayMember(j, p, "ownerReferences"));
  if (owners != nullptr) {
    Path op = p.field("ownerReferences");
    for (size_t i = 0; i < owners->size(); ++i) {
      const json& o = (*owners)[i];
      Path ip = op.at(i);
      RETURN_IF_ERROR(checkObject(o, ip));
      OwnerReference r;
      RETURN_IF_ERROR(readString(o, ip, "apiVersion", &r.api_version));
      RETURN_IF_ERROR(readString(o, ip, "kind", &r.kind));
      RETURN_IF_ERROR(readString(o, ip, "name", &r.name));
      RETURN_IF_ERROR(readString(o, ip, "uid", &r.uid));
      RETURN_IF_ERROR(readBool(o, ip, "controller", &r.controller));
      RETURN_IF_ERROR(readBool(o, ip, "blockOwnerDeletion", &r.block_owner_deletion));
      m.owner_references.push_back(std::move(r));
    }
  }
  return m;
}

json encodeObjectMeta(const ObjectMeta& m) {
  json j = json::object();
  auto str = [&](const char* key, const std::string& v) {
    if (!v.empty()) j[key] = v;
  };
  str("name", m.name);
  str("generateName", m.generate_name);
  str("namespace", m.namespace_);
  str("uid", m.uid);
  str("resourceVersion", m.resource_version);
  if (m.generation != 0) j["generation"] = m.generation;
  if (m.creation_timestamp) j["creationTimestamp"] = formatTime(*m.creation_timestamp);
  if (m.deletion_timestamp) j["deletionTimestamp"] = formatTime(*m.deletion_timestamp);
  if (m.deletion_grace_period_seconds) {
    j["deletionGracePeriodSeconds"] = *m.deletion_grace_period_seconds;
  }
  if (!m.labels.empty()) j["labels"] = m.labels.toMap();
  if (!m.annotations.empty()) j["annotations"] = m.annotations.toMap();
  if (!m.owner_references.empty()) {
    json owners = json::array();
    for (const auto& r : m.owner_references) {
      json o = {{"apiVersion", r.api_version}, {"kind", r.kind}, {"name", r.name}, {"uid", r.uid}};
      if (r.controller) o["controller"] = *r.controller;
      if (r.block_owner_deletion) o["blockOwnerDeletion"] = *r.block_owner_deletion;
      owners.push_back(std::move(o));
    }
    j["ownerReferences"] = std::move(owners);
  }
  return j;
}

base::Status checkKind(const json& obj, std::string_view kind, std::string_view api_version) {
  Path root;
  const json* k = find(obj, "kind");
  if (k != nullptr && (!k->is_string() || k->get_ref<const std::string&>() != kind)) {
    return fieldError(root.field("kind"),
                      "expected \"" + std::string(kind) + "\", got " + k->dump());
  }
  const json* v = find(obj, "apiVersion");
  if (v != nullptr && (!v->is_string() || v->get_ref<const std::string&>() != api_version)) {
    return fieldError(root.field("apiVersion"),
                      "expected \"" + std::string(api_version) + "\", got " + v->dump());
  }
  return base::okStatus();
}

}  // namespace nodeagent::api::json_util
