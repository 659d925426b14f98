#include "test/support/tls_cert.h"

#include <stdexcept>
#include <utility>

namespace nodeagent::testing {

namespace {

std::string fileNameFor(const std::string& name) {
  std::string out = name;
  for (char& c : out) {
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-';
    if (!keep) c = '_';
  }
  return out.empty() ? "cert" : out;
}

// Throws (a test reports it as its failure; a bench stops) when `status` is an error.
void check(const base::Status& status) {
  if (!status.ok()) throw std::runtime_error("test TLS material: " + status.toString());
}

void write(const certificate::KeyPair& pair, const std::filesystem::path& cert_file,
           const std::filesystem::path& key_file) {
  check(certificate::writeKeyPair(pair, cert_file, key_file));
}

}  // namespace

void writeSelfSignedCert(const std::filesystem::path& dir) {
  certificate::CertificateRequest request;
  request.common_name = "127.0.0.1";
  request.ip_addresses = {"127.0.0.1"};
  request.server_auth = true;
  auto pair = certificate::generateSelfSigned(request);
  check(pair.status());
  write(*pair, dir / "cert.pem", dir / "key.pem");
}

TestPki::TestPki(std::filesystem::path dir, const std::string& ca_name) : dir_(std::move(dir)) {
  auto ca = certificate::generateCa(ca_name);
  check(ca.status());
  ca_ = std::move(*ca);
  write(ca_, dir_ / "ca.crt", dir_ / "ca.key");
}

TestPki::Files TestPki::issue(const certificate::CertificateRequest& request,
                              const std::string& file_name) {
  auto pair = certificate::issueCertificate(ca_, request);
  check(pair.status());
  Files files{dir_ / (file_name + ".crt"), dir_ / (file_name + ".key")};
  write(*pair, files.cert_file, files.key_file);
  return files;
}

TestPki::Files TestPki::issueClient(const std::string& user, const std::vector<std::string>& groups,
                                    const std::string& file_name) {
  certificate::CertificateRequest request;
  request.common_name = user;
  request.organizations = groups;
  request.client_auth = true;
  return issue(request, file_name.empty() ? fileNameFor(user) : file_name);
}

TestPki::Files TestPki::issueServing(const std::string& name, const std::vector<std::string>& ips,
                                     const std::vector<std::string>& dns_names) {
  certificate::CertificateRequest request;
  request.common_name = name;
  request.ip_addresses = ips;
  request.dns_names = dns_names;
  request.server_auth = true;
  return issue(request, fileNameFor(name));
}

}  // namespace nodeagent::testing
