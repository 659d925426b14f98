// Schema lookups and the field validation of request bodies (openapi.h). The documents are in
// openapi_documents.cpp.
#include "cmd/test-apiserver/openapi.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/api_status.h"

namespace nodeagent::testapiserver {

using nlohmann::json;

const SchemaField* SchemaType::field(std::string_view field_name) const {
  for (const auto& f : fields) {
    if (f.name == field_name) return &f;
    const SchemaType* inline_type = f.name.empty() ? findType(f.type) : nullptr;
    const SchemaField* inner = inline_type ? inline_type->field(field_name) : nullptr;
    if (inner) return inner;
  }
  return nullptr;
}

void SchemaType::forEachField(const std::function<void(const SchemaField&)>& fn) const {
  for (const auto& f : fields) {
    const SchemaType* inline_type = f.name.empty() ? findType(f.type) : nullptr;
    if (inline_type) {
      inline_type->forEachField(fn);
    } else {
      fn(f);
    }
  }
}

const SchemaType* findType(std::string_view name) {
  const auto& types = servedTypes();
  auto it = std::lower_bound(types.begin(), types.end(), name,
                             [](const SchemaType& t, std::string_view n) { return t.name < n; });
  return it != types.end() && it->name == name ? &*it : nullptr;
}

std::string openApiName(std::string_view name) {
  if (name == "Quantity") return "io.k8s.apimachinery.pkg.api.resource.Quantity";
  if (name == "Time" || name == "MicroTime") {
    return "io.k8s.apimachinery.pkg.apis.meta.v1." + std::string(name);
  }
  if (name == "IntOrString") return "io.k8s.apimachinery.pkg.util.intstr.IntOrString";
  if (name.starts_with("meta.")) return "io.k8s.apimachinery.pkg.apis." + std::string(name);
  return "io.k8s.api." + std::string(name);
}

std::string kindTypeName(const ResourceInfo& resource) {
  std::string package =
      resource.group.empty() ? "core" : resource.group.substr(0, resource.group.find('.'));
  std::string name = package + "." + resource.version + "." + resource.kind;
  return findType(name) ? name : "";
}

std::optional<FieldValidation> parseFieldValidation(std::string_view value) {
  if (value.empty() || value == "Warn") return FieldValidation::kWarn;
  if (value == "Strict") return FieldValidation::kStrict;
  if (value == "Ignore") return FieldValidation::kIgnore;
  return std::nullopt;
}

json invalidFieldValidationStatus(std::string_view value, std::string_view options_kind) {
  const std::string cause = "Unsupported value: " + json(value).dump() +
                            R"(: supported values: "", "Ignore", "Strict", "Warn")";
  const std::string message =
      std::string(options_kind) + R"(.meta.k8s.io "" is invalid: fieldValidation: )" + cause;
  return statusObject(422, message, "Invalid",
                      {{"group", "meta.k8s.io"},
                       {"kind", options_kind},
                       {"causes",
                        {{{"reason", "FieldValueNotSupported"},
                          {"message", cause},
                          {"field", "fieldValidation"}}}}});
}

namespace {

// kube-apiserver keeps at most this many strict decoding errors of one body (sigs.k8s.io/json).
constexpr size_t kMaxProblems = 100;

// Walks a JSON text as sigs.k8s.io/json's strict decoder walks it into the Go types: a frame per
// object or array being read, the path of the value being read, and every unknown or repeated
// key recorded once in the order met.
class StrictWalker : public nlohmann::json_sax<json> {
 public:
  StrictWalker(std::string_view root, bool patch) : pending_(root), patch_(patch) {}

  std::vector<std::string> problems() && { return std::move(problems_); }

  bool null() override { return scalar(); }
  bool boolean(bool) override { return scalar(); }
  bool number_integer(number_integer_t) override { return scalar(); }
  bool number_unsigned(number_unsigned_t) override { return scalar(); }
  bool number_float(number_float_t, const string_t&) override { return scalar(); }
  bool string(string_t&) override { return scalar(); }
  bool binary(binary_t&) override { return scalar(); }

  bool start_object(std::size_t) override {
    std::string_view type = valueType();
    Frame frame{Frame::kOpaque, nullptr, {}, path_.size(), {}, 0};
    if (type.starts_with("map[")) {
      frame.kind = Frame::kMap;
      frame.element = type.substr(4, type.size() - 5);
    } else if (const SchemaType* spec = findType(type)) {
      frame.kind = Frame::kObject;
      frame.type = spec;
    }
    frames_.push_back(std::move(frame));
    return true;
  }

  bool key(string_t& name) override {
    Frame& frame = frames_.back();
    path_.resize(frame.path_length);
    if (frame.kind == Frame::kOpaque) {
      pending_ = "Object";
      return true;
    }
    if (!frame.seen.insert(name).second) record("duplicate field", name);
    if (frame.kind == Frame::kMap) {
      pending_ = frame.element;
    } else if (const SchemaField* f = frame.type->field(name)) {
      pending_ = f->type.starts_with('!') ? f->type.substr(1) : f->type;
    } else {
      pending_ = "Object";
      if (!(patch_ && name.starts_with('$'))) record("unknown field", name);
    }
    if (!path_.empty()) path_ += '.';
    path_ += name;
    return true;
  }

  bool end_object() override { return end(); }

  bool start_array(std::size_t) override {
    std::string_view type = valueType();
    Frame frame{Frame::kOpaque, nullptr, {}, path_.size(), {}, 0};
    if (type.starts_with("[]")) {
      frame.kind = Frame::kArray;
      frame.element = type.substr(2);
    }
    frames_.push_back(std::move(frame));
    return true;
  }

  bool end_array() override { return end(); }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    problems_.clear();
    return false;
  }

 private:
  struct Frame {
    enum Kind { kObject, kMap, kArray, kOpaque } kind;
    const SchemaType* type;    // kObject
    std::string_view element;  // kMap, kArray: the type of the values
    size_t path_length;        // of the path of this object or array
    std::set<std::string> seen;
    size_t next_index;  // kArray
  };

  // The type of the value about to be read; an array item's path gets its index here.
  std::string_view valueType() {
    if (frames_.empty()) return pending_;
    Frame& frame = frames_.back();
    if (frame.kind == Frame::kOpaque) return "Object";
    if (frame.kind != Frame::kArray) return pending_;
    path_.resize(frame.path_length);
    path_ += "[" + std::to_string(frame.next_index++) + "]";
    return frame.element;
  }

  bool scalar() {
    valueType();
    return true;
  }

  bool end() {
    frames_.pop_back();
    return true;
  }

  // sigs.k8s.io/json's newFieldError: the path of the enclosing value, '.', the key.
  void record(std::string_view what, const std::string& key) {
    std::string field = path_.empty() ? key : path_ + "." + key;
    std::string problem = std::string(what) + " " + json(field).dump();
    if (problems_.size() < kMaxProblems && reported_.insert(problem).second) {
      problems_.push_back(std::move(problem));
    }
  }

  std::vector<Frame> frames_;
  std::string path_;
  std::string_view pending_;
  bool patch_;
  std::vector<std::string> problems_;
  std::set<std::string> reported_;
};

}  // namespace

namespace {

// A list item's path element as structured-merge-diff writes it: its key fields for an
// associative list (a port's missing protocol is its default, TCP), its value in a set, its
// index otherwise.
std::string listItemPath(std::string_view list, const json& item, size_t index) {
  if (list == "set") return "[=" + item.dump() + "]";
  if (!list.starts_with("map:") || !item.is_object()) return "[" + std::to_string(index) + "]";
  std::string out = "[";
  std::string_view keys = list.substr(4);
  while (!keys.empty()) {
    const std::string key(keys.substr(0, keys.find(',')));
    keys.remove_prefix(std::min(keys.size(), key.size() + 1));
    json value = item.contains(key) ? item[key] : key == "protocol" ? json("TCP") : json();
    if (value.is_null()) return "[" + std::to_string(index) + "]";
    out += (out.size() > 1 ? "," : "") + key + "=" + value.dump();
  }
  return out + "]";
}

void applyWalk(std::string_view type, std::string_view list, const json& value,
               const std::string& path, std::vector<std::string>& out) {
  if (type.starts_with('!')) type.remove_prefix(1);
  if (type.starts_with("[]")) {
    if (!value.is_array()) return;
    for (size_t i = 0; i < value.size(); ++i) {
      applyWalk(type.substr(2), "", value[i], path + listItemPath(list, value[i], i), out);
    }
    return;
  }
  if (type.starts_with("map[")) {
    if (!value.is_object()) return;
    for (const auto& [key, item] : value.items()) {
      applyWalk(type.substr(4, type.size() - 5), "", item, path + "." + key, out);
    }
    return;
  }
  const SchemaType* spec = findType(type);
  if (!spec || !value.is_object()) return;
  for (const auto& [key, item] : value.items()) {
    if (const SchemaField* f = spec->field(key)) {
      applyWalk(f->type, f->list, item, path + "." + key, out);
    } else {
      out.push_back(path + "." + key + ": field not declared in schema");
    }
  }
}

}  // namespace

std::vector<std::string> applyProblems(std::string_view type, const json& object) {
  std::vector<std::string> out;
  applyWalk(type, "", object, "", out);
  return out;
}

std::vector<std::string> fieldProblems(std::string_view type, std::string_view body, bool patch) {
  if (!findType(type)) return {};
  StrictWalker walker(type, patch);
  if (!json::sax_parse(body.begin(), body.end(), &walker)) return {};
  return std::move(walker).problems();
}

}  // namespace nodeagent::testapiserver
