#include "cmd/test-apiserver/jwt.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {
namespace {

using nlohmann::json;

using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;
using SigPtr = std::unique_ptr<ECDSA_SIG, decltype(&ECDSA_SIG_free)>;
using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free_all)>;

// How a key type signs: the JWS algorithm, its digest and, for ECDSA, the length of each of r
// and s in the JWS signature (RFC 7518 3.4: fixed-length big-endian r || s, not DER).
struct Algorithm {
  std::string name;
  const EVP_MD* (*digest)();
  size_t ec_coordinate_bytes;  // 0: RSA (PKCS#1 v1.5)
};

std::optional<Algorithm> algorithmFor(EVP_PKEY* key) {
  if (EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA) return Algorithm{"RS256", EVP_sha256, 0};
  if (EVP_PKEY_get_base_id(key) != EVP_PKEY_EC) return std::nullopt;
  char curve[64] = {};
  if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, curve, sizeof(curve),
                                     nullptr) != 1) {
    return std::nullopt;
  }
  const std::string name = curve;
  if (name == "prime256v1" || name == "P-256") return Algorithm{"ES256", EVP_sha256, 32};
  if (name == "secp384r1" || name == "P-384") return Algorithm{"ES384", EVP_sha384, 48};
  if (name == "secp521r1" || name == "P-521") return Algorithm{"ES512", EVP_sha512, 66};
  return std::nullopt;
}

std::string opensslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// kube-apiserver's keyIDFromPublicKey.
base::StatusOr<std::string> keyIdOf(EVP_PKEY* key) {
  unsigned char* der = nullptr;
  const int n = i2d_PUBKEY(key, &der);
  if (n <= 0) return base::internalError("encoding the public key: " + opensslError());
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_len = 0;
  const int ok =
      EVP_Digest(der, static_cast<size_t>(n), digest, &digest_len, EVP_sha256(), nullptr);
  OPENSSL_free(der);
  if (ok != 1) return base::internalError("hashing the public key: " + opensslError());
  return base64UrlEncode(std::string_view(reinterpret_cast<const char*>(digest), digest_len));
}

// DER ECDSA-Sig-Value to the JWS form and back.
std::optional<std::string> ecdsaDerToJws(const std::string& der, size_t n) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(der.data());
  SigPtr sig(d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(der.size())), ECDSA_SIG_free);
  if (!sig) return std::nullopt;
  std::string out(2 * n, '\0');
  auto* bytes = reinterpret_cast<unsigned char*>(out.data());
  if (BN_bn2binpad(ECDSA_SIG_get0_r(sig.get()), bytes, static_cast<int>(n)) < 0 ||
      BN_bn2binpad(ECDSA_SIG_get0_s(sig.get()), bytes + n, static_cast<int>(n)) < 0) {
    return std::nullopt;
  }
  return out;
}

std::optional<std::string> ecdsaJwsToDer(std::string_view jws, size_t n) {
  if (jws.size() != 2 * n) return std::nullopt;
  const auto* bytes = reinterpret_cast<const unsigned char*>(jws.data());
  SigPtr sig(ECDSA_SIG_new(), ECDSA_SIG_free);
  BIGNUM* r = BN_bin2bn(bytes, static_cast<int>(n), nullptr);
  BIGNUM* s = BN_bin2bn(bytes + n, static_cast<int>(n), nullptr);
  if (!sig || !r || !s || ECDSA_SIG_set0(sig.get(), r, s) != 1) {
    BN_free(r);
    BN_free(s);
    return std::nullopt;
  }
  unsigned char* der = nullptr;
  const int len = i2d_ECDSA_SIG(sig.get(), &der);
  if (len <= 0) return std::nullopt;
  std::string out(reinterpret_cast<const char*>(der), static_cast<size_t>(len));
  OPENSSL_free(der);
  return out;
}

// The three parts of a compact JWS, still encoded; nullopt when it has not exactly three.
std::optional<std::vector<std::string>> jwsParts(std::string_view token) {
  std::vector<std::string> parts = splitString(token, '.');
  if (parts.size() != 3) return std::nullopt;
  return parts;
}

std::optional<json> decodeJsonPart(std::string_view part) {
  std::optional<std::string> text = base64UrlDecode(part);
  if (!text) return std::nullopt;
  json doc = json::parse(*text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return std::nullopt;
  return doc;
}

}  // namespace

struct JwtKey::Key {
  PkeyPtr pkey;
  Algorithm algorithm;
  std::string key_id;
};

JwtKey::JwtKey(std::unique_ptr<Key> key) : key_(std::move(key)) {}
JwtKey::~JwtKey() = default;

const std::string& JwtKey::algorithm() const { return key_->algorithm.name; }
const std::string& JwtKey::keyId() const { return key_->key_id; }

base::StatusOr<std::unique_ptr<JwtKey>> JwtKey::generate() {
  PkeyPtr pkey(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"), EVP_PKEY_free);
  if (!pkey) return base::internalError("generating an ECDSA P-256 key: " + opensslError());
  ASSIGN_OR_RETURN(std::string key_id, keyIdOf(pkey.get()));
  auto key = std::make_unique<Key>(Key{std::move(pkey), {"ES256", EVP_sha256, 32}, key_id});
  return std::unique_ptr<JwtKey>(new JwtKey(std::move(key)));
}

base::StatusOr<std::unique_ptr<JwtKey>> JwtKey::fromPem(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free_all);
  PkeyPtr pkey(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr,
               EVP_PKEY_free);
  if (!pkey) {
    ERR_clear_error();
    return base::invalidArgumentError("no PEM private key");
  }
  std::optional<Algorithm> algorithm = algorithmFor(pkey.get());
  if (!algorithm) {
    return base::invalidArgumentError("the key is neither RSA nor ECDSA on P-256, P-384 or P-521");
  }
  ASSIGN_OR_RETURN(std::string key_id, keyIdOf(pkey.get()));
  auto key = std::make_unique<Key>(Key{std::move(pkey), std::move(*algorithm), key_id});
  return std::unique_ptr<JwtKey>(new JwtKey(std::move(key)));
}

base::StatusOr<std::unique_ptr<JwtKey>> JwtKey::fromPemFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return base::invalidArgumentError("cannot read signing key file " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  auto key = fromPem(text.str());
  if (!key.ok()) {
    return base::invalidArgumentError("signing key file " + path.string() + ": " +
                                      key.status().message());
  }
  return key;
}

base::StatusOr<std::string> JwtKey::sign(const json& claims) const {
  const json header = {{"alg", key_->algorithm.name}, {"kid", key_->key_id}};
  const std::string input = base64UrlEncode(header.dump()) + "." + base64UrlEncode(claims.dump());
  MdCtxPtr ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  size_t len = 0;
  if (!ctx ||
      EVP_DigestSignInit(ctx.get(), nullptr, key_->algorithm.digest(), nullptr, key_->pkey.get()) !=
          1 ||
      EVP_DigestSign(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(input.data()),
                     input.size()) != 1) {
    return base::internalError("signing a token: " + opensslError());
  }
  std::string signature(len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &len,
                     reinterpret_cast<const unsigned char*>(input.data()), input.size()) != 1) {
    return base::internalError("signing a token: " + opensslError());
  }
  signature.resize(len);
  if (key_->algorithm.ec_coordinate_bytes > 0) {
    auto jws = ecdsaDerToJws(signature, key_->algorithm.ec_coordinate_bytes);
    if (!jws) return base::internalError("signing a token: malformed ECDSA signature");
    signature = std::move(*jws);
  }
  return input + "." + base64UrlEncode(signature);
}

base::StatusOr<json> JwtKey::verify(std::string_view token) const {
  auto parts = jwsParts(token);
  if (!parts) return base::invalidArgumentError("compact JWS format must have three parts");
  std::optional<json> header = decodeJsonPart((*parts)[0]);
  std::optional<json> claims = decodeJsonPart((*parts)[1]);
  std::optional<std::string> signature = base64UrlDecode((*parts)[2]);
  if (!header || !claims || !signature) {
    return base::invalidArgumentError("the token is not a valid compact JWS");
  }
  const std::string crypto_error = "go-jose/go-jose: error in cryptographic primitive";
  if (header->value("alg", "") != key_->algorithm.name) {
    return base::invalidArgumentError(crypto_error);
  }
  if (key_->algorithm.ec_coordinate_bytes > 0) {
    signature = ecdsaJwsToDer(*signature, key_->algorithm.ec_coordinate_bytes);
    if (!signature) return base::invalidArgumentError(crypto_error);
  }
  const std::string_view input = token.substr(0, (*parts)[0].size() + 1 + (*parts)[1].size());
  MdCtxPtr ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  const bool ok =
      ctx &&
      EVP_DigestVerifyInit(ctx.get(), nullptr, key_->algorithm.digest(), nullptr,
                           key_->pkey.get()) == 1 &&
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature->data()),
                       signature->size(), reinterpret_cast<const unsigned char*>(input.data()),
                       input.size()) == 1;
  ERR_clear_error();
  if (!ok) return base::invalidArgumentError(crypto_error);
  return std::move(*claims);
}

std::optional<json> JwtKey::unverifiedClaims(std::string_view token) {
  auto parts = jwsParts(token);
  if (!parts || !decodeJsonPart((*parts)[0])) return std::nullopt;
  return decodeJsonPart((*parts)[1]);
}

std::string randomUuid() {
  unsigned char b[16];
  NA_CHECK(RAND_bytes(b, sizeof(b)) == 1, "OpenSSL's random generator failed");
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < sizeof(b); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[b[i] >> 4];
    out += kHex[b[i] & 15];
  }
  return out;
}

}  // namespace nodeagent::testapiserver
