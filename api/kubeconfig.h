// kubeconfig (apiVersion v1, kind Config) -> RestConfig: what the REST client needs to reach and
// authenticate to an apiserver. Reads current-context (or a named context), its cluster (server,
// certificate-authority[-data], insecure-skip-tls-verify, tls-server-name) and user (token,
// tokenFile, client-certificate[-data], client-key[-data], username/password). Relative paths
// resolve against the kubeconfig's directory; `*-data` wins over the path, `token` over
// `tokenFile`. Referenced files are read at load time. `exec` and `auth-provider` users are not
// supported: loading fails with an error naming them. Errors name the file and the field.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "base/status.h"

namespace nodeagent::api {

struct RestConfig {
  // Scheme, host and port, e.g. "https://10.0.0.1:6443", plus an optional path prefix.
  std::string server;
  // PEM bundle of trusted CAs; empty means the system roots (for https).
  std::string ca_pem;
  bool insecure_skip_tls_verify = false;
  // The name the server certificate must carry, when it differs from the server's host.
  std::string tls_server_name;
  std::string bearer_token;
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string username;
  std::string password;
  // The context's default namespace ("" when unset).
  std::string namespace_;
  // Where this came from ("kubeconfig /etc/nodeagent/kubeconfig"), for messages.
  std::string origin;
};

// Parses kubeconfig text. `base_dir` resolves relative paths; `origin` names the input in errors;
// `context` overrides current-context when non-empty.
base::StatusOr<RestConfig> parseKubeconfig(std::string_view yaml_text,
                                           const std::filesystem::path& base_dir,
                                           std::string_view origin, std::string_view context = "");

// Reads and parses a kubeconfig file.
base::StatusOr<RestConfig> loadKubeconfig(const std::filesystem::path& path,
                                          std::string_view context = "");

// Standard base64 (padding optional, whitespace ignored). Error on other characters.
base::StatusOr<std::string> decodeBase64(std::string_view text);
// Standard base64 with padding.
std::string encodeBase64(std::string_view data);

}  // namespace nodeagent::api
