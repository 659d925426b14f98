#include "cmd/test-apiserver/patch.h"

#include <algorithm>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace nodeagent::testapiserver {

using nlohmann::json;

std::optional<PatchType> patchTypeFromContentType(std::string_view content_type) {
  auto semi = content_type.find(';');
  std::string_view mt = content_type.substr(0, semi);
  while (!mt.empty() && mt.back() == ' ') mt.remove_suffix(1);
  if (mt == "application/json-patch+json") return PatchType::kJsonPatch;
  if (mt == "application/merge-patch+json") return PatchType::kMergePatch;
  if (mt == "application/strategic-merge-patch+json") return PatchType::kStrategicMergePatch;
  return std::nullopt;
}

std::optional<std::string_view> strategicMergeKey(std::string_view field) {
  static const std::map<std::string_view, std::string_view> kKeys = {
      {"containers", "name"},
      {"initContainers", "name"},
      {"ephemeralContainers", "name"},
      {"conditions", "type"},
      {"env", "name"},
      {"ports", "containerPort"},
      {"volumeMounts", "mountPath"},
      {"volumeDevices", "devicePath"},
      {"volumes", "name"},
      {"imagePullSecrets", "name"},
      {"secrets", "name"},  // a ServiceAccount's
      {"hostAliases", "ip"},
      {"ownerReferences", "uid"},
      {"addresses", "type"},
      {"podIPs", "ip"},
      {"hostIPs", "ip"},
      {"resourceClaims", "name"},
      {"schedulingGates", "name"},
      {"readinessGates", "conditionType"},
  };
  auto it = kKeys.find(field);
  if (it == kKeys.end()) return std::nullopt;
  return it->second;
}

namespace {

// Lists of scalars whose patch strategy is "merge" (union) rather than replace.
bool isMergedPrimitiveList(std::string_view field) { return field == "finalizers"; }

json mergePatchImpl(json target, const json& patch) {
  if (!patch.is_object()) return patch;
  if (!target.is_object()) target = json::object();
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    if (it->is_null()) {
      target.erase(it.key());
    } else {
      json cur = target.contains(it.key()) ? target[it.key()] : json();
      target[it.key()] = mergePatchImpl(std::move(cur), *it);
    }
  }
  return target;
}

bool isDirective(const std::string& key) { return !key.empty() && key[0] == '$'; }

// A patch value with every directive removed (used where it lands in place of nothing).
json stripDirectives(const json& v) {
  if (v.is_object()) {
    json out = json::object();
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (isDirective(it.key())) continue;
      if (it->is_null()) continue;
      out[it.key()] = stripDirectives(*it);
    }
    return out;
  }
  if (v.is_array()) {
    json out = json::array();
    for (const auto& e : v) {
      if (e.is_object() && e.contains("$patch")) continue;
      out.push_back(stripDirectives(e));
    }
    return out;
  }
  return v;
}

base::StatusOr<json> smpMap(json target, const json& patch, const std::string& path);

base::StatusOr<json> smpList(const json& target, const json& patch, std::string_view field,
                             const std::string& path) {
  if (!patch.is_array()) {
    return base::invalidArgumentError("strategic merge patch: " + path + " must be a list");
  }
  auto key = strategicMergeKey(field);
  if (!key) {
    if (isMergedPrimitiveList(field) && target.is_array()) {
      json out = target;
      for (const auto& v : patch) {
        if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
      }
      return out;
    }
    return stripDirectives(patch);
  }
  json out = target.is_array() ? target : json::array();
  for (const auto& p : patch) {
    if (p.is_object() && p.contains("$patch")) {
      const json& directive = p["$patch"];
      if (directive == "replace") return stripDirectives(patch);
      if (directive == "delete") {
        if (!p.contains(*key)) {
          return base::invalidArgumentError("strategic merge patch: " + path +
                                            ": $patch delete needs the merge key " +
                                            std::string(*key));
        }
        out.erase(std::remove_if(out.begin(), out.end(),
                                 [&](const json& e) {
                                   return e.is_object() && e.contains(*key) && e[*key] == p[*key];
                                 }),
                  out.end());
        continue;
      }
      return base::invalidArgumentError("strategic merge patch: " + path +
                                        ": unknown $patch directive " + directive.dump());
    }
    if (!p.is_object() || !p.contains(*key)) {
      return base::invalidArgumentError("strategic merge patch: " + path +
                                        ": element without "
                                        "merge key \"" +
                                        std::string(*key) + "\"");
    }
    auto it = std::find_if(out.begin(), out.end(), [&](const json& e) {
      return e.is_object() && e.contains(*key) && e[*key] == p[*key];
    });
    if (it != out.end()) {
      ASSIGN_OR_RETURN(*it, smpMap(*it, p, path + "[" + p[*key].dump() + "]"));
    } else {
      ASSIGN_OR_RETURN(auto added, smpMap(json::object(), p, path + "[" + p[*key].dump() + "]"));
      out.push_back(std::move(added));
    }
  }
  return out;
}

// Reorders `list` as `order` says; elements the order does not name keep their relative order
// after the named ones.
json applyElementOrder(const json& list, const json& order, std::optional<std::string_view> key) {
  if (!list.is_array() || !order.is_array()) return list;
  auto id = [&](const json& e) -> json {
    if (key && e.is_object()) return e.contains(*key) ? e[*key] : json();
    return e;
  };
  json out = json::array();
  std::vector<bool> used(list.size(), false);
  for (const auto& o : order) {
    json want = id(o);
    for (size_t i = 0; i < list.size(); ++i) {
      if (!used[i] && id(list[i]) == want) {
        out.push_back(list[i]);
        used[i] = true;
        break;
      }
    }
  }
  for (size_t i = 0; i < list.size(); ++i) {
    if (!used[i]) out.push_back(list[i]);
  }
  return out;
}

// One field of a map patch: null deletes it, a map merges into it, a list merges as its
// patch strategy says, anything else replaces it.
base::Status smpField(json& target, const std::string& k, const json& value,
                      const std::string& child_path) {
  if (value.is_null()) {
    target.erase(k);
  } else if (value.is_object()) {
    json cur = target.contains(k) ? target[k] : json::object();
    ASSIGN_OR_RETURN(json merged, smpMap(std::move(cur), value, child_path));
    if (merged.is_null()) {
      target.erase(k);
    } else {
      target[k] = std::move(merged);
    }
  } else if (value.is_array()) {
    json cur = target.contains(k) ? target[k] : json();
    ASSIGN_OR_RETURN(target[k], smpList(cur, value, k, child_path));
  } else {
    target[k] = value;
  }
  return base::okStatus();
}

// $deleteFromPrimitiveList/<field>: removes each listed value from the list `field`.
void deleteFromPrimitiveList(json& target, const std::string& field, const json& values) {
  if (target.contains(field) && target[field].is_array() && values.is_array()) {
    json& list = target[field];
    for (const auto& v : values) {
      list.erase(std::remove(list.begin(), list.end(), v), list.end());
    }
  }
}

// $retainKeys: only the listed keys stay.
void retainKeys(json& target, const json& keys) {
  json kept = json::object();
  for (auto t = target.begin(); t != target.end(); ++t) {
    if (std::find(keys.begin(), keys.end(), t.key()) != keys.end()) kept[t.key()] = *t;
  }
  target = std::move(kept);
}

base::StatusOr<json> smpMap(json target, const json& patch, const std::string& path) {
  if (!patch.is_object()) {
    return base::invalidArgumentError("strategic merge patch: " + path + " must be an object");
  }
  if (!target.is_object()) target = json::object();
  if (auto it = patch.find("$patch"); it != patch.end()) {
    if (*it == "replace") return stripDirectives(patch);
    if (*it == "delete") return json();
    return base::invalidArgumentError("strategic merge patch: " + path +
                                      ": unknown $patch directive " + it->dump());
  }
  std::map<std::string, json> orders;
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    const std::string& k = it.key();
    if (k.starts_with("$setElementOrder/")) {
      orders[k.substr(17)] = *it;
      continue;
    }
    if (k.starts_with("$deleteFromPrimitiveList/")) {
      deleteFromPrimitiveList(target, k.substr(25), *it);
      continue;
    }
    if (k == "$retainKeys") continue;
    if (isDirective(k)) continue;
    RETURN_IF_ERROR(smpField(target, k, *it, path.empty() ? k : path + "." + k));
  }
  if (auto it = patch.find("$retainKeys"); it != patch.end() && it->is_array()) {
    retainKeys(target, *it);
  }
  for (const auto& [field, order] : orders) {
    if (target.contains(field)) {
      target[field] = applyElementOrder(target[field], order, strategicMergeKey(field));
    }
  }
  return target;
}

}  // namespace

base::StatusOr<json> applyMergePatch(const json& target, const json& patch) {
  if (!patch.is_object()) {
    return base::invalidArgumentError("merge patch must be a JSON object");
  }
  return mergePatchImpl(target, patch);
}

base::StatusOr<json> applyStrategicMergePatch(const json& target, const json& patch) {
  if (!patch.is_object()) {
    return base::invalidArgumentError("strategic merge patch must be a JSON object");
  }
  ASSIGN_OR_RETURN(json out, smpMap(target, patch, ""));
  if (out.is_null()) return base::invalidArgumentError("strategic merge patch deletes the object");
  return out;
}

base::StatusOr<json> applyJsonPatch(const json& target, const json& patch) {
  if (!patch.is_array()) return base::invalidArgumentError("json patch must be a JSON array");
  try {
    return target.patch(patch);
  } catch (const json::exception& e) {
    return base::invalidArgumentError(std::string("json patch: ") + e.what());
  }
}

base::StatusOr<json> applyPatch(PatchType type, const json& target, const json& patch) {
  switch (type) {
    case PatchType::kJsonPatch:
      return applyJsonPatch(target, patch);
    case PatchType::kMergePatch:
      return applyMergePatch(target, patch);
    case PatchType::kStrategicMergePatch:
      return applyStrategicMergePatch(target, patch);
  }
  return base::invalidArgumentError("unknown patch type");
}

}  // namespace nodeagent::testapiserver
