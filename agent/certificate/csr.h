// Asking the apiserver for a certificate (client-go's util/certificate/csr): a
// certificates.k8s.io/v1 CertificateSigningRequest is created (or, when a request of the same name
// exists, reused if it was made with the same key), then watched until it is issued, denied or
// failed. Blocking calls on a RestClient: run them on a thread of their own, never on a strand.
#pragma once

#include <chrono>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "api/rest_client.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::certificate {

inline constexpr char kKubeletClientSigner[] = "kubernetes.io/kube-apiserver-client-kubelet";
inline constexpr char kCsrCollectionPath[] =
    "/apis/certificates.k8s.io/v1/certificatesigningrequests";

struct CsrSpec {
  // metadata.name; "" asks the server for one (generateName "csr-").
  std::string name;
  std::string request_pem;  // PEM "CERTIFICATE REQUEST"
  std::string signer_name = kKubeletClientSigner;
  std::vector<std::string> usages;
  // spec.expirationSeconds (the signer may shorten it; kube-apiserver's minimum is 600 s).
  std::optional<std::chrono::seconds> expiration;
};

// Whether a failed call is worth retrying: the apiserver unreachable or slow, 5xx, 429.
bool isTransientApiError(const base::Status& status);

// The CertificateSigningRequest object for `spec`.
nlohmann::json csrObject(const CsrSpec& spec);

// kubelet's bootstrap request name: "node-csr-" and the SHA-512/256 of the public key, subject and
// usages, so that a restart with the same key finds its request again. The digest is written in
// hex where kubelet writes unpadded base64url (upper case and '_'): the name is then a DNS
// subdomain, valid for servers that check CSR names as they check most names.
base::StatusOr<std::string> nodeCsrName(const std::string& key_pem, const std::string& common_name,
                                        const std::vector<std::string>& organizations,
                                        const std::vector<std::string>& usages);

// Where a request stands.
struct CsrState {
  enum Phase { kPending, kApproved, kIssued, kDenied, kFailed };
  Phase phase = kPending;
  std::string certificate_pem;  // kIssued
  std::string reason;           // kDenied, kFailed: the condition's reason and message
};
CsrState csrState(const nlohmann::json& csr);

struct CreatedCsr {
  std::string name;
  std::string uid;
};

// Creates the request. A named request that exists already is reused when it was made with
// `key_pem` (and its certificate, if any, has not expired); otherwise an error saying why.
base::StatusOr<CreatedCsr> requestCertificate(api::RestClient& client, const CsrSpec& spec,
                                              const std::string& key_pem, base::SystemTime now);

struct CsrWaitOptions {
  // kubelet's bootstrap waits an hour; its certificate manager 15 minutes per request.
  base::Duration timeout = std::chrono::hours(1);
  // How often "waiting for CSR <name> to be approved" is logged (the watch is re-opened then).
  base::Duration log_every = std::chrono::seconds(30);
};

// Waits (list, then watch with a field selector on the name) until the request is issued, and
// answers the certificate PEM. Denied, Failed, deleted or replaced (another UID) requests are
// errors saying so; DeadlineExceeded after `timeout`; Cancelled when `stop` fires.
base::StatusOr<std::string> waitForCertificate(api::RestClient& client, base::Clock& clock,
                                               const CreatedCsr& csr, const CsrWaitOptions& options,
                                               std::stop_token stop);

}  // namespace nodeagent::certificate
