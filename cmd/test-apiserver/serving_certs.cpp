#include "cmd/test-apiserver/serving_certs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <utility>
#include <vector>

#include "agent/certificate/pki.h"

namespace nodeagent::testapiserver {
namespace {

bool isIpAddress(const std::string& text) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, text.c_str(), buf) == 1 || inet_pton(AF_INET6, text.c_str(), buf) == 1;
}

// An exclusive lock on `<dir>/ca.lock` for as long as it lives.
class DirectoryLock {
 public:
  static base::StatusOr<DirectoryLock> take(const std::filesystem::path& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
    const auto file = dir / "ca.lock";
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) {
      if (fd >= 0) ::close(fd);
      return base::invalidArgumentError("cannot lock " + file.string() + ": " +
                                        std::strerror(errno));
    }
    return DirectoryLock(fd);
  }
  DirectoryLock(DirectoryLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  DirectoryLock& operator=(DirectoryLock&&) = delete;
  ~DirectoryLock() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  explicit DirectoryLock(int fd) : fd_(fd) {}
  int fd_;
};

base::StatusOr<certificate::KeyPair> loadOrMakeCa(const std::filesystem::path& cert_dir) {
  const auto cert_file = cert_dir / "ca.crt";
  const auto key_file = cert_dir / "ca.key";
  ASSIGN_OR_RETURN(DirectoryLock lock, DirectoryLock::take(cert_dir));
  if (std::filesystem::exists(cert_file) != std::filesystem::exists(key_file)) {
    return base::invalidArgumentError(
        "the CA under --cert-dir is half there: " + cert_file.string() + " and " +
        key_file.string() + " go together (remove the one left to make a new CA)");
  }
  auto existing = certificate::loadKeyPair(cert_file, key_file);
  if (existing.ok() || existing.status().code() != base::StatusCode::kNotFound) {
    if (!existing.ok()) {
      return existing.status().withContext("the CA under --cert-dir (remove " + cert_file.string() +
                                           " and " + key_file.string() + " to make a new one)");
    }
    return existing;
  }
  const auto unix_now = static_cast<long long>(std::time(nullptr));
  auto ca = certificate::generateCa("test-apiserver-ca@" + std::to_string(unix_now),
                                    std::chrono::hours(24 * 365 * 10));
  if (!ca.ok()) return ca.status().withContext("generating the CA");
  RETURN_IF_ERROR(certificate::writeKeyPair(*ca, cert_file, key_file));
  return ca;
}

}  // namespace

base::StatusOr<ServingCertificate> ensureServingCertificate(const std::filesystem::path& cert_dir,
                                                            const std::string& bind_address) {
  ASSIGN_OR_RETURN(certificate::KeyPair ca, loadOrMakeCa(cert_dir));
  certificate::CertificateRequest request;
  request.common_name = "test-apiserver";
  request.server_auth = true;
  request.ip_addresses = {"127.0.0.1", "::1"};
  request.dns_names = {"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"};
  // 0.0.0.0 and :: are no address a client dials; those clients use a name or loopback.
  if (bind_address != "0.0.0.0" && bind_address != "::" && !bind_address.empty()) {
    auto& names = isIpAddress(bind_address) ? request.ip_addresses : request.dns_names;
    if (std::find(names.begin(), names.end(), bind_address) == names.end()) {
      names.push_back(bind_address);
    }
  }
  auto serving = certificate::issueCertificate(ca, request);
  if (!serving.ok()) return serving.status().withContext("issuing the serving certificate");
  serving->cert_pem += ca.cert_pem;
  RETURN_IF_ERROR(
      certificate::writeKeyPair(*serving, cert_dir / "apiserver.crt", cert_dir / "apiserver.key"));
  return ServingCertificate{std::move(serving->cert_pem), std::move(serving->key_pem),
                            std::move(ca.cert_pem), std::move(ca.key_pem)};
}

std::filesystem::path defaultCertDir() {
  if (geteuid() == 0) return "/var/run/test-apiserver";
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime && *runtime) {
    return std::filesystem::path(runtime) / "test-apiserver";
  }
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home && *home ? home : "/tmp") / ".cache" / "test-apiserver";
}

}  // namespace nodeagent::testapiserver
