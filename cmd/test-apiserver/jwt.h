// The key the test apiserver signs service account tokens with, and the JSON Web Tokens it signs:
// compact JWS as kube-apiserver's token generator writes them (pkg/serviceaccount/jwt.go). RS256
// for an RSA key, ES256/ES384/ES512 for an ECDSA P-256/P-384/P-521 key; the header carries the
// algorithm and the key ID kube-apiserver derives from the public key (the unpadded base64url of
// the SHA-256 of its PKIX DER form). OpenSSL stays inside jwt.cpp.
//
// Threading: a JwtKey is immutable once made; sign() and verify() may run on any thread.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace nodeagent::testapiserver {

class JwtKey {
 public:
  // A new ECDSA P-256 key (ES256), for a server given no --service-account-signing-key-file.
  static base::StatusOr<std::unique_ptr<JwtKey>> generate();
  // A PEM private key (PKCS#1 RSA, SEC1 EC or PKCS#8) from text or a file; InvalidArgument naming
  // the file when it is unreadable, not a private key, or of an unsupported type or curve.
  static base::StatusOr<std::unique_ptr<JwtKey>> fromPem(const std::string& pem);
  static base::StatusOr<std::unique_ptr<JwtKey>> fromPemFile(const std::filesystem::path& path);

  ~JwtKey();
  JwtKey(const JwtKey&) = delete;
  JwtKey& operator=(const JwtKey&) = delete;

  // "RS256", "ES256"...
  const std::string& algorithm() const;
  const std::string& keyId() const;

  // `claims` signed: "header.payload.signature", each part base64url.
  base::StatusOr<std::string> sign(const nlohmann::json& claims) const;
  // The claims of a token signed by this key. InvalidArgument when it is no compact JWS, names
  // another algorithm, or its signature does not verify ("go-jose/go-jose: error in cryptographic
  // primitive", as kube-apiserver words that).
  base::StatusOr<nlohmann::json> verify(std::string_view token) const;

  // The claims of a compact JWS without checking its signature (to find its issuer first, as
  // kube-apiserver does); nullopt when it is no JWS with a JSON object as payload.
  static std::optional<nlohmann::json> unverifiedClaims(std::string_view token);

  struct Key;

 private:
  explicit JwtKey(std::unique_ptr<Key> key);
  std::unique_ptr<Key> key_;
};

// A random version 4 UUID, as kube-apiserver's token IDs ("jti").
std::string randomUuid();

}  // namespace nodeagent::testapiserver
