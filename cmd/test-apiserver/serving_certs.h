// test-apiserver's own TLS when it is given no certificate, as kube-apiserver's --cert-dir: a CA
// kept in the directory (ca.crt, ca.key; made once, reused by every later start, so a written
// kubeconfig stays valid) and a serving certificate issued by it at each start (apiserver.crt,
// holding the certificate and then the CA, and apiserver.key) for 127.0.0.1, ::1, localhost,
// the kubernetes service names and the bind address.
#pragma once

#include <filesystem>
#include <string>

#include "base/status.h"

namespace nodeagent::testapiserver {

struct ServingCertificate {
  std::filesystem::path cert_file;
  std::filesystem::path key_file;
  std::string ca_pem;  // what clients trust (the kubeconfig's certificate-authority-data)
};

// Fails naming the file when the directory cannot be made or written, or when a CA is there but
// does not load (a broken or expired CA is not replaced: kubeconfigs written for it would stop
// working without a word; remove it to start over).
base::StatusOr<ServingCertificate> ensureServingCertificate(const std::filesystem::path& cert_dir,
                                                            const std::string& bind_address);

// --cert-dir when none is given: kube-apiserver's /var/run/kubernetes for root, else
// $XDG_RUNTIME_DIR/test-apiserver or ~/.cache/test-apiserver.
std::filesystem::path defaultCertDir();

}  // namespace nodeagent::testapiserver
