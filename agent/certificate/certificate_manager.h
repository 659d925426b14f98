// kubelet's client certificate manager (client-go util/certificate Manager, with the kubelet's
// client template): with --rotate-certificates it asks for a new client certificate, with a new
// key, once 70-90 % of the current one's validity has passed (the jittered deadline
// notBefore + lifetime * (0.7 + 0.2 * random), so that nodes made together do not rotate
// together), stores it (certificate_store.h: the new pem, then the symlink) and hands it to
// `on_rotated`, which makes the apiserver clients use it for new connections. The old
// certificate stays in use until the new one is in place. A failed request is retried after
// 2, 4, 8 and 16 s (10 % jitter), then every 32 s.
//
// The decisions (deadline, retry, metrics) run on one strand with an injected clock; the request
// itself (key, CSR, wait for approval, files) is blocking and runs on `blocking`, a thread of its
// own in the daemon: the wait for approval may take minutes.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <stop_token>
#include <string>

#include "agent/certificate/certificate_store.h"
#include "agent/certificate/csr.h"
#include "api/rest_client.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/random.h"
#include "base/status.h"

namespace nodeagent::certificate {

// client-go's serverHealth after a failed request: the apiserver answered it (401, 403, 404),
// so it is up and the request itself was refused; anything else (no connection, a timeout, a 5xx
// from a proxy) says nothing about it.
bool serverAnswered(const base::Status& request_error);

// client-go's jittered rotation deadline: `random` in [0, 1) picks 70-90 % of the lifetime.
base::SystemTime rotationDeadline(const CertificateInfo& info, double random);

// Obtains a certificate for a request: blocking, on the manager's blocking executor.
class CertificateRequester {
 public:
  virtual ~CertificateRequester() = default;
  // The issued certificate (PEM) for `spec` (whose request was made with `key_pem`); Cancelled
  // when `stop` fires.
  virtual base::StatusOr<std::string> request(const CsrSpec& spec, const std::string& key_pem,
                                              std::stop_token stop) = 0;
};

// Asks the apiserver through `client` (authenticated with the current certificate): creates the
// request and waits for it (csr.h).
class ApiCertificateRequester final : public CertificateRequester {
 public:
  ApiCertificateRequester(api::RestClient& client, base::Clock& clock, CsrWaitOptions wait)
      : client_(client), clock_(clock), wait_(wait) {}
  base::StatusOr<std::string> request(const CsrSpec& spec, const std::string& key_pem,
                                      std::stop_token stop) override;

 private:
  api::RestClient& client_;
  base::Clock& clock_;
  CsrWaitOptions wait_;
};

struct ClientCertificateManagerOptions {
  std::string node_name;
  // spec.expirationSeconds of the requests (unset: the signer's default).
  std::optional<std::chrono::seconds> requested_lifetime;
  // Where request() and the store's file writes run. Required.
  asio::any_io_executor blocking;
  // Runs on the manager's strand once a new certificate is stored.
  std::function<void(const StoredCertificate&)> on_rotated;
  // Runs on the strand when a rotation failed after the current certificate expired and the
  // apiserver answered the request (serverAnswered): kubelet exits then, so that it starts over
  // with its bootstrap credentials. Unset: the manager keeps trying.
  std::function<void()> on_expired;
  base::Duration retry_initial = std::chrono::seconds(2);
  int retry_steps = 5;
  base::Duration retry_poll = std::chrono::seconds(32);
};

class ClientCertificateManager : public std::enable_shared_from_this<ClientCertificateManager> {
 public:
  ClientCertificateManager(asio::any_io_executor ex, base::Clock& clock, base::Random& random,
                           CertificateStore store, std::shared_ptr<CertificateRequester> requester,
                           ClientCertificateManagerOptions options);

  // Starts with `current` (the certificate the clients use now). Any thread.
  void start(StoredCertificate current);
  // Cancels the timer and a request in flight (the stored files stay). Any thread; idempotent.
  void stop();

  // Any thread.
  CertificateInfo current() const;
  // When the next rotation is due (none before start()).
  std::optional<base::SystemTime> nextDeadline() const;
  int rotations() const { return rotations_.load(); }
  int renewErrors() const { return renew_errors_.load(); }
  // Whether the apiserver answered the last request (client-go's ServerHealthy); true before any.
  bool serverHealthy() const { return server_healthy_.load(); }
  // kubelet_certificate_manager_client_expiration_seconds (unix time of the expiry),
  // kubelet_certificate_manager_client_ttl_seconds (seconds left) and
  // kubelet_certificate_manager_client_expiration_renew_errors.
  void writeMetrics(std::ostream& out) const;

 private:
  void scheduleNext();
  void rotate();
  void onRotated(base::StatusOr<StoredCertificate> result);
  base::StatusOr<StoredCertificate> requestBlocking(std::stop_token stop);

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  base::Random& random_;
  CertificateStore store_;
  std::shared_ptr<CertificateRequester> requester_;
  ClientCertificateManagerOptions options_;
  base::TimerPtr timer_;       // strand only
  int failures_in_a_row_ = 0;  // strand only
  std::stop_source stop_;
  std::atomic<bool> stopped_{false};
  std::atomic<int> rotations_{0};
  std::atomic<int> renew_errors_{0};
  std::atomic<bool> server_healthy_{true};
  mutable std::mutex mu_;  // guards current_ and deadline_
  CertificateInfo current_;
  std::optional<base::SystemTime> deadline_;
};

}  // namespace nodeagent::certificate
