#include "agent/certificate/pki.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <system_error>
#include <utility>

#include "base/log.h"

namespace nodeagent::certificate {
namespace {

NODEAGENT_LOGGER("certificate");

// Nothing here runs before main(): OpenSSL initialises itself on the first call into it (the
// daemon defers that until TLS is first used, cmd/nodeagent/lazy_openssl.h).

template <auto Fn>
struct Deleter {
  template <typename T>
  void operator()(T* p) const {
    Fn(p);
  }
};
void freeExtensions(STACK_OF(X509_EXTENSION) * exts) {
  sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
}

using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO_free_all>>;
using BnPtr = std::unique_ptr<BIGNUM, Deleter<BN_free>>;
using NamesPtr = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES_free>>;
using NamePtr = std::unique_ptr<GENERAL_NAME, Deleter<GENERAL_NAME_free>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION_free>>;
using ReqPtr = std::unique_ptr<X509_REQ, Deleter<X509_REQ_free>>;
using NameStackPtr = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES_free>>;
using ExtStackPtr = std::unique_ptr<STACK_OF(X509_EXTENSION), Deleter<freeExtensions>>;

// The queued OpenSSL errors as one line (the queue is emptied).
std::string opensslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

base::Status sslError(std::string_view what) {
  return base::internalError(std::string(what) + ": " + opensslErrors());
}

base::StatusOr<PkeyPtr> generateKey() {
  PkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!key) return sslError("generating an ECDSA P-256 key");
  return key;
}

std::string bioText(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

base::StatusOr<std::string> keyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  // PKCS#8 ("PRIVATE KEY"), unencrypted.
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return sslError("encoding a private key");
  return bioText(bio.get());
}

base::StatusOr<std::string> certPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return sslError("encoding a certificate");
  return bioText(bio.get());
}

// The first certificate of a PEM text (a chain may follow it).
X509Ptr parseCert(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return nullptr;
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

PkeyPtr parseKey(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return nullptr;
  return PkeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

// A positive random 127-bit serial number (RFC 5280 allows up to 20 octets).
base::Status setRandomSerial(X509* cert) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return sslError("drawing a serial number");
  bytes[0] &= 0x7f;
  bytes[0] |= 0x40;  // never zero, always 16 octets
  BnPtr bn(BN_bin2bn(bytes, sizeof(bytes), nullptr));
  if (!bn || BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)) == nullptr)
    return sslError("setting a serial number");
  return base::okStatus();
}

base::Status setSubject(X509* cert, const std::string& common_name,
                        const std::vector<std::string>& organizations) {
  X509_NAME* name = X509_get_subject_name(cert);
  auto add = [&](const char* field, const std::string& value) {
    return X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                                      reinterpret_cast<const unsigned char*>(value.c_str()),
                                      static_cast<int>(value.size()), -1, 0) == 1;
  };
  for (const auto& o : organizations) {
    if (!add("O", o)) return base::invalidArgumentError("bad organization \"" + o + "\"");
  }
  if (!common_name.empty() && !add("CN", common_name))
    return base::invalidArgumentError("bad common name \"" + common_name + "\"");
  return base::okStatus();
}

// notBefore is `backdate` before now (clock skew between hosts), notAfter `validity` after that.
base::Status setValidity(X509* cert, std::chrono::seconds backdate, std::chrono::seconds validity) {
  long before = -static_cast<long>(backdate.count());
  long after = before + static_cast<long>(validity.count());
  if (X509_gmtime_adj(X509_getm_notBefore(cert), before) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert), after) == nullptr)
    return sslError("setting the validity");
  return base::okStatus();
}

base::Status addSubjectAltNames(X509* cert, const std::vector<std::string>& dns_names,
                                const std::vector<std::string>& ip_addresses) {
  if (dns_names.empty() && ip_addresses.empty()) return base::okStatus();
  NamesPtr names(GENERAL_NAMES_new());
  for (const auto& dns : dns_names) {
    if (dns.empty()) return base::invalidArgumentError("empty DNS name");
    NamePtr gn(GENERAL_NAME_new());
    ASN1_IA5STRING* s = ASN1_IA5STRING_new();
    if (!gn || s == nullptr || ASN1_STRING_set(s, dns.data(), static_cast<int>(dns.size())) != 1) {
      ASN1_IA5STRING_free(s);
      return sslError("adding DNS name " + dns);
    }
    GENERAL_NAME_set0_value(gn.get(), GEN_DNS, s);
    sk_GENERAL_NAME_push(names.get(), gn.release());
  }
  for (const auto& ip : ip_addresses) {
    NamePtr gn(GENERAL_NAME_new());
    ASN1_OCTET_STRING* addr = a2i_IPADDRESS(ip.c_str());
    if (addr == nullptr) {
      ERR_clear_error();
      return base::invalidArgumentError("\"" + ip + "\" is not an IP address");
    }
    GENERAL_NAME_set0_value(gn.get(), GEN_IPADD, addr);
    sk_GENERAL_NAME_push(names.get(), gn.release());
  }
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1)
    return sslError("adding subjectAltName");
  return base::okStatus();
}

// Adds extensions in OpenSSL's config syntax; `issuer` supplies the authority key identifier.
base::Status addExtensions(X509* cert, X509* issuer,
                           const std::vector<std::pair<int, std::string>>& extensions) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  for (const auto& [nid, value] : extensions) {
    ExtPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
    if (!ext || X509_add_ext(cert, ext.get(), -1) != 1)
      return sslError(std::string("adding ") + OBJ_nid2sn(nid) + "=" + value);
  }
  return base::okStatus();
}

std::string extendedKeyUsage(const CertificateRequest& request) {
  std::string eku;
  if (request.server_auth) eku = "serverAuth";
  if (request.client_auth) eku += eku.empty() ? "clientAuth" : ",clientAuth";
  return eku;
}

struct Signer {
  X509* cert;  // nullptr: self-signed
  EVP_PKEY* key;
};

// Builds and signs a certificate for `key` (the subject's), as `request` and `is_ca` say.
base::StatusOr<X509Ptr> buildCertificate(const CertificateRequest& request, bool is_ca,
                                         EVP_PKEY* key, Signer signer) {
  X509Ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) return sslError("making a certificate");
  RETURN_IF_ERROR(setRandomSerial(cert.get()));
  RETURN_IF_ERROR(setSubject(cert.get(), request.common_name, request.organizations));
  X509_NAME* issuer_name = signer.cert != nullptr ? X509_get_subject_name(signer.cert)
                                                  : X509_get_subject_name(cert.get());
  if (X509_set_issuer_name(cert.get(), issuer_name) != 1 || X509_set_pubkey(cert.get(), key) != 1)
    return sslError("setting the issuer and key");
  RETURN_IF_ERROR(setValidity(cert.get(), request.backdate, request.validity));
  std::vector<std::pair<int, std::string>> exts = {
      {NID_basic_constraints, is_ca ? "critical,CA:TRUE" : "critical,CA:FALSE"},
      {NID_key_usage, is_ca ? "critical,digitalSignature,keyEncipherment,keyCertSign"
                            : "critical,digitalSignature,keyEncipherment"},
      {NID_subject_key_identifier, "hash"},
  };
  if (std::string eku = extendedKeyUsage(request); !eku.empty())
    exts.emplace_back(NID_ext_key_usage, eku);
  X509* issuer = signer.cert != nullptr ? signer.cert : cert.get();
  RETURN_IF_ERROR(addExtensions(cert.get(), issuer, exts));
  // After the subject key identifier: a self-signed certificate is its own authority.
  const std::vector<std::pair<int, std::string>> authority = {
      {NID_authority_key_identifier, "keyid:always"}};
  RETURN_IF_ERROR(addExtensions(cert.get(), issuer, authority));
  RETURN_IF_ERROR(addSubjectAltNames(cert.get(), request.dns_names, request.ip_addresses));
  EVP_PKEY* signing_key = signer.key != nullptr ? signer.key : key;
  if (X509_sign(cert.get(), signing_key, EVP_sha256()) <= 0) return sslError("signing");
  return cert;
}

base::StatusOr<KeyPair> makePair(X509* cert, EVP_PKEY* key) {
  auto cert_pem = certPem(cert);
  if (!cert_pem.ok()) return cert_pem.status();
  auto key_pem = keyPem(key);
  if (!key_pem.ok()) return key_pem.status();
  return KeyPair{std::move(*cert_pem), std::move(*key_pem)};
}

}  // namespace

base::StatusOr<KeyPair> generateSelfSigned(const CertificateRequest& request) {
  auto key = generateKey();
  if (!key.ok()) return key.status();
  auto cert = buildCertificate(request, /*is_ca=*/true, key->get(), Signer{nullptr, nullptr});
  if (!cert.ok()) return cert.status().withContext("certificate " + request.common_name);
  return makePair(cert->get(), key->get());
}

base::StatusOr<KeyPair> generateCa(const std::string& common_name, std::chrono::seconds validity) {
  CertificateRequest request;
  request.common_name = common_name;
  request.validity = validity;
  return generateSelfSigned(request);
}

base::StatusOr<KeyPair> issueCertificate(const KeyPair& ca, const CertificateRequest& request) {
  X509Ptr ca_cert = parseCert(ca.cert_pem);
  PkeyPtr ca_key = parseKey(ca.key_pem);
  if (!ca_cert || !ca_key) {
    ERR_clear_error();
    return base::invalidArgumentError("the CA's certificate or key does not parse");
  }
  auto key = generateKey();
  if (!key.ok()) return key.status();
  auto cert =
      buildCertificate(request, /*is_ca=*/false, key->get(), Signer{ca_cert.get(), ca_key.get()});
  if (!cert.ok()) return cert.status().withContext("certificate " + request.common_name);
  return makePair(cert->get(), key->get());
}

namespace {

std::string nameEntry(const X509_NAME_ENTRY* entry) {
  const ASN1_STRING* data = X509_NAME_ENTRY_get_data(entry);
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(data)),
                     static_cast<size_t>(ASN1_STRING_length(data)));
}

// The CN and O entries of a subject.
void readSubject(const X509_NAME* subject, std::string& common_name,
                 std::vector<std::string>& organizations) {
  for (int i = 0; i < X509_NAME_entry_count(subject); ++i) {
    const X509_NAME_ENTRY* entry = X509_NAME_get_entry(subject, i);
    const int nid = OBJ_obj2nid(X509_NAME_ENTRY_get_object(entry));
    if (nid == NID_commonName) common_name = nameEntry(entry);
    if (nid == NID_organizationName) organizations.push_back(nameEntry(entry));
  }
}

void readAltNames(X509_REQ* req, SigningRequest& out) {
  ExtStackPtr exts(X509_REQ_get_extensions(req));
  if (!exts) return;
  NameStackPtr names(static_cast<GENERAL_NAMES*>(
      X509V3_get_d2i(exts.get(), NID_subject_alt_name, nullptr, nullptr)));
  if (!names) return;
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* gn = sk_GENERAL_NAME_value(names.get(), i);
    if (gn->type == GEN_DNS) {
      const ASN1_STRING* dns = gn->d.dNSName;
      out.dns_names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(dns)),
                                 static_cast<size_t>(ASN1_STRING_length(dns)));
    } else if (gn->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* ip = gn->d.iPAddress;
      const int len = ASN1_STRING_length(ip);
      char text[INET6_ADDRSTRLEN] = {};
      if ((len == 4 || len == 16) &&
          inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(ip), text, sizeof(text)) !=
              nullptr) {
        out.ip_addresses.emplace_back(text);
      }
    } else {
      ++out.other_names;
    }
  }
}

base::StatusOr<ReqPtr> readRequest(const std::string& csr_pem) {
  BioPtr bio(BIO_new_mem_buf(csr_pem.data(), static_cast<int>(csr_pem.size())));
  ReqPtr req(bio ? PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!req) {
    ERR_clear_error();
    return base::invalidArgumentError("PEM block type must be CERTIFICATE REQUEST");
  }
  EVP_PKEY* key = X509_REQ_get0_pubkey(req.get());
  if (key == nullptr || X509_REQ_verify(req.get(), key) != 1) {
    ERR_clear_error();
    return base::invalidArgumentError("the request's signature does not verify");
  }
  return req;
}

}  // namespace

base::StatusOr<std::string> generatePrivateKey() {
  ASSIGN_OR_RETURN(PkeyPtr key, generateKey());
  return keyPem(key.get());
}

base::StatusOr<std::string> makeSigningRequest(const std::string& key_pem,
                                               const CertificateRequest& request) {
  PkeyPtr key = parseKey(key_pem);
  if (!key) {
    ERR_clear_error();
    return base::invalidArgumentError("the private key does not parse");
  }
  ReqPtr req(X509_REQ_new());
  if (!req) return sslError("making a request");
  X509_NAME* name = X509_REQ_get_subject_name(req.get());
  auto add = [&](const char* field, const std::string& value) {
    return X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                                      reinterpret_cast<const unsigned char*>(value.c_str()),
                                      static_cast<int>(value.size()), -1, 0) == 1;
  };
  for (const auto& o : request.organizations) {
    if (!add("O", o)) return base::invalidArgumentError("bad organization \"" + o + "\"");
  }
  if (!request.common_name.empty() && !add("CN", request.common_name)) {
    return base::invalidArgumentError("bad common name \"" + request.common_name + "\"");
  }
  if (!request.dns_names.empty() || !request.ip_addresses.empty()) {
    std::string names;
    for (const auto& dns : request.dns_names) names += (names.empty() ? "DNS:" : ",DNS:") + dns;
    for (const auto& ip : request.ip_addresses) names += (names.empty() ? "IP:" : ",IP:") + ip;
    ExtStackPtr exts(sk_X509_EXTENSION_new_null());
    ExtPtr ext(X509V3_EXT_conf_nid(nullptr, nullptr, NID_subject_alt_name, names.c_str()));
    if (!exts || !ext || sk_X509_EXTENSION_push(exts.get(), ext.get()) == 0) {
      return sslError("adding subjectAltName to the request");
    }
    ext.release();
    if (X509_REQ_add_extensions(req.get(), exts.get()) != 1) return sslError("adding extensions");
  }
  if (X509_REQ_set_pubkey(req.get(), key.get()) != 1 ||
      X509_REQ_sign(req.get(), key.get(), EVP_sha256()) <= 0) {
    return sslError("signing the request");
  }
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509_REQ(bio.get(), req.get()) != 1) {
    return sslError("writing the request");
  }
  return bioText(bio.get());
}

base::StatusOr<KeyPair> generateSigningRequest(const CertificateRequest& request) {
  ASSIGN_OR_RETURN(std::string key_pem, generatePrivateKey());
  ASSIGN_OR_RETURN(std::string csr_pem, makeSigningRequest(key_pem, request));
  return KeyPair{std::move(csr_pem), std::move(key_pem)};
}

bool signingRequestMatchesKey(const std::string& csr_pem, const std::string& key_pem) {
  auto req = readRequest(csr_pem);
  PkeyPtr key = parseKey(key_pem);
  const bool same =
      req.ok() && key && EVP_PKEY_eq(X509_REQ_get0_pubkey(req->get()), key.get()) == 1;
  ERR_clear_error();
  return same;
}

base::StatusOr<std::string> publicKeyDer(const std::string& key_pem) {
  PkeyPtr key = parseKey(key_pem);
  if (!key) {
    ERR_clear_error();
    return base::invalidArgumentError("the private key does not parse");
  }
  unsigned char* der = nullptr;
  const int n = i2d_PUBKEY(key.get(), &der);
  if (n <= 0) return sslError("encoding a public key");
  std::string out(reinterpret_cast<const char*>(der), static_cast<size_t>(n));
  OPENSSL_free(der);
  return out;
}

base::StatusOr<SigningRequest> parseSigningRequest(const std::string& csr_pem) {
  ASSIGN_OR_RETURN(ReqPtr req, readRequest(csr_pem));
  SigningRequest out;
  readSubject(X509_REQ_get_subject_name(req.get()), out.common_name, out.organizations);
  readAltNames(req.get(), out);
  return out;
}

base::StatusOr<std::string> signSigningRequest(const KeyPair& ca, const std::string& csr_pem,
                                               const CertificateRequest& usage) {
  ASSIGN_OR_RETURN(ReqPtr req, readRequest(csr_pem));
  ASSIGN_OR_RETURN(SigningRequest parsed, parseSigningRequest(csr_pem));
  X509Ptr ca_cert = parseCert(ca.cert_pem);
  PkeyPtr ca_key = parseKey(ca.key_pem);
  if (!ca_cert || !ca_key) {
    ERR_clear_error();
    return base::invalidArgumentError("the CA's certificate or key does not parse");
  }
  CertificateRequest request = usage;
  request.common_name = parsed.common_name;
  request.organizations = parsed.organizations;
  request.dns_names = parsed.dns_names;
  request.ip_addresses = parsed.ip_addresses;
  auto cert = buildCertificate(request, /*is_ca=*/false, X509_REQ_get0_pubkey(req.get()),
                               Signer{ca_cert.get(), ca_key.get()});
  if (!cert.ok()) return cert.status().withContext("certificate " + request.common_name);
  return certPem(cert->get());
}

base::StatusOr<KeyPair> generateSelfSignedServing(const std::string& host,
                                                  const std::vector<std::string>& ip_addresses,
                                                  const std::vector<std::string>& dns_names) {
  // Certificate names carry the wall time, as kubelet's do; OpenSSL reads the same clock for the
  // validity period.
  const auto unix_now = static_cast<long long>(std::time(nullptr));
  auto ca = generateCa(host + "-ca@" + std::to_string(unix_now));
  if (!ca.ok()) return ca.status();
  CertificateRequest request;
  request.common_name = host + "@" + std::to_string(unix_now);
  request.server_auth = true;
  ASN1_OCTET_STRING* host_ip = a2i_IPADDRESS(host.c_str());
  ERR_clear_error();
  if (host_ip != nullptr) {
    request.ip_addresses.push_back(host);
  } else {
    request.dns_names.push_back(host);
  }
  ASN1_OCTET_STRING_free(host_ip);
  request.ip_addresses.insert(request.ip_addresses.end(), ip_addresses.begin(), ip_addresses.end());
  request.dns_names.insert(request.dns_names.end(), dns_names.begin(), dns_names.end());
  auto serving = issueCertificate(*ca, request);
  if (!serving.ok()) return serving.status();
  serving->cert_pem += ca->cert_pem;  // the serving certificate, then its CA
  return serving;
}

base::Status writeFileAtomically(const std::filesystem::path& file, const std::string& data,
                                 unsigned mode) {
  auto fail = [&](std::string_view what) {
    return base::internalError(std::string(what) + " " + file.string() + ": " +
                               std::strerror(errno));
  };
  std::string tmp = file.string() + ".tmp-XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) return fail("creating a temporary file for");
  bool ok = ::fchmod(fd, static_cast<mode_t>(mode)) == 0;
  for (size_t off = 0; ok && off < data.size();) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) off += static_cast<size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  ok = (::close(fd) == 0) && ok;
  if (!ok || ::rename(tmp.c_str(), file.c_str()) != 0) {
    base::Status st = fail("writing");
    ::unlink(tmp.c_str());
    return st;
  }
  // The rename itself survives a crash once the directory is synced.
  int dir = ::open(file.parent_path().empty() ? "." : file.parent_path().c_str(),
                   O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return base::okStatus();
}

base::Status ensureDirectory(const std::filesystem::path& dir) {
  if (dir.empty()) return base::okStatus();
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return base::okStatus();
  std::filesystem::create_directories(dir, ec);
  if (ec) return base::internalError("creating directory " + dir.string() + ": " + ec.message());
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  if (ec) return base::internalError("setting the mode of " + dir.string() + ": " + ec.message());
  return base::okStatus();
}

namespace {

base::StatusOr<std::string> readFile(const std::filesystem::path& file, std::string_view what) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec))
    return base::notFoundError(std::string(what) + " " + file.string() + " does not exist");
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof())
    return base::invalidArgumentError("cannot read " + std::string(what) + " " + file.string());
  return text.str();
}

std::string asn1TimeText(const ASN1_TIME* t) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || ASN1_TIME_print(bio.get(), t) != 1) return "?";
  return bioText(bio.get());
}

base::Status checkValidity(const std::string& cert_file, X509* cert) {
  const ASN1_TIME* not_before = X509_get0_notBefore(cert);
  const ASN1_TIME* not_after = X509_get0_notAfter(cert);
  if (X509_cmp_current_time(not_before) >= 0)
    return base::invalidArgumentError("certificate " + cert_file + " is not valid before " +
                                      asn1TimeText(not_before));
  if (X509_cmp_current_time(not_after) <= 0)
    return base::invalidArgumentError("certificate " + cert_file + " expired at " +
                                      asn1TimeText(not_after));
  return base::okStatus();
}

base::SystemTime asn1SystemTime(const ASN1_TIME* t) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return base::SystemTime{};
  return std::chrono::system_clock::from_time_t(::timegm(&tm));
}

}  // namespace

base::StatusOr<CertificateInfo> inspectCertificate(const std::string& cert_pem) {
  X509Ptr cert = parseCert(cert_pem);
  if (!cert) {
    ERR_clear_error();
    return base::invalidArgumentError("no PEM certificate");
  }
  CertificateInfo info;
  readSubject(X509_get_subject_name(cert.get()), info.common_name, info.organizations);
  info.not_before = asn1SystemTime(X509_get0_notBefore(cert.get()));
  info.not_after = asn1SystemTime(X509_get0_notAfter(cert.get()));
  return info;
}

base::Status checkKeyMatches(const std::string& cert_pem, const std::string& key_pem) {
  X509Ptr cert = parseCert(cert_pem);
  PkeyPtr key = parseKey(key_pem);
  const bool ok = cert && key && X509_check_private_key(cert.get(), key.get()) == 1;
  ERR_clear_error();
  if (!cert) return base::invalidArgumentError("no PEM certificate");
  if (!key) return base::invalidArgumentError("no PEM private key");
  if (!ok) return base::invalidArgumentError("the key does not match the certificate");
  return base::okStatus();
}

base::Status writeKeyPair(const KeyPair& pair, const std::filesystem::path& cert_file,
                          const std::filesystem::path& key_file) {
  RETURN_IF_ERROR(ensureDirectory(cert_file.parent_path()));
  RETURN_IF_ERROR(ensureDirectory(key_file.parent_path()));
  // The key first: a certificate never sits next to a key it does not match for long.
  RETURN_IF_ERROR(writeFileAtomically(key_file, pair.key_pem, 0600));
  return writeFileAtomically(cert_file, pair.cert_pem, 0644);
}

base::StatusOr<KeyPair> loadKeyPair(const std::filesystem::path& cert_file,
                                    const std::filesystem::path& key_file) {
  auto cert_pem = readFile(cert_file, "certificate");
  if (!cert_pem.ok()) return cert_pem.status();
  auto key_pem = readFile(key_file, "key");
  if (!key_pem.ok()) return key_pem.status();
  X509Ptr cert = parseCert(*cert_pem);
  if (!cert) {
    return base::invalidArgumentError("certificate " + cert_file.string() +
                                      " holds no PEM certificate: " + opensslErrors());
  }
  PkeyPtr key = parseKey(*key_pem);
  if (!key) {
    return base::invalidArgumentError("key " + key_file.string() +
                                      " holds no PEM private key: " + opensslErrors());
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return base::invalidArgumentError("key " + key_file.string() +
                                      " does not match the certificate " + cert_file.string());
  }
  RETURN_IF_ERROR(checkValidity(cert_file.string(), cert.get()));
  return KeyPair{std::move(*cert_pem), std::move(*key_pem)};
}

base::StatusOr<CertificatePaths> ensureSelfSignedServing(const std::filesystem::path& cert_dir,
                                                         const std::string& node_name,
                                                         const std::vector<std::string>& ips,
                                                         const std::vector<std::string>& names) {
  CertificatePaths paths{cert_dir / "kubelet.crt", cert_dir / "kubelet.key"};
  auto existing = loadKeyPair(paths.cert_file, paths.key_file);
  if (existing.ok()) {
    log()->info("Using the serving certificate cert={} key={}", paths.cert_file.string(),
                paths.key_file.string());
    return paths;
  }
  if (existing.status().code() != base::StatusCode::kNotFound) {
    log()->warn("Replacing the self-signed serving certificate error={}",
                existing.status().message());
  }
  auto pair = generateSelfSignedServing(node_name, ips, names);
  if (!pair.ok()) return pair.status().withContext("generating the serving certificate");
  RETURN_IF_ERROR(writeKeyPair(*pair, paths.cert_file, paths.key_file));
  log()->info("Using a self-signed serving certificate cert={} key={}", paths.cert_file.string(),
              paths.key_file.string());
  return paths;
}

}  // namespace nodeagent::certificate
