// kubelet's certificate file store (client-go certificate.NewFileStore("kubelet-client", ...)):
// each issued certificate and its key go into one PEM file `<dir>/<prefix>-<timestamp>.pem` (mode
// 0600), and `<dir>/<prefix>-current.pem` is a symlink to the one in use, moved atomically (a new
// symlink renamed over it), so a reader never sees a half-written or mismatched pair and the
// previous files stay until an operator removes them. Blocking file I/O: never on a strand.
#pragma once

#include <filesystem>
#include <string>

#include "agent/certificate/pki.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::certificate {

inline constexpr char kKubeletClientPrefix[] = "kubelet-client";
// Where the bootstrap keeps the key of a pending request, so that a restart asks again with the
// same key (and finds its request, named after the key).
inline constexpr char kBootstrapKeyFile[] = "kubelet-client.key.tmp";

// A certificate from the store, with what the agent reads of it.
struct StoredCertificate {
  KeyPair pair;
  CertificateInfo info;
  std::filesystem::path path;
};

class CertificateStore {
 public:
  CertificateStore(std::filesystem::path dir, std::string prefix = kKubeletClientPrefix);

  // `<dir>/<prefix>-current.pem`.
  std::filesystem::path currentPath() const;
  // The pair `currentPath()` holds: a certificate (then any chain) and its key in one file,
  // checked to parse and match. NotFound when there is none; InvalidArgument naming the file
  // otherwise. Validity times are the caller's to judge (`info`).
  base::StatusOr<StoredCertificate> current() const;
  // Writes `<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` (UTC `now`; a suffix when that name is taken)
  // holding the certificate then the key, and points the current symlink at it atomically.
  // Answers the stored certificate.
  base::StatusOr<StoredCertificate> update(const KeyPair& pair, base::SystemTime now);

 private:
  std::filesystem::path dir_;
  std::string prefix_;
};

// Reads a PEM private key from `path`, or generates an ECDSA P-256 key and writes it there
// (mode 0600) when the file is missing or does not hold a key (client-go's
// keyutil.LoadOrGenerateKeyFile).
base::StatusOr<std::string> loadOrGenerateKeyFile(const std::filesystem::path& path);

// Splits a PEM text holding certificates and a private key (in any order) into the pair.
base::StatusOr<KeyPair> splitCertificateAndKey(const std::string& pem);

}  // namespace nodeagent::certificate
