#include "cmd/test-apiserver/bootstrap_tokens.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <regex>

#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {
namespace {

using nlohmann::json;

bool lowerAlnum(std::string_view text, size_t size) {
  return text.size() == size && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
         });
}

// A data value of the Secret, base64-decoded; "" when missing or not base64.
std::string secretValue(const json& secret, const char* key) {
  const std::string encoded = stringAt(secret.value("data", json::object()), key);
  return base64Decode(encoded).value_or("");
}

bool sameSecret(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

std::optional<ReviewUser> authenticateBootstrapToken(const Store& store, const std::string& token,
                                                     base::SystemTime now) {
  const size_t dot = token.find('.');
  if (dot == std::string::npos) return std::nullopt;
  const std::string id = token.substr(0, dot);
  const std::string secret_part = token.substr(dot + 1);
  if (!lowerAlnum(id, 6) || !lowerAlnum(secret_part, 16)) return std::nullopt;
  auto secret = store.get("secrets", "kube-system", "bootstrap-token-" + id);
  if (!secret.ok() || stringAt(*secret, "type") != "bootstrap.kubernetes.io/token") {
    return std::nullopt;
  }
  if (secret->value("metadata", json::object()).contains("deletionTimestamp")) {
    return std::nullopt;
  }
  if (secretValue(*secret, "token-id") != id ||
      !sameSecret(secretValue(*secret, "token-secret"), secret_part) ||
      secretValue(*secret, "usage-bootstrap-authentication") != "true") {
    return std::nullopt;
  }
  const std::string expiration = secretValue(*secret, "expiration");
  if (!expiration.empty()) {
    std::optional<base::SystemTime> expires = parseTime(expiration);
    if (!expires || *expires < now) return std::nullopt;
  }
  ReviewUser user{"system:bootstrap:" + id, "", {"system:bootstrappers"}, {}};
  static const std::regex kGroup("^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$");
  for (std::string& group : splitString(secretValue(*secret, "auth-extra-groups"), ',')) {
    if (group.empty()) continue;
    if (!std::regex_match(group, kGroup)) return std::nullopt;
    if (std::find(user.groups.begin(), user.groups.end(), group) == user.groups.end()) {
      user.groups.push_back(std::move(group));
    }
  }
  return user;
}

}  // namespace nodeagent::testapiserver
