#include "agent/runtime/spec_extras.h"

#include <nlohmann/json.hpp>

namespace nodeagent::runtime {
namespace {

nlohmann::json parseSpec(const api::Pod& pod) {
  if (!pod.raw) return nlohmann::json();
  if (pod.raw->hasSpec()) return nlohmann::json::parse(pod.raw->spec(), nullptr, false);
  auto whole = nlohmann::json::parse(pod.raw->str(), nullptr, false);
  if (!whole.is_object()) return nlohmann::json();
  auto it = whole.find("spec");
  return it != whole.end() ? std::move(*it) : nlohmann::json();
}

const nlohmann::json* member(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it != object.end() ? &*it : nullptr;
}

std::string stringMember(const nlohmann::json& object, const char* key) {
  const auto* v = member(object, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

// securityContext's `key` ("seccompProfile", "appArmorProfile").
std::optional<SecurityProfileField> profileOf(const nlohmann::json& security_context,
                                              const char* key) {
  const auto* profile = member(security_context, key);
  if (profile == nullptr || !profile->is_object()) return std::nullopt;
  return SecurityProfileField{stringMember(*profile, "type"),
                              stringMember(*profile, "localhostProfile")};
}

std::optional<SELinuxOption> seLinuxOf(const nlohmann::json& security_context) {
  const auto* options = member(security_context, "seLinuxOptions");
  if (options == nullptr || !options->is_object()) return std::nullopt;
  return SELinuxOption{stringMember(*options, "user"), stringMember(*options, "role"),
                       stringMember(*options, "type"), stringMember(*options, "level")};
}

std::vector<Sysctl> sysctlsOf(const nlohmann::json& spec) {
  std::vector<Sysctl> out;
  const auto* security_context = member(spec, "securityContext");
  const auto* list = security_context ? member(*security_context, "sysctls") : nullptr;
  if (list == nullptr || !list->is_array()) return out;
  for (const auto& entry : *list) {
    out.push_back({stringMember(entry, "name"), stringMember(entry, "value")});
  }
  return out;
}

base::StatusOr<SecurityProfile> fromField(const SecurityProfileField& field,
                                          const std::filesystem::path& profile_root) {
  if (field.type == "RuntimeDefault") {
    return SecurityProfile{SecurityProfile::Type::kRuntimeDefault, ""};
  }
  if (field.type != "Localhost") return SecurityProfile{};  // Unconfined
  if (field.localhost_profile.empty()) {
    return base::invalidArgumentError(
        "localhostProfile must be set if seccompProfile type is Localhost.");
  }
  const std::filesystem::path relative(field.localhost_profile);
  bool climbs = false;
  for (const auto& part : relative) climbs = climbs || part == "..";
  if (relative.is_absolute() || climbs) {
    return base::invalidArgumentError(
        "seccompProfile.localhostProfile: \"" + field.localhost_profile +
        "\" must be a relative path without '..' (it is below " + profile_root.string() + ")");
  }
  return SecurityProfile{SecurityProfile::Type::kLocalhost, (profile_root / relative).string()};
}

}  // namespace

SpecExtras specExtras(const api::Pod& pod) {
  SpecExtras out;
  const auto spec = parseSpec(pod);
  if (!spec.is_object()) return out;
  out.hostname = stringMember(spec, "hostname");
  out.subdomain = stringMember(spec, "subdomain");
  if (const auto* share = member(spec, "shareProcessNamespace"); share && share->is_boolean()) {
    out.share_process_namespace = share->get<bool>();
  }
  out.sysctls = sysctlsOf(spec);
  if (const auto* security_context = member(spec, "securityContext")) {
    out.pod_seccomp = profileOf(*security_context, "seccompProfile");
    out.pod_apparmor = profileOf(*security_context, "appArmorProfile");
    out.pod_selinux = seLinuxOf(*security_context);
  }
  for (const char* list : {"initContainers", "containers"}) {
    const auto* containers = member(spec, list);
    if (containers == nullptr || !containers->is_array()) continue;
    for (const auto& c : *containers) {
      const auto* security_context = member(c, "securityContext");
      if (security_context == nullptr) continue;
      if (auto profile = profileOf(*security_context, "seccompProfile")) {
        out.container_seccomp.emplace(stringMember(c, "name"), *std::move(profile));
      }
      if (auto profile = profileOf(*security_context, "appArmorProfile")) {
        out.container_apparmor.emplace(stringMember(c, "name"), *std::move(profile));
      }
      if (auto options = seLinuxOf(*security_context)) {
        out.container_selinux.emplace(stringMember(c, "name"), *std::move(options));
      }
    }
  }
  return out;
}

SpecExtras specExtrasNaming(const api::Pod& pod, std::string_view key) {
  if (!pod.raw || !pod.raw->contains("\"" + std::string(key) + "\"")) return SpecExtras{};
  return specExtras(pod);
}

std::string podHostname(const SpecExtras& extras, std::string_view pod_name) {
  constexpr size_t kMaxHostnameLength = 63;
  std::string out(extras.hostname.empty() ? pod_name : std::string_view(extras.hostname));
  if (out.size() <= kMaxHostnameLength) return out;
  out.resize(kMaxHostnameLength);
  while (!out.empty() && (out.back() == '-' || out.back() == '.')) out.pop_back();
  return out;
}

std::vector<Sysctl> podSysctls(const api::Pod& pod) {
  if (!pod.raw || !pod.raw->contains("\"sysctls\"")) return {};
  return sysctlsOf(parseSpec(pod));
}

std::string sysctlDotted(std::string_view name) {
  std::string out(name);
  const size_t first = out.find_first_of("./");
  if (first == std::string::npos || out[first] != '/') return out;
  for (auto& c : out) {
    if (c == '/') {
      c = '.';
    } else if (c == '.') {
      c = '/';
    }
  }
  return out;
}

base::StatusOr<SecurityProfile> seccompProfileFor(const SpecExtras& extras,
                                                  std::string_view container, bool seccomp_default,
                                                  const std::filesystem::path& profile_root) {
  if (!container.empty()) {
    if (auto it = extras.container_seccomp.find(container); it != extras.container_seccomp.end()) {
      return fromField(it->second, profile_root);
    }
  }
  if (extras.pod_seccomp) return fromField(*extras.pod_seccomp, profile_root);
  if (seccomp_default) return SecurityProfile{SecurityProfile::Type::kRuntimeDefault, ""};
  return SecurityProfile{};
}

base::StatusOr<SecurityProfile> seccompProfileFor(const api::Pod& pod, std::string_view container,
                                                  bool seccomp_default,
                                                  const std::filesystem::path& profile_root) {
  return seccompProfileFor(specExtrasNaming(pod, "seccompProfile"), container, seccomp_default,
                           profile_root);
}

std::optional<SELinuxOption> seLinuxOptionsFor(const SpecExtras& extras,
                                               std::string_view container) {
  if (!container.empty()) {
    if (auto it = extras.container_selinux.find(container); it != extras.container_selinux.end()) {
      return it->second;
    }
  }
  return extras.pod_selinux;
}

std::optional<SELinuxOption> seLinuxOptionsFor(const api::Pod& pod, std::string_view container) {
  return seLinuxOptionsFor(specExtrasNaming(pod, "seLinuxOptions"), container);
}

bool seLinuxEnabled(const std::filesystem::path& sys) {
  std::error_code ec;
  return std::filesystem::exists(sys / "fs/selinux/enforce", ec);
}

}  // namespace nodeagent::runtime
