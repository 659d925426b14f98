#include "agent/images/keyring.h"

#include <fnmatch.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "api/kubeconfig.h"

namespace nodeagent::agent::images {
namespace {

// kubelet's DockerConfigEntry.UnmarshalJSON; errors never quote the entry.
base::StatusOr<RegistryCredential> parseEntry(const nlohmann::json& entry,
                                              const std::string& location) {
  const auto where = "docker config entry \"" + location + "\"";
  if (!entry.is_object()) return base::invalidArgumentError(where + " is not an object");
  auto member = [&](const char* key, std::string* out) -> base::Status {
    auto it = entry.find(key);
    if (it == entry.end() || it->is_null()) return base::okStatus();
    if (!it->is_string()) {
      return base::invalidArgumentError(where + ": " + key + " is not a string");
    }
    *out = it->get<std::string>();
    return base::okStatus();
  };
  RegistryCredential credential;
  std::string auth;
  RETURN_IF_ERROR(member("username", &credential.username));
  RETURN_IF_ERROR(member("password", &credential.password));
  RETURN_IF_ERROR(member("auth", &auth));
  if (auth.empty()) return credential;
  auto decoded = api::decodeBase64(auth);
  const size_t colon = decoded.ok() ? decoded->find(':') : std::string::npos;
  if (colon == std::string::npos) {
    return base::invalidArgumentError(
        where + ": unable to parse auth field, must be formatted as base64(username:password)");
  }
  credential.username = decoded->substr(0, colon);
  credential.password = decoded->substr(colon + 1);
  return credential;
}

// url.Parse of a registry location: host (with port) and path; a missing scheme is https.
struct Location {
  std::string host;
  std::string path;
};

Location parseLocation(std::string_view location) {
  for (std::string_view scheme : {"https://", "http://"}) {
    if (location.starts_with(scheme)) {
      location.remove_prefix(scheme.size());
      break;
    }
  }
  location = location.substr(0, location.find_first_of("?#"));
  const size_t slash = location.find('/');
  if (slash == std::string_view::npos) return Location{std::string(location), ""};
  return Location{std::string(location.substr(0, slash)), std::string(location.substr(slash))};
}

// net.SplitHostPort, falling back to the whole host without a port.
std::pair<std::string, std::string> splitHostPort(const std::string& host) {
  if (host.starts_with('[')) {
    const size_t close = host.find("]:");
    if (close == std::string::npos) return {host, ""};
    return {host.substr(1, close - 1), host.substr(close + 2)};
  }
  const size_t colon = host.find(':');
  if (colon == std::string::npos || host.find(':', colon + 1) != std::string::npos) {
    return {host, ""};
  }
  return {host.substr(0, colon), host.substr(colon + 1)};
}

std::vector<std::string> splitDots(const std::string& host) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = host.find('.', start);
    parts.push_back(host.substr(start, dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

constexpr std::string_view kDefaultRegistryHost = "index.docker.io";

// kubelet's isDefaultRegistryMatch.
bool isDefaultRegistryMatch(std::string_view image) {
  const size_t slash = image.find('/');
  const std::string_view first = image.substr(0, slash);
  if (first.empty()) return false;
  if (slash == std::string_view::npos) return true;
  if (first == "docker.io" || first == kDefaultRegistryHost) return true;
  return first.find_first_of(".:") == std::string_view::npos;
}

}  // namespace

base::StatusOr<DockerConfig> parseDockerConfig(std::string_view text, bool json_config) {
  const char* what = json_config ? "dockerconfigjson" : "dockercfg";
  auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return base::invalidArgumentError(std::string("the ") + what + " is not valid JSON");
  }
  const nlohmann::json* auths = &parsed;
  if (json_config) {
    if (!parsed.is_object()) {
      return base::invalidArgumentError("the dockerconfigjson is not a JSON object");
    }
    auto it = parsed.find("auths");
    if (it == parsed.end() || it->is_null()) return DockerConfig{};
    auths = &*it;
  }
  if (!auths->is_object()) {
    return base::invalidArgumentError(std::string("the ") + what +
                                      "'s registries are not a JSON object");
  }
  DockerConfig config;
  for (const auto& [location, entry] : auths->items()) {
    ASSIGN_OR_RETURN(auto credential, parseEntry(entry, location));
    config[location] = std::move(credential);
  }
  return config;
}

base::StatusOr<DockerConfig> dockerConfigFromSecret(
    std::string_view type, const std::map<std::string, std::string>& data) {
  auto nonEmpty = [&](std::string_view key) -> const std::string* {
    auto it = data.find(std::string(key));
    return it == data.end() || it->second.empty() ? nullptr : &it->second;
  };
  if (type == kSecretTypeDockerConfigJson) {
    if (const auto* text = nonEmpty(kDockerConfigJsonKey)) return parseDockerConfig(*text, true);
  } else if (type == kSecretTypeDockercfg) {
    if (const auto* text = nonEmpty(kDockerConfigKey)) return parseDockerConfig(*text, false);
  }
  return DockerConfig{};
}

std::string repositoryToPull(std::string_view image) {
  image = image.substr(0, image.find('@'));
  const size_t last_slash = image.rfind('/');
  const size_t colon = image.rfind(':');
  if (colon != std::string_view::npos &&
      (last_slash == std::string_view::npos || colon > last_slash)) {
    image = image.substr(0, colon);
  }
  const size_t slash = image.find('/');
  std::string domain = "docker.io";
  std::string_view rest = image;
  if (slash != std::string_view::npos) {
    const std::string_view first = image.substr(0, slash);
    if (first.find_first_of(".:") != std::string_view::npos || first == "localhost") {
      domain = std::string(first);
      rest = image.substr(slash + 1);
    }
  }
  if (domain == kDefaultRegistryHost) domain = "docker.io";
  if (domain == "docker.io" && rest.find('/') == std::string_view::npos) {
    return domain + "/library/" + std::string(rest);
  }
  return domain + "/" + std::string(rest);
}

bool registryMatches(std::string_view glob, std::string_view target) {
  const Location glob_url = parseLocation(glob);
  const Location target_url = parseLocation(target);
  const auto [glob_host, glob_port] = splitHostPort(glob_url.host);
  const auto [target_host, target_port] = splitHostPort(target_url.host);
  if (glob_port != target_port) return false;
  const auto glob_parts = splitDots(glob_host);
  const auto target_parts = splitDots(target_host);
  if (glob_parts.size() != target_parts.size()) return false;
  if (!target_url.path.starts_with(glob_url.path)) return false;
  for (size_t i = 0; i < glob_parts.size(); ++i) {
    if (::fnmatch(glob_parts[i].c_str(), target_parts[i].c_str(), FNM_PATHNAME) != 0) return false;
  }
  return true;
}

void Keyring::add(const DockerConfig& config) {
  for (const auto& [location, credential] : config) {
    Location parsed = parseLocation(location);
    // The docker client takes /v1/ and /v2/ as the host itself.
    std::string path = parsed.path;
    if (path.starts_with("/v2/") || path.starts_with("/v1/")) path = path.substr(3);
    const std::string key = !path.empty() && path != "/" ? parsed.host + path : parsed.host;
    creds_[key].push_back(credential);
  }
}

std::vector<RegistryCredential> Keyring::lookup(std::string_view repository) const {
  std::vector<RegistryCredential> found;
  // Reverse order: "quay.io/coreos" before "quay.io".
  for (auto it = creds_.rbegin(); it != creds_.rend(); ++it) {
    if (registryMatches(it->first, repository)) {
      found.insert(found.end(), it->second.begin(), it->second.end());
    }
  }
  if (!found.empty()) return found;
  if (isDefaultRegistryMatch(repository)) {
    auto it = creds_.find(std::string(kDefaultRegistryHost));
    if (it != creds_.end()) return it->second;
  }
  return {};
}

}  // namespace nodeagent::agent::images
