// The test apiserver's CertificateSigningRequests: checks on create, the node client approver
// and the signer (csr.h), and the PKCS#10 helpers they use (agent/certificate/pki.h).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/certificate/pki.h"
#include "cmd/test-apiserver/csr.h"
#include "cmd/test-apiserver/util.h"
#include "test/support/test_util.h"

using nlohmann::json;
using namespace nodeagent;
using namespace nodeagent::testapiserver;

namespace {

json csrFor(const certificate::CertificateRequest& subject, const std::string& signer,
            std::vector<std::string> usages) {
  auto request = certificate::generateSigningRequest(subject);
  REQUIRE(request.ok());
  return {
      {"apiVersion", "certificates.k8s.io/v1"},
      {"kind", "CertificateSigningRequest"},
      {"metadata", {{"name", "req"}}},
      {"spec",
       {{"request", base64Encode(request->cert_pem)}, {"signerName", signer}, {"usages", usages}}}};
}

certificate::CertificateRequest nodeSubject(const std::string& node) {
  certificate::CertificateRequest subject;
  subject.common_name = "system:node:" + node;
  subject.organizations = {"system:nodes"};
  return subject;
}

const ReviewUser kBootstrapper{"system:bootstrap:abcdef", "", {"system:bootstrappers"}, {}};

}  // namespace

TEST_CASE("PKCS#10 requests: made, parsed with their names, and signed by a CA",
          "[unit][apiserver]") {
  certificate::CertificateRequest subject = nodeSubject("n1");
  subject.dns_names = {"n1.example"};
  subject.ip_addresses = {"10.0.0.1"};
  auto request = certificate::generateSigningRequest(subject);
  REQUIRE(request.ok());
  CHECK(request->cert_pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"));
  auto parsed = certificate::parseSigningRequest(request->cert_pem);
  REQUIRE(parsed.ok());
  CHECK(parsed->common_name == "system:node:n1");
  CHECK(parsed->organizations == std::vector<std::string>{"system:nodes"});
  CHECK(parsed->dns_names == std::vector<std::string>{"n1.example"});
  CHECK(parsed->ip_addresses == std::vector<std::string>{"10.0.0.1"});
  CHECK_FALSE(certificate::parseSigningRequest("not a request").ok());

  auto ca = certificate::generateCa("signer");
  REQUIRE(ca.ok());
  certificate::CertificateRequest usage;
  usage.client_auth = true;
  auto cert = certificate::signSigningRequest(*ca, request->cert_pem, usage);
  REQUIRE(cert.ok());
  // The issued certificate goes with the request's key and chains to the CA.
  const nodeagent::testing::TempDir dir("csr-sign");
  CHECK(certificate::writeKeyPair({*cert, request->key_pem}, dir / "c.crt", dir / "c.key").ok());
  CHECK(certificate::loadKeyPair(dir / "c.crt", dir / "c.key").ok());
}

TEST_CASE("a new CertificateSigningRequest is checked and stamped with its requestor",
          "[unit][apiserver]") {
  json csr = csrFor(nodeSubject("n1"), "kubernetes.io/kube-apiserver-client-kubelet",
                    {"digital signature", "client auth"});
  csr["status"] = {{"certificate", "Zm9yZ2Vk"}};
  REQUIRE(prepareCertificateSigningRequest(csr, kBootstrapper).ok());
  CHECK(csr["spec"]["username"] == "system:bootstrap:abcdef");
  CHECK(csr["spec"]["groups"] == json{"system:bootstrappers"});
  CHECK_FALSE(csr.contains("status"));  // a requestor cannot bring its own certificate

  json bad = csr;
  bad["spec"]["request"] = base64Encode("garbage");
  auto invalid = prepareCertificateSigningRequest(bad, kBootstrapper);
  REQUIRE_FALSE(invalid.ok());
  CHECK(invalid.message().find("spec.request: Invalid value") != std::string::npos);
  bad = csr;
  bad["spec"]["usages"] = {"client auth", "flying"};
  CHECK(prepareCertificateSigningRequest(bad, kBootstrapper)
            .message()
            .find("spec.usages: Unsupported value: \"flying\"") != std::string::npos);
  bad = csr;
  bad["spec"].erase("signerName");
  CHECK_FALSE(prepareCertificateSigningRequest(bad, kBootstrapper).ok());
  bad = csr;
  bad["spec"]["expirationSeconds"] = 60;
  CHECK_FALSE(prepareCertificateSigningRequest(bad, kBootstrapper).ok());
}

TEST_CASE(
    "the approver approves node client requests its requestor may have, the signer "
    "issues or fails them",
    "[unit][apiserver]") {
  auto ca = certificate::generateCa("signer");
  REQUIRE(ca.ok());
  json csr = csrFor(nodeSubject("n1"), "kubernetes.io/kube-apiserver-client-kubelet",
                    {"digital signature", "key encipherment", "client auth"});
  REQUIRE(prepareCertificateSigningRequest(csr, kBootstrapper).ok());
  std::string asked;
  const auto deny = [&](const ReviewUser&, const char* sub) {
    asked = sub;
    return false;
  };
  CHECK_FALSE(autoApproveCertificateSigningRequest(csr, deny, "2026-01-01T00:00:00Z"));
  CHECK(asked == "nodeclient");
  CHECK_FALSE(signCertificateSigningRequest(csr, *ca, "2026-01-01T00:00:00Z"));  // pending
  const auto allow = [](const ReviewUser&, const char*) { return true; };
  REQUIRE(autoApproveCertificateSigningRequest(csr, allow, "2026-01-01T00:00:00Z"));
  CHECK(csr["status"]["conditions"][0]["reason"] == "AutoApproved");
  REQUIRE(signCertificateSigningRequest(csr, *ca, "2026-01-01T00:00:00Z"));
  const std::string pem = base64Decode(csr["status"]["certificate"].get<std::string>()).value();
  CHECK(pem.starts_with("-----BEGIN CERTIFICATE-----"));
  CHECK_FALSE(signCertificateSigningRequest(csr, *ca, "2026-01-01T00:00:00Z"));  // done once

  // The node renewing its own asks for selfnodeclient; another subject is no node client.
  json renew = csrFor(nodeSubject("n1"), "kubernetes.io/kube-apiserver-client-kubelet",
                      {"digital signature", "client auth"});
  REQUIRE(prepareCertificateSigningRequest(
              renew, {"system:node:n1", "", {"system:nodes", "system:authenticated"}, {}})
              .ok());
  CHECK_FALSE(autoApproveCertificateSigningRequest(renew, deny, "t"));
  CHECK(asked == "selfnodeclient");
  certificate::CertificateRequest admin;
  admin.common_name = "admin";
  admin.organizations = {"system:masters"};
  json masters = csrFor(admin, "kubernetes.io/kube-apiserver-client-kubelet", {"client auth"});
  REQUIRE(prepareCertificateSigningRequest(masters, kBootstrapper).ok());
  CHECK_FALSE(autoApproveCertificateSigningRequest(masters, allow, "t"));
  // Approved by hand all the same, the kubelet signer refuses it.
  masters["status"] = {{"conditions", {{{"type", "Approved"}, {"status", "True"}}}}};
  REQUIRE(signCertificateSigningRequest(masters, *ca, "t"));
  CHECK(masters["status"]["conditions"][1]["type"] == "Failed");
  CHECK(masters["status"]["conditions"][1]["reason"] == "SignerValidationFailure");
  CHECK_FALSE(masters["status"].contains("certificate"));
}
