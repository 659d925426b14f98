#include "api/kubeconfig.h"

#include <fstream>
#include <optional>
#include <sstream>

#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

namespace nodeagent::api {
namespace {

constexpr size_t kMaxKubeconfigBytes = 4 * 1024 * 1024;

base::StatusOr<std::string> readSmallFile(const std::filesystem::path& path,
                                          std::string_view what) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    return base::notFoundError(std::string(what) + ": cannot read " + path.string() + ": " +
                               ec.message());
  }
  if (size > kMaxKubeconfigBytes) {
    return base::invalidArgumentError(std::string(what) + ": " + path.string() +
                                      " is larger than " + std::to_string(kMaxKubeconfigBytes) +
                                      " bytes");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return base::notFoundError(std::string(what) + ": cannot open " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad())
    return base::unavailableError(std::string(what) + ": error reading " + path.string());
  return ss.str();
}

// A scalar string field of a map node, or nullopt when absent/null.
base::StatusOr<std::optional<std::string>> scalarField(const YAML::Node& map, const char* key,
                                                       const std::string& where) {
  YAML::Node n = map[key];
  if (!n || n.IsNull()) return std::optional<std::string>();
  if (!n.IsScalar()) return base::invalidArgumentError(where + "." + key + ": expected a string");
  return std::optional<std::string>(n.Scalar());
}

base::StatusOr<bool> boolField(const YAML::Node& map, const char* key, const std::string& where) {
  YAML::Node n = map[key];
  if (!n || n.IsNull()) return false;
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
    return base::invalidArgumentError(where + "." + key + ": expected a boolean");
  }
  return v;
}

// Finds `name` in a list of {name, <inner_key>: {...}} entries; returns the inner map.
base::StatusOr<YAML::Node> namedEntry(const YAML::Node& root, const char* list_key,
                                      const char* inner_key, const std::string& name) {
  YAML::Node list = root[list_key];
  if (!list || list.IsNull()) {
    return base::invalidArgumentError(std::string(list_key) + ": no entry named \"" + name + "\"");
  }
  if (!list.IsSequence())
    return base::invalidArgumentError(std::string(list_key) + ": expected a list");
  for (size_t i = 0; i < list.size(); ++i) {
    YAML::Node entry = list[i];
    if (!entry.IsMap()) continue;
    YAML::Node n = entry["name"];
    if (n && n.IsScalar() && n.Scalar() == name) {
      YAML::Node inner = entry[inner_key];
      if (!inner || inner.IsNull()) return YAML::Node(YAML::NodeType::Map);
      if (!inner.IsMap()) {
        return base::invalidArgumentError(std::string(list_key) + "[" + std::to_string(i) + "]." +
                                          inner_key + ": expected a map");
      }
      return inner;
    }
  }
  return base::invalidArgumentError(std::string(list_key) + ": no entry named \"" + name + "\"");
}

// `<data_key>` (base64) wins over `<path_key>` (a file, relative to base_dir).
base::StatusOr<std::string> dataOrFile(const YAML::Node& map, const char* data_key,
                                       const char* path_key, const std::string& where,
                                       const std::filesystem::path& base_dir) {
  ASSIGN_OR_RETURN(auto data, scalarField(map, data_key, where));
  if (data && !data->empty()) {
    auto decoded = decodeBase64(*data);
    if (!decoded.ok()) return decoded.status().withContext(where + "." + data_key);
    return *decoded;
  }
  ASSIGN_OR_RETURN(auto path, scalarField(map, path_key, where));
  if (path && !path->empty()) {
    std::filesystem::path p(*path);
    if (p.is_relative()) p = base_dir / p;
    auto content = readSmallFile(p, where + "." + path_key);
    if (!content.ok()) return content.status();
    return *content;
  }
  return std::string();
}

}  // namespace

std::string encodeBase64(std::string_view in) {
  std::string out(4 * ((in.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

base::StatusOr<std::string> decodeBase64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  bool padding = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      padding = true;
      continue;
    }
    int v = value(c);
    if (v < 0 || padding) {
      return base::invalidArgumentError("invalid base64 at offset " + std::to_string(i));
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

namespace {

// What a kubeconfig context names.
struct KubeconfigContext {
  std::string cluster;
  std::optional<std::string> user;
  std::optional<std::string> namespace_;
};

// The context `context` (current-context when empty). Errors name the file (`where_file`).
base::StatusOr<KubeconfigContext> resolveContext(const YAML::Node& root, std::string_view context,
                                                 const std::string& where_file) {
  auto fail = [&](const base::Status& st) { return st.withContext(where_file); };
  std::string ctx_name(context);
  if (ctx_name.empty()) {
    auto cur = scalarField(root, "current-context", "kubeconfig");
    if (!cur.ok()) return fail(cur.status());
    if (!cur->has_value() || (*cur)->empty()) {
      return base::invalidArgumentError(where_file + ": current-context is not set");
    }
    ctx_name = **cur;
  }
  auto ctx = namedEntry(root, "contexts", "context", ctx_name);
  if (!ctx.ok()) return fail(ctx.status());
  const std::string ctx_where = "contexts[" + ctx_name + "].context";
  auto cluster_name = scalarField(*ctx, "cluster", ctx_where);
  if (!cluster_name.ok()) return fail(cluster_name.status());
  if (!cluster_name->has_value() || (*cluster_name)->empty()) {
    return base::invalidArgumentError(where_file + ": " + ctx_where + ".cluster: not set");
  }
  auto user_name = scalarField(*ctx, "user", ctx_where);
  if (!user_name.ok()) return fail(user_name.status());
  auto ns = scalarField(*ctx, "namespace", ctx_where);
  if (!ns.ok()) return fail(ns.status());
  return KubeconfigContext{**cluster_name, *user_name, *ns};
}

// The cluster entry: server URL, certificate authority, TLS verification and server name.
base::Status applyCluster(const YAML::Node& root, const std::string& cluster_name,
                          const std::filesystem::path& base_dir, const std::string& where_file,
                          RestConfig& cfg) {
  auto fail = [&](const base::Status& st) { return st.withContext(where_file); };
  auto cluster = namedEntry(root, "clusters", "cluster", cluster_name);
  if (!cluster.ok()) return fail(cluster.status());
  const std::string cl_where = "clusters[" + cluster_name + "].cluster";
  auto server = scalarField(*cluster, "server", cl_where);
  if (!server.ok()) return fail(server.status());
  if (!server->has_value() || (*server)->empty()) {
    return base::invalidArgumentError(where_file + ": " + cl_where + ".server: not set");
  }
  cfg.server = **server;
  while (!cfg.server.empty() && cfg.server.back() == '/') cfg.server.pop_back();
  if (cfg.server.rfind("https://", 0) != 0 && cfg.server.rfind("http://", 0) != 0) {
    return base::invalidArgumentError(where_file + ": " + cl_where + ".server: \"" + cfg.server +
                                      "\" is not an http(s) URL");
  }
  if (auto p = scalarField(*cluster, "proxy-url", cl_where); p.ok() && p->has_value()) {
    return base::unimplementedError(where_file + ": " + cl_where +
                                    ".proxy-url: proxies are not supported");
  }
  auto ca = dataOrFile(*cluster, "certificate-authority-data", "certificate-authority", cl_where,
                       base_dir);
  if (!ca.ok()) return fail(ca.status());
  cfg.ca_pem = *ca;
  auto insecure = boolField(*cluster, "insecure-skip-tls-verify", cl_where);
  if (!insecure.ok()) return fail(insecure.status());
  cfg.insecure_skip_tls_verify = *insecure;
  if (cfg.insecure_skip_tls_verify && !cfg.ca_pem.empty()) {
    return base::invalidArgumentError(
        where_file + ": " + cl_where +
        ": insecure-skip-tls-verify cannot be combined with a certificate authority");
  }
  auto sni = scalarField(*cluster, "tls-server-name", cl_where);
  if (!sni.ok()) return fail(sni.status());
  cfg.tls_server_name = sni->value_or("");
  return base::okStatus();
}

// The user's bearer token: `token`, else the first line of `tokenFile` (relative to the
// kubeconfig's directory); none when neither is set.
base::Status applyUserToken(const YAML::Node& user, const std::string& u_where,
                            const std::filesystem::path& base_dir, const std::string& where_file,
                            RestConfig& cfg) {
  auto fail = [&](const base::Status& st) { return st.withContext(where_file); };
  auto token = scalarField(user, "token", u_where);
  if (!token.ok()) return fail(token.status());
  if (token->has_value() && !(*token)->empty()) {
    cfg.bearer_token = **token;
    return base::okStatus();
  }
  auto token_file = scalarField(user, "tokenFile", u_where);
  if (!token_file.ok()) return fail(token_file.status());
  if (!token_file->has_value() || (*token_file)->empty()) return base::okStatus();
  std::filesystem::path p(**token_file);
  if (p.is_relative()) p = base_dir / p;
  auto content = readSmallFile(p, u_where + ".tokenFile");
  if (!content.ok()) return fail(content.status());
  std::string t = *content;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  if (t.empty()) {
    return base::invalidArgumentError(where_file + ": " + u_where + ".tokenFile: " + p.string() +
                                      " is empty");
  }
  cfg.bearer_token = t;
  return base::okStatus();
}

// The user entry: token, client certificate and key, basic auth. exec and auth-provider
// plugins are refused.
base::Status applyUser(const YAML::Node& root, const std::string& user_name,
                       const std::filesystem::path& base_dir, const std::string& where_file,
                       RestConfig& cfg) {
  auto fail = [&](const base::Status& st) { return st.withContext(where_file); };
  auto user = namedEntry(root, "users", "user", user_name);
  if (!user.ok()) return fail(user.status());
  const std::string u_where = "users[" + user_name + "].user";
  for (const char* unsupported : {"exec", "auth-provider"}) {
    YAML::Node n = (*user)[unsupported];
    if (n && !n.IsNull()) {
      return base::unimplementedError(where_file + ": " + u_where + "." + unsupported +
                                      ": this authentication method is not supported (use a "
                                      "token, tokenFile or client certificate)");
    }
  }
  RETURN_IF_ERROR(applyUserToken(*user, u_where, base_dir, where_file, cfg));
  auto cert = dataOrFile(*user, "client-certificate-data", "client-certificate", u_where, base_dir);
  if (!cert.ok()) return fail(cert.status());
  auto key = dataOrFile(*user, "client-key-data", "client-key", u_where, base_dir);
  if (!key.ok()) return fail(key.status());
  if (cert->empty() != key->empty()) {
    return base::invalidArgumentError(where_file + ": " + u_where +
                                      ": client-certificate and client-key must be set together");
  }
  cfg.client_cert_pem = *cert;
  cfg.client_key_pem = *key;
  auto username = scalarField(*user, "username", u_where);
  if (!username.ok()) return fail(username.status());
  auto password = scalarField(*user, "password", u_where);
  if (!password.ok()) return fail(password.status());
  cfg.username = username->value_or("");
  cfg.password = password->value_or("");
  return base::okStatus();
}

}  // namespace

base::StatusOr<RestConfig> parseKubeconfig(std::string_view yaml_text,
                                           const std::filesystem::path& base_dir,
                                           std::string_view origin, std::string_view context) {
  const std::string where_file(origin);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return base::invalidArgumentError(where_file + ": invalid YAML: " + e.what());
  }
  if (!root.IsMap()) return base::invalidArgumentError(where_file + ": expected a kubeconfig map");

  try {
    ASSIGN_OR_RETURN(KubeconfigContext ctx, resolveContext(root, context, where_file));
    RestConfig cfg;
    cfg.origin = "kubeconfig " + where_file;
    cfg.namespace_ = ctx.namespace_.value_or("");
    RETURN_IF_ERROR(applyCluster(root, ctx.cluster, base_dir, where_file, cfg));
    if (ctx.user.has_value() && !ctx.user->empty()) {
      RETURN_IF_ERROR(applyUser(root, *ctx.user, base_dir, where_file, cfg));
    }
    return cfg;
  } catch (const YAML::Exception& e) {
    return base::invalidArgumentError(where_file + ": " + e.what());
  }
}

base::StatusOr<RestConfig> loadKubeconfig(const std::filesystem::path& path,
                                          std::string_view context) {
  auto text = readSmallFile(path, "kubeconfig");
  if (!text.ok()) return text.status();
  auto base_dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  return parseKubeconfig(*text, base_dir, path.string(), context);
}

}  // namespace nodeagent::api
