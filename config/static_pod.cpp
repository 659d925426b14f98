#include "config/static_pod.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>

#include "api/pod_json.h"
#include "api/pod_update.h"
#include "api/time.h"
#include "api/yaml.h"
#include "config/pod_defaults.h"
#include "config/pod_validation.h"

namespace nodeagent::config {

std::string FieldError::toString() const {
  if (field.empty()) return message;
  return field + ": " + message;
}

std::string DecodeResult::errorText() const {
  std::string out;
  for (const auto& e : errors) {
    if (!out.empty()) out += '\n';
    out += e.toString();
  }
  return out;
}

namespace {

using nlohmann::json;

const char* jsonTypeName(const json& j) {
  switch (j.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::null:
      return "null";
    default:
      return "a number";
  }
}

std::string joinField(const std::string& prefix, const std::string& field) {
  if (prefix.empty()) return field;
  if (field.empty()) return prefix;
  return prefix + "." + field;
}

bool looksLikeFieldPath(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '"') return false;
  }
  return true;
}

// decodePod reports "field.path: message"; split it so every problem has the same shape.
FieldError fromDecodeStatus(const base::Status& status, const std::string& prefix) {
  const std::string& msg = status.message();
  size_t sep = msg.find(": ");
  if (sep != std::string::npos && looksLikeFieldPath(std::string_view(msg).substr(0, sep))) {
    return {joinField(prefix, msg.substr(0, sep)), msg.substr(sep + 2)};
  }
  return {prefix, msg};
}

// apiVersion and kind, checked before anything else: a Deployment is not a Pod with errors.
bool checkTypeMeta(const json& obj, const std::string& prefix, std::vector<std::string_view> kinds,
                   bool required, std::vector<FieldError>& errors) {
  size_t before = errors.size();
  auto check = [&](const char* key, const std::vector<std::string_view>& supported) {
    auto it = obj.find(key);
    std::string field = joinField(prefix, key);
    if (it == obj.end() || (it->is_string() && it->get_ref<const std::string&>().empty())) {
      if (required) errors.push_back(validation::required(field));
      return;
    }
    if (it->is_string()) {
      const auto& value = it->get_ref<const std::string&>();
      for (auto s : supported) {
        if (value == s) return;
      }
      errors.push_back(validation::notSupported(field, value, supported));
      return;
    }
    FieldError e = validation::notSupported(field, "", supported);
    e.message =
        "Unsupported value: " + it->dump() + e.message.substr(e.message.find(": supported"));
    errors.push_back(std::move(e));
  };
  check("kind", kinds);
  check("apiVersion", {"v1"});
  return errors.size() == before;
}

void decodeOnePod(json& obj, const ManifestSource& source, const std::string& prefix,
                  DecodeResult& out) {
  applyApiDefaults(obj);
  applyStaticPodDefaults(obj, source);
  if (!source.seen_time.empty()) {
    auto meta = obj.find("metadata");
    if (meta != obj.end() && meta->is_object()) {
      json& annotations = (*meta)["annotations"];
      if (annotations.is_null()) annotations = json::object();
      if (annotations.is_object()) {
        annotations[std::string(api::kConfigSourceAnnotationKey)] =
            source.is_file ? api::kFileSource : api::kHttpSource;
        annotations[std::string(api::kConfigFirstSeenAnnotationKey)] = source.seen_time;
      }
    }
  }
  auto noteInvalid = [&obj, &out] {
    auto meta = obj.find("metadata");
    if (meta == obj.end() || !meta->is_object()) return;
    auto text = [&meta](const char* key) {
      auto it = meta->find(key);
      return it != meta->end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    ManifestPodRef ref{text("namespace"), text("name"), text("uid")};
    if (!ref.name.empty()) out.invalid_pods.push_back(std::move(ref));
  };
  auto pod = api::decodePodPtr(obj);
  if (!pod.ok()) {
    out.errors.push_back(fromDecodeStatus(pod.status(), prefix));
    noteInvalid();
    return;
  }
  auto errors = validatePodWithJson(**pod, &obj);
  if (errors.empty()) {
    out.pods.push_back(std::move(*pod));
    return;
  }
  noteInvalid();
  for (auto& e : errors) {
    e.field = joinField(prefix, e.field);
    out.errors.push_back(std::move(e));
  }
}

bool isBlank(std::string_view bytes) {
  return bytes.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

void decodeInto(std::string_view bytes, const ManifestSource& source, bool allow_list,
                DecodeResult& out) {
  if (bytes.size() > api::kMaxConfigLength) {
    out.errors.push_back({"", "manifest is " + std::to_string(bytes.size()) +
                                  " bytes, more than the limit of " +
                                  std::to_string(api::kMaxConfigLength) + " bytes"});
    return;
  }
  if (isBlank(bytes)) {
    out.errors.push_back({"", "empty manifest"});
    return;
  }
  auto parsed = api::yamlToJson(bytes);
  if (!parsed.ok()) {
    out.errors.push_back({"", parsed.status().message()});
    return;
  }
  json doc = std::move(*parsed);
  if (doc.is_null()) {
    out.errors.push_back({"", "empty manifest"});
    return;
  }
  if (!doc.is_object()) {
    out.errors.push_back({"", std::string("expected a Pod object, got ") + jsonTypeName(doc)});
    return;
  }
  stripNulls(doc);

  ManifestSource normalized = source;
  normalized.node_name = generatePodName("", source.node_name).substr(1);  // lower-cased

  std::vector<std::string_view> kinds = {"Pod"};
  if (allow_list) kinds.push_back("PodList");
  if (!checkTypeMeta(doc, "", kinds, /*required=*/true, out.errors)) return;

  if (doc["kind"] == "Pod") {
    decodeOnePod(doc, normalized, "", out);
    return;
  }
  auto items = doc.find("items");
  if (items == doc.end()) return;  // an empty list
  if (!items->is_array()) {
    out.errors.push_back({"items", std::string("expected an array, got ") + jsonTypeName(*items)});
    return;
  }
  for (size_t i = 0; i < items->size(); ++i) {
    json& item = (*items)[i];
    std::string prefix = "items[" + std::to_string(i) + "]";
    if (!item.is_object()) {
      out.errors.push_back(
          {prefix, std::string("expected a Pod object, got ") + jsonTypeName(item)});
      continue;
    }
    // List items may leave out their kind and apiVersion; when given they must be a v1 Pod.
    if (!checkTypeMeta(item, prefix, {"Pod"}, /*required=*/false, out.errors)) continue;
    item["kind"] = "Pod";
    item["apiVersion"] = "v1";
    decodeOnePod(item, normalized, prefix, out);
  }
}

}  // namespace

std::string seenTime(base::Clock& clock) {
  return api::formatNanoTime(
      std::chrono::time_point_cast<std::chrono::nanoseconds>(clock.wallNow()));
}

DecodeResult decodeManifest(std::string_view bytes, const ManifestSource& source, bool allow_list) {
  DecodeResult out;
  try {
    decodeInto(bytes, source, allow_list, out);
  } catch (const std::exception& e) {
    // Nothing above should throw; if it does, the manifest is rejected rather than the agent.
    out.errors.push_back({"", std::string("cannot decode manifest: ") + e.what()});
  }
  // A list with one bad item is rejected whole, as kubelet does.
  if (!out.errors.empty()) out.pods.clear();
  return out;
}

base::StatusOr<std::string> readManifestFile(const std::string& path, size_t max_bytes) {
  // O_NONBLOCK: a FIFO swapped in after the caller's stat must not block the source.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    const std::string message = std::string("cannot open: ") + std::strerror(err);
    return err == ENOENT ? base::notFoundError(message) : base::unavailableError(message);
  }
  std::string out;
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      return base::invalidArgumentError("is a directory, not a manifest file");
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return base::invalidArgumentError("is not a regular file");
    }
    if (S_ISREG(st.st_mode) && static_cast<uintmax_t>(st.st_size) > max_bytes) {
      ::close(fd);  // refused on its size alone: none of it is read
      return base::resourceExhaustedError("manifest is larger than " + std::to_string(max_bytes) +
                                          " bytes");
    }
    if (st.st_size > 0) {
      out.reserve(std::min<size_t>(static_cast<size_t>(st.st_size), max_bytes) + 1);
    }
  }
  char buf[16384];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return base::unavailableError(std::string("cannot read: ") + std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      ::close(fd);
      return base::resourceExhaustedError("manifest is larger than " + std::to_string(max_bytes) +
                                          " bytes");
    }
  }
  ::close(fd);
  return out;
}

}  // namespace nodeagent::config
