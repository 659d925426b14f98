#include "agent/certificate/certificate_store.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <system_error>

#include "api/time.h"
#include "base/log.h"

namespace nodeagent::certificate {
namespace {

NODEAGENT_LOGGER("certificate");

base::StatusOr<std::string> readText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return base::notFoundError(path.string() + " does not exist");
    return base::internalError("cannot read " + path.string() + ": " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// "2006-01-02-15-04-05" of Go's layout, in UTC.
std::string timestamp(base::SystemTime now) {
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d-%H-%M-%S", &tm);
  return buf;
}

bool isKeyBlock(std::string_view label) {
  return label == "PRIVATE KEY" || label == "EC PRIVATE KEY" || label == "RSA PRIVATE KEY";
}

}  // namespace

base::StatusOr<KeyPair> splitCertificateAndKey(const std::string& pem) {
  KeyPair pair;
  size_t pos = 0;
  while (true) {
    const size_t begin = pem.find("-----BEGIN ", pos);
    if (begin == std::string::npos) break;
    const size_t label_end = pem.find("-----", begin + 11);
    if (label_end == std::string::npos) break;
    const std::string label = pem.substr(begin + 11, label_end - begin - 11);
    const std::string end_marker = "-----END " + label + "-----";
    const size_t end = pem.find(end_marker, label_end);
    if (end == std::string::npos) break;
    const std::string block = pem.substr(begin, end + end_marker.size() - begin) + "\n";
    if (label == "CERTIFICATE") pair.cert_pem += block;
    if (isKeyBlock(label) && pair.key_pem.empty()) pair.key_pem = block;
    pos = end + end_marker.size();
  }
  if (pair.cert_pem.empty()) return base::invalidArgumentError("no PEM certificate");
  if (pair.key_pem.empty()) return base::invalidArgumentError("no PEM private key");
  return pair;
}

CertificateStore::CertificateStore(std::filesystem::path dir, std::string prefix)
    : dir_(std::move(dir)), prefix_(std::move(prefix)) {}

std::filesystem::path CertificateStore::currentPath() const {
  return dir_ / (prefix_ + "-current.pem");
}

base::StatusOr<StoredCertificate> CertificateStore::current() const {
  const auto path = currentPath();
  ASSIGN_OR_RETURN(std::string text, readText(path));
  auto fail = [&](const base::Status& st) {
    return base::invalidArgumentError(path.string() + ": " + st.message());
  };
  auto pair = splitCertificateAndKey(text);
  if (!pair.ok()) return fail(pair.status());
  if (auto st = checkKeyMatches(pair->cert_pem, pair->key_pem); !st.ok()) return fail(st);
  auto info = inspectCertificate(pair->cert_pem);
  if (!info.ok()) return fail(info.status());
  return StoredCertificate{std::move(*pair), std::move(*info), path};
}

base::StatusOr<StoredCertificate> CertificateStore::update(const KeyPair& pair,
                                                           base::SystemTime now) {
  RETURN_IF_ERROR(checkKeyMatches(pair.cert_pem, pair.key_pem));
  ASSIGN_OR_RETURN(CertificateInfo info, inspectCertificate(pair.cert_pem));
  RETURN_IF_ERROR(ensureDirectory(dir_));
  std::error_code ec;
  std::filesystem::path file = dir_ / (prefix_ + "-" + timestamp(now) + ".pem");
  for (int n = 1; std::filesystem::exists(file, ec); ++n) {
    file = dir_ / (prefix_ + "-" + timestamp(now) + "-" + std::to_string(n) + ".pem");
  }
  std::string text = pair.cert_pem;
  if (!text.ends_with('\n')) text += '\n';
  text += pair.key_pem;
  RETURN_IF_ERROR(writeFileAtomically(file, text, 0600));
  // A new symlink renamed over the current one: readers see the old pair or the new one.
  const std::filesystem::path updating = dir_ / (prefix_ + "-updated.pem");
  std::filesystem::remove(updating, ec);
  std::filesystem::create_symlink(file.filename(), updating, ec);
  if (ec) {
    return base::internalError("cannot make the symlink " + updating.string() + ": " +
                               ec.message());
  }
  std::filesystem::rename(updating, currentPath(), ec);
  if (ec) {
    return base::internalError("cannot move the symlink " + currentPath().string() + ": " +
                               ec.message());
  }
  log()->info(
      "Stored a client certificate path={} current={} expires={}", file.string(),
      currentPath().string(),
      api::formatTime(std::chrono::time_point_cast<std::chrono::nanoseconds>(info.not_after)));
  return StoredCertificate{pair, std::move(info), currentPath()};
}

base::StatusOr<std::string> loadOrGenerateKeyFile(const std::filesystem::path& path) {
  auto text = readText(path);
  if (text.ok() && publicKeyDer(*text).ok()) return *text;
  if (text.ok())
    log()->warn("Replacing a key file that holds no private key path={}", path.string());
  if (!text.ok() && text.status().code() != base::StatusCode::kNotFound) return text.status();
  ASSIGN_OR_RETURN(std::string key, generatePrivateKey());
  RETURN_IF_ERROR(ensureDirectory(path.parent_path()));
  RETURN_IF_ERROR(writeFileAtomically(path, key, 0600));
  return key;
}

}  // namespace nodeagent::certificate
