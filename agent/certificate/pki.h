// Keys and X.509 certificates for the agent's TLS: kubelet's self-signed serving certificate
// under --cert-dir, and the CA and client certificates tests and tools issue. ECDSA P-256 keys;
// PEM in and out; OpenSSL stays inside pki.cpp.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::certificate {

struct KeyPair {
  std::string cert_pem;
  std::string key_pem;  // PKCS#8 "PRIVATE KEY"
};

struct CertificateRequest {
  std::string common_name;
  std::vector<std::string> organizations;  // O=: the groups, for a client certificate
  std::vector<std::string> dns_names;      // subjectAltName DNS entries
  std::vector<std::string> ip_addresses;   // subjectAltName IP entries (IPv4 or IPv6 text)
  bool server_auth = false;                // extendedKeyUsage serverAuth
  bool client_auth = false;                // extendedKeyUsage clientAuth
  std::chrono::seconds validity{std::chrono::hours(24 * 365)};
  // notBefore is this long before now (kubelet's hour, for clock skew between hosts); notAfter
  // is `validity` after notBefore. Tests make expired (or not yet valid) certificates with it.
  std::chrono::seconds backdate{std::chrono::hours(1)};
};

// Every certificate: X.509 v3, a random 127-bit serial, SHA-256 signature, critical
// basicConstraints and keyUsage, subject and authority key identifiers.
// A self-signed CA certificate (basicConstraints CA:TRUE, keyCertSign), backdated one hour.
base::StatusOr<KeyPair> generateCa(const std::string& common_name,
                                   std::chrono::seconds validity = std::chrono::hours(24 * 365));
// A self-signed certificate that is also its own CA (CA:TRUE, keyCertSign) carrying the
// request's names and usages: a server clients trust directly (tests, tools).
base::StatusOr<KeyPair> generateSelfSigned(const CertificateRequest& request);
// A certificate for `request` with a new key, signed by `ca`.
base::StatusOr<KeyPair> issueCertificate(const KeyPair& ca, const CertificateRequest& request);

// A PKCS#10 certificate signing request (CertificateSigningRequest.spec.request): its subject
// and subjectAltName entries (DNS and IP only; other kinds are counted in `other_names`).
struct SigningRequest {
  std::string common_name;
  std::vector<std::string> organizations;
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  int other_names = 0;
};

// A new ECDSA P-256 key and a PEM "CERTIFICATE REQUEST" for `request`'s CN, O and names (the
// pair's cert_pem holds the request).
base::StatusOr<KeyPair> generateSigningRequest(const CertificateRequest& request);
// A new ECDSA P-256 private key, PEM (PKCS#8).
base::StatusOr<std::string> generatePrivateKey();
// A PEM "CERTIFICATE REQUEST" for `request`'s CN, O and names, signed by `key_pem`.
base::StatusOr<std::string> makeSigningRequest(const std::string& key_pem,
                                               const CertificateRequest& request);
// Whether the PEM request's public key is `key_pem`'s (a request made with that key).
bool signingRequestMatchesKey(const std::string& csr_pem, const std::string& key_pem);
// The DER SubjectPublicKeyInfo of a PEM private key.
base::StatusOr<std::string> publicKeyDer(const std::string& key_pem);
// Parses a PEM request and checks its self-signature; InvalidArgument saying why otherwise.
base::StatusOr<SigningRequest> parseSigningRequest(const std::string& csr_pem);
// A certificate for the request's subject and public key signed by `ca`: CN, O and names from
// the request, usages and validity from `usage` (its names are ignored). PEM.
base::StatusOr<std::string> signSigningRequest(const KeyPair& ca, const std::string& csr_pem,
                                               const CertificateRequest& usage);

// kubelet's self-signed serving certificate (certutil.GenerateSelfSignedCertKey): a CA named
// "<host>-ca@<unix time>" and a serving certificate for `host` (DNS or IP) and the given
// addresses and names signed by it, valid one year; the certificate PEM holds the serving
// certificate followed by the CA.
base::StatusOr<KeyPair> generateSelfSignedServing(const std::string& host,
                                                  const std::vector<std::string>& ip_addresses,
                                                  const std::vector<std::string>& dns_names);

// What the agent reads of a certificate: the first of a PEM text.
struct CertificateInfo {
  std::string common_name;
  std::vector<std::string> organizations;
  base::SystemTime not_before;
  base::SystemTime not_after;
};
base::StatusOr<CertificateInfo> inspectCertificate(const std::string& cert_pem);
// Checks that the PEM key parses and belongs to the PEM certificate (its first).
base::Status checkKeyMatches(const std::string& cert_pem, const std::string& key_pem);

// Writes `data` to `file` through a temporary file, fsync and rename (the directory synced too),
// with `mode`.
base::Status writeFileAtomically(const std::filesystem::path& file, const std::string& data,
                                 unsigned mode);
// Makes `dir` (mode 0700) when missing.
base::Status ensureDirectory(const std::filesystem::path& dir);

// Writes the pair (key mode 0600, certificate 0644), each file atomically (write + rename), the
// directory made when missing (0700).
base::Status writeKeyPair(const KeyPair& pair, const std::filesystem::path& cert_file,
                          const std::filesystem::path& key_file);

// Reads and checks a pair: both parse, the key matches the certificate, and the certificate is
// valid now. InvalidArgument naming the file and why otherwise (NotFound when a file is missing).
base::StatusOr<KeyPair> loadKeyPair(const std::filesystem::path& cert_file,
                                    const std::filesystem::path& key_file);

// kubelet's serving certificate when none was given: `<cert_dir>/kubelet.crt` and
// `kubelet.key`, reused when they load, else generated for the node (generateSelfSignedServing)
// and written. Answers the two paths.
struct CertificatePaths {
  std::filesystem::path cert_file;
  std::filesystem::path key_file;
};
base::StatusOr<CertificatePaths> ensureSelfSignedServing(const std::filesystem::path& cert_dir,
                                                         const std::string& node_name,
                                                         const std::vector<std::string>& ips,
                                                         const std::vector<std::string>& names);

}  // namespace nodeagent::certificate
