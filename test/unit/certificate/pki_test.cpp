#include "agent/certificate/pki.h"

#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "test/support/test_util.h"
#include "test/support/tls_cert.h"

namespace nodeagent::certificate {
namespace {

using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;

// Every certificate of a PEM text, in order.
std::vector<X509Ptr> parseAll(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), int(pem.size())),
                                                &BIO_free);
  std::vector<X509Ptr> out;
  while (X509* c = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    out.emplace_back(c, &X509_free);
  }
  return out;
}

X509Ptr parseOne(const std::string& pem) {
  auto all = parseAll(pem);
  REQUIRE(all.size() == 1);
  return std::move(all.front());
}

std::string nameEntry(X509* cert, int nid, int index = 0) {
  X509_NAME* name = X509_get_subject_name(cert);
  int pos = -1;
  for (int i = 0; i <= index; ++i) {
    pos = X509_NAME_get_index_by_NID(name, nid, pos);
    if (pos < 0) return "";
  }
  ASN1_STRING* s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, pos));
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     size_t(ASN1_STRING_length(s)));
}

// X509_verify_cert of `leaf` (with `chain` as untrusted intermediates) against `ca` for `purpose`.
int verify(X509* leaf, X509* ca, int purpose) {
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), &X509_STORE_free);
  X509_STORE_add_cert(store.get(), ca);
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(),
                                                                      &X509_STORE_CTX_free);
  X509_STORE_CTX_init(ctx.get(), store.get(), leaf, nullptr);
  X509_STORE_CTX_set_purpose(ctx.get(), purpose);
  if (X509_verify_cert(ctx.get()) == 1) return X509_V_OK;
  return X509_STORE_CTX_get_error(ctx.get());
}

std::string serialHex(X509* cert) {
  BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get_serialNumber(cert), nullptr);
  char* hex = BN_bn2hex(bn);
  std::string out(hex);
  OPENSSL_free(hex);
  BN_free(bn);
  return out;
}

KeyPair mustCa(const std::string& name = "test-ca") {
  auto ca = generateCa(name);
  INFO(ca.status().toString());
  REQUIRE(ca.ok());
  return *ca;
}

KeyPair mustIssue(const KeyPair& ca, const CertificateRequest& request) {
  auto pair = issueCertificate(ca, request);
  INFO(pair.status().toString());
  REQUIRE(pair.ok());
  return *pair;
}

mode_t modeOf(const std::filesystem::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

TEST_CASE("generateCa makes a self-signed P-256 CA with key identifiers and random serials",
          "[pki]") {
  KeyPair ca = mustCa("my-ca");
  CHECK(ca.key_pem.find("-----BEGIN PRIVATE KEY-----") == 0);
  X509Ptr cert = parseOne(ca.cert_pem);
  CHECK(nameEntry(cert.get(), NID_commonName) == "my-ca");
  CHECK(X509_get_version(cert.get()) == 2);
  CHECK(X509_check_ca(cert.get()) == 1);
  CHECK((X509_get_key_usage(cert.get()) & KU_KEY_CERT_SIGN) != 0);
  CHECK(X509_get0_subject_key_id(cert.get()) != nullptr);
  CHECK(X509_get0_authority_key_id(cert.get()) != nullptr);
  CHECK(X509_check_issued(cert.get(), cert.get()) == X509_V_OK);
  CHECK(verify(cert.get(), cert.get(), X509_PURPOSE_ANY) == X509_V_OK);
  EVP_PKEY* key = X509_get0_pubkey(cert.get());
  CHECK(EVP_PKEY_get_base_id(key) == EVP_PKEY_EC);
  char group[64] = {};
  size_t len = 0;
  REQUIRE(EVP_PKEY_get_group_name(key, group, sizeof(group), &len) == 1);
  CHECK(std::string(group) == "prime256v1");
  CHECK(serialHex(cert.get()) != serialHex(parseOne(mustCa().cert_pem).get()));
  // Backdated an hour, valid a year.
  int days = 0, seconds = 0;
  REQUIRE(ASN1_TIME_diff(&days, &seconds, X509_get0_notBefore(cert.get()),
                         X509_get0_notAfter(cert.get())) == 1);
  CHECK(days == 365);
  REQUIRE(ASN1_TIME_diff(&days, &seconds, X509_get0_notBefore(cert.get()), nullptr) == 1);
  CHECK(days == 0);
  CHECK(seconds >= 3600);
  CHECK(seconds < 3700);
}

TEST_CASE("issueCertificate makes a client certificate with CN, O and clientAuth", "[pki]") {
  KeyPair ca = mustCa();
  CertificateRequest request;
  request.common_name = "system:node:n1";
  request.organizations = {"system:nodes", "team"};
  request.client_auth = true;
  X509Ptr leaf = parseOne(mustIssue(ca, request).cert_pem);
  X509Ptr ca_cert = parseOne(ca.cert_pem);
  CHECK(nameEntry(leaf.get(), NID_commonName) == "system:node:n1");
  CHECK(nameEntry(leaf.get(), NID_organizationName, 0) == "system:nodes");
  CHECK(nameEntry(leaf.get(), NID_organizationName, 1) == "team");
  CHECK(X509_check_ca(leaf.get()) == 0);
  CHECK((X509_get_extended_key_usage(leaf.get()) & XKU_SSL_CLIENT) != 0);
  CHECK((X509_get_extended_key_usage(leaf.get()) & XKU_SSL_SERVER) == 0);
  CHECK((X509_get_key_usage(leaf.get()) & KU_DIGITAL_SIGNATURE) != 0);
  CHECK((X509_get_key_usage(leaf.get()) & KU_KEY_CERT_SIGN) == 0);
  CHECK(ASN1_OCTET_STRING_cmp(X509_get0_authority_key_id(leaf.get()),
                              X509_get0_subject_key_id(ca_cert.get())) == 0);
  CHECK(verify(leaf.get(), ca_cert.get(), X509_PURPOSE_SSL_CLIENT) == X509_V_OK);
  CHECK(verify(leaf.get(), ca_cert.get(), X509_PURPOSE_SSL_SERVER) != X509_V_OK);
  // Another CA does not vouch for it.
  X509Ptr other = parseOne(mustCa("other").cert_pem);
  CHECK(verify(leaf.get(), other.get(), X509_PURPOSE_SSL_CLIENT) != X509_V_OK);
}

TEST_CASE("issueCertificate puts DNS and IP names in subjectAltName", "[pki]") {
  KeyPair ca = mustCa();
  CertificateRequest request;
  request.common_name = "serving";
  request.dns_names = {"node-1", "node-1.example"};
  request.ip_addresses = {"127.0.0.1", "::1", "10.0.0.7"};
  request.server_auth = true;
  X509Ptr leaf = parseOne(mustIssue(ca, request).cert_pem);
  CHECK(X509_check_host(leaf.get(), "node-1", 0, 0, nullptr) == 1);
  CHECK(X509_check_host(leaf.get(), "node-1.example", 0, 0, nullptr) == 1);
  CHECK(X509_check_host(leaf.get(), "node-2", 0, 0, nullptr) == 0);
  CHECK(X509_check_ip_asc(leaf.get(), "127.0.0.1", 0) == 1);
  CHECK(X509_check_ip_asc(leaf.get(), "::1", 0) == 1);
  CHECK(X509_check_ip_asc(leaf.get(), "10.0.0.7", 0) == 1);
  CHECK(X509_check_ip_asc(leaf.get(), "10.0.0.8", 0) == 0);
  CHECK((X509_get_extended_key_usage(leaf.get()) & XKU_SSL_SERVER) != 0);
  CHECK(verify(leaf.get(), parseOne(ca.cert_pem).get(), X509_PURPOSE_SSL_SERVER) == X509_V_OK);
}

TEST_CASE("issueCertificate rejects bad input", "[pki]") {
  KeyPair ca = mustCa();
  CertificateRequest request;
  request.common_name = "x";
  request.ip_addresses = {"not-an-ip"};
  auto bad_ip = issueCertificate(ca, request);
  REQUIRE_FALSE(bad_ip.ok());
  CHECK(bad_ip.status().code() == base::StatusCode::kInvalidArgument);
  CHECK(bad_ip.status().message().find("not-an-ip") != std::string::npos);
  request.ip_addresses.clear();
  auto bad_ca = issueCertificate(KeyPair{"garbage", ca.key_pem}, request);
  REQUIRE_FALSE(bad_ca.ok());
  CHECK(bad_ca.status().code() == base::StatusCode::kInvalidArgument);
}

TEST_CASE("generateSelfSignedServing has kubelet's shape: serving certificate then its CA",
          "[pki]") {
  auto pair = generateSelfSignedServing("node-a", {"10.1.2.3"}, {"alias"});
  INFO(pair.status().toString());
  REQUIRE(pair.ok());
  auto chain = parseAll(pair->cert_pem);
  REQUIRE(chain.size() == 2);
  CHECK_THAT(nameEntry(chain[0].get(), NID_commonName), Catch::StartsWith("node-a@"));
  CHECK_THAT(nameEntry(chain[1].get(), NID_commonName), Catch::StartsWith("node-a-ca@"));
  CHECK(X509_check_host(chain[0].get(), "node-a", 0, 0, nullptr) == 1);
  CHECK(X509_check_host(chain[0].get(), "alias", 0, 0, nullptr) == 1);
  CHECK(X509_check_ip_asc(chain[0].get(), "10.1.2.3", 0) == 1);
  CHECK(X509_check_ca(chain[1].get()) == 1);
  CHECK(verify(chain[0].get(), chain[1].get(), X509_PURPOSE_SSL_SERVER) == X509_V_OK);

  auto by_ip = generateSelfSignedServing("192.168.5.5", {}, {});
  REQUIRE(by_ip.ok());
  auto ip_chain = parseAll(by_ip->cert_pem);
  REQUIRE(ip_chain.size() == 2);
  CHECK(X509_check_ip_asc(ip_chain[0].get(), "192.168.5.5", 0) == 1);
  CHECK(X509_check_host(ip_chain[0].get(), "192.168.5.5", 0, 0, nullptr) == 0);
}

TEST_CASE("writeKeyPair writes the key 0600, the certificate 0644, a new directory 0700", "[pki]") {
  testing::TempDir tmp;
  KeyPair ca = mustCa();
  auto dir = tmp / "new" / "certs";
  REQUIRE(writeKeyPair(ca, dir / "c.crt", dir / "c.key").ok());
  CHECK(modeOf(dir / "c.key") == 0600);
  CHECK(modeOf(dir / "c.crt") == 0644);
  CHECK(modeOf(dir) == 0700);
  CHECK(testing::readFile(dir / "c.crt") == ca.cert_pem);
  CHECK(testing::readFile(dir / "c.key") == ca.key_pem);
  // Overwriting leaves no temporary files behind.
  REQUIRE(writeKeyPair(mustCa(), dir / "c.crt", dir / "c.key").ok());
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++files;
  CHECK(files == 2);
  auto loaded = loadKeyPair(dir / "c.crt", dir / "c.key");
  INFO(loaded.status().toString());
  CHECK(loaded.ok());
}

// A CA, a leaf it issued and two file names to write them under.
struct LoadFixture {
  testing::TempDir tmp;
  KeyPair ca = mustCa();
  CertificateRequest request = leafRequest();
  KeyPair leaf = mustIssue(ca, request);
  std::filesystem::path crt = tmp / "a.crt";
  std::filesystem::path key = tmp / "a.key";

  static CertificateRequest leafRequest() {
    CertificateRequest r;
    r.common_name = "leaf";
    return r;
  }
};

TEST_CASE_METHOD(LoadFixture, "loadKeyPair names the file and the problem", "[pki]") {
  SECTION("missing file") {
    auto r = loadKeyPair(crt, key);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == base::StatusCode::kNotFound);
    CHECK(r.status().message().find(crt.string()) != std::string::npos);
  }
  SECTION("not PEM") {
    testing::writeFile(crt, "hello");
    testing::writeFile(key, leaf.key_pem);
    auto r = loadKeyPair(crt, key);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == base::StatusCode::kInvalidArgument);
    CHECK(r.status().message().find(crt.string()) != std::string::npos);
  }
  SECTION("bad key") {
    testing::writeFile(crt, leaf.cert_pem);
    testing::writeFile(key, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
    auto r = loadKeyPair(crt, key);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find(key.string()) != std::string::npos);
  }
}

TEST_CASE_METHOD(LoadFixture,
                 "loadKeyPair checks that the key matches and the certificate is valid now",
                 "[pki]") {
  SECTION("key of another certificate") {
    REQUIRE(writeKeyPair(KeyPair{leaf.cert_pem, ca.key_pem}, crt, key).ok());
    auto r = loadKeyPair(crt, key);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == base::StatusCode::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains("does not match"));
    CHECK_THAT(r.status().message(), Catch::Contains(key.string()));
  }
  SECTION("expired") {
    request.backdate = std::chrono::hours(2);
    request.validity = std::chrono::hours(1);
    REQUIRE(writeKeyPair(mustIssue(ca, request), crt, key).ok());
    auto r = loadKeyPair(crt, key);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains("expired"));
    CHECK_THAT(r.status().message(), Catch::Contains(crt.string()));
  }
  SECTION("not yet valid") {
    request.backdate = -std::chrono::hours(1);
    REQUIRE(writeKeyPair(mustIssue(ca, request), crt, key).ok());
    auto r = loadKeyPair(crt, key);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains("not valid before"));
  }
  SECTION("good pair") {
    REQUIRE(writeKeyPair(leaf, crt, key).ok());
    auto r = loadKeyPair(crt, key);
    INFO(r.status().toString());
    REQUIRE(r.ok());
    CHECK(r->cert_pem == leaf.cert_pem);
    CHECK(r->key_pem == leaf.key_pem);
  }
}

TEST_CASE("ensureSelfSignedServing writes kubelet.crt/kubelet.key once and reuses them", "[pki]") {
  testing::TempDir tmp;
  auto dir = tmp / "pki";
  auto first = ensureSelfSignedServing(dir, "node-x", {"127.0.0.1"}, {"localhost"});
  INFO(first.status().toString());
  REQUIRE(first.ok());
  CHECK(first->cert_file == dir / "kubelet.crt");
  CHECK(first->key_file == dir / "kubelet.key");
  CHECK(modeOf(first->key_file) == 0600);
  std::string cert = testing::readFile(first->cert_file);
  auto chain = parseAll(cert);
  REQUIRE(chain.size() == 2);
  CHECK(X509_check_host(chain[0].get(), "node-x", 0, 0, nullptr) == 1);
  CHECK(X509_check_ip_asc(chain[0].get(), "127.0.0.1", 0) == 1);

  auto again = ensureSelfSignedServing(dir, "node-x", {}, {});
  REQUIRE(again.ok());
  CHECK(testing::readFile(again->cert_file) == cert);

  SECTION("a pair that does not load is replaced") {
    testing::writeFile(dir / "kubelet.key", mustCa().key_pem);
    auto replaced = ensureSelfSignedServing(dir, "node-x", {}, {});
    REQUIRE(replaced.ok());
    CHECK(testing::readFile(replaced->cert_file) != cert);
    CHECK(loadKeyPair(replaced->cert_file, replaced->key_file).ok());
  }
}

TEST_CASE("TestPki issues client and serving certificates its CA file verifies", "[pki]") {
  testing::TempDir tmp;
  testing::TestPki pki(tmp.path());
  auto client = pki.issueClient("system:admin", {"system:masters"});
  CHECK(client.cert_file == tmp / "system_admin.crt");
  auto serving = pki.issueServing("kubelet");
  X509Ptr ca = parseOne(testing::readFile(pki.caFile()));
  X509Ptr client_cert = parseOne(testing::readFile(client.cert_file));
  X509Ptr serving_cert = parseOne(testing::readFile(serving.cert_file));
  CHECK(nameEntry(client_cert.get(), NID_organizationName) == "system:masters");
  CHECK(verify(client_cert.get(), ca.get(), X509_PURPOSE_SSL_CLIENT) == X509_V_OK);
  CHECK(verify(serving_cert.get(), ca.get(), X509_PURPOSE_SSL_SERVER) == X509_V_OK);
  CHECK(loadKeyPair(client.cert_file, client.key_file).ok());

  testing::writeSelfSignedCert(tmp.path());
  X509Ptr self = parseOne(testing::readFile(tmp / "cert.pem"));
  CHECK(X509_check_ip_asc(self.get(), "127.0.0.1", 0) == 1);
  CHECK(verify(self.get(), self.get(), X509_PURPOSE_SSL_SERVER) == X509_V_OK);
  CHECK(loadKeyPair(tmp / "cert.pem", tmp / "key.pem").ok());
}

}  // namespace
}  // namespace nodeagent::certificate
