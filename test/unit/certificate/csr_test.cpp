// The CertificateSigningRequest objects the agent makes and reads, and kubelet's request name.
#include "agent/certificate/csr.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/certificate/bootstrap.h"
#include "agent/certificate/pki.h"
#include "api/kubeconfig.h"

namespace nodeagent::certificate {

using nlohmann::json;

TEST_CASE("csr: a node client request as kubelet makes it", "[unit][certificate]") {
  auto key = generatePrivateKey();
  REQUIRE(key.ok());
  auto pem = makeSigningRequest(*key, nodeClientSubject("n1"));
  REQUIRE(pem.ok());
  auto parsed = parseSigningRequest(*pem);
  REQUIRE(parsed.ok());
  CHECK(parsed->common_name == "system:node:n1");
  CHECK(parsed->organizations == std::vector<std::string>{"system:nodes"});
  CHECK(signingRequestMatchesKey(*pem, *key));
  CHECK(!signingRequestMatchesKey(*pem, *generatePrivateKey()));

  CsrSpec spec;
  spec.name = "node-csr-x";
  spec.request_pem = *pem;
  spec.usages = nodeClientUsages();
  json object = csrObject(spec);
  CHECK(object["apiVersion"] == "certificates.k8s.io/v1");
  CHECK(object["kind"] == "CertificateSigningRequest");
  CHECK(object["metadata"] == json{{"name", "node-csr-x"}});
  CHECK(object["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet");
  CHECK(object["spec"]["usages"] == json{"digital signature", "client auth"});
  CHECK(api::decodeBase64(object["spec"]["request"].get<std::string>()).value() == *pem);
  CHECK(!object["spec"].contains("expirationSeconds"));

  spec.name.clear();
  spec.expiration = std::chrono::seconds(600);
  object = csrObject(spec);
  CHECK(object["metadata"] == json{{"generateName", "csr-"}});
  CHECK(object["spec"]["expirationSeconds"] == 600);
}

TEST_CASE("csr: the bootstrap request's name follows the key and the subject",
          "[unit][certificate]") {
  auto key = generatePrivateKey();
  auto other = generatePrivateKey();
  REQUIRE((key.ok() && other.ok()));
  const std::vector<std::string> orgs = {"system:nodes"};
  auto name = nodeCsrName(*key, "system:node:n1", orgs, nodeClientUsages());
  REQUIRE(name.ok());
  CHECK(name->starts_with("node-csr-"));
  // kubelet's: 32 bytes, base64url without padding.
  CHECK(name->size() == 9 + 43);
  CHECK(name->find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
                                9) == std::string::npos);
  CHECK(*nodeCsrName(*key, "system:node:n1", orgs, nodeClientUsages()) == *name);
  CHECK(*nodeCsrName(*other, "system:node:n1", orgs, nodeClientUsages()) != *name);
  CHECK(*nodeCsrName(*key, "system:node:n2", orgs, nodeClientUsages()) != *name);
  CHECK(*nodeCsrName(*key, "system:node:n", {"1system:nodes"}, nodeClientUsages()) != *name);
}

TEST_CASE("csr: conditions and the certificate tell where a request stands",
          "[unit][certificate]") {
  auto condition = [](const char* type) {
    return json{{"type", type}, {"status", "True"}, {"reason", "R"}, {"message", "M"}};
  };
  CHECK(csrState(json::object()).phase == CsrState::kPending);
  json approved = {{"status", {{"conditions", {condition("Approved")}}}}};
  CHECK(csrState(approved).phase == CsrState::kApproved);
  approved["status"]["certificate"] = api::encodeBase64("CERT");
  CsrState issued = csrState(approved);
  CHECK(issued.phase == CsrState::kIssued);
  CHECK(issued.certificate_pem == "CERT");
  CsrState denied = csrState({{"status", {{"conditions", {condition("Denied")}}}}});
  CHECK(denied.phase == CsrState::kDenied);
  CHECK(denied.reason == "reason: R, message: M");
  json failed = {{"status", {{"conditions", {condition("Approved"), condition("Failed")}}}}};
  CHECK(csrState(failed).phase == CsrState::kFailed);
}

TEST_CASE("csr: transient apiserver errors are the retried ones", "[unit][certificate]") {
  CHECK(isTransientApiError(base::unavailableError("connection refused")));
  CHECK(isTransientApiError(base::deadlineExceededError("timed out")));
  CHECK(!isTransientApiError(base::invalidArgumentError("bad")));
  CHECK(!isTransientApiError(base::permissionDeniedError("forbidden")));
}

}  // namespace nodeagent::certificate
