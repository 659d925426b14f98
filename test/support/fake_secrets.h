// Secrets for tests of image pulls: an ApiObjectSource holding Secrets by name (NotFound, worded
// as the apiserver's, for any other), and docker config secrets built as kubectl builds them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/volume/api_objects.h"

namespace nodeagent::testing {

inline std::string base64Encode(const std::string& in) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    unsigned n = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) n |= static_cast<unsigned char>(in[i + 1]) << 8;
    if (i + 2 < in.size()) n |= static_cast<unsigned char>(in[i + 2]);
    out += table[(n >> 18) & 63];
    out += table[(n >> 12) & 63];
    out += i + 1 < in.size() ? table[(n >> 6) & 63] : '=';
    out += i + 2 < in.size() ? table[n & 63] : '=';
  }
  return out;
}

// A kubernetes.io/dockerconfigjson Secret (as `kubectl create secret docker-registry` makes it)
// whose one entry for `registry` holds `auth`: base64 "user:password".
inline nlohmann::json dockerConfigJsonSecret(const std::string& registry, const std::string& user,
                                             const std::string& password) {
  nlohmann::json config = {
      {"auths", {{registry, {{"auth", base64Encode(user + ":" + password)}}}}}};
  return {{"type", "kubernetes.io/dockerconfigjson"},
          {"data", {{".dockerconfigjson", base64Encode(config.dump())}}}};
}

class FakeSecrets final : public agent::ApiObjectSource {
 public:
  void add(const std::string& name, nlohmann::json secret) { secrets_[name] = std::move(secret); }
  // "<namespace>/<name>" of each read, in order.
  std::vector<std::string> reads;

  base::StatusOr<std::shared_ptr<const nlohmann::json>> get(agent::ApiObjectKind kind,
                                                            const std::string& ns,
                                                            const std::string& name,
                                                            const std::string&) override {
    if (kind != agent::ApiObjectKind::kSecret) return base::notFoundError("not a secret");
    reads.push_back(ns + "/" + name);
    auto it = secrets_.find(name);
    if (it == secrets_.end()) return base::notFoundError("secret \"" + name + "\" not found");
    return std::make_shared<const nlohmann::json>(it->second);
  }

 private:
  std::map<std::string, nlohmann::json> secrets_;
};

}  // namespace nodeagent::testing
