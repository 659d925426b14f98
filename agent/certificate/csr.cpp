#include "agent/certificate/csr.h"

#include <openssl/evp.h>

#include <algorithm>
#include <memory>

#include <nlohmann/json.hpp>

#include "agent/certificate/pki.h"
#include "api/api_errors.h"
#include "api/kubeconfig.h"
#include "base/duration.h"
#include "base/log.h"

namespace nodeagent::certificate {
namespace {

NODEAGENT_LOGGER("certificate");

using nlohmann::json;

// base64url without padding (Go's base64.RawURLEncoding).
std::string rawUrlBase64(std::string_view data) {
  std::string out = api::encodeBase64(data);
  while (!out.empty() && out.back() == '=') out.pop_back();
  std::replace(out.begin(), out.end(), '+', '-');
  std::replace(out.begin(), out.end(), '/', '_');
  return out;
}

base::StatusOr<std::string> sha512_256(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &n, EVP_sha512_256(), nullptr) != 1) {
    return base::internalError("cannot compute a SHA-512/256 digest");
  }
  return std::string(reinterpret_cast<const char*>(digest), n);
}

std::string stringAt(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const json& objectAt(const json& j, const char* key) {
  static const json kEmpty = json::object();
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : kEmpty;
}

// A request of ours that exists already is reused only when it was made with our key
// (client-go's ensureCompatible).
base::Status checkCompatible(const json& existing, const CsrSpec& spec, const std::string& key_pem,
                             base::SystemTime now) {
  const json& es = objectAt(existing, "spec");
  auto request = api::decodeBase64(stringAt(es, "request"));
  if (!request.ok()) return base::invalidArgumentError("its spec.request is not base64");
  auto theirs = parseSigningRequest(*request);
  auto ours = parseSigningRequest(spec.request_pem);
  if (!theirs.ok() || !ours.ok()) return base::invalidArgumentError("its request does not parse");
  if (theirs->common_name != ours->common_name || theirs->organizations != ours->organizations) {
    return base::invalidArgumentError("the subjects differ");
  }
  if (stringAt(es, "signerName") != spec.signer_name) {
    return base::invalidArgumentError("the signer names differ");
  }
  if (!signingRequestMatchesKey(*request, key_pem)) {
    return base::invalidArgumentError("it was made with another key");
  }
  CsrState state = csrState(existing);
  if (state.phase == CsrState::kIssued) {
    auto info = inspectCertificate(state.certificate_pem);
    if (info.ok() && info->not_after < now) {
      return base::invalidArgumentError("its certificate has expired");
    }
  }
  return base::okStatus();
}

}  // namespace

bool isTransientApiError(const base::Status& st) {
  return st.code() == base::StatusCode::kUnavailable ||
         st.code() == base::StatusCode::kDeadlineExceeded || api::isServerError(st) ||
         api::isTooManyRequests(st);
}

json csrObject(const CsrSpec& spec) {
  json metadata = json::object();
  if (spec.name.empty()) {
    metadata["generateName"] = "csr-";
  } else {
    metadata["name"] = spec.name;
  }
  json s = {{"request", api::encodeBase64(spec.request_pem)},
            {"signerName", spec.signer_name},
            {"usages", spec.usages}};
  if (spec.expiration) s["expirationSeconds"] = spec.expiration->count();
  return {{"apiVersion", "certificates.k8s.io/v1"},
          {"kind", "CertificateSigningRequest"},
          {"metadata", std::move(metadata)},
          {"spec", std::move(s)}};
}

base::StatusOr<std::string> nodeCsrName(const std::string& key_pem, const std::string& common_name,
                                        const std::vector<std::string>& organizations,
                                        const std::vector<std::string>& usages) {
  ASSIGN_OR_RETURN(std::string public_key, publicKeyDer(key_pem));
  // Each part base64url-encoded then '|' (not in that alphabet): no two inputs hash alike.
  std::string stream;
  auto write = [&](std::string_view part) {
    stream += rawUrlBase64(part);
    stream += '|';
  };
  write(public_key);
  write(common_name);
  for (const auto& o : organizations) write(o);
  for (const auto& u : usages) write(u);
  ASSIGN_OR_RETURN(std::string digest, sha512_256(stream));
  return "node-csr-" + rawUrlBase64(digest);
}

CsrState csrState(const json& csr) {
  CsrState state;
  const json& status = objectAt(csr, "status");
  auto conditions = status.find("conditions");
  bool approved = false;
  if (conditions != status.end() && conditions->is_array()) {
    for (const json& c : *conditions) {
      if (!c.is_object()) continue;
      const std::string type = stringAt(c, "type");
      const std::string why =
          "reason: " + stringAt(c, "reason") + ", message: " + stringAt(c, "message");
      if (type == "Denied") return {CsrState::kDenied, "", why};
      if (type == "Failed") return {CsrState::kFailed, "", why};
      if (type == "Approved") approved = true;
    }
  }
  if (!approved) return state;
  auto cert = api::decodeBase64(stringAt(status, "certificate"));
  if (cert.ok() && !cert->empty()) return {CsrState::kIssued, std::move(*cert), ""};
  state.phase = CsrState::kApproved;
  return state;
}

base::StatusOr<CreatedCsr> requestCertificate(api::RestClient& client, const CsrSpec& spec,
                                              const std::string& key_pem, base::SystemTime now) {
  auto created = client.createJson(kCsrCollectionPath, csrObject(spec));
  if (created.ok()) {
    const json& meta = objectAt(*created, "metadata");
    CreatedCsr out{stringAt(meta, "name"), stringAt(meta, "uid")};
    log()->info("Created a certificate signing request csr={} signer={}", out.name,
                spec.signer_name);
    return out;
  }
  if (!api::isAlreadyExists(created.status()) || spec.name.empty()) {
    return created.status().withContext("cannot create certificate signing request");
  }
  log()->info("The certificate signing request for this node exists already, reusing it csr={}",
              spec.name);
  auto existing = client.getJson(std::string(kCsrCollectionPath) + "/" + api::urlEncode(spec.name));
  if (!existing.ok()) {
    return existing.status().withContext("cannot retrieve certificate signing request");
  }
  if (auto st = checkCompatible(*existing, spec, key_pem, now); !st.ok()) {
    return base::failedPreconditionError("certificate signing request " + spec.name +
                                         " exists and is not compatible: " + st.message());
  }
  return CreatedCsr{spec.name, stringAt(objectAt(*existing, "metadata"), "uid")};
}

namespace {

// One request's wait: lists it, then watches it from the list's resourceVersion, judging each
// object until it is issued, refused or gone.
class CsrWait {
 public:
  CsrWait(api::RestClient& client, const CreatedCsr& csr, std::stop_token stop)
      : client_(client),
        csr_(csr),
        stop_(std::move(stop)),
        selector_("metadata.name=" + csr.name) {}

  bool done() const { return done_; }
  base::StatusOr<std::string> result() const { return result_; }
  // Whether the next step is a list (first, after 410 Gone, after a failure).
  bool needsList() const { return rv_.empty(); }
  void forgetVersion() { rv_.clear(); }

  base::Status list() {
    api::ListOptions lo;
    lo.field_selector = selector_;
    auto list = client_.list(kCsrCollectionPath, lo, stop_);
    if (!list.ok()) return list.status();
    const json& items = list->value("items", json::array());
    if (items.empty()) {
      finish(base::notFoundError("csr \"" + csr_.name + "\" was deleted"));
      return base::okStatus();
    }
    judge(items.front());
    rv_ = stringAt(objectAt(*list, "metadata"), "resourceVersion");
    if (rv_.empty()) rv_ = "0";
    return base::okStatus();
  }

  // A watch the server ends after `seconds` (OK then).
  base::Status watch(int64_t seconds) {
    api::ListOptions wo;
    wo.field_selector = selector_;
    wo.resource_version = rv_;
    wo.timeout_seconds = seconds;
    return client_.watch(
        kCsrCollectionPath, wo, [this](api::RawWatchEvent&& ev) { return onEvent(std::move(ev)); },
        stop_);
  }

 private:
  bool onEvent(api::RawWatchEvent&& ev) {
    if (ev.type == api::WatchEventType::kDeleted) {
      finish(base::notFoundError("csr \"" + csr_.name + "\" was deleted"));
      return false;
    }
    if (!ev.object) return true;
    std::string rv = stringAt(objectAt(*ev.object, "metadata"), "resourceVersion");
    if (!rv.empty()) rv_ = std::move(rv);
    if (ev.type != api::WatchEventType::kBookmark) judge(*ev.object);
    return !done_;
  }

  void finish(base::StatusOr<std::string> result) {
    done_ = true;
    result_ = std::move(result);
  }

  void judge(const json& object) {
    const std::string uid = stringAt(objectAt(object, "metadata"), "uid");
    if (!csr_.uid.empty() && !uid.empty() && uid != csr_.uid) {
      finish(base::abortedError("csr \"" + csr_.name + "\" changed UIDs"));
      return;
    }
    CsrState state = csrState(object);
    const std::string what = "certificate signing request " + csr_.name;
    switch (state.phase) {
      case CsrState::kIssued:
        log()->info("Certificate signing request is issued csr={}", csr_.name);
        finish(std::move(state.certificate_pem));
        return;
      case CsrState::kDenied:
        finish(base::permissionDeniedError(what + " is denied, " + state.reason));
        return;
      case CsrState::kFailed:
        finish(base::abortedError(what + " failed, " + state.reason));
        return;
      case CsrState::kApproved:
        if (!approved_logged_) {
          log()->info("Certificate signing request is approved, waiting to be issued csr={}",
                      csr_.name);
        }
        approved_logged_ = true;
        return;
      case CsrState::kPending:
        return;
    }
  }

  api::RestClient& client_;
  const CreatedCsr& csr_;
  std::stop_token stop_;
  const std::string selector_;
  std::string rv_;
  bool approved_logged_ = false;
  bool done_ = false;
  base::StatusOr<std::string> result_ = base::unknownError("pending");
};

}  // namespace

base::StatusOr<std::string> waitForCertificate(api::RestClient& client, base::Clock& clock,
                                               const CreatedCsr& csr, const CsrWaitOptions& options,
                                               std::stop_token stop) {
  const auto started = clock.now();
  CsrWait wait(client, csr, stop);
  log()->info(
      "Waiting for CSR {} to be approved and its certificate issued timeout={} (an approver "
      "or an operator's kubectl certificate approve {})",
      csr.name, base::formatDuration(options.timeout), csr.name);
  while (true) {
    if (stop.stop_requested()) return base::cancelledError("waiting for CSR " + csr.name);
    const auto waited = clock.now() - started;
    if (waited >= options.timeout) {
      return base::deadlineExceededError("timed out after " + base::formatDuration(waited) +
                                         " waiting for CSR " + csr.name + " to be approved");
    }
    if (waited > base::Duration::zero()) {
      log()->info("Still waiting for CSR {} to be approved and its certificate issued waited={}",
                  csr.name, base::formatDuration(waited));
    }
    base::Status st = wait.needsList() ? wait.list() : base::okStatus();
    if (st.ok() && !wait.done()) {
      const auto slice = std::min(options.timeout - waited, options.log_every);
      st = wait.watch(std::max<int64_t>(1, std::chrono::ceil<std::chrono::seconds>(slice).count()));
    }
    if (wait.done()) return wait.result();
    if (st.ok()) continue;
    if (st.code() == base::StatusCode::kCancelled) return st;
    wait.forgetVersion();
    if (api::isGone(st)) continue;
    if (!isTransientApiError(st))
      return st.withContext("cannot watch on the certificate signing request");
    log()->warn("Cannot reach the apiserver while waiting for CSR {} err={}", csr.name,
                st.message());
    if (!api::waitOrStop(std::min<base::Duration>(options.log_every, std::chrono::seconds(5)),
                         stop)) {
      return base::cancelledError("waiting for CSR " + csr.name);
    }
  }
}

}  // namespace nodeagent::certificate
