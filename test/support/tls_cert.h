// Test TLS material made on the fly (agent/certificate/pki.h), for HTTPS servers in tests.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "agent/certificate/pki.h"

namespace nodeagent::testing {

// A self-signed certificate for 127.0.0.1 (also its own CA), written as `dir`/cert.pem and
// `dir`/key.pem. Throws std::runtime_error when it cannot be made (as TestPki does).
void writeSelfSignedCert(const std::filesystem::path& dir);

// A CA in `dir` (ca.crt, ca.key) that issues client and serving certificates as PEM files
// there, for tests of TLS servers that verify client certificates (the kubelet API). Every
// failure throws std::runtime_error (the current test fails with its message).
class TestPki {
 public:
  struct Files {
    std::filesystem::path cert_file;
    std::filesystem::path key_file;
  };

  explicit TestPki(std::filesystem::path dir, const std::string& ca_name = "nodeagent-test-ca");

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path caFile() const { return dir_ / "ca.crt"; }
  const certificate::KeyPair& ca() const { return ca_; }

  // A client certificate: CN `user`, O `groups` (clientAuth), written as
  // `<file_name>.crt`/`.key` (default: `user` with characters other than [A-Za-z0-9._-] as '_').
  Files issueClient(const std::string& user, const std::vector<std::string>& groups = {},
                    const std::string& file_name = "");
  // A serving certificate (serverAuth) for the given addresses and names, CN `name`.
  Files issueServing(const std::string& name, const std::vector<std::string>& ips = {"127.0.0.1"},
                     const std::vector<std::string>& dns_names = {"localhost"});
  // Any request, signed by the CA, written as `<file_name>.crt`/`.key`.
  Files issue(const certificate::CertificateRequest& request, const std::string& file_name);

 private:
  std::filesystem::path dir_;
  certificate::KeyPair ca_;
};

}  // namespace nodeagent::testing
