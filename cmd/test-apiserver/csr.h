// certificates.k8s.io/v1 CertificateSigningRequests as kube-apiserver checks them and as
// kube-controller-manager's csrapproving and csrsigning controllers answer them, so a kubelet's
// TLS bootstrap can run against the test apiserver:
//   - create: spec.request must be a PEM CERTIFICATE REQUEST whose signature verifies, with a
//     signerName and known usages; spec.username, uid and groups are the requesting user's;
//   - the approver approves (reason AutoApproved) a node client request (signer
//     kubernetes.io/kube-apiserver-client-kubelet, CN system:node:<name>, O system:nodes only, no
//     subject alternative names, usages within digital signature, key encipherment and client
//     auth) when the authorizer lets its requestor create certificatesigningrequests/nodeclient
//     (a new node, e.g. a bootstrap token's user) or selfnodeclient (the node renewing its own);
//   - the signer issues status.certificate from the cluster CA for approved requests of
//     kube-apiserver-client-kubelet, kube-apiserver-client and kubelet-serving (valid
//     spec.expirationSeconds, at least 600, else a year; backdated 5 minutes), or sets a Failed
//     condition (SignerValidationFailure) for one its signer does not accept.
// `kubectl certificate approve|deny` write the conditions through the approval subresource.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "agent/certificate/pki.h"
#include "base/status.h"
#include "cmd/test-apiserver/authz.h"

namespace nodeagent::testapiserver {

// Checks a new request and stamps its requestor. FailedPrecondition (422, kube-apiserver's
// field error) for an invalid one.
base::Status prepareCertificateSigningRequest(nlohmann::json& csr, const ReviewUser& requestor);

// Whether `requestor` may create certificatesigningrequests/<subresource>.
using CsrPermission = std::function<bool(const ReviewUser& requestor, const char* subresource)>;

// The approver: adds the Approved condition to a node client request its requestor may have
// approved. True when it did.
bool autoApproveCertificateSigningRequest(nlohmann::json& csr, const CsrPermission& permitted,
                                          const std::string& now);

// The signer: issues the certificate of an approved request (or marks it Failed). True when the
// status changed.
bool signCertificateSigningRequest(nlohmann::json& csr, const certificate::KeyPair& ca,
                                   const std::string& now);

}  // namespace nodeagent::testapiserver
