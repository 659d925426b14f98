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

// The annotation as the field it stands for (kubelet's getProfileFromPodAnnotations); nullopt
// for none or a spelling kubelet does not know.
std::optional<SecurityProfileField> fromAnnotation(const api::Pod& pod,
                                                   std::string_view container) {
  const auto it = pod.metadata.annotations.find(std::string(kAppArmorAnnotationPrefix) +
                                                std::string(container));
  if (it == pod.metadata.annotations.end()) return std::nullopt;
  const std::string_view value = it->second;
  if (value == kRuntimeDefaultName) return SecurityProfileField{"RuntimeDefault", ""};
  if (value == kUnconfinedName) return SecurityProfileField{"Unconfined", ""};
  if (value.starts_with(kLocalhostPrefix)) {
    return SecurityProfileField{"Localhost", std::string(value.substr(kLocalhostPrefix.size()))};
  }
  return std::nullopt;
}

}  // namespace

base::StatusOr<std::optional<SecurityProfile>> appArmorProfileFor(const api::Pod& pod,
                                                                  const SpecExtras& extras,
                                                                  std::string_view container) {
  // The container's field, else the annotation, else the pod's field.
  std::optional<SecurityProfileField> field;
  if (auto it = extras.container_apparmor.find(container); it != extras.container_apparmor.end()) {
    field = it->second;
  } else if (auto annotated = fromAnnotation(pod, container)) {
    field = std::move(annotated);
  } else {
    field = extras.pod_apparmor;
  }
  if (!field) return std::optional<SecurityProfile>();
  auto profile = fromField(*field, container);
  if (!profile.ok()) return profile.status();
  return std::optional<SecurityProfile>(*std::move(profile));
}

SpecExtras appArmorExtras(const api::Pod& pod) { return specExtrasNaming(pod, "appArmorProfile"); }

base::StatusOr<std::optional<SecurityProfile>> appArmorProfileFor(const api::Pod& pod,
                                                                  std::string_view container) {
  return appArmorProfileFor(pod, appArmorExtras(pod), container);
}

bool appArmorRequired(const api::Pod& pod, const SpecExtras& extras) {
  // kubelet's isRequired: a field other than Unconfined, or an annotation that is not
  // "unconfined".
  for (const auto& [key, value] : pod.metadata.annotations) {
    if (key.starts_with(kAppArmorAnnotationPrefix) && value != kUnconfinedName) return true;
  }
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
  // runc's IsEnabled, which kubelet asks: securityfs has AppArmor and the module says Y.
  std::error_code ec;
  if (!std::filesystem::is_directory(sys / "kernel/security/apparmor", ec)) return false;
  std::string text, error;
  if (!readWholeFile((sys / "module/apparmor/parameters/enabled").string(), text, error)) {
    return false;
  }
  return !text.empty() && text[0] == 'Y';
}

}  // namespace nodeagent::runtime
