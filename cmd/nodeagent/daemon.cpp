#include "cmd/nodeagent/daemon.h"
#include "cmd/nodeagent/client_certificate.h"
#include "cmd/nodeagent/kubelet_api.h"
#include "cmd/nodeagent/local_sources.h"

#include <signal.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>
#include <thread>

#include "agent/apparmor_admission.h"
#include "agent/runtime/fake_runtime.h"
#include "agent/runtime/process_runtime.h"
#include "api/async_rest_client.h"
#include "api/pod_update.h"
#include "base/duration.h"
#include "base/log.h"
#include "base/printable.h"
#include "config/apiserver_source.h"
#include "config/file_source.h"
#include "config/http_source.h"
#include "config/reflector.h"

namespace nodeagent::cmd {
namespace {

// How long the Node may stay Ready while the api source has not listed its pods (the first list
// at start-up).
constexpr base::Duration kApiSourceGrace = std::chrono::minutes(1);
// The sync loop ticks every second; the watchdog allows this much beyond its own period.
constexpr base::Duration kSyncLoopTickSlack = std::chrono::seconds(2);

NODEAGENT_LOGGER("nodeagent")

std::unique_ptr<runtime::Runtime> makeCriRuntime(const DaemonConfig& c,
                                                 runtime::cri::MakeCriRuntimeFn make,
                                                 asio::any_io_executor calls, base::Clock& clock) {
  runtime::cri::CriModuleOptions o;
  o.endpoint = c.flags.container_runtime_endpoint;
  o.request_timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(c.flags.runtime_request_timeout);
  o.pod_log_dir = c.flags.pod_log_dir;
  o.blocking_executor = std::move(calls);
  o.clock = &clock;
  // The endpoint was checked with the flags: making the runtime cannot fail on it.
  auto runtime = make(o);
  if (!runtime.ok()) throw std::runtime_error(runtime.status().toString());
  return std::move(*runtime);
}

std::unique_ptr<runtime::Runtime> makeRuntime(const DaemonConfig& c, asio::io_context& ioc,
                                              runtime::cri::MakeCriRuntimeFn make_cri,
                                              asio::any_io_executor cri_calls, base::Clock& clock,
                                              const NodeCgroups& cgroups) {
  if (c.flags.runtime == "fake") {
    return std::make_unique<runtime::FakeRuntime>(ioc.get_executor(), clock);
  }
  if (c.flags.runtime == "cri") return makeCriRuntime(c, make_cri, std::move(cri_calls), clock);
  runtime::ProcessRuntimeOptions ro;
  ro.root_dir = c.flags.root_dir;
  ro.pod_log_dir = c.flags.pod_log_dir;
  ro.log_max_size = c.log_max_size;
  ro.log_max_files = static_cast<int>(c.flags.container_log_max_files);
  ro.cgroups = cgroups.cgroups();
  ro.container_open_files = containerOpenFileLimit();
  return std::make_unique<runtime::ProcessRuntime>(ioc.get_executor(), clock, ro);
}

agent::AgentOptions agentOptions(const DaemonConfig& c, asio::any_io_executor blocking,
                                 const std::shared_ptr<agent::EventRecorder>& events,
                                 const NodeCgroups& cgroups,
                                 std::function<agent::AdmitResult(const api::Pod&)> admit,
                                 std::function<std::string()> network_errors,
                                 std::shared_ptr<agent::ApiObjectSource> api_objects) {
  agent::AgentOptions ao;
  ao.api_objects = std::move(api_objects);
  ao.admit_handler = std::move(admit);
  ao.container_manager = cgroups.manager;
  ao.memory_capacity = c.capacity.memory_bytes;
  ao.node_name = c.node_name;
  ao.node_ip = c.node_ip;
  ao.root_dir = c.flags.root_dir;
  ao.allocatable = c.allocatable;
  ao.crashloop_backoff_initial = c.flags.crashloop_backoff_initial;
  ao.crashloop_backoff_max = c.flags.crashloop_backoff_max;
  ao.workers.resync_interval = c.flags.sync_frequency;
  ao.pleg.relist_period = c.flags.pleg_relist_period;
  // The CRI runtime reports no container events: the relist is the PLEG, every second as
  // kubelet's.
  if (c.flags.runtime == "cri" && !c.pleg_relist_period_set) {
    ao.pleg.relist_period = std::chrono::seconds(1);
  }
  // A CRI runtime's sandboxes have networks of their own (CNI) unless hostNetwork: pods wait for
  // the runtime's network (kubelet's NetworkNotReady) and get their sandbox's IP.
  ao.network_errors = std::move(network_errors);
  ao.sandbox_network = c.flags.runtime == "cri";
  ao.dns.resolv_conf = c.flags.resolv_conf;
  ao.dns.cluster_dns = c.cluster_dns;
  ao.dns.cluster_domain = c.flags.cluster_domain;
  ao.allow_root_api_pods = c.flags.allow_root_api_pods;
  ao.seccomp_default = c.flags.seccomp_default;
  ao.blocking_executor = std::move(blocking);
  if (events) {
    ao.record_event = [events](const api::Pod& pod, const std::string& type,
                               const std::string& reason, const std::string& message,
                               const std::string& field_path) {
      events->record(pod, type, reason, message, field_path);
    };
  }
  return ao;
}

config::PodConfigOptions podConfigOptions(const DaemonConfig& c, asio::any_io_executor blocking) {
  config::PodConfigOptions pco;
  pco.checkpoint_dir = std::filesystem::path(c.flags.root_dir) / "pod-checkpoints";
  pco.blocking_executor = std::move(blocking);
  return pco;
}

std::string manifestErrorsJson(const config::ManifestErrors& errors) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& e : errors.list()) {
    out.push_back({{"source", e.source}, {"location", e.location}, {"message", e.message}});
  }
  // File names and messages may hold any bytes: invalid UTF-8 becomes U+FFFD.
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string manifestErrorsMetrics(const config::ManifestErrors& errors) {
  std::string out =
      "# HELP nodeagent_manifest_errors Current manifest errors by source and location.\n"
      "# TYPE nodeagent_manifest_errors gauge\n";
  for (const auto& e : errors.list()) {
    out += "nodeagent_manifest_errors{source=\"" + base::prometheusLabelValue(e.source) +
           "\",location=\"" + base::prometheusLabelValue(e.location) + "\"} 1\n";
  }
  return out;
}

}  // namespace

base::StatusOr<ApiClients> makeApiClients(const DaemonConfig& c, base::Clock& clock) {
  ApiClients clients;
  if (!c.kubeconfig) return clients;
  api::RestClientOptions rco;
  rco.qps = c.flags.kube_api_qps;
  rco.burst = static_cast<int>(c.flags.kube_api_burst);
  auto rest = api::RestClient::create(*c.kubeconfig, rco, clock);
  if (!rest.ok()) return rest.status().withContext("--kubeconfig");
  api::RestClientOptions eco;
  eco.qps = 50;
  eco.burst = 100;
  auto events = api::RestClient::create(*c.kubeconfig, eco, clock);
  if (!events.ok()) return events.status().withContext("--kubeconfig");
  auto webhooks = api::RestClient::create(*c.kubeconfig, eco, clock);
  if (!webhooks.ok()) return webhooks.status().withContext("--kubeconfig");
  clients.rest = std::move(*rest);
  clients.events = std::move(*events);
  clients.webhooks = std::move(*webhooks);
  return clients;
}

void DaemonThreads::run(int threads) {
  std::vector<std::thread> running;
  for (int i = 0; i < threads; ++i) running.emplace_back([this] { ioc.run(); });
  for (auto& t : running) t.join();
}

void DaemonThreads::joinPools() {
  api_pool.join();
  webhook_pool.join();
  api_objects_pool.join();
  blocking.join();
}

Daemon::Daemon(const DaemonConfig& config, std::vector<LockFile> locks, ApiClients clients,
               runtime::cri::MakeCriRuntimeFn make_cri, DaemonThreads* shared)
    : config_(config),
      flags_(config.flags),
      locks_(std::move(locks)),
      clock_(base::realClock()),
      random_(base::defaultRandom()),
      started_(clock_.now()),
      clients_(std::move(clients)),
      own_threads_(shared == nullptr ? std::make_unique<DaemonThreads>(static_cast<int>(
                                           agent::apiPoolThreadsFor(config.flags.kube_api_qps)))
                                     : nullptr),
      threads_(shared == nullptr ? *own_threads_ : *shared),
      ioc_(threads_.ioc),
      work_(asio::make_work_guard(ioc_)),
      blocking_(threads_.blocking),
      api_pool_(threads_.api_pool),
      api_objects_pool_(threads_.api_objects_pool),
      webhook_pool_(threads_.webhook_pool),
      cert_pool_(config.flags.rotate_certificates && clients_.rest
                     ? std::make_unique<asio::thread_pool>(1)
                     : nullptr),
      client_certificate_(cert_pool_ ? makeClientCertificateManager(
                                           config, ioc_.get_executor(), cert_pool_->get_executor(),
                                           clock_, random_, clients_, [this] { stopForRestart(); })
                                     : nullptr),
      runtime_pool_(config.flags.runtime == "cri"
                        ? std::make_unique<asio::thread_pool>(kRuntimePoolThreads)
                        : nullptr),
      cgroups_(startNodeCgroups(config)),
      runtime_(makeRuntime(config, ioc_, make_cri,
                           runtime_pool_ ? asio::any_io_executor(runtime_pool_->get_executor())
                                         : asio::any_io_executor(ioc_.get_executor()),
                           clock_, cgroups_)),
      instrumented_(*runtime_),
      runtime_state_(makeRuntimeState()),
      pod_network_(makePodNetwork()),
      log_manager_(makeLogManager()),
      api_state_loss_(clock_),
      node_status_(makeNodeStatus()),
      api_mirror_client_(makeMirrorClient()),
      pod_manager_(api_mirror_client_
                       ? static_cast<podmanager::MirrorClient&>(*api_mirror_client_)
                       : static_cast<podmanager::MirrorClient&>(noop_mirror_client_)),
      status_manager_(clock_, pod_manager_),
      events_(makeEventRecorder()),
      image_gc_(makeImageGc()),
      api_objects_(makeApiObjects()),
      pod_config_(
          ioc_.get_executor(), clock_,
          [this](api::PodUpdate u) { agent_.onPodUpdate(std::move(u)); },
          podConfigOptions(config, blocking_.get_executor())),
      agent_(
          ioc_.get_executor(), clock_, random_, instrumented_, pod_manager_, status_manager_,
          [this](const std::string& source) { return pod_config_.sourceSeen(source); },
          [this] { return pod_config_.seenAllSources(pod_config_.sources()); },
          agentOptions(
              config, blocking_.get_executor(), events_, cgroups_,
              [this](const api::Pod& pod) {
                auto result = eviction_ ? eviction_->admitPod(pod) : agent::AdmitResult{};
                if (result.admit) {
                  result = config_.sysctls.admit(pod, config_.flags.runtime == "process");
                }
                if (result.admit) {
                  result =
                      agent::admitAppArmor(pod, config_.apparmor_enabled, config_.flags.runtime);
                }
                return result;
              },
              [this] { return runtime_state_->networkErrors(); }, api_objects_)),
      summary_(makeSummary()),
      eviction_(makeEvictionManager()),
      systemd_(
          ioc_.get_executor(), clock_, [this] { return localSourcesAnswered(); },
          [this](std::string* why) { return watchdogAlive(why); }),
      lock_watch_(ioc_),
      trimmer_(ioc_.get_executor(), clock_),
      signals_(ioc_) {
  // Caught from here on (a SIGTERM while init() binds the ports is handled once run() starts);
  // a fleet's daemons leave signals to the fleet.
  if (own_threads_) {
    signals_.add(SIGINT);
    signals_.add(SIGTERM);
  }
  buildSources();
  buildApiControllers();
}

Daemon::~Daemon() { joinAndRelease(); }

api::AsyncRestClient Daemon::api(api::RestClient& client) {
  return api::AsyncRestClient(client, api_pool_.get_executor());
}

void Daemon::reportStateLoss(const std::string& reason) { api_state_loss_.report(reason); }

std::shared_ptr<agent::PodNetwork> Daemon::makePodNetwork() {
  if (flags_.runtime != "cri") return nullptr;
  agent::PodNetworkOptions o;
  o.cni_conf_dir = flags_.cni_conf_dir;
  o.bridge = flags_.cni_bridge;
  o.masquerade = flags_.cni_masquerade;
  o.ipam_dir = std::filesystem::absolute(flags_.root_dir) / "cni" / "ipam";
  return std::make_shared<agent::PodNetwork>(ioc_.get_executor(), blocking_.get_executor(),
                                             instrumented_, o);
}

std::shared_ptr<agent::NodeStatusController> Daemon::makeNodeStatus() {
  if (!clients_.rest) return nullptr;
  agent::NodeStatusOptions no;
  no.node_name = config_.node_name;
  no.node_ip = config_.node_ip;
  no.labels = config_.node_labels;
  no.register_with_taints = config_.register_with_taints;
  no.capacity = config_.capacity;
  no.allocatable = config_.allocatable;
  no.info = agent::readNodeInfo(runtime_->type() + "://" + NODEAGENT_VERSION);
  no.daemon_port = static_cast<int>(flags_.port);
  no.update_frequency = flags_.node_status_update_frequency;
  if (config_.node_status_frequency_set) no.report_frequency = flags_.node_status_update_frequency;
  no.healthy = [this](std::string* why) { return nodeHealthy(why); };
  no.pressure = [this] {
    return eviction_ ? eviction_->conditions() : eviction::PressureConditions{};
  };
  no.on_state_lost = [this](const std::string& r) { reportStateLoss(r); };
  no.max_images = flags_.node_status_max_images;
  if (pod_network_) {
    no.pod_cidrs = [network = pod_network_,
                    source = "Node " + config_.node_name + " spec.podCIDRs"](std::string cidrs) {
      network->set(std::move(cidrs), source);
    };
  }
  if (runtime_->runsImages()) {
    // image_gc_ is built later; asked only once started.
    no.images = [this]() -> std::optional<std::vector<agent::NodeImage>> {
      auto listed = image_gc_ ? image_gc_->imageList() : std::nullopt;
      if (!listed) return std::nullopt;
      std::vector<agent::NodeImage> images;
      for (const auto& image : *listed) {
        agent::NodeImage& out = images.emplace_back();
        out.names = image.repo_digests;
        out.names.insert(out.names.end(), image.repo_tags.begin(), image.repo_tags.end());
        out.size_bytes = static_cast<int64_t>(image.size);
      }
      return images;
    };
  }
  auto node_status = std::make_shared<agent::NodeStatusController>(ioc_.get_executor(), clock_,
                                                                   api(*clients_.rest), no);
  api_state_loss_.subscribe([n = node_status.get()](const std::string&) { n->reRegister(); });
  return node_status;
}

std::shared_ptr<agent::RuntimeState> Daemon::makeRuntimeState() {
  agent::RuntimeStateOptions ro;
  // The Node's Ready condition follows at once (node_status_ is built later: read at call time).
  ro.on_change = [this] {
    if (node_status_) node_status_->requestUpdate();
  };
  return std::make_shared<agent::RuntimeState>(ioc_.get_executor(), clock_, instrumented_, ro);
}

std::shared_ptr<logs::ContainerLogManager> Daemon::makeLogManager() {
  if (flags_.runtime != "cri") return nullptr;
  logs::ContainerLogManagerOptions lo;
  lo.max_size = config_.log_max_size;
  lo.max_files = static_cast<int>(flags_.container_log_max_files);
  lo.blocking_executor = blocking_.get_executor();
  return std::make_shared<logs::ContainerLogManager>(ioc_.get_executor(), clock_, instrumented_,
                                                     lo);
}

std::unique_ptr<agent::ApiMirrorClient> Daemon::makeMirrorClient() {
  if (!clients_.rest) return nullptr;
  agent::ApiMirrorClientOptions mo;
  mo.node_name = config_.node_name;
  mo.node_uid = [n = node_status_.get()] { return n->nodeUid(); };
  return std::make_unique<agent::ApiMirrorClient>(api(*clients_.rest), clock_, mo);
}

std::shared_ptr<agent::EventRecorder> Daemon::makeEventRecorder() {
  if (!clients_.events) return nullptr;
  agent::EventRecorderOptions eo;
  eo.node_name = config_.node_name;
  auto events = std::make_shared<agent::EventRecorder>(ioc_.get_executor(), clock_,
                                                       api(*clients_.events), eo);
  // Bad static manifests become FailedValidation events (config/ only knows a listener).
  manifest_errors_.setListener(
      [events](const config::ManifestError& e) { agent::recordManifestError(*events, e); });
  return events;
}

std::shared_ptr<agent::ApiObjectSource> Daemon::makeApiObjects() {
  if (!clients_.rest) return nullptr;
  api::RestClient* rest = clients_.rest.get();
  const auto& strategy = flags_.config_map_and_secret_change_detection_strategy;
  // kubelet's Cache strategy keeps an object a minute (its default TTL); Get reads every time,
  // and reads for Watch what is not watched yet.
  auto direct = std::make_shared<agent::CachingApiObjectSource>(
      clock_, [rest](const std::string& path) { return rest->getJson(path); },
      strategy == "Cache" ? base::Duration(std::chrono::minutes(1)) : base::Duration::zero(),
      [rest](const std::string& path, const nlohmann::json& body) {
        return rest->createJson(path, body);
      });
  if (strategy != "Watch") return direct;
  watching_api_objects_ = std::make_shared<agent::WatchingApiObjectSource>(
      ioc_.get_executor(), clock_, random_,
      [rest, ex = ioc_.get_executor(), pool = api_objects_pool_.get_executor()](
          const std::string& path, const std::string& field_selector) {
        return std::make_shared<config::AsyncListerWatcher>(*rest, ex, pool, path, field_selector);
      },
      std::move(direct));
  return watching_api_objects_;
}

std::shared_ptr<agent::images::ImageGcManager> Daemon::makeImageGc() {
  if (!runtime_->runsImages()) return nullptr;
  agent::images::ImageGcOptions io;
  io.policy = config_.image_gc_policy;
  // pod_config_ and agent_ are built later; asked only once started.
  io.ready = [this] { return pod_config_.seenAllSources(pod_config_.sources()); };
  io.wanted_images = [this] {
    std::vector<std::string> images;
    for (const auto& pod : agent_.activePods()) {
      for (const auto& c : pod->spec->init_containers) images.push_back(c.image);
      for (const auto& c : pod->spec->containers) images.push_back(c.image);
    }
    return images;
  };
  if (events_) {
    io.record_node_warning = [events = events_](const std::string& reason,
                                                const std::string& message) {
      events->record(events->nodeReference(), "Warning", reason, message);
    };
  }
  return std::make_shared<agent::images::ImageGcManager>(ioc_.get_executor(), clock_, instrumented_,
                                                         std::move(io));
}

std::shared_ptr<stats::SummaryProvider> Daemon::makeSummary() {
  stats::SummaryOptions so;
  so.node_name = config_.node_name;
  so.root_dir = flags_.root_dir;
  so.pod_log_dir = flags_.pod_log_dir;
  so.container_manager = cgroups_.manager;
  so.blocking_executor = blocking_.get_executor();
  so.pods = [this] {
    std::vector<stats::SummaryPod> out;
    for (auto& pod : pod_manager_.getPods()) {
      auto status = status_manager_.getPodStatus(pod->metadata.uid);
      out.push_back({std::move(pod), std::move(status)});
    }
    return out;
  };
  if (image_gc_) {
    so.image_fs = [gc = image_gc_]() -> std::optional<stats::ImageFsUsage> {
      auto fs = gc->imageFs();
      if (!fs) return std::nullopt;
      return stats::ImageFsUsage{fs->mountpoint.string(), fs->used_bytes, fs->inodes_used};
    };
  }
  return std::make_shared<stats::SummaryProvider>(ioc_.get_executor(), clock_, std::move(so));
}

asio::awaitable<base::Status> Daemon::reclaimNodeDisk() {
  // kubelet's node-level reclaim of a disk signal: dead containers, then unused images, each
  // whatever the other did.
  auto collecting = agent_.removeDeadContainers();
  auto collected = co_await std::move(collecting);
  if (!image_gc_) co_return collected;
  auto deleting = image_gc_->deleteUnusedImages();
  auto freed = co_await std::move(deleting);
  if (freed.ok()) {
    log()->info("Removed unused images to reclaim node resources bytes={}", *freed);
  } else if (collected.ok()) {
    co_return freed.status();
  } else {
    co_return base::Status(collected.code(), collected.message() + "; " + freed.status().message());
  }
  co_return collected;
}

std::shared_ptr<eviction::EvictionManager> Daemon::makeEvictionManager() {
  eviction::RealSignalSourceOptions signals;
  signals.root_dir = flags_.root_dir;
  signals.pod_log_dir = flags_.pod_log_dir;
  if (auto manager = cgroups_.manager) {
    // allocatableMemory.available: what kubepods may still use of its limit.
    signals.kubepods_working_set = [manager]() -> std::optional<int64_t> {
      auto stats = manager->cgroups().stats(manager->kubepods());
      if (!stats.ok() || !stats->memory_working_set_bytes) return std::nullopt;
      return static_cast<int64_t>(*stats->memory_working_set_bytes);
    };
    signals.allocatable_memory_bytes = config_.kubepods_limits.memory_limit.value_or(0);
  }
  if (image_gc_) {
    signals.image_fs_path = [gc = image_gc_]() -> std::optional<std::string> {
      auto fs = gc->imageFs();
      if (!fs) return std::nullopt;
      return fs->mountpoint.string();
    };
  }
  eviction::EvictionManagerOptions eo;
  eo.thresholds = config_.eviction_thresholds;
  eo.pressure_transition_period = flags_.eviction_pressure_transition_period;
  eo.max_pod_grace_period_seconds = flags_.eviction_max_pod_grace_period;
  eo.signals = std::make_shared<eviction::RealSignalSource>(std::move(signals));
  eo.active_pods = [this] { return agent_.activePods(); };
  eo.pod_usage = [summary = summary_](const std::vector<api::PodPtr>& pods) {
    return summary->podUsage(pods);
  };
  eo.kill_pod = [this](api::PodPtr pod, api::PodStatus status,
                       std::optional<int64_t> grace) -> asio::awaitable<bool> {
    agent_.evictPod(std::move(pod), std::move(status), grace);
    co_return true;
  };
  eo.reclaim_node_level = [this](eviction::Signal) { return reclaimNodeDisk(); };
  eo.pod_cleaned_up = [this](const api::Pod& pod) { return agent_.podCleanedUp(pod); };
  if (events_) {
    eo.record_pod_event = [events = events_](const api::Pod& pod, const std::string& type,
                                             const std::string& reason, const std::string& message,
                                             const std::string& field_path) {
      events->record(pod, type, reason, message, field_path);
    };
  }
  eo.on_conditions_changed = [this](const eviction::PressureConditions&) {
    if (node_status_) node_status_->requestUpdate();
  };
  eo.blocking_executor = blocking_.get_executor();
  return std::make_shared<eviction::EvictionManager>(ioc_.get_executor(), clock_, std::move(eo));
}

void Daemon::buildSources() {
  const auto& f = flags_;
  LocalSources local{f.pod_manifest_path, f.manifest_url,         config_.manifest_url_headers,
                     config_.node_name,   f.file_check_frequency, f.http_check_frequency};
  // The URL was checked when the configuration was loaded: this cannot fail.
  (void)addLocalSources(local, ioc_.get_executor(), blocking_.get_executor(), clock_,
                        manifest_errors_, pod_config_, sources_);
  if (clients_.rest) {
    auto api_sink = pod_config_.channel(std::string(api::kApiserverSource));
    auto restored = pod_config_.restore();
    if (!restored.ok())
      log()->warn("Checkpoint restore failed err={}", restored.status().toString());
    config::ApiserverSourceOptions ao;
    ao.kubeconfig = f.kubeconfig;
    ao.node_name = config_.node_name;
    ao.kube_api_qps = f.kube_api_qps;
    ao.kube_api_burst = static_cast<int>(f.kube_api_burst);
    ao.errors = &manifest_errors_;
    ao.reflector.on_state_lost = [this](const std::string& r) { reportStateLoss(r); };
    auto source = config::makeApiserverSource(ioc_.get_executor(), clock_, random_, *clients_.rest,
                                              ao, api_sink);
    api_state_loss_.subscribe([src = source.get()](const std::string& r) { src->relist(r); });
    sources_.push_back(std::move(source));
  }
}

void Daemon::buildApiControllers() {
  if (!clients_.rest) return;
  agent::NodeLeaseOptions lo;
  lo.node_name = config_.node_name;
  lo.node_uid = [n = node_status_.get()] { return n->nodeUid(); };
  lo.on_repeated_failure = [client = clients_.rest.get()] { client->closeIdleConnections(); };
  lo.on_state_lost = [this](const std::string& r) { reportStateLoss(r); };
  node_lease_ = std::make_shared<agent::NodeLeaseController>(ioc_.get_executor(), clock_,
                                                             api(*clients_.rest), lo);
  api_state_loss_.subscribe([l = node_lease_.get()](const std::string&) { l->recreate(); });

  agent::StatusSyncerOptions so;
  so.max_in_flight = agent::statusRequestsInFlight(config_.flags.kube_api_qps,
                                                   static_cast<size_t>(threads_.api_threads));
  so.pod_resources_reclaimed = [this](const std::string& uid) {
    return !agent_.podWorkers().couldHaveRunningContainers(uid);
  };
  status_syncer_ = std::make_shared<agent::StatusSyncer>(
      ioc_.get_executor(), clock_, api(*clients_.rest), status_manager_, pod_manager_, so);
  api_state_loss_.subscribe([s = status_syncer_.get()](const std::string&) { s->resyncAll(); });
}

bool Daemon::nodeHealthy(std::string* why) const {
  if (!agent_.healthy(why)) return false;
  // kubelet's runtime and network errors, in its aggregate's form.
  std::vector<std::string> errors;
  for (auto e : {runtime_state_->runtimeErrors(), runtime_state_->networkErrors()}) {
    if (!e.empty()) errors.push_back(std::move(e));
  }
  if (!errors.empty()) {
    if (why != nullptr) {
      *why = errors.size() == 1 ? errors.front() : "[" + errors[0] + ", " + errors[1] + "]";
    }
    return false;
  }
  // A node whose agent cannot list its API pods is not ready for them (after a grace for the
  // first list at start-up).
  auto api_state = pod_config_.sourceState(std::string(api::kApiserverSource));
  if (api_state.seen || clock_.now() - started_ < kApiSourceGrace) return true;
  if (why != nullptr) {
    *why = "the api pod source has not listed this node's pods yet" +
           (api_state.reason.empty() ? std::string() : ": " + api_state.reason);
  }
  return false;
}

bool Daemon::watchdogAlive(std::string* why) const {
  // Fed only while the sync loop ticks (a stuck loop gets the agent restarted) and the PLEG
  // relists. The sync loop ticks every second; allow the watchdog's own period plus some slack.
  const auto since_tick = clock_.now() - agent_.syncLoop().lastTick();
  if (since_tick > systemd_.watchdogPeriod() + kSyncLoopTickSlack) {
    if (why != nullptr) {
      *why = "the sync loop has not ticked for " + base::formatDuration(since_tick);
    }
    return false;
  }
  return agent_.healthy(why);
}

// systemd readiness once the local sources (file, HTTP) have answered and their pods are handed
// on. The api source is not waited for: with the apiserver down (or itself one of this node's
// static pods) the agent would never be ready, and systemd would restart it forever. Its state
// shows in /healthz?verbose and the Node's Ready condition.
bool Daemon::localSourcesAnswered() const {
  const auto configured = pod_config_.sources();
  const bool answered = std::all_of(configured.begin(), configured.end(), [&](const auto& s) {
    return s == api::kApiserverSource || pod_config_.sourceState(s).answered;
  });
  if (answered) {
    log()->info("Local pod sources answered, ready sources={} all_seen={}", configured.size(),
                pod_config_.seenAllSources(configured));
  }
  return answered;
}

// /healthz: the sync loop as kubelet checks it, then each pod source (informational).
std::vector<agent::HealthCheck> Daemon::healthChecks() {
  std::vector<agent::HealthCheck> checks;
  const base::Duration limit =
      std::max<base::Duration>(2 * flags_.sync_frequency, std::chrono::minutes(5));
  checks.push_back({"syncloop", [this, limit](std::string* why) {
                      if (clock_.now() - agent_.syncLoop().lastTick() <= limit) return true;
                      if (why != nullptr) {
                        *why = "the sync loop has not run for " + base::formatDuration(limit);
                      }
                      return false;
                    }});
  checks.push_back({"cgroups", [this](std::string* why) { return cgroups_.enforced(why); },
                    /*informational=*/true});
  for (const auto& source : pod_config_.sources()) {
    checks.push_back({"source/" + source,
                      [this, source](std::string* why) {
                        auto st = pod_config_.sourceState(source);
                        if (st.seen) return true;
                        if (why != nullptr) {
                          *why = "not seen: " +
                                 (st.answered ? st.reason : std::string("no answer yet")) +
                                 "; containers of removed pods are not cleaned up until every "
                                 "source is seen";
                        }
                        return false;
                      },
                      /*informational=*/true});
  }
  return checks;
}

base::Status Daemon::buildServers() {
  const std::string local_address = flags_.address.empty() ? "127.0.0.1" : flags_.address;
  {
    agent::ReadOnlyServerOptions ro;
    ro.http.address = local_address;
    ro.http.port = static_cast<int>(flags_.read_only_port);
    ro.manifest_errors_json = [this] { return manifestErrorsJson(manifest_errors_); };
    ro.extra_metrics = [this] {
      std::ostringstream runtime_metrics;
      instrumented_.writeMetrics(runtime_metrics);
      if (client_certificate_) client_certificate_->writeMetrics(runtime_metrics);
      return runtime_metrics.str() + manifestErrorsMetrics(manifest_errors_) +
             cgroups_.metricsText();
    };
    ro.health_checks = healthChecks();
    ro.stats_summary_json = [summary = summary_] { return summary->json(); };
    read_only_ = std::make_unique<agent::ReadOnlyServer>(ioc_.get_executor(), clock_, agent_, ro);
  }
  if (flags_.port > 0) {
    ASSIGN_OR_RETURN(agent::KubeletServerOptions ko, kubeletServerOptions(config_));
    ko.read_only = [ro = read_only_.get()](const agent::HttpRequest& r) { return ro->handle(r); };
    ko.configz_json = [this] { return configzJson(config_); };
    ko.spec_json = [this] { return machineSpecJson(config_); };
    ko.file_pool = blocking_.get_executor();
    if (clients_.webhooks) {
      kubelet_webhooks_.emplace(*clients_.webhooks, webhook_pool_.get_executor());
    }
    kubelet_ = std::make_unique<agent::KubeletServer>(
        ioc_.get_executor(), clock_, agent_, instrumented_,
        kubelet_webhooks_ ? &*kubelet_webhooks_ : nullptr, std::move(ko));
  }
  if (flags_.healthz_port > 0 && flags_.healthz_port != flags_.read_only_port) {
    agent::ReadOnlyServerOptions ho;
    ho.http.name = "healthz";
    ho.http.address = local_address;
    ho.http.port = static_cast<int>(flags_.healthz_port);
    ho.health_checks = healthChecks();
    ho.healthz_only = true;
    healthz_ = std::make_unique<agent::ReadOnlyServer>(ioc_.get_executor(), clock_, agent_, ho);
  }
  return base::okStatus();
}

base::Status Daemon::init() {
  if (!cgroups_.error.ok()) return cgroups_.error.withContext("cannot set up the node's cgroups");
  if (auto s = runtime_->recover(); !s.ok()) {
    return s.withContext(flags_.runtime == "cri"
                             ? "cannot use the container runtime (--container-runtime-endpoint)"
                             : "cannot recover containers from a previous run");
  }
  if (const auto version = runtime_->version(); node_status_ && !version.empty()) {
    node_status_->setContainerRuntimeVersion(runtime_->type() + "://" + version);
  }
  // Every port the agent serves is its own: one it cannot bind is fatal.
  RETURN_IF_ERROR(buildServers());
  if (flags_.read_only_port > 0) {
    if (auto s = read_only_->start(); !s.ok())
      return s.withContext("cannot serve the read-only port");
  }
  if (kubelet_) {
    if (auto s = kubelet_->start(); !s.ok()) return s.withContext("cannot serve the kubelet API");
  }
  if (healthz_) {
    if (auto s = healthz_->start(); !s.ok()) return s.withContext("cannot serve the healthz port");
  }
  if (flags_.exit_on_lock_contention) {
    RETURN_IF_ERROR(lock_watch_.start(locks_, [] { ::kill(::getpid(), SIGTERM); }));
  }
  return base::okStatus();
}

void Daemon::start() {
  log()->info("Starting nodeagent version={} node={} node_ip={} runtime={} root_dir={} malloc={}",
              NODEAGENT_VERSION, config_.node_name, config_.node_ip, runtime_->type(),
              flags_.root_dir, base::allocatorName());
  if (sources_.empty()) {
    log()->warn(
        "No pod source configured (--allow-no-sources): every container under the root dir is an "
        "orphan and will be stopped");
  }
  // kubelet hands the runtime --pod-cidr before anything else runs.
  if (pod_network_) pod_network_->set(flags_.pod_cidr, "--pod-cidr");
  runtime_state_->start();
  if (log_manager_) log_manager_->start();
  if (image_gc_) image_gc_->start();
  if (node_status_) node_status_->start();
  if (node_lease_) node_lease_->start();
  if (status_syncer_) status_syncer_->start();
  agent_.start();
  summary_->start();
  eviction_->start();
  for (auto& s : sources_) s->start();
  if (own_threads_) {
    systemd_.start();
    trimmer_.start();
  }
}

void Daemon::stopForRestart() {
  // A fleet's node has no process of its own to end: it goes on without a valid certificate.
  if (!own_threads_) return;
  asio::post(ioc_, [this] {
    exit_code_ = 1;
    stop([this] { ioc_.stop(); });
  });
}

void Daemon::stop(std::function<void()> on_stopped) {
  if (stopping_.exchange(true)) return;
  on_stopped_ = std::move(on_stopped);
  if (own_threads_) sdNotify("STOPPING=1");
  if (client_certificate_) client_certificate_->stop();
  for (auto& s : sources_) s->stop();
  if (status_syncer_) status_syncer_->stop();
  if (node_status_) node_status_->stop();
  runtime_state_->stop();
  if (log_manager_) log_manager_->stop();
  if (image_gc_) image_gc_->stop();
  if (watching_api_objects_) watching_api_objects_->stop();
  if (node_lease_) node_lease_->stop();
  if (events_) events_->stop();
  systemd_.stop();
  lock_watch_.stop();
  trimmer_.stop();
  if (read_only_) read_only_->stop();
  if (healthz_) healthz_->stop();
  if (kubelet_) kubelet_->stop();
  eviction_->stop();
  summary_->stop();
  agent_.stop([this] { stopWhenServersIdle(100); });
}

void Daemon::stopWhenServersIdle(int attempts_left) {
  if (kubelet_ && kubelet_->activeCalls() > 0 && attempts_left > 0) {
    if (!idle_wait_) idle_wait_ = clock_.makeTimer(ioc_.get_executor());
    idle_wait_->asyncWaitFor(std::chrono::milliseconds(50),
                             [this, attempts_left] { stopWhenServersIdle(attempts_left - 1); });
    return;
  }
  work_.reset();
  if (on_stopped_) on_stopped_();
}

int Daemon::run() {
  start();
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    log()->info("Shutting down signal={}", sig);
    stop([this] { ioc_.stop(); });
  });
  threads_.run(2);
  joinAndRelease();
  log()->info("Stopped; containers keep running exit_code={}", exit_code_.load());
  return exit_code_;
}

// After the io_context stopped: no request is answered any more, the apiserver calls in flight
// end (the clients shut down) and both pools finish their work, so that nothing runs while the
// members are destroyed. Idempotent.
void Daemon::joinAndRelease() {
  if (read_only_) read_only_->stop();
  if (healthz_) healthz_->stop();
  if (kubelet_) kubelet_->stop();
  if (clients_.rest) clients_.rest->shutdown();
  if (clients_.events) clients_.events->shutdown();
  if (clients_.webhooks) clients_.webhooks->shutdown();
  if (own_threads_) own_threads_->joinPools();
  if (cert_pool_) cert_pool_->join();
  if (runtime_pool_) runtime_pool_->join();
}

}  // namespace nodeagent::cmd
