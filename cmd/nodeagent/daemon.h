// The daemon's composition root: every component of a running agent, owned here in construction
// order (each member is built from the ones above it) and destroyed in reverse. Some runtime
// dependencies point forward, to members built later; they are only followed once run() starts
// the components: PodConfig hands its updates to the agent, the Node status reports the agent's
// health and the eviction manager's pressure, the agent's admission asks the eviction manager,
// and the status syncer asks the agent's pod workers whether a pod's resources are gone.
//
// Threads: two io_context threads run every strand; a blocking pool of 2 threads takes file work
// (checkpoints, pod directories, the HTTP source's fetches); a pool of kApiPoolThreads (eight
// above 1,000 --kube-api-qps or with no limit: agent::apiPoolThreadsFor) takes every blocking
// apiserver call of every controller (api/async_rest_client.h).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "agent/agent.h"
#include "agent/api_mirror_client.h"
#include "agent/api_state_loss.h"
#include "agent/certificate/certificate_manager.h"
#include "agent/event_recorder.h"
#include "agent/eviction/eviction_manager.h"
#include "agent/eviction/signal_source.h"
#include "agent/health_checks.h"
#include "agent/images/image_gc_manager.h"
#include "agent/logs/container_log_manager.h"
#include "agent/node_lease.h"
#include "agent/node_status.h"
#include "agent/pod_network.h"
#include "agent/read_only_server.h"
#include "agent/runtime/cri/cri_module.h"
#include "agent/runtime/instrumented_runtime.h"
#include "agent/runtime_state.h"
#include "agent/server/kubelet_server.h"
#include "agent/stats/summary.h"
#include "agent/status/status_manager.h"
#include "agent/status/status_syncer.h"
#include "agent/volume/watching_api_objects.h"
#include "api/async_rest_client.h"
#include "api/rest_client.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/heap.h"
#include "base/random.h"
#include "cmd/nodeagent/daemon_config.h"
#include "cmd/nodeagent/daemon_support.h"
#include "cmd/nodeagent/lock_file.h"
#include "cmd/nodeagent/node_cgroups.h"
#include "config/manifest_errors.h"
#include "config/pod_config.h"
#include "config/pod_source.h"
#include "podmanager/mirror_client.h"
#include "podmanager/pod_manager.h"

namespace nodeagent::cmd {

// The apiserver clients: one shared by the api source, mirror pods, pod statuses, the Node and
// its lease (one QPS/burst budget, like kubelet's client), one for events (kubelet's
// eventRecordQPS 50 / eventBurst 100, so a burst of pod starts does not delay the statuses).
struct ApiClients {
  std::unique_ptr<api::RestClient> rest;
  std::unique_ptr<api::RestClient> events;
  // The kubelet API's TokenReviews and SubjectAccessReviews: a client and rate limit of their
  // own, so that requests to the port never hold up the node's lease and statuses.
  std::unique_ptr<api::RestClient> webhooks;
};

// The threads every component of a daemon runs on: the io_context (run by the owner's threads),
// the blocking pool, the API pool, the kubelet API's review pool and the pool of the LISTs of
// watched ConfigMaps and Secrets. A standalone daemon owns
// its own; the daemons of a hollow fleet (hollow_fleet.h) share one.
struct DaemonThreads {
  static constexpr int kApiPoolThreads = static_cast<int>(agent::kApiPoolThreads);

  explicit DaemonThreads(int api_threads = kApiPoolThreads)
      : api_threads(api_threads), api_pool(api_threads) {}

  const int api_threads;  // the API pool's
  asio::io_context ioc;
  asio::thread_pool blocking{2};
  asio::thread_pool api_pool;
  asio::thread_pool webhook_pool{2};  // the kubelet API's reviews
  // The LISTs of the watched ConfigMaps and Secrets (the Watch strategy), which wait for the
  // client's rate limiter: never on the API pool, where they would hold up the node's lease.
  asio::thread_pool api_objects_pool{1};

  // Runs the io_context on `threads` threads until it is stopped.
  void run(int threads);
  // Waits for the pools' work to finish (after the io_context stopped and every daemon using
  // them shut its clients down: see Daemon::joinAndRelease).
  void joinPools();
};

class Daemon {
 public:
  static constexpr int kApiPoolThreads = DaemonThreads::kApiPoolThreads;
  static constexpr int kRuntimePoolThreads = 64;

  // `clients` are empty without --kubeconfig. Builds every component; starts nothing.
  // `make_cri` is the CRI runtime module's entry point (with --runtime=cri; else null).
  // `shared` are the threads of a hollow fleet, which outlive the daemon and are run, stopped
  // and joined by the fleet (null: the daemon has threads of its own); a fleet's daemon leaves
  // systemd notifications, heap trimming and signals to the fleet.
  Daemon(const DaemonConfig& config, std::vector<LockFile> locks, ApiClients clients,
         runtime::cri::MakeCriRuntimeFn make_cri = nullptr, DaemonThreads* shared = nullptr);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Recovers what a previous agent left in the runtime, binds the served ports (each one a
  // startup error when taken) and watches the lock files.
  base::Status init();
  // Starts every component and runs until SIGINT/SIGTERM (or lock contention), then stops them
  // in reverse. Containers keep running. The exit code. Not for a fleet's daemon.
  int run();

  // A fleet's daemon: start() starts every component on the shared threads; stop() stops them
  // in reverse and calls `on_stopped` (on the io_context) once the pod workers are idle and the
  // kubelet API's streams ended. After the io_context stopped, joinAndRelease() ends the
  // apiserver calls in flight and joins the daemon's own pools; the fleet then joins the shared
  // ones before destroying the daemon.
  void start();
  // Only the first call stops; later ones do nothing.
  void stop(std::function<void()> on_stopped);
  void joinAndRelease();

  const std::string& nodeName() const { return config_.node_name; }

 private:
  api::AsyncRestClient api(api::RestClient& client);
  void reportStateLoss(const std::string& reason);
  std::shared_ptr<agent::RuntimeState> makeRuntimeState();
  std::shared_ptr<logs::ContainerLogManager> makeLogManager();
  std::shared_ptr<agent::PodNetwork> makePodNetwork();
  std::shared_ptr<agent::NodeStatusController> makeNodeStatus();
  std::unique_ptr<agent::ApiMirrorClient> makeMirrorClient();
  std::shared_ptr<agent::EventRecorder> makeEventRecorder();
  std::shared_ptr<agent::images::ImageGcManager> makeImageGc();
  std::shared_ptr<agent::ApiObjectSource> makeApiObjects();
  std::shared_ptr<stats::SummaryProvider> makeSummary();
  std::shared_ptr<eviction::EvictionManager> makeEvictionManager();
  // The eviction manager's node-level reclaim for a disk signal.
  asio::awaitable<base::Status> reclaimNodeDisk();
  void buildApiControllers();
  void buildSources();
  base::Status buildServers();
  // Stops the io_context once the kubelet API's streams have ended (or after a few seconds).
  void stopWhenServersIdle(int attempts_left);
  std::vector<agent::HealthCheck> healthChecks();
  bool nodeHealthy(std::string* why) const;
  bool watchdogAlive(std::string* why) const;
  bool localSourcesAnswered() const;
  // The client certificate expired and the apiserver refuses its rotation: the daemon stops with
  // exit code 1 (kubelet exits), so that its restart bootstraps again. Any thread.
  void stopForRestart();

  const DaemonConfig& config_;
  const DaemonFlags& flags_;
  std::vector<LockFile> locks_;
  base::Clock& clock_;
  base::Random& random_;
  const base::MonotonicTime started_;
  ApiClients clients_;  // outlive everything that calls them
  // The threads: owned (own_threads_) or a fleet's; the references below name their parts.
  std::unique_ptr<DaemonThreads> own_threads_;
  DaemonThreads& threads_;
  asio::io_context& ioc_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  asio::thread_pool& blocking_;
  asio::thread_pool& api_pool_;
  asio::thread_pool& api_objects_pool_;
  asio::thread_pool& webhook_pool_;
  std::function<void()> on_stopped_;  // stop()'s
  std::atomic<bool> stopping_{false};
  std::atomic<int> exit_code_{0};
  // --rotate-certificates: the client certificate manager's requests (a thread of their own: the
  // wait for approval may be long) and the manager, whose rotations all of clients_ follow.
  std::unique_ptr<asio::thread_pool> cert_pool_;
  std::shared_ptr<certificate::ClientCertificateManager> client_certificate_;
  // The CRI runtime's blocking gRPC calls (with --runtime=cri; else null): a StopContainer holds
  // its thread for the grace period, so they stay off the file pool, and as many pods as there
  // are threads stop at once.
  std::unique_ptr<asio::thread_pool> runtime_pool_;
  // kubepods and below; the runtime makes each container's cgroup under its pod's.
  NodeCgroups cgroups_;
  std::unique_ptr<runtime::Runtime> runtime_;
  // Everything the agent asks of the runtime is counted (kubelet_runtime_operations_total).
  runtime::InstrumentedRuntime instrumented_;
  // The runtime's Status, asked every 5 s: its errors make the Node NotReady.
  std::shared_ptr<agent::RuntimeState> runtime_state_;
  // The node's pod CIDRs to the CRI runtime, and the agent's CNI config; null for other runtimes.
  std::shared_ptr<agent::PodNetwork> pod_network_;
  // Rotates the CRI runtime's container logs (the process runtime's shims rotate their own);
  // null otherwise.
  std::shared_ptr<logs::ContainerLogManager> log_manager_;
  // A lost apiserver state seen by the api source, the Node or the lease makes all of them (and
  // the pod statuses) start over.
  agent::ApiStateLoss api_state_loss_;
  std::shared_ptr<agent::NodeStatusController> node_status_;  // with --kubeconfig
  podmanager::NoopMirrorClient noop_mirror_client_;
  std::unique_ptr<agent::ApiMirrorClient> api_mirror_client_;  // with --kubeconfig
  podmanager::PodManager pod_manager_;
  agent::StatusManager status_manager_;
  config::ManifestErrors manifest_errors_;
  std::shared_ptr<agent::EventRecorder> events_;  // with --kubeconfig
  // Removes unused images when the image filesystem fills (a runtime that runs images; else
  // null). The eviction manager's disk reclaim asks it too.
  std::shared_ptr<agent::images::ImageGcManager> image_gc_;
  // ConfigMaps and Secrets for pods (with --kubeconfig), by the change detection strategy; the
  // Watch strategy's source also as itself, to stop its watches.
  std::shared_ptr<agent::WatchingApiObjectSource> watching_api_objects_;
  std::shared_ptr<agent::ApiObjectSource> api_objects_;
  config::PodConfig pod_config_;
  agent::Agent agent_;
  // /stats/summary and the eviction manager's pod usage.
  std::shared_ptr<stats::SummaryProvider> summary_;
  // Node pressure: the agent's admission and the Node's conditions ask it (built after both).
  std::shared_ptr<eviction::EvictionManager> eviction_;
  std::vector<std::unique_ptr<config::PodSource>> sources_;
  std::shared_ptr<agent::NodeLeaseController> node_lease_;  // with --kubeconfig
  std::shared_ptr<agent::StatusSyncer> status_syncer_;      // with --kubeconfig
  // --read-only-port's answers, also served (authenticated) by the kubelet API; started only
  // with --read-only-port.
  std::unique_ptr<agent::ReadOnlyServer> read_only_;
  std::unique_ptr<agent::KubeletServer> kubelet_;         // --port
  std::optional<api::AsyncRestClient> kubelet_webhooks_;  // with --kubeconfig
  base::TimerPtr idle_wait_;                              // stopWhenServersIdle's
  std::unique_ptr<agent::ReadOnlyServer> healthz_;        // --healthz-port
  SystemdNotifier systemd_;
  LockContentionWatch lock_watch_;
  base::HeapTrimmer trimmer_;
  asio::signal_set signals_;
};

// The apiserver clients of --kubeconfig (none without it); an error names the kubeconfig.
base::StatusOr<ApiClients> makeApiClients(const DaemonConfig& config, base::Clock& clock);

}  // namespace nodeagent::cmd
