#include "cmd/test-apiserver/managed_fields.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>

#include "cmd/test-apiserver/api_status.h"
#include "cmd/test-apiserver/patch.h"
#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {
namespace {

using nlohmann::json;

constexpr char kApply[] = "Apply";
constexpr char kUpdate[] = "Update";

struct Entry {
  std::string manager;
  std::string operation;
  std::string api_version;
  std::string time;
  std::string subresource;
  FieldSet fields;

  bool sameWriter(const FieldWrite& w, const char* op) const {
    return manager == w.manager && operation == op && subresource == w.subresource &&
           (operation == kApply || api_version == w.api_version);
  }
};

std::vector<Entry> readEntries(const json* object) {
  std::vector<Entry> entries;
  if (object == nullptr || !object->contains("metadata")) return entries;
  const json& meta = (*object)["metadata"];
  const auto list = meta.find("managedFields");
  if (list == meta.end() || !list->is_array()) return entries;
  for (const json& e : *list) {
    if (!e.is_object() || stringAt(e, "manager").empty()) continue;
    Entry entry{stringAt(e, "manager"), stringAt(e, "operation"),   stringAt(e, "apiVersion"),
                stringAt(e, "time"),    stringAt(e, "subresource"), {}};
    if (e.contains("fieldsV1")) entry.fields = fromFieldsV1(e["fieldsV1"]);
    entries.push_back(std::move(entry));
  }
  return entries;
}

void writeEntries(const std::vector<Entry>& entries, json& object) {
  json list = json::array();
  for (const Entry& e : entries) {
    if (e.fields.empty()) continue;
    json out = {{"manager", e.manager},        {"operation", e.operation},
                {"apiVersion", e.api_version}, {"time", e.time},
                {"fieldsType", "FieldsV1"},    {"fieldsV1", toFieldsV1(e.fields)}};
    if (!e.subresource.empty()) out["subresource"] = e.subresource;
    list.push_back(std::move(out));
  }
  json& meta = object["metadata"];
  if (list.empty()) {
    meta.erase("managedFields");
  } else {
    meta["managedFields"] = std::move(list);
  }
}

Entry& writerEntry(std::vector<Entry>& entries, const FieldWrite& write, const char* op) {
  for (Entry& e : entries) {
    if (e.sameWriter(write, op)) return e;
  }
  entries.push_back({write.manager, op, write.api_version, write.time, write.subresource, {}});
  return entries.back();
}

const json* valueAt(const json& object, const FieldPath& path) {
  const json* at = &object;
  for (const std::string& key : path) {
    if (!at->is_object()) return nullptr;
    const auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

void setAt(json& object, const FieldPath& path, const json& value) {
  json* at = &object;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    json& next = (*at)[path[i]];
    if (!next.is_object()) next = json::object();
    at = &next;
  }
  (*at)[path.back()] = value;
}

void eraseAt(json& object, const FieldPath& path) {
  json* parent = &object;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    if (!parent->is_object() || !parent->contains(path[i])) return;
    parent = &(*parent)[path[i]];
  }
  if (!parent->is_object()) return;
  parent->erase(path.back());
  // An emptied label or annotation map goes too.
  if (path.size() == 3 && path[0] == "metadata" && parent->empty()) {
    object["metadata"].erase(path[1]);
  }
}

// The live value with the applied one laid over it: objects merged key by key (keys only the
// live value has, such as the server's defaults, stay), lists with a strategic merge key merged
// element by element in the applied order, anything else replaced.
json overlay(const json& live, const json& applied, std::string_view field) {
  if (live.is_object() && applied.is_object()) {
    json out = live;
    for (const auto& [key, value] : applied.items()) {
      const auto it = out.find(key);
      out[key] = it == out.end() ? value : overlay(*it, value, key);
    }
    return out;
  }
  const std::optional<std::string_view> merge_key = strategicMergeKey(field);
  if (!merge_key || !live.is_array() || !applied.is_array()) return applied;
  const std::string key(*merge_key);
  json out = json::array();
  for (const json& element : applied) {
    const auto match = std::find_if(live.begin(), live.end(), [&](const json& l) {
      return l.is_object() && element.is_object() && l.contains(key) && element.contains(key) &&
             l[key] == element[key];
    });
    out.push_back(match == live.end() ? element : overlay(*match, element, ""));
  }
  return out;
}

// What the field becomes when `applied` is applied over `live`.
json appliedValue(const json* live, const json& applied, const FieldPath& path) {
  const json* want = valueAt(applied, path);
  const json* have = live != nullptr ? valueAt(*live, path) : nullptr;
  return have != nullptr ? overlay(*have, *want, path.back()) : *want;
}

bool sameValue(const json& a, const json& b, const FieldPath& path) {
  const json* x = valueAt(a, path);
  const json* y = valueAt(b, path);
  return x != nullptr && y != nullptr && *x == *y;
}

std::string managerLabel(const Entry& e) {
  std::string label = "\"" + e.manager + "\"";
  if (!e.subresource.empty()) label += " with subresource \"" + e.subresource + "\"";
  if (e.operation == kUpdate) {
    label += " using " + e.api_version;
    if (!e.time.empty()) label += " at " + e.time;
  }
  return label;
}

}  // namespace

FieldSet fieldsOf(const json& object, bool status_only, bool skip_status) {
  FieldSet fields;
  if (!object.is_object()) return fields;
  for (const auto& [key, value] : object.items()) {
    if (key == "apiVersion" || key == "kind") continue;
    if ((key == "status") != status_only && (status_only || skip_status)) continue;
    if (key == "metadata") {
      if (!value.is_object()) continue;
      for (const char* map : {"labels", "annotations"}) {
        const auto it = value.find(map);
        if (it == value.end() || !it->is_object()) continue;
        for (const auto& item : it->items()) fields.insert({"metadata", map, item.key()});
      }
      for (const char* whole : {"finalizers", "ownerReferences"}) {
        if (value.contains(whole)) fields.insert({"metadata", whole});
      }
    } else if (value.is_object() && !value.empty()) {
      for (const auto& item : value.items()) fields.insert({key, item.key()});
    } else {
      fields.insert({key});
    }
  }
  return fields;
}

std::string fieldPathString(const FieldPath& path) {
  std::string out;
  for (const std::string& part : path) out += "." + part;
  return out;
}

json toFieldsV1(const FieldSet& fields) {
  json out = json::object();
  for (const FieldPath& path : fields) {
    json* at = &out;
    for (const std::string& key : path) at = &(*at)["f:" + key];
    if (at->is_null()) *at = json::object();
  }
  return out;
}

FieldSet fromFieldsV1(const json& fields_v1) {
  FieldSet fields;
  const auto walk = [&fields](const auto& self, const json& node, FieldPath& path) -> void {
    bool leaf = true;
    if (node.is_object()) {
      for (const auto& [key, child] : node.items()) {
        if (!key.starts_with("f:")) continue;
        leaf = false;
        path.push_back(key.substr(2));
        self(self, child, path);
        path.pop_back();
      }
    }
    if (leaf && !path.empty()) fields.insert(path);
  };
  FieldPath path;
  walk(walk, fields_v1, path);
  return fields;
}

void recordUpdate(const json* old, json& next, const FieldWrite& write) {
  std::vector<Entry> entries = readEntries(old);
  if (!write.manager.empty()) {
    const FieldSet now = fieldsOf(next, write.statusOnly(), write.skipStatus());
    FieldSet changed;
    for (const FieldPath& f : now) {
      if (old == nullptr || !sameValue(*old, next, f)) changed.insert(f);
    }
    FieldSet removed;
    if (old != nullptr) {
      for (const FieldPath& f : fieldsOf(*old, write.statusOnly(), write.skipStatus())) {
        if (!now.contains(f)) removed.insert(f);
      }
    }
    for (Entry& e : entries) {
      for (const FieldPath& f : removed) e.fields.erase(f);
      for (const FieldPath& f : changed) e.fields.erase(f);
    }
    if (!changed.empty()) {
      Entry& mine = writerEntry(entries, write, kUpdate);
      mine.fields.insert(changed.begin(), changed.end());
      mine.time = write.time;
    }
  }
  writeEntries(entries, next);
}

ApplyResult applyConfiguration(const json* live, const json& applied, const FieldWrite& write,
                               bool force) {
  const FieldSet wanted = fieldsOf(applied, write.statusOnly(), write.skipStatus());
  std::vector<Entry> entries = readEntries(live);
  Entry& mine = writerEntry(entries, write, kApply);
  const FieldSet before = mine.fields;
  ApplyResult result;
  for (Entry& e : entries) {
    if (&e == &mine || live == nullptr) continue;
    for (const FieldPath& f : wanted) {
      const json* have = valueAt(*live, f);
      if (!e.fields.contains(f) || (have != nullptr && appliedValue(live, applied, f) == *have)) {
        continue;
      }
      if (force) {
        e.fields.erase(f);
      } else {
        result.conflicts.push_back({managerLabel(e), fieldPathString(f)});
      }
    }
  }
  if (!result.conflicts.empty()) return result;
  json object = live != nullptr ? *live : applied;
  // An apply that changes nothing leaves the object as it is, managedFields times included.
  bool changed = live == nullptr || before != wanted || mine.api_version != write.api_version;
  if (live != nullptr) {
    for (const FieldPath& f : before) {
      if (wanted.contains(f) || valueAt(object, f) == nullptr) continue;
      const bool shared = std::any_of(entries.begin(), entries.end(), [&](const Entry& e) {
        return &e != &mine && e.fields.contains(f);
      });
      if (shared) continue;
      eraseAt(object, f);
      changed = true;
    }
    for (const FieldPath& f : wanted) {
      json value = appliedValue(live, applied, f);
      const json* have = valueAt(object, f);
      if (have != nullptr && *have == value) continue;
      setAt(object, f, value);
      changed = true;
    }
  }
  mine.fields = wanted;
  if (changed) mine.time = write.time;
  mine.api_version = write.api_version;
  writeEntries(entries, object);
  result.object = std::move(object);
  return result;
}

json applyConflictStatus(const std::vector<ApplyConflict>& conflicts) {
  json causes = json::array();
  for (const ApplyConflict& c : conflicts) {
    causes.push_back({{"reason", "FieldManagerConflict"},
                      {"message", "conflict with " + c.manager},
                      {"field", c.field}});
  }
  std::string message;
  if (conflicts.size() == 1) {
    message = "Apply failed with 1 conflict: conflict with " + conflicts[0].manager + ": " +
              conflicts[0].field;
  } else {
    std::map<std::string, std::vector<std::string>> by_manager;
    for (const ApplyConflict& c : conflicts) by_manager[c.manager].push_back(c.field);
    message = "Apply failed with " + std::to_string(conflicts.size()) + " conflicts: ";
    bool first = true;
    for (const auto& [manager, fields] : by_manager) {
      message += (first ? "" : "\n") + std::string("conflicts with ") + manager + ":";
      for (const std::string& f : fields) message += "\n- " + f;
      first = false;
    }
  }
  return statusObject(409, message, "Conflict", json{{"causes", std::move(causes)}});
}

}  // namespace nodeagent::testapiserver
