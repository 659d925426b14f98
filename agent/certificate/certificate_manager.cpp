#include "agent/certificate/certificate_manager.h"

#include <cmath>

#include "agent/certificate/bootstrap.h"
#include "api/time.h"
#include "base/backoff.h"
#include "base/duration.h"
#include "base/log.h"
#include "base/metrics.h"

namespace nodeagent::certificate {
namespace {

NODEAGENT_LOGGER("certificate");

double unixSeconds(base::SystemTime t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

std::string formatTime(base::SystemTime t) {
  return api::formatTime(std::chrono::time_point_cast<std::chrono::nanoseconds>(t));
}

}  // namespace

base::SystemTime rotationDeadline(const CertificateInfo& info, double random) {
  const auto total = info.not_after - info.not_before;
  const double fraction = 0.7 + 0.2 * random;
  return info.not_before + std::chrono::round<base::SystemTime::duration>(total * fraction);
}

base::StatusOr<std::string> ApiCertificateRequester::request(const CsrSpec& spec,
                                                             const std::string& key_pem,
                                                             std::stop_token stop) {
  ASSIGN_OR_RETURN(CreatedCsr csr, requestCertificate(client_, spec, key_pem, clock_.wallNow()));
  return waitForCertificate(client_, clock_, csr, wait_, stop);
}

ClientCertificateManager::ClientCertificateManager(asio::any_io_executor ex, base::Clock& clock,
                                                   base::Random& random, CertificateStore store,
                                                   std::shared_ptr<CertificateRequester> requester,
                                                   ClientCertificateManagerOptions options)
    : strand_(asio::make_strand(ex)),
      clock_(clock),
      random_(random),
      store_(std::move(store)),
      requester_(std::move(requester)),
      options_(std::move(options)),
      timer_(clock.makeTimer(strand_)) {}

bool serverAnswered(const base::Status& request_error) {
  switch (request_error.code()) {
    case base::StatusCode::kUnauthenticated:
    case base::StatusCode::kPermissionDenied:
    case base::StatusCode::kNotFound:
      return true;
    default:
      return false;
  }
}

void ClientCertificateManager::start(StoredCertificate current) {
  {
    std::lock_guard lock(mu_);
    current_ = current.info;
  }
  log()->info("Certificate rotation is enabled name=client-auth cert={}", current.path.string());
  asio::dispatch(strand_, [self = shared_from_this()] { self->scheduleNext(); });
}

void ClientCertificateManager::stop() {
  if (stopped_.exchange(true)) return;
  stop_.request_stop();
  asio::dispatch(strand_, [self = shared_from_this()] { self->timer_->cancel(); });
}

CertificateInfo ClientCertificateManager::current() const {
  std::lock_guard lock(mu_);
  return current_;
}

std::optional<base::SystemTime> ClientCertificateManager::nextDeadline() const {
  std::lock_guard lock(mu_);
  return deadline_;
}

void ClientCertificateManager::scheduleNext() {
  if (stopped_) return;
  base::SystemTime deadline;
  {
    std::lock_guard lock(mu_);
    deadline = rotationDeadline(current_, random_.uniform());
    deadline_ = deadline;
    log()->info(
        "Certificate expiration is {}, rotation deadline is {} name=client-auth expiration={} "
        "deadline={}",
        formatTime(current_.not_after), formatTime(deadline), formatTime(current_.not_after),
        formatTime(deadline));
  }
  const auto wait = deadline - clock_.wallNow();
  if (wait <= base::Duration::zero()) {
    rotate();
    return;
  }
  log()->info("Waiting {} for next certificate rotation name=client-auth",
              base::formatDuration(wait));
  timer_->asyncWaitFor(wait, [self = shared_from_this()] { self->rotate(); });
}

void ClientCertificateManager::rotate() {
  if (stopped_) return;
  log()->info("Rotating certificates name=client-auth");
  asio::post(options_.blocking, [self = shared_from_this(), stop = stop_.get_token()] {
    auto result = self->requestBlocking(stop);
    asio::post(self->strand_, [self, result = std::move(result)]() mutable {
      self->onRotated(std::move(result));
    });
  });
}

base::StatusOr<StoredCertificate> ClientCertificateManager::requestBlocking(std::stop_token stop) {
  const CertificateRequest subject = nodeClientSubject(options_.node_name);
  ASSIGN_OR_RETURN(std::string key, generatePrivateKey());
  CsrSpec spec;
  spec.usages = nodeClientUsages();
  spec.expiration = options_.requested_lifetime;
  ASSIGN_OR_RETURN(spec.request_pem, makeSigningRequest(key, subject));
  ASSIGN_OR_RETURN(std::string cert, requester_->request(spec, key, stop));
  if (stop.stop_requested()) return base::cancelledError("certificate rotation stopped");
  return store_.update({std::move(cert), std::move(key)}, clock_.wallNow());
}

void ClientCertificateManager::onRotated(base::StatusOr<StoredCertificate> result) {
  if (stopped_) return;
  server_healthy_ = result.ok() || serverAnswered(result.status());
  if (!result.ok()) {
    renew_errors_.fetch_add(1);
    ++failures_in_a_row_;
    const base::Duration delay =
        failures_in_a_row_ < options_.retry_steps
            ? base::jitter(options_.retry_initial * (1 << (failures_in_a_row_ - 1)), 0.1, random_)
            : options_.retry_poll;
    const auto expiry = current().not_after;
    auto level = clock_.wallNow() >= expiry ? spdlog::level::err : spdlog::level::warn;
    log()->log(level,
               "Failed to rotate the client certificate, keeping the current one err={} "
               "expiration={} retry_in={}",
               result.status().message(), formatTime(expiry), base::formatDuration(delay));
    if (clock_.wallNow() >= expiry && options_.on_expired) {
      if (server_healthy_) {
        log()->error(
            "The currently active client certificate has expired and the server is responsive, "
            "exiting expiration={}",
            formatTime(expiry));
        options_.on_expired();
        return;
      }
      log()->error(
          "The currently active client certificate has expired, but the server is not "
          "responsive. A restart may be necessary to retrieve new initial credentials "
          "expiration={}",
          formatTime(expiry));
    }
    timer_->asyncWaitFor(delay, [self = shared_from_this()] { self->rotate(); });
    return;
  }
  failures_in_a_row_ = 0;
  rotations_.fetch_add(1);
  {
    std::lock_guard lock(mu_);
    current_ = result->info;
  }
  log()->info("Rotated the client certificate cert={} expiration={}", result->path.string(),
              formatTime(result->info.not_after));
  if (options_.on_rotated) options_.on_rotated(*result);
  scheduleNext();
}

void ClientCertificateManager::writeMetrics(std::ostream& out) const {
  const CertificateInfo info = current();
  const double expiry = unixSeconds(info.not_after);
  const double ttl = expiry - unixSeconds(clock_.wallNow());
  base::writeMetricHeader(out, "kubelet_certificate_manager_client_expiration_seconds", "gauge",
                          "Gauge of the lifetime of a certificate. The value is the date the "
                          "certificate will expire in seconds since January 1, 1970 UTC.");
  out << "kubelet_certificate_manager_client_expiration_seconds " << std::llround(expiry) << "\n";
  base::writeMetricHeader(out, "kubelet_certificate_manager_client_ttl_seconds", "gauge",
                          "Gauge of the TTL (time-to-live) of the Kubelet's client certificate. "
                          "The value is in seconds until certificate expiry (negative if "
                          "already expired).");
  out << "kubelet_certificate_manager_client_ttl_seconds " << std::llround(ttl) << "\n";
  base::writeMetricHeader(out, "kubelet_certificate_manager_client_expiration_renew_errors",
                          "counter", "Counter of certificate renewal errors.");
  out << "kubelet_certificate_manager_client_expiration_renew_errors " << renew_errors_.load()
      << "\n";
}

}  // namespace nodeagent::certificate
