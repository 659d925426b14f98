#include "agent/runtime/apparmor.h"

#include "agent/runtime/state_file.h"

namespace nodeagent::runtime {
namespace {

constexpr std::string_view kRuntimeDefaultName = "runtime/default";
constexpr std::string_view kUnconfinedName = "unconfined";
constexpr std::string_view kLocalhostPrefix = "localhost/";

base::StatusOr<SecurityProfile> fromField(const SecurityProfileField& field,
                                          std::string_view container) {
  if (field.type == "RuntimeDefault")
    return SecurityProfile{SecurityProfile::Type::kRuntimeDefault, ""};
  if (field.type == "Unconfined") return SecurityProfile{};
  if (field.type == "Localhost") {
    if (field.localhost_profile.find_first_not_of(" \t\n") == std::string::npos) {
      return base::invalidArgumentError("invalid empty AppArmor profile name for container \"" +
                                        std::string(container) + "\"");
    }
    return SecurityProfile{SecurityProfile::Type::kLocalhost, field.localhost_profile};
  }
  return base::invalidArgumentError("unknown AppArmor profile type \"" + field.type +
                                    "\" for container \"" + std::string(container) + "\"");
}

// The annotation's profile; nullopt for none or a spelling kubelet does not know.
std::optional<SecurityProfile> fromAnnotation(const api::Pod& pod, std::string_view container) {
  const auto it = pod.metadata.annotations.find(std::string(kAppArmorAnnotationPrefix) +
                                                std::string(container));
  if (it == pod.metadata.annotations.end()) return std::nullopt;
  const std::string_view value = it->second;
  if (value == kRuntimeDefaultName)
    return SecurityProfile{SecurityProfile::Type::kRuntimeDefault, ""};
  if (value == kUnconfinedName) return SecurityProfile{};
  if (value.starts_with(kLocalhostPrefix)) {
    return SecurityProfile{SecurityProfile::Type::kLocalhost,
                           std::string(value.substr(kLocalhostPrefix.size()))};
  }
  return std::nullopt;
}

}  // namespace

base::StatusOr<std::optional<SecurityProfile>> appArmorProfileFor(const api::Pod& pod,
                                                                  const SpecExtras& extras,
                                                                  std::string_view container) {
  using Result = std::optional<SecurityProfile>;
  if (auto it = extras.container_apparmor.find(container); it != extras.container_apparmor.end()) {
    auto profile = fromField(it->second, container);
    if (!profile.ok()) return profile.status();
    return Result(*std::move(profile));
  }
  if (auto annotated = fromAnnotation(pod, container)) return Result(*std::move(annotated));
  if (extras.pod_apparmor) {
    auto profile = fromField(*extras.pod_apparmor, container);
    if (!profile.ok()) return profile.status();
    return Result(*std::move(profile));
  }
  return Result();
}

base::StatusOr<std::optional<SecurityProfile>> appArmorProfileFor(const api::Pod& pod,
                                                                  std::string_view container) {
  if (!pod.raw || !pod.raw->contains("\"appArmorProfile\"")) {
    return appArmorProfileFor(pod, SpecExtras{}, container);
  }
  return appArmorProfileFor(pod, specExtras(pod), container);
}

bool appArmorRequired(const api::Pod& pod) {
  // kubelet's isRequired: a field other than Unconfined, or an annotation that is not
  // "unconfined".
  for (const auto& [key, value] : pod.metadata.annotations) {
    if (key.starts_with(kAppArmorAnnotationPrefix) && value != kUnconfinedName) return true;
  }
  if (!pod.raw || !pod.raw->contains("\"appArmorProfile\"")) return false;
  const auto extras = specExtras(pod);
  auto confines = [](const SecurityProfileField& f) { return f.type != "Unconfined"; };
  if (extras.pod_apparmor && confines(*extras.pod_apparmor)) return true;
  for (const auto& [name, field] : extras.container_apparmor) {
    if (confines(field)) return true;
  }
  return false;
}

std::string appArmorProfileName(const SecurityProfile& profile) {
  switch (profile.type) {
    case SecurityProfile::Type::kRuntimeDefault:
      return std::string(kRuntimeDefaultName);
    case SecurityProfile::Type::kLocalhost:
      return std::string(kLocalhostPrefix) + profile.localhost_ref;
    case SecurityProfile::Type::kUnconfined:
      break;
  }
  return std::string(kUnconfinedName);
}

bool appArmorEnabled(const std::filesystem::path& sys) {
  std::string text, error;
  if (!readWholeFile((sys / "module/apparmor/parameters/enabled").string(), text, error)) {
    return false;
  }
  return !text.empty() && text[0] == 'Y';
}

}  // namespace nodeagent::runtime
