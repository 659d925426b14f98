// Keyring: kubelet's credentialprovider keyring built from a pod's imagePullSecrets. A Secret of
// type kubernetes.io/dockerconfigjson (key .dockerconfigjson, {"auths": {...}}) or the legacy
// kubernetes.io/dockercfg (key .dockercfg, the map itself) gives registry entries; lookup(image)
// answers the credentials whose registry matches the image, most specific first, as kubelet's
// BasicDockerKeyring: the host matched part by part with `*` wildcards (`*.example.com`), the
// port exactly, the entry's path as a prefix of the repository's; an image on the default
// registry (a short name, docker.io, index.docker.io) also takes the entry of index.docker.io.
//
// Credentials are secrets: nothing here logs them, and neither may a caller.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace nodeagent::agent::images {

inline constexpr std::string_view kSecretTypeDockerConfigJson = "kubernetes.io/dockerconfigjson";
inline constexpr std::string_view kDockerConfigJsonKey = ".dockerconfigjson";
inline constexpr std::string_view kSecretTypeDockercfg = "kubernetes.io/dockercfg";
inline constexpr std::string_view kDockerConfigKey = ".dockercfg";

// One registry's credentials (kubelet's DockerConfigEntry, with `auth` decoded).
struct RegistryCredential {
  std::string username;
  std::string password;
  bool operator==(const RegistryCredential&) const = default;
};

// A docker config: registry location (as written: "host[:port][/path]", maybe with a scheme)
// to its credentials.
using DockerConfig = std::map<std::string, RegistryCredential>;

// Parses a .dockercfg (the map) or, with `json_config`, a .dockerconfigjson ({"auths": map}). An
// entry's `auth` (base64 "user:password", padded or not) replaces its username and password.
// InvalidArgument for text that is not such JSON; the message never quotes the text.
base::StatusOr<DockerConfig> parseDockerConfig(std::string_view text, bool json_config);

// The registry credentials of one Secret (its type and decoded data): its docker config for the
// two docker secret types with a non-empty key, an empty config for any other secret (kubelet
// ignores them). Errors as parseDockerConfig's.
base::StatusOr<DockerConfig> dockerConfigFromSecret(std::string_view type,
                                                    const std::map<std::string, std::string>& data);

// kubelet's ParseImageName, the repository part: `image` without its tag and digest, normalized
// as docker does ("busybox" -> "docker.io/library/busybox", "me/app" -> "docker.io/me/app").
std::string repositoryToPull(std::string_view image);

// kubelet's URLsMatchStr: whether the schemeless registry location `glob` (host with `*` and `?`
// wildcards per dot-separated part, optional port and path) covers `target`.
bool registryMatches(std::string_view glob, std::string_view target);

class Keyring {
 public:
  // BasicDockerKeyring.Add: the entries of `config`, keyed by host plus path (a scheme and a
  // leading /v1/ or /v2/ dropped), after those added before for the same key.
  void add(const DockerConfig& config);

  // BasicDockerKeyring.Lookup of a repository (repositoryToPull): the credentials of every
  // matching key, most specific key first (the keys in reverse order); else those of the default
  // registry for an image on it; empty when nothing matches (pull anonymously).
  std::vector<RegistryCredential> lookup(std::string_view repository) const;

  bool empty() const { return creds_.empty(); }

 private:
  std::map<std::string, std::vector<RegistryCredential>> creds_;
};

}  // namespace nodeagent::agent::images
