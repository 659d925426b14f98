#include "config/pod_defaults.h"

#include <array>
#include <nlohmann/json.hpp>
#include <optional>

#include "api/canonical_json.h"
#include "api/hash.h"
#include "api/quantity.h"

namespace nodeagent::config {
namespace {

using nlohmann::json;

constexpr int64_t kDefaultTerminationGracePeriodSeconds = 30;
constexpr int64_t kDefaultFileMode = 0644;  // 420, the default of every projected file mode

bool isAbsent(const json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null();
}

// Go zero values default: an absent, null or empty string becomes `value`.
void defaultString(json& obj, const char* key, const char* value) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null() ||
      (it->is_string() && it->get_ref<const std::string&>().empty())) {
    obj[key] = value;
  }
}

// Go int32 fields default when zero, so an explicit 0 is defaulted too.
void defaultIntIfZero(json& obj, const char* key, int64_t value) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null() || (it->is_number() && *it == 0)) obj[key] = value;
}

// Pointer fields default only when absent.
void defaultIfAbsent(json& obj, const char* key, json value) {
  if (isAbsent(obj, key)) obj[key] = std::move(value);
}

// The object under `key`, or null when it is absent or not an object.
json* objectAt(json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_object()) return nullptr;
  return &*it;
}

json* arrayAt(json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_array()) return nullptr;
  return &*it;
}

template <typename Fn>
void forEachObject(json& obj, const char* key, Fn&& fn) {
  json* arr = arrayAt(obj, key);
  if (arr == nullptr) return;
  for (auto& item : *arr) {
    if (item.is_object()) fn(item);
  }
}

void defaultHttpGet(json& handler) {
  if (json* get = objectAt(handler, "httpGet")) {
    defaultString(*get, "path", "/");
    defaultString(*get, "scheme", "HTTP");
  }
}

void defaultProbe(json& container, const char* key) {
  json* probe = objectAt(container, key);
  if (probe == nullptr) return;
  defaultIntIfZero(*probe, "timeoutSeconds", 1);
  defaultIntIfZero(*probe, "periodSeconds", 10);
  defaultIntIfZero(*probe, "successThreshold", 1);
  defaultIntIfZero(*probe, "failureThreshold", 3);
  defaultHttpGet(*probe);
}

void defaultFieldRef(json& holder) {
  if (json* ref = objectAt(holder, "fieldRef")) defaultString(*ref, "apiVersion", "v1");
}

bool isQuantity(const json& value) {
  if (value.is_number()) return api::Quantity::parse(value.dump()).ok();
  return value.is_string() && api::Quantity::parse(value.get_ref<const std::string&>()).ok();
}

void defaultContainer(json& c, bool host_network) {
  auto pull = c.find("imagePullPolicy");
  if (pull == c.end() || pull->is_null() ||
      (pull->is_string() && pull->get_ref<const std::string&>().empty())) {
    auto image = c.find("image");
    std::string_view image_name;
    if (image != c.end() && image->is_string()) image_name = image->get_ref<const std::string&>();
    c["imagePullPolicy"] = defaultImagePullPolicy(image_name);
  }
  defaultString(c, "terminationMessagePath", "/dev/termination-log");
  defaultString(c, "terminationMessagePolicy", "File");
  forEachObject(c, "ports", [&](json& port) {
    defaultString(port, "protocol", "TCP");
    if (host_network) {
      auto container_port = port.find("containerPort");
      if (container_port != port.end() && container_port->is_number()) {
        defaultIntIfZero(port, "hostPort", 0);
        if (port["hostPort"] == 0) port["hostPort"] = *container_port;
      }
    }
  });
  defaultProbe(c, "livenessProbe");
  defaultProbe(c, "readinessProbe");
  defaultProbe(c, "startupProbe");
  if (json* lifecycle = objectAt(c, "lifecycle")) {
    if (json* h = objectAt(*lifecycle, "postStart")) defaultHttpGet(*h);
    if (json* h = objectAt(*lifecycle, "preStop")) defaultHttpGet(*h);
  }
  forEachObject(c, "env", [](json& env) {
    if (json* from = objectAt(env, "valueFrom")) defaultFieldRef(*from);
  });
  // SetDefaults_Pod: limits without requests make the requests.
  if (json* resources = objectAt(c, "resources")) {
    json* limits = objectAt(*resources, "limits");
    if (limits != nullptr) {
      if (isAbsent(*resources, "requests")) (*resources)["requests"] = json::object();
      if (json* requests = objectAt(*resources, "requests")) {
        for (auto it = limits->begin(); it != limits->end(); ++it) {
          // A limit that is not a quantity is reported once, at the limit, by the decoder.
          if (requests->contains(it.key()) || !isQuantity(it.value())) continue;
          (*requests)[it.key()] = it.value();
        }
      }
    }
  }
}

void defaultDownwardApiItems(json& source) {
  forEachObject(source, "items", [](json& item) { defaultFieldRef(item); });
}

void defaultVolume(json& v) {
  if (volumeSourcesIn(v) == 0) v["emptyDir"] = json::object();
  if (json* s = objectAt(v, "hostPath")) defaultIfAbsent(*s, "type", "");
  if (json* s = objectAt(v, "secret")) defaultIfAbsent(*s, "defaultMode", kDefaultFileMode);
  if (json* s = objectAt(v, "configMap")) defaultIfAbsent(*s, "defaultMode", kDefaultFileMode);
  if (json* s = objectAt(v, "downwardAPI")) {
    defaultIfAbsent(*s, "defaultMode", kDefaultFileMode);
    defaultDownwardApiItems(*s);
  }
  if (json* s = objectAt(v, "projected")) {
    defaultIfAbsent(*s, "defaultMode", kDefaultFileMode);
    forEachObject(*s, "sources", [](json& projection) {
      if (json* d = objectAt(projection, "downwardAPI")) defaultDownwardApiItems(*d);
      if (json* t = objectAt(projection, "serviceAccountToken")) {
        defaultIfAbsent(*t, "expirationSeconds", 3600);
      }
    });
  }
  if (json* s = objectAt(v, "iscsi")) defaultString(*s, "iscsiInterface", "default");
  if (json* s = objectAt(v, "rbd")) {
    defaultString(*s, "pool", "rbd");
    defaultString(*s, "user", "admin");
    defaultString(*s, "keyring", "/etc/ceph/keyring");
  }
  if (json* s = objectAt(v, "azureDisk")) {
    defaultIfAbsent(*s, "cachingMode", "ReadWrite");
    defaultIfAbsent(*s, "kind", "Shared");
    defaultIfAbsent(*s, "fsType", "ext4");
    defaultIfAbsent(*s, "readOnly", false);
  }
  if (json* s = objectAt(v, "scaleIO")) {
    defaultString(*s, "storageMode", "ThinProvisioned");
    defaultString(*s, "fsType", "xfs");
  }
}

// Docker reference grammar (distribution/reference), enough to tell a tag from a registry port.
bool isLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool isAlnum(char c) { return isLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }

// path-component := [a-z0-9]+ ((?:[._]|__|[-]*)[a-z0-9]+)*
bool isPathComponent(std::string_view s) {
  if (s.empty() || !isLowerAlnum(s.front()) || !isLowerAlnum(s.back())) return false;
  size_t i = 0;
  while (i < s.size()) {
    if (isLowerAlnum(s[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && !isLowerAlnum(s[j])) ++j;
    std::string_view sep = s.substr(i, j - i);
    bool ok = sep == "." || sep == "_" || sep == "__" ||
              sep.find_first_not_of('-') == std::string_view::npos;
    if (!ok) return false;
    i = j;
  }
  return true;
}

// domain := component ('.' component)* (':' port)?; component :=
// [a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?
bool isDomain(std::string_view s) {
  size_t colon = s.find(':');
  std::string_view host = s.substr(0, colon);
  if (colon != std::string_view::npos) {
    std::string_view port = s.substr(colon + 1);
    if (port.empty() || port.find_first_not_of("0123456789") != std::string_view::npos)
      return false;
  }
  size_t start = 0;
  while (true) {
    size_t dot = host.find('.', start);
    std::string_view comp =
        host.substr(start, dot == std::string_view::npos ? host.npos : dot - start);
    if (comp.empty() || !isAlnum(comp.front()) || !isAlnum(comp.back())) return false;
    for (char c : comp) {
      if (!isAlnum(c) && c != '-') return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// tag := [\w][\w.-]{0,127}
bool isTag(std::string_view s) {
  auto word = [](char c) { return isAlnum(c) || c == '_'; };
  if (s.empty() || s.size() > 128 || !word(s.front())) return false;
  for (char c : s) {
    if (!word(c) && c != '.' && c != '-') return false;
  }
  return true;
}

// digest := algorithm ':' hex{32,}
bool isDigest(std::string_view s) {
  size_t colon = s.find(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view hex = s.substr(colon + 1);
  if (hex.size() < 32) return false;
  return hex.find_first_not_of("0123456789abcdefABCDEF") == std::string_view::npos;
}

}  // namespace

uint32_t volumeSourcesIn(const json& volume) {
  static_assert(kVolumeSourceKeys.size() <= 32);
  uint32_t bits = 0;
  if (!volume.is_object()) return bits;
  for (const auto& [key, value] : volume.items()) {
    if (value.is_null()) continue;
    for (size_t i = 0; i < kVolumeSourceKeys.size(); ++i) {
      if (kVolumeSourceKeys[i] == key) {
        bits |= uint32_t{1} << i;
        break;
      }
    }
  }
  return bits;
}

void stripNulls(json& value) {
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end();) {
      if (it->is_null()) {
        it = value.erase(it);
      } else {
        stripNulls(*it);
        ++it;
      }
    }
  } else if (value.is_array()) {
    for (auto& item : value) stripNulls(item);
  }
}

std::string defaultImagePullPolicy(std::string_view image) {
  constexpr const char* kAlways = "Always";
  constexpr const char* kIfNotPresent = "IfNotPresent";
  // A reference that does not parse has no tag: IfNotPresent, as kubelet's parser error gives.
  std::string_view rest = image;
  bool has_digest = false;
  if (size_t at = rest.find('@'); at != std::string_view::npos) {
    if (!isDigest(rest.substr(at + 1))) return kIfNotPresent;
    has_digest = true;
    rest = rest.substr(0, at);
  }
  std::string_view tag;
  size_t last_slash = rest.rfind('/');
  size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos &&
      (last_slash == std::string_view::npos || colon > last_slash)) {
    tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (!isTag(tag)) return kIfNotPresent;
  }
  if (rest.empty() || rest.size() > 255) return kIfNotPresent;
  size_t first_slash = rest.find('/');
  std::string_view path = rest;
  if (first_slash != std::string_view::npos) {
    std::string_view first = rest.substr(0, first_slash);
    bool has_upper = first.find_first_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ") != std::string_view::npos;
    if (first.find_first_of(".:") != std::string_view::npos || first == "localhost" || has_upper) {
      if (!isDomain(first)) return kIfNotPresent;
      path = rest.substr(first_slash + 1);
    }
  }
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    std::string_view comp =
        path.substr(start, slash == std::string_view::npos ? path.npos : slash - start);
    if (!isPathComponent(comp)) return kIfNotPresent;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  if (tag.empty() && !has_digest) tag = "latest";
  return tag == "latest" ? kAlways : kIfNotPresent;
}

void applyApiDefaults(json& pod) {
  if (!pod.is_object()) return;
  if (isAbsent(pod, "spec")) pod["spec"] = json::object();
  json* spec = objectAt(pod, "spec");
  if (spec == nullptr) return;

  defaultString(*spec, "dnsPolicy", "ClusterFirst");
  defaultString(*spec, "restartPolicy", "Always");
  defaultIfAbsent(*spec, "securityContext", json::object());
  defaultIfAbsent(*spec, "terminationGracePeriodSeconds", kDefaultTerminationGracePeriodSeconds);
  defaultString(*spec, "schedulerName", "default-scheduler");
  defaultIfAbsent(*spec, "enableServiceLinks", true);

  auto host_network_it = spec->find("hostNetwork");
  bool host_network = host_network_it != spec->end() && host_network_it->is_boolean() &&
                      host_network_it->get<bool>();
  forEachObject(*spec, "containers", [&](json& c) { defaultContainer(c, host_network); });
  forEachObject(*spec, "initContainers", [&](json& c) { defaultContainer(c, host_network); });
  forEachObject(*spec, "volumes", [](json& v) { defaultVolume(v); });
}

std::string staticPodUid(const json& api_defaulted_pod, std::string_view node_name,
                         std::string_view source) {
  std::string input;
  input.reserve(1024);
  input += kStaticPodUidHashPrefix;
  api::appendCanonicalJson(api_defaulted_pod, input);
  input += "\nhost:";
  input += node_name;
  input += "\nsource:";
  input += source;
  return api::hash128(input).toHex();
}

std::string generatePodName(std::string_view name, std::string_view node_name) {
  std::string out(name);
  out += '-';
  for (char c : node_name) out += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  return out;
}

namespace {

// The UID the static pod gets: the one the manifest gives, else a hash of the manifest as the
// API defaulted it. nullopt when the given UID has the wrong type (the decoder reports it).
std::optional<std::string> staticPodUidOf(json& pod, std::string_view node,
                                          std::string_view source) {
  const json* meta = objectAt(pod, "metadata");
  const json* given = nullptr;
  if (meta != nullptr) {
    auto it = meta->find("uid");
    if (it != meta->end() && !it->is_null()) given = &*it;
  }
  if (given != nullptr && given->is_string() && !given->get_ref<const std::string&>().empty()) {
    return given->get<std::string>();
  }
  if (given == nullptr || (given->is_string() && given->get_ref<const std::string&>().empty())) {
    return staticPodUid(pod, node, source);
  }
  return std::nullopt;
}

// AddOrUpdateTolerationInPod with a toleration of every NoExecute taint: an equal toleration
// is left alone, a matching one (same key, operator, value and effect) is replaced, otherwise
// it is appended.
void addNoExecuteToleration(json& spec) {
  static const json toleration = {{"operator", "Exists"}, {"effect", "NoExecute"}};
  if (isAbsent(spec, "tolerations")) spec["tolerations"] = json::array();
  json* tolerations = arrayAt(spec, "tolerations");
  if (tolerations == nullptr) return;
  auto str = [](const json& t, const char* k) -> std::string {
    auto it = t.find(k);
    return it != t.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  bool found = false;
  for (auto& t : *tolerations) {
    if (!t.is_object()) continue;
    if (str(t, "key").empty() && str(t, "operator") == "Exists" && str(t, "value").empty() &&
        str(t, "effect") == "NoExecute") {
      found = true;
      if (t != toleration) t = toleration;
    }
  }
  if (!found) tolerations->push_back(toleration);
}

}  // namespace

void applyStaticPodDefaults(json& pod, const ManifestSource& source) {
  if (!pod.is_object()) return;
  std::string node = generatePodName("", source.node_name).substr(1);  // lower-cased

  // The UID is hashed from the manifest as the API defaulted it, before any change below.
  const std::optional<std::string> uid = staticPodUidOf(pod, node, source.source);

  if (isAbsent(pod, "metadata")) pod["metadata"] = json::object();
  json* meta = objectAt(pod, "metadata");
  if (meta != nullptr) {
    if (uid) (*meta)["uid"] = *uid;
    auto name = meta->find("name");
    if (name != meta->end() && name->is_string() && !name->get_ref<const std::string&>().empty()) {
      *name = generatePodName(name->get_ref<const std::string&>(), node);
    }
    defaultString(*meta, "namespace", "default");
  }

  if (isAbsent(pod, "spec")) pod["spec"] = json::object();
  json* spec = objectAt(pod, "spec");
  if (spec != nullptr) (*spec)["nodeName"] = node;

  if (meta != nullptr && uid) {
    if (isAbsent(*meta, "annotations")) (*meta)["annotations"] = json::object();
    if (json* annotations = objectAt(*meta, "annotations")) {
      (*annotations)[std::string(kConfigHashAnnotation)] = *uid;
    }
  }
  if (source.is_file && spec != nullptr) addNoExecuteToleration(*spec);

  if (isAbsent(pod, "status")) pod["status"] = json::object();
  if (json* status = objectAt(pod, "status")) (*status)["phase"] = "Pending";
}

}  // namespace nodeagent::config
