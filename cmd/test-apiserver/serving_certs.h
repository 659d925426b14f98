// test-apiserver's own TLS when it is given no certificate, as kube-apiserver's --cert-dir: a CA
// kept in the directory (ca.crt, ca.key; made once, reused by every later start, so a written
// kubeconfig stays valid) and a serving certificate issued by it at each start (written as
// apiserver.crt, holding the certificate and then the CA, and apiserver.key) for 127.0.0.1, ::1,
// localhost, the kubernetes service names and the bind address.
#pragma once

#include <filesystem>
#include <string>

#include "base/status.h"

namespace nodeagent::testapiserver {

struct ServingCertificate {
  std::string cert_pem;  // the serving certificate, then the CA
  std::string key_pem;
  std::string ca_pem;      // what clients trust (the kubeconfig's certificate-authority-data)
  std::string ca_key_pem;  // the CA's key (the CSR signer's, without --cluster-signing-*)
};

// The server serves the returned PEMs (the files are written for people to look at; two servers
// started on one directory at once each serve their own). Fails naming the file when the
// directory cannot be made or written, or when a CA is there but does not load or only half of
// it is there (a broken, expired or half CA is not replaced: kubeconfigs written for it would
// stop working without a word; remove it to start over). Making the CA holds a lock on
// `ca.lock` there, so two first starts agree on one CA.
base::StatusOr<ServingCertificate> ensureServingCertificate(const std::filesystem::path& cert_dir,
                                                            const std::string& bind_address);

// --cert-dir when none is given: /var/run/test-apiserver for root (not kube-apiserver's
// /var/run/kubernetes, whose apiserver.crt a real apiserver on the host may use), else
// $XDG_RUNTIME_DIR/test-apiserver or ~/.cache/test-apiserver.
std::filesystem::path defaultCertDir();

}  // namespace nodeagent::testapiserver
