// The client certificate manager on a fake clock: kubelet's jittered rotation deadline, the
// request at the deadline, the store and the clients' hand-over, retries that keep the old
// certificate, and its metrics.
#include "agent/certificate/certificate_manager.h"

#include <catch2/catch.hpp>
#include <deque>
#include <sstream>

#include "agent/certificate/bootstrap.h"
#include "agent/certificate/pki.h"
#include "test/support/fake_clock.h"
#include "test/support/fixed_random.h"
#include "test/support/test_util.h"

namespace nodeagent::certificate {
namespace {

using namespace std::chrono_literals;

// Signs each request with a test CA, valid `validity` from the fake clock's wall time (the
// signer's clock is the real one: the backdate makes up the difference); or fails as scripted.
class FakeRequester final : public CertificateRequester {
 public:
  FakeRequester(base::Clock& clock, KeyPair ca) : clock_(clock), ca_(std::move(ca)) {}

  base::StatusOr<std::string> request(const CsrSpec& spec, const std::string& key_pem,
                                      std::stop_token) override {
    specs.push_back(spec);
    REQUIRE(signingRequestMatchesKey(spec.request_pem, key_pem));
    if (!failures.empty()) {
      auto st = failures.front();
      failures.pop_front();
      return st;
    }
    return sign(spec.request_pem);
  }

  std::string sign(const std::string& csr_pem) const {
    CertificateRequest usage;
    usage.client_auth = true;
    usage.validity = std::chrono::duration_cast<std::chrono::seconds>(validity);
    usage.backdate = -std::chrono::duration_cast<std::chrono::seconds>(clock_.wallNow() -
                                                                       base::realClock().wallNow());
    auto cert = signSigningRequest(ca_, csr_pem, usage);
    REQUIRE(cert.ok());
    return *cert;
  }

  std::vector<CsrSpec> specs;
  std::deque<base::Status> failures;
  base::Duration validity = 1000s;

 private:
  base::Clock& clock_;
  KeyPair ca_;
};

struct Fixture {
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  testing::FixedRandom random{0.5};
  testing::TempDir dir{"cert-manager"};
  std::shared_ptr<FakeRequester> requester;
  std::vector<StoredCertificate> rotated;
  int expired = 0;  // on_expired calls
  std::shared_ptr<ClientCertificateManager> manager;
  StoredCertificate initial;

  Fixture() {
    clock.setWallTime(base::realClock().wallNow());
    auto ca = generateCa("test-ca");
    REQUIRE(ca.ok());
    requester = std::make_shared<FakeRequester>(clock, *ca);
    auto key = generatePrivateKey();
    REQUIRE(key.ok());
    auto csr = makeSigningRequest(*key, nodeClientSubject("n1"));
    REQUIRE(csr.ok());
    initial.pair = {requester->sign(*csr), *key};
    initial.info = *inspectCertificate(initial.pair.cert_pem);
    initial.path = dir / "kubeconfig";
    ClientCertificateManagerOptions o;
    o.node_name = "n1";
    o.requested_lifetime = 600s;
    o.blocking = ioc.get_executor();
    o.on_rotated = [this](const StoredCertificate& s) { rotated.push_back(s); };
    o.on_expired = [this] { ++expired; };
    manager = std::make_shared<ClientCertificateManager>(
        ioc.get_executor(), clock, random, CertificateStore(dir / "pki"), requester, o);
  }
  ~Fixture() {
    manager->stop();
    ioc.poll();
  }

  void advance(base::Duration d) {
    clock.advance(d);
    ioc.poll();
  }
  // Moves the clock to `t` (wall time) less `early`.
  void advanceTo(base::SystemTime t, base::Duration early = 0s) {
    advance(std::chrono::duration_cast<base::Duration>(t - clock.wallNow()) - early);
  }
};

}  // namespace

TEST_CASE("certificate manager: the rotation deadline is 70 to 90 percent of the lifetime",
          "[unit][certificate]") {
  CertificateInfo info;
  info.not_before = base::SystemTime(std::chrono::seconds(1000000));
  info.not_after = info.not_before + 1000s;
  CHECK(rotationDeadline(info, 0.0) == info.not_before + 700s);
  CHECK(rotationDeadline(info, 0.5) == info.not_before + 800s);
  CHECK(rotationDeadline(info, 0.999) > info.not_before + 899s);
  CHECK(rotationDeadline(info, 0.999) < info.not_before + 900s);
}

TEST_CASE("certificate manager: a new certificate is requested at the deadline and handed over",
          "[unit][certificate]") {
  Fixture f;
  f.manager->start(f.initial);
  f.ioc.poll();
  REQUIRE(f.manager->nextDeadline().has_value());
  const auto deadline = *f.manager->nextDeadline();
  CHECK(deadline == f.initial.info.not_before + 800s);

  f.advanceTo(deadline, 1s);
  CHECK(f.requester->specs.empty());
  CHECK(f.rotated.empty());
  f.advance(1s);
  REQUIRE(f.requester->specs.size() == 1);
  const CsrSpec& spec = f.requester->specs.front();
  CHECK(spec.usages == std::vector<std::string>{"digital signature", "client auth"});
  CHECK(spec.signer_name == "kubernetes.io/kube-apiserver-client-kubelet");
  CHECK(spec.expiration == std::optional<std::chrono::seconds>(600s));
  CHECK(parseSigningRequest(spec.request_pem)->common_name == "system:node:n1");

  REQUIRE(f.rotated.size() == 1);
  CHECK(f.rotated.front().pair.key_pem != f.initial.pair.key_pem);  // a new key each time
  auto stored = CertificateStore(f.dir / "pki").current();
  REQUIRE(stored.ok());
  CHECK(stored->pair.cert_pem == f.rotated.front().pair.cert_pem);
  CHECK(f.manager->rotations() == 1);
  CHECK(f.manager->current().not_after == f.rotated.front().info.not_after);
  // The next deadline follows the new certificate.
  CHECK(*f.manager->nextDeadline() == f.rotated.front().info.not_before + 800s);
  f.advanceTo(*f.manager->nextDeadline());
  CHECK(f.rotated.size() == 2);
}

TEST_CASE(
    "certificate manager: failed requests are retried with backoff and keep the old "
    "certificate",
    "[unit][certificate]") {
  Fixture f;
  for (int i = 0; i < 5; ++i) f.requester->failures.push_back(base::unavailableError("down"));
  f.manager->start(f.initial);
  f.ioc.poll();
  f.advanceTo(*f.manager->nextDeadline());
  REQUIRE(f.requester->specs.size() == 1);
  // 2, 4, 8, 16 s, each with 10 % jitter (the fixed random gives half of it), then 32 s.
  for (auto delay : {2100ms, 4200ms, 8400ms, 16800ms, 32000ms}) {
    const size_t before = f.requester->specs.size();
    f.advance(delay - 10ms);
    CHECK(f.requester->specs.size() == before);
    f.advance(10ms);
    CHECK(f.requester->specs.size() == before + 1);
  }
  CHECK(f.manager->renewErrors() == 5);
  REQUIRE(f.rotated.size() == 1);  // the sixth request succeeded
  CHECK(f.manager->rotations() == 1);
}

TEST_CASE("certificate manager: the old certificate stays while requests fail",
          "[unit][certificate]") {
  Fixture f;
  f.requester->failures.push_back(base::permissionDeniedError("denied"));
  f.manager->start(f.initial);
  f.ioc.poll();
  f.advanceTo(*f.manager->nextDeadline());
  CHECK(f.requester->specs.size() == 1);
  CHECK(f.rotated.empty());
  CHECK(CertificateStore(f.dir / "pki").current().status().code() == base::StatusCode::kNotFound);
  CHECK(f.manager->current().not_after == f.initial.info.not_after);
  std::ostringstream metrics;
  f.manager->writeMetrics(metrics);
  CHECK(metrics.str().find("kubelet_certificate_manager_client_expiration_renew_errors 1\n") !=
        std::string::npos);
}

TEST_CASE(
    "certificate manager: an expired certificate whose rotation the apiserver refuses ends the "
    "agent and one the apiserver does not answer keeps it trying",
    "[unit][certificate]") {
  CHECK(serverAnswered(base::unauthenticatedError("expired")));
  CHECK(serverAnswered(base::permissionDeniedError("forbidden")));
  CHECK(serverAnswered(base::notFoundError("no csr api")));
  CHECK_FALSE(serverAnswered(base::unavailableError("connection refused")));
  CHECK_FALSE(serverAnswered(base::deadlineExceededError("timeout")));
  Fixture f;
  for (int i = 0; i < 200; ++i) {
    f.requester->failures.push_back(base::unavailableError("connection refused"));
  }
  f.manager->start(f.initial);
  f.ioc.poll();
  // Every request fails without an answer, past the expiry: the manager keeps trying.
  while (f.clock.wallNow() < f.initial.info.not_after + 60s) f.advance(8s);
  CHECK(f.expired == 0);
  CHECK_FALSE(f.manager->serverHealthy());
  const size_t before = f.requester->specs.size();
  CHECK(before > 10);
  // The apiserver is back and refuses the expired certificate: kubelet exits.
  f.requester->failures.assign(5, base::unauthenticatedError("Unauthorized"));
  f.advance(40s);
  CHECK(f.expired == 1);
  CHECK(f.manager->serverHealthy());
  // And asks no more.
  const size_t after = f.requester->specs.size();
  f.advance(200s);
  CHECK(f.requester->specs.size() == after);
  CHECK(f.expired == 1);
}

TEST_CASE("certificate manager: stop cancels the pending rotation", "[unit][certificate]") {
  Fixture f;
  f.manager->start(f.initial);
  f.ioc.poll();
  const auto deadline = *f.manager->nextDeadline();
  f.manager->stop();
  f.ioc.poll();
  f.advanceTo(deadline + 1h);
  CHECK(f.requester->specs.empty());
  CHECK(f.clock.pendingTimers() == 0);
}

TEST_CASE("certificate manager: metrics show the expiry and the time left", "[unit][certificate]") {
  Fixture f;
  f.manager->start(f.initial);
  f.ioc.poll();
  f.advance(100s);
  std::ostringstream out;
  f.manager->writeMetrics(out);
  const auto expiry =
      std::chrono::duration_cast<std::chrono::seconds>(f.initial.info.not_after.time_since_epoch())
          .count();
  const auto ttl = std::chrono::duration_cast<std::chrono::seconds>(f.initial.info.not_after -
                                                                    f.clock.wallNow());
  INFO(out.str());
  CHECK(out.str().find("# TYPE kubelet_certificate_manager_client_expiration_seconds gauge\n") !=
        std::string::npos);
  CHECK(out.str().find("kubelet_certificate_manager_client_expiration_seconds " +
                       std::to_string(expiry) + "\n") != std::string::npos);
  const std::string ttl_line = "\nkubelet_certificate_manager_client_ttl_seconds ";
  const auto at = out.str().find(ttl_line);
  REQUIRE(at != std::string::npos);
  const long shown = std::stol(out.str().substr(at + ttl_line.size()));
  CHECK(std::abs(shown - ttl.count()) <= 1);
}

}  // namespace nodeagent::certificate
