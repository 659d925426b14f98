#include "cmd/test-apiserver/csr.h"

#include <algorithm>
#include <array>
#include <set>

#include "cmd/test-apiserver/api_status.h"
#include "cmd/test-apiserver/node_authorizer.h"
#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {
namespace {

using nlohmann::json;

constexpr char kKind[] = "CertificateSigningRequest.certificates.k8s.io";
constexpr char kKubeletClientSigner[] = "kubernetes.io/kube-apiserver-client-kubelet";
constexpr char kClientSigner[] = "kubernetes.io/kube-apiserver-client";
constexpr char kKubeletServingSigner[] = "kubernetes.io/kubelet-serving";

const std::set<std::string>& knownUsages() {
  static const std::set<std::string> kUsages = {"signing",
                                                "digital signature",
                                                "content commitment",
                                                "key encipherment",
                                                "key agreement",
                                                "data encipherment",
                                                "cert sign",
                                                "crl sign",
                                                "encipher only",
                                                "decipher only",
                                                "any",
                                                "server auth",
                                                "client auth",
                                                "code signing",
                                                "email protection",
                                                "s/mime",
                                                "ipsec end system",
                                                "ipsec tunnel",
                                                "ipsec user",
                                                "timestamping",
                                                "ocsp signing",
                                                "microsoft sgc",
                                                "netscape sgc"};
  return kUsages;
}

std::vector<std::string> usagesOf(const json& csr) {
  std::vector<std::string> usages;
  const json spec = csr.value("spec", json::object());
  for (const json& u : spec.value("usages", json::array())) {
    if (u.is_string()) usages.push_back(u.get<std::string>());
  }
  return usages;
}

bool within(const std::vector<std::string>& usages, const std::set<std::string>& allowed) {
  return std::all_of(usages.begin(), usages.end(),
                     [&](const std::string& u) { return allowed.contains(u); });
}

bool has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// The PEM request of spec.request (base64 in JSON); "" when absent or not base64.
std::string requestPem(const json& csr) {
  return base64Decode(stringAt(csr.value("spec", json::object()), "request")).value_or("");
}

// kube's ValidateKubeletClientCSR / isNodeClientCert: "" when it is one, else why not.
std::string nodeClientProblem(const certificate::SigningRequest& req,
                              const std::vector<std::string>& usages) {
  if (req.organizations != std::vector<std::string>{std::string(kNodesGroup)}) {
    return "subject organization is not " + std::string(kNodesGroup);
  }
  if (!req.common_name.starts_with(kNodeUserPrefix)) {
    return "subject common name does not begin with " + std::string(kNodeUserPrefix);
  }
  if (!req.dns_names.empty() || !req.ip_addresses.empty() || req.other_names > 0) {
    return "subject alternative names are not allowed";
  }
  if (!has(usages, "client auth") ||
      !within(usages, {"digital signature", "key encipherment", "client auth"})) {
    return "usages must be client auth with digital signature or key encipherment only";
  }
  return "";
}

bool hasCondition(const json& csr, const char* type) {
  const json status = csr.value("status", json::object());
  for (const json& c : status.value("conditions", json::array())) {
    if (c.is_object() && stringAt(c, "type") == type) return true;
  }
  return false;
}

void addCondition(json& csr, const char* type, const char* reason, const std::string& message,
                  const std::string& now) {
  if (!csr.contains("status") || !csr["status"].is_object()) csr["status"] = json::object();
  json& conditions = csr["status"]["conditions"];
  if (!conditions.is_array()) conditions = json::array();
  conditions.push_back({{"type", type},
                        {"status", "True"},
                        {"reason", reason},
                        {"message", message},
                        {"lastUpdateTime", now},
                        {"lastTransitionTime", now}});
}

}  // namespace

base::Status prepareCertificateSigningRequest(json& csr, const ReviewUser& requestor) {
  const std::string name = stringAt(csr.value("metadata", json::object()), "name");
  if (!csr.contains("spec") || !csr["spec"].is_object()) csr["spec"] = json::object();
  json& spec = csr["spec"];
  const std::string pem = requestPem(csr);
  if (pem.empty()) {
    return invalidObjectError(kKind, name, "spec.request: Required value: a PEM request");
  }
  if (auto parsed = certificate::parseSigningRequest(pem); !parsed.ok()) {
    return invalidObjectError(kKind, name,
                              "spec.request: Invalid value: \"\": " + parsed.status().message());
  }
  if (stringAt(spec, "signerName").empty()) {
    return invalidObjectError(kKind, name, "spec.signerName: Required value");
  }
  const std::vector<std::string> usages = usagesOf(csr);
  if (usages.empty()) return invalidObjectError(kKind, name, "spec.usages: Required value");
  for (const std::string& u : usages) {
    if (!knownUsages().contains(u)) {
      return invalidObjectError(kKind, name, "spec.usages: Unsupported value: \"" + u + "\"");
    }
  }
  if (spec.contains("expirationSeconds") &&
      (!spec["expirationSeconds"].is_number_integer() || spec["expirationSeconds"] < 600)) {
    return invalidObjectError(kKind, name,
                              "spec.expirationSeconds: Invalid value: may not specify a duration "
                              "less than 600 seconds (10 minutes)");
  }
  spec["username"] = requestor.username;
  spec["groups"] = requestor.groups;
  if (requestor.uid.empty()) {
    spec.erase("uid");
  } else {
    spec["uid"] = requestor.uid;
  }
  if (!requestor.extra.empty()) spec["extra"] = requestor.extra;
  csr.erase("status");
  return base::okStatus();
}

bool autoApproveCertificateSigningRequest(json& csr, const CsrPermission& permitted,
                                          const std::string& now) {
  const json spec = csr.value("spec", json::object());
  if (stringAt(spec, "signerName") != kKubeletClientSigner || hasCondition(csr, "Approved") ||
      hasCondition(csr, "Denied")) {
    return false;
  }
  auto parsed = certificate::parseSigningRequest(requestPem(csr));
  if (!parsed.ok() || !nodeClientProblem(*parsed, usagesOf(csr)).empty()) return false;
  ReviewUser requestor{stringAt(spec, "username"), stringAt(spec, "uid"), {}, {}};
  for (const json& g : spec.value("groups", json::array())) {
    if (g.is_string()) requestor.groups.push_back(g.get<std::string>());
  }
  const char* subresource =
      requestor.username == parsed->common_name ? "selfnodeclient" : "nodeclient";
  if (!permitted(requestor, subresource)) return false;
  addCondition(csr, "Approved", "AutoApproved",
               "Auto approving kubelet client certificate after SubjectAccessReview.", now);
  return true;
}

bool signCertificateSigningRequest(json& csr, const certificate::KeyPair& ca,
                                   const std::string& now) {
  const json spec = csr.value("spec", json::object());
  const std::string signer = stringAt(spec, "signerName");
  if (!hasCondition(csr, "Approved") || hasCondition(csr, "Denied") ||
      hasCondition(csr, "Failed") ||
      !stringAt(csr.value("status", json::object()), "certificate").empty()) {
    return false;
  }
  if (signer != kKubeletClientSigner && signer != kClientSigner &&
      signer != kKubeletServingSigner) {
    return false;  // another signer's request: not ours to sign
  }
  const std::string pem = requestPem(csr);
  auto parsed = certificate::parseSigningRequest(pem);
  const std::vector<std::string> usages = usagesOf(csr);
  std::string problem = parsed.ok() ? "" : std::string(parsed.status().message());
  if (problem.empty() && signer == kKubeletClientSigner) {
    problem = nodeClientProblem(*parsed, usages);
  }
  if (problem.empty() && signer == kClientSigner && !has(usages, "client auth")) {
    problem = "usages must include client auth";
  }
  if (problem.empty() && signer == kKubeletServingSigner &&
      (!has(usages, "server auth") || !parsed->common_name.starts_with(kNodeUserPrefix))) {
    problem = "a kubelet serving certificate is for system:node:<name> with server auth";
  }
  if (!problem.empty()) {
    addCondition(csr, "Failed", "SignerValidationFailure", problem, now);
    return true;
  }
  certificate::CertificateRequest usage;
  usage.client_auth = has(usages, "client auth");
  usage.server_auth = has(usages, "server auth");
  usage.backdate = std::chrono::minutes(5);
  usage.validity = std::chrono::hours(24 * 365);
  if (spec.contains("expirationSeconds") && spec["expirationSeconds"].is_number_integer()) {
    usage.validity = std::chrono::seconds(spec["expirationSeconds"].get<int64_t>());
  }
  usage.validity += usage.backdate;
  auto cert = certificate::signSigningRequest(ca, pem, usage);
  if (!cert.ok()) {
    addCondition(csr, "Failed", "SignerValidationFailure", cert.status().message(), now);
    return true;
  }
  csr["status"]["certificate"] = base64Encode(*cert);
  return true;
}

}  // namespace nodeagent::testapiserver
