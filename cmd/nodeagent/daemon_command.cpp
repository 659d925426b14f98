#include "cmd/nodeagent/daemon_command.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <malloc.h>
#include <net/if.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "agent/admission.h"
#include "agent/agent.h"
#include "agent/api_mirror_client.h"
#include "agent/api_state_loss.h"
#include "agent/event_recorder.h"
#include "agent/node_lease.h"
#include "agent/node_status.h"
#include "agent/read_only_server.h"
#include "agent/runtime/fake_runtime.h"
#include "agent/runtime/instrumented_runtime.h"
#include "agent/runtime/process_runtime.h"
#include "agent/status/status_manager.h"
#include "agent/status/status_syncer.h"
#include "api/kubeconfig.h"
#include "api/pod_update.h"
#include "api/rest_client.h"
#include "api/yaml.h"
#include "base/asio.h"
#include "base/duration.h"
#include "base/log.h"
#include "base/printable.h"
#include "base/readable_wait.h"
#include "cmd/nodeagent/config_file.h"
#include "cmd/nodeagent/flags.h"
#include "cmd/nodeagent/lock_file.h"
#include "config/apiserver_source.h"
#include "config/file_source.h"
#include "config/http_source.h"
#include "config/manifest_errors.h"
#include "config/pod_config.h"
#include "podmanager/mirror_client.h"
#include "podmanager/pod_manager.h"

namespace nodeagent::cmd {
namespace {

// How long the Node may stay Ready while the api source has not listed its pods (the first list
// at start-up).
constexpr base::Duration kApiSourceGrace = std::chrono::minutes(1);
// The sync loop ticks every second; the watchdog allows this much beyond its own period.
constexpr base::Duration kSyncLoopTickSlack = std::chrono::seconds(2);

// glibc malloc for a long-running daemon whose memory comes in bursts (a thousand pods started
// at once, a large /pods body): one arena instead of one per thread that ever allocated (each
// kept its own high-water mark), large blocks always mmap'ed so they go back when freed (the
// default threshold grows after the first large free and then keeps them on the heap).
void tuneMalloc() {
  ::mallopt(M_ARENA_MAX, 1);
  ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);
}

// Free heap pages only go back to the system from the top of the heap; after a burst (pods
// started, a large request) most free memory sits between live blocks. Every few seconds, when
// the resident size grew by more than `kSlack` since the last trim, malloc_trim returns the whole
// free pages. The check reads /proc/self/statm (mallinfo2 walks every free chunk: too costly to
// poll on an idle agent).
class HeapTrimmer {
 public:
  HeapTrimmer(asio::any_io_executor ex, base::Clock& clock) : timer_(clock.makeTimer(ex)) {}
  void start() { arm(); }
  void stop() { timer_->cancel(); }

 private:
  static constexpr long kSlack = 1 << 20;
  static constexpr std::chrono::seconds kPeriod{3};
  static long residentBytes() {
    long pages = 0;
    long resident = 0;
    FILE* f = std::fopen("/proc/self/statm", "re");
    if (f == nullptr) return 0;
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
    return resident * ::sysconf(_SC_PAGESIZE);
  }
  void arm() {
    timer_->asyncWaitFor(kPeriod, [this] {
      const long rss = residentBytes();
      if (rss > rss_after_trim_ + kSlack) {
        ::malloc_trim(0);
        rss_after_trim_ = residentBytes();
      } else if (rss < rss_after_trim_) {
        rss_after_trim_ = rss;
      }
      arm();
    });
  }
  base::TimerPtr timer_;
  long rss_after_trim_ = 0;
};

struct DaemonFlags {
  std::string config;
  std::string pod_manifest_path;
  std::string manifest_url;
  std::vector<std::string> manifest_url_header;
  std::string kubeconfig;
  std::string hostname_override;
  std::string node_ip;
  std::string root_dir = "/var/lib/nodeagent";
  std::string pod_log_dir = "/var/log/pods";
  std::string runtime = "process";
  std::string address = "127.0.0.1";
  std::string system_reserved;
  std::string node_labels;
  std::string container_log_max_size = "10Mi";
  int64_t container_log_max_files = 5;
  int64_t read_only_port = 10255;
  int64_t healthz_port = 10248;
  int64_t max_pods = 110;
  int64_t verbosity = 0;
  std::string logging_format = "text";
  double kube_api_qps = 50;
  int64_t kube_api_burst = 100;
  base::Duration file_check_frequency = std::chrono::seconds(20);
  base::Duration http_check_frequency = std::chrono::seconds(20);
  base::Duration sync_frequency = std::chrono::minutes(1);
  base::Duration pleg_relist_period = std::chrono::seconds(10);
  base::Duration crashloop_backoff_initial = std::chrono::seconds(10);
  base::Duration crashloop_backoff_max = std::chrono::seconds(300);
  base::Duration node_status_update_frequency = std::chrono::seconds(10);
  std::string lock_file;
  bool exit_on_lock_contention = false;
  bool allow_no_sources = false;
  bool allow_root_api_pods = false;
  bool help = false;
};

void registerFlags(FlagSet& fs, DaemonFlags& f) {
  fs.addString("config", &f.config, "KubeletConfiguration YAML file (flags override it)");
  fs.addString("pod-manifest-path", &f.pod_manifest_path, "static pod manifest directory or file");
  fs.addString("manifest-url", &f.manifest_url, "URL serving static pod manifests");
  fs.addStringList("manifest-url-header", &f.manifest_url_header,
                   "HTTP header for --manifest-url, Key:Value (repeatable)");
  fs.addString("kubeconfig", &f.kubeconfig, "kubeconfig of the apiserver (enables the api source)");
  fs.addString("hostname-override", &f.hostname_override, "node name (default: the host name)");
  fs.addString("node-ip", &f.node_ip, "the node's IP (default: the first non-loopback IPv4)");
  fs.addString("root-dir", &f.root_dir, "state directory");
  fs.addString("pod-log-dir", &f.pod_log_dir, "container log directory");
  fs.addString("runtime", &f.runtime, "container runtime: process or fake");
  fs.addString("address", &f.address, "address of the read-only and healthz ports");
  fs.addString("node-labels", &f.node_labels,
               "labels of the Node object, k=v,k2=v2 (with --kubeconfig)");
  fs.addDuration("node-status-update-frequency", &f.node_status_update_frequency,
                 "how often the node status is computed and posted when changed");
  fs.addString("system-reserved", &f.system_reserved,
               "resources kept from pods, e.g. cpu=500m,memory=1Gi");
  fs.addString("container-log-max-size", &f.container_log_max_size,
               "rotate a container log at this size");
  fs.addInt("container-log-max-files", &f.container_log_max_files, "log files kept per container");
  fs.addInt("read-only-port", &f.read_only_port, "read-only HTTP port (0 disables)");
  fs.addInt("healthz-port", &f.healthz_port, "healthz HTTP port (0 disables)");
  fs.addInt("max-pods", &f.max_pods, "pods this node admits");
  fs.addInt("v", &f.verbosity, "log verbosity");
  fs.addString("logging-format", &f.logging_format, "log format: text or json (kubelet's flag)");
  fs.addDouble("kube-api-qps", &f.kube_api_qps, "apiserver requests per second");
  fs.addInt("kube-api-burst", &f.kube_api_burst, "apiserver request burst");
  fs.addDuration("file-check-frequency", &f.file_check_frequency,
                 "manifest directory relist period");
  fs.addDuration("http-check-frequency", &f.http_check_frequency, "manifest URL poll period");
  fs.addDuration("sync-frequency", &f.sync_frequency, "periodic pod resync");
  fs.addDuration("pleg-relist-period", &f.pleg_relist_period, "PLEG safety-net relist period");
  fs.addDuration("crashloop-backoff-initial", &f.crashloop_backoff_initial,
                 "first restart backoff");
  fs.addDuration("crashloop-backoff-max", &f.crashloop_backoff_max, "restart backoff cap");
  fs.addString(
      "lock-file", &f.lock_file,
      "a second lock file to hold besides <root-dir>/nodeagent.lock (kubelet's --lock-file)");
  fs.addBool("exit-on-lock-contention", &f.exit_on_lock_contention,
             "wait for the lock instead of failing, and exit (containers keep running) when "
             "another agent asks for it, as kubelet does for upgrades");
  fs.addBool("allow-no-sources", &f.allow_no_sources,
             "start even with no pod source (no manifest path, URL or kubeconfig); such an agent "
             "stops every container it finds under its root dir");
  fs.addBool("allow-root-api-pods", &f.allow_root_api_pods,
             "let pods from the apiserver run as root, privileged or with added capabilities");
  fs.addBool("help", &f.help, "show this help");
  fs.addShorthand('v', "v");
  fs.addShorthand('h', "help");
}

std::string detectNodeIp() {
  ifaddrs* addrs = nullptr;
  if (getifaddrs(&addrs) != 0) return "127.0.0.1";
  std::string found;
  for (auto* a = addrs; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_LOOPBACK) != 0 || (a->ifa_flags & IFF_UP) == 0) continue;
    char buf[INET_ADDRSTRLEN] = {};
    auto* in = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf)) != nullptr) found = buf;
  }
  freeifaddrs(addrs);
  return found.empty() ? "127.0.0.1" : found;
}

// systemd's sd_notify, written directly (no libsystemd).
void sdNotify(const std::string& message) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return;
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string p = path;
  if (p[0] == '@') p[0] = '\0';  // abstract namespace
  std::memcpy(addr.sun_path, p.data(), std::min(p.size(), sizeof(addr.sun_path) - 1));
  auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + p.size());
  (void)sendto(fd, message.data(), message.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr),
               len);
  close(fd);
}

int usageError(const std::string& message, const FlagSet& fs) {
  std::fprintf(stderr, "nodeagent: %s\nusage: nodeagent [flags]\n%s", message.c_str(),
               fs.usage().c_str());
  return 2;
}

}  // namespace

int runDaemon(int argc, char** argv) {
  tuneMalloc();
  DaemonFlags f;
  FlagSet fs;
  registerFlags(fs, f);
  if (auto s = fs.parse(argc, argv); !s.ok()) return usageError(s.message(), fs);
  if (f.help) {
    std::printf("usage: nodeagent [flags]\n%s", fs.usage().c_str());
    return 0;
  }
  ConfigFileResult config_file;
  if (!f.config.empty()) {
    auto applied = applyConfigFile(fs, f.config);
    if (!applied.ok()) return usageError(applied.status().message(), fs);
    config_file = std::move(*applied);
  }
  if (f.logging_format != "text" && f.logging_format != "json") {
    return usageError("--logging-format: \"" + f.logging_format + "\" is not text or json", fs);
  }
  base::initLogging(
      {.verbosity = static_cast<int>(f.verbosity),
       .format = f.logging_format == "json" ? base::LogFormat::kJson : base::LogFormat::kText});
  auto log = base::logger("nodeagent");
  for (const auto& key : config_file.ignored_keys) {
    log->warn("Ignoring a KubeletConfiguration field nodeagent does not implement file={} key={}",
              f.config, key);
  }
  // An agent without a pod source wants no pods at all: every container it adopts from its root
  // dir is an orphan and is stopped. That is almost always a mistake (a typo in a flag or in the
  // config file), so it takes an explicit flag.
  if (f.pod_manifest_path.empty() && f.manifest_url.empty() && f.kubeconfig.empty() &&
      !f.allow_no_sources) {
    return usageError(
        "no pod source: give --pod-manifest-path, --manifest-url or --kubeconfig (or "
        "staticPodPath / staticPodURL in --config); an agent without one stops every container "
        "under its --root-dir, so it starts only with --allow-no-sources",
        fs);
  }

  if (f.runtime != "process" && f.runtime != "fake") {
    return usageError("--runtime: \"" + f.runtime + "\" is not process or fake", fs);
  }
  auto log_size = api::Quantity::parse(f.container_log_max_size);
  if (!log_size.ok() || log_size->value() <= 0) {
    return usageError(
        "--container-log-max-size: \"" + f.container_log_max_size + "\" is not a positive quantity",
        fs);
  }
  if (f.max_pods <= 0) return usageError("--max-pods must be positive", fs);
  const std::string node_name = config::resolveNodeName(f.hostname_override);
  const std::string node_ip = f.node_ip.empty() ? detectNodeIp() : f.node_ip;
  auto capacity = agent::readHostCapacity();
  if (!capacity.ok()) {
    log->error("Cannot read the host's capacity err={}", capacity.status().toString());
    return 1;
  }
  auto allocatable = agent::computeAllocatable(*capacity, f.system_reserved, f.max_pods, node_name);
  if (!allocatable.ok()) return usageError(allocatable.status().message(), fs);

  // Before anything that reads or changes the root dir: two agents on one root dir would each
  // take the other's containers for orphans.
  std::error_code ec;
  std::filesystem::create_directories(f.root_dir, ec);
  if (ec) {
    log->error("Cannot create the root directory path={} err={}", f.root_dir, ec.message());
    return 1;
  }
  std::vector<LockFile> locks;
  std::vector<std::string> lock_paths{
      (std::filesystem::path(f.root_dir) / "nodeagent.lock").string()};
  if (!f.lock_file.empty() && std::filesystem::weakly_canonical(f.lock_file, ec) !=
                                  std::filesystem::weakly_canonical(lock_paths[0], ec)) {
    lock_paths.push_back(f.lock_file);
  }
  for (const auto& path : lock_paths) {
    if (f.exit_on_lock_contention) log->info("Waiting for the lock file path={}", path);
    auto lock = LockFile::acquire(path, f.exit_on_lock_contention);
    if (!lock.ok()) {
      log->error("Cannot start: {}", lock.status().message());
      return 1;
    }
    locks.push_back(std::move(*lock));
  }
  std::filesystem::create_directories(std::filesystem::path(f.root_dir) / "pods", ec);
  if (ec) {
    log->error("Cannot create the root directory path={} err={}", f.root_dir, ec.message());
    return 1;
  }

  asio::io_context ioc;
  auto work = asio::make_work_guard(ioc);
  asio::thread_pool blocking(2);
  base::Clock& clock = base::realClock();
  base::Random& random = base::defaultRandom();

  std::unique_ptr<runtime::Runtime> rt;
  if (f.runtime == "fake") {
    rt = std::make_unique<runtime::FakeRuntime>(ioc.get_executor(), clock);
  } else {
    runtime::ProcessRuntimeOptions ro;
    ro.root_dir = f.root_dir;
    ro.pod_log_dir = f.pod_log_dir;
    ro.log_max_size = log_size->value();
    ro.log_max_files = static_cast<int>(f.container_log_max_files);
    auto process = std::make_unique<runtime::ProcessRuntime>(ioc.get_executor(), clock, ro);
    if (auto s = process->recover(); !s.ok()) {
      log->error("Cannot recover containers from a previous run err={}", s.toString());
      return 1;
    }
    rt = std::move(process);
  }
  // Everything the agent asks of the runtime is counted (kubelet_runtime_operations_total).
  runtime::InstrumentedRuntime instrumented(*rt);

  // With --kubeconfig: one REST client shared by the api source, mirror pods, pod statuses, the
  // Node, its lease and events (one QPS/burst budget, like kubelet's client).
  std::unique_ptr<api::RestClient> rest;
  // Events get their own client and budget (kubelet's eventRecordQPS 50 / eventBurst 100), so a
  // burst of pod starts does not delay the statuses behind their events.
  std::unique_ptr<api::RestClient> event_rest;
  std::map<std::string, std::string> node_labels;
  if (!f.kubeconfig.empty()) {
    auto labels = agent::parseNodeLabels(f.node_labels);
    if (!labels.ok()) return usageError(labels.status().message(), fs);
    node_labels = std::move(*labels);
    auto rc = api::loadKubeconfig(f.kubeconfig);
    if (!rc.ok()) return usageError("--kubeconfig: " + rc.status().message(), fs);
    api::RestClientOptions rco;
    rco.qps = f.kube_api_qps;
    rco.burst = static_cast<int>(f.kube_api_burst);
    auto client = api::RestClient::create(*rc, rco, clock);
    if (!client.ok()) return usageError("--kubeconfig: " + client.status().message(), fs);
    rest = std::move(*client);
    api::RestClientOptions eco;
    eco.qps = 50;
    eco.burst = 100;
    auto event_client = api::RestClient::create(std::move(*rc), eco, clock);
    if (!event_client.ok())
      return usageError("--kubeconfig: " + event_client.status().message(), fs);
    event_rest = std::move(*event_client);
  }
  std::shared_ptr<agent::NodeStatusController> node_status;
  std::shared_ptr<agent::NodeLeaseController> node_lease;
  std::shared_ptr<agent::StatusSyncer> status_syncer;
  // A lost apiserver state seen by the api source, the Node or the lease makes all of them (and
  // the pod statuses) start over.
  agent::ApiStateLoss api_state_loss(clock);
  auto report_state_loss = [&api_state_loss](const std::string& r) { api_state_loss.report(r); };
  std::shared_ptr<agent::EventRecorder> events;
  podmanager::NoopMirrorClient noop_mirror_client;
  std::unique_ptr<agent::ApiMirrorClient> api_mirror_client;
  if (rest) {
    agent::ApiMirrorClientOptions mo;
    mo.node_name = node_name;
    mo.node_uid = [&node_status] { return node_status ? node_status->nodeUid() : std::string(); };
    api_mirror_client = std::make_unique<agent::ApiMirrorClient>(*rest, clock, mo);
  }
  podmanager::MirrorClient& mirror_client =
      api_mirror_client ? static_cast<podmanager::MirrorClient&>(*api_mirror_client)
                        : static_cast<podmanager::MirrorClient&>(noop_mirror_client);
  podmanager::PodManager pod_manager(mirror_client);
  agent::StatusManager status_manager(clock, pod_manager);
  config::ManifestErrors manifest_errors;

  std::shared_ptr<agent::Agent> the_agent;
  config::PodConfigOptions pco;
  pco.checkpoint_dir = std::filesystem::path(f.root_dir) / "pod-checkpoints";
  pco.blocking_executor = blocking.get_executor();
  auto pod_config = std::make_unique<config::PodConfig>(
      ioc.get_executor(), clock,
      [&the_agent](api::PodUpdate u) {
        if (the_agent) the_agent->onPodUpdate(std::move(u));
      },
      pco);

  agent::AgentOptions ao;
  ao.node_name = node_name;
  ao.node_ip = node_ip;
  ao.root_dir = f.root_dir;
  ao.allocatable = *allocatable;
  ao.crashloop_backoff_initial = f.crashloop_backoff_initial;
  ao.crashloop_backoff_max = f.crashloop_backoff_max;
  ao.workers.resync_interval = f.sync_frequency;
  ao.pleg.relist_period = f.pleg_relist_period;
  ao.allow_root_api_pods = f.allow_root_api_pods;
  if (rest) {
    agent::EventRecorderOptions eo;
    eo.node_name = node_name;
    events = std::make_shared<agent::EventRecorder>(ioc.get_executor(), clock, *event_rest, eo);
    // Bad static manifests become FailedValidation events (config/ only knows a listener).
    manifest_errors.setListener(
        [events](const config::ManifestError& e) { agent::recordManifestError(*events, e); });
    ao.record_event = [events](const api::Pod& pod, const std::string& type,
                               const std::string& reason, const std::string& message,
                               const std::string& field_path) {
      events->record(pod, type, reason, message, field_path);
    };
  }
  auto* pc = pod_config.get();
  the_agent = std::make_shared<agent::Agent>(
      ioc.get_executor(), clock, random, instrumented, pod_manager, status_manager,
      [pc](const std::string& source) { return pc->sourceSeen(source); },
      [pc] { return pc->seenAllSources(pc->sources()); }, ao);

  std::vector<std::unique_ptr<config::PodSource>> sources;
  if (!f.pod_manifest_path.empty()) {
    config::FileSourceOptions fo;
    fo.path = f.pod_manifest_path;
    fo.node_name = node_name;
    fo.check_frequency = f.file_check_frequency;
    fo.errors = &manifest_errors;
    sources.push_back(config::makeFileSource(ioc.get_executor(), clock, fo,
                                             pod_config->channel(std::string(api::kFileSource))));
  }
  if (!f.manifest_url.empty()) {
    auto headers = config::parseManifestUrlHeaders(f.manifest_url_header);
    if (!headers.ok()) return usageError(headers.status().message(), fs);
    config::HttpSourceOptions ho;
    ho.url = f.manifest_url;
    ho.headers = *headers;
    ho.node_name = node_name;
    ho.check_frequency = f.http_check_frequency;
    ho.errors = &manifest_errors;
    auto http = config::HttpSource::create(ioc.get_executor(), blocking.get_executor(), clock, ho,
                                           pod_config->channel(std::string(api::kHttpSource)));
    if (!http.ok()) return usageError(http.status().message(), fs);
    sources.push_back(std::move(*http));
  }
  if (!f.kubeconfig.empty()) {
    auto api_sink = pod_config->channel(std::string(api::kApiserverSource));
    auto restored = pod_config->restore();
    if (!restored.ok()) log->warn("Checkpoint restore failed err={}", restored.status().toString());
    config::ApiserverSourceOptions ao2;
    ao2.kubeconfig = f.kubeconfig;
    ao2.node_name = node_name;
    ao2.kube_api_qps = f.kube_api_qps;
    ao2.kube_api_burst = static_cast<int>(f.kube_api_burst);
    ao2.errors = &manifest_errors;
    ao2.reflector.on_state_lost = report_state_loss;
    auto api_source =
        config::makeApiserverSource(ioc.get_executor(), clock, random, *rest, ao2, api_sink);
    api_state_loss.subscribe([src = api_source.get()](const std::string& r) { src->relist(r); });
    sources.push_back(std::move(api_source));

    agent::NodeStatusOptions no;
    no.node_name = node_name;
    no.node_ip = node_ip;
    no.labels = node_labels;
    no.capacity = *capacity;
    no.allocatable = *allocatable;
    no.info = agent::readNodeInfo(f.runtime + "://" + NODEAGENT_VERSION);
    if (f.runtime == "fake")
      no.info.container_runtime_version = std::string("fake://") + NODEAGENT_VERSION;
    no.daemon_port = f.read_only_port > 0 ? static_cast<int>(f.read_only_port) : 10250;
    no.update_frequency = f.node_status_update_frequency;
    if (fs.isSet("node-status-update-frequency"))
      no.report_frequency = f.node_status_update_frequency;
    no.healthy = [&the_agent, pc = pod_config.get(), &clock,
                  started = clock.now()](std::string* why) {
      if (!the_agent->healthy(why)) return false;
      // A node whose agent cannot list its API pods is not ready for them (after a grace for
      // the first list at start-up).
      auto api_state = pc->sourceState(std::string(api::kApiserverSource));
      if (api_state.seen || clock.now() - started < kApiSourceGrace) return true;
      if (why != nullptr) {
        *why = "the api pod source has not listed this node's pods yet" +
               (api_state.reason.empty() ? std::string() : ": " + api_state.reason);
      }
      return false;
    };
    no.on_state_lost = report_state_loss;
    node_status =
        std::make_shared<agent::NodeStatusController>(ioc.get_executor(), clock, *rest, no);
    api_state_loss.subscribe([n = node_status.get()](const std::string&) { n->reRegister(); });

    agent::NodeLeaseOptions lo;
    lo.node_name = node_name;
    lo.node_uid = [&node_status] { return node_status->nodeUid(); };
    lo.on_repeated_failure = [client = rest.get()] { client->closeIdleConnections(); };
    lo.on_state_lost = report_state_loss;
    node_lease = std::make_shared<agent::NodeLeaseController>(ioc.get_executor(), clock, *rest, lo);
    api_state_loss.subscribe([l = node_lease.get()](const std::string&) { l->recreate(); });

    agent::StatusSyncerOptions so;
    so.pod_resources_reclaimed = [&the_agent](const std::string& uid) {
      return !the_agent->podWorkers().couldHaveRunningContainers(uid);
    };
    status_syncer = std::make_shared<agent::StatusSyncer>(ioc.get_executor(), clock, *rest,
                                                          status_manager, pod_manager, so);
    api_state_loss.subscribe([s = status_syncer.get()](const std::string&) { s->resyncAll(); });
  }
  if (sources.empty()) {
    log->warn(
        "No pod source configured (--allow-no-sources): every container under the root dir "
        "is an orphan and will be stopped");
  }

  auto manifest_errors_json = [&manifest_errors] {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : manifest_errors.list()) {
      out.push_back({{"source", e.source}, {"location", e.location}, {"message", e.message}});
    }
    // File names and messages may hold any bytes: invalid UTF-8 becomes U+FFFD.
    return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  auto errors_metrics = [&manifest_errors] {
    std::string out =
        "# HELP nodeagent_manifest_errors Current manifest errors by source and location.\n"
        "# TYPE nodeagent_manifest_errors gauge\n";
    for (const auto& e : manifest_errors.list()) {
      out += "nodeagent_manifest_errors{source=\"" + base::prometheusLabelValue(e.source) +
             "\",location=\"" + base::prometheusLabelValue(e.location) + "\"} 1\n";
    }
    return out;
  };
  // /healthz: the sync loop as kubelet checks it, then each pod source (informational).
  std::vector<agent::HealthCheck> health_checks;
  const base::Duration syncloop_limit =
      std::max<base::Duration>(2 * f.sync_frequency, std::chrono::minutes(5));
  health_checks.push_back(
      {"syncloop", [&the_agent, &clock, limit = syncloop_limit](std::string* why) {
         if (clock.now() - the_agent->syncLoop().lastTick() <= limit) return true;
         if (why != nullptr) *why = "the sync loop has not run for " + base::formatDuration(limit);
         return false;
       }});
  for (const auto& source : pc->sources()) {
    health_checks.push_back(
        {"source/" + source,
         [pc, source](std::string* why) {
           auto st = pc->sourceState(source);
           if (st.seen) return true;
           if (why != nullptr) {
             *why = "not seen: " + (st.answered ? st.reason : std::string("no answer yet")) +
                    "; containers of removed pods are not cleaned up until every source is seen";
           }
           return false;
         },
         /*informational=*/true});
  }
  // Every port the agent serves is its own: one it cannot bind is fatal.
  std::unique_ptr<agent::ReadOnlyServer> read_only;
  if (f.read_only_port > 0) {
    agent::ReadOnlyServerOptions ro;
    ro.http.address = f.address;
    ro.http.port = static_cast<int>(f.read_only_port);
    ro.manifest_errors_json = manifest_errors_json;
    ro.extra_metrics = [&errors_metrics, &instrumented] {
      std::ostringstream runtime_metrics;
      instrumented.writeMetrics(runtime_metrics);
      return runtime_metrics.str() + errors_metrics();
    };
    ro.health_checks = health_checks;
    read_only = std::make_unique<agent::ReadOnlyServer>(ioc.get_executor(), clock, *the_agent, ro);
    if (auto s = read_only->start(); !s.ok()) {
      log->error("Cannot serve the read-only port err={}", s.toString());
      return 1;
    }
  }
  std::unique_ptr<agent::ReadOnlyServer> healthz;
  if (f.healthz_port > 0 && f.healthz_port != f.read_only_port) {
    agent::ReadOnlyServerOptions ho;
    ho.http.name = "healthz";
    ho.http.address = f.address;
    ho.http.port = static_cast<int>(f.healthz_port);
    ho.health_checks = health_checks;
    ho.healthz_only = true;
    healthz = std::make_unique<agent::ReadOnlyServer>(ioc.get_executor(), clock, *the_agent, ho);
    if (auto s = healthz->start(); !s.ok()) {
      log->error("Cannot serve the healthz port err={}", s.toString());
      return 1;
    }
  }

  log->info("Starting nodeagent version={} node={} node_ip={} runtime={} root_dir={}",
            NODEAGENT_VERSION, node_name, node_ip, f.runtime, f.root_dir);
  if (node_status) node_status->start();
  if (node_lease) node_lease->start();
  if (status_syncer) status_syncer->start();
  the_agent->start();
  for (auto& s : sources) s->start();

  // systemd readiness once the local sources (file, HTTP) have answered and their pods are
  // handed on. The api source is not waited for: with the apiserver down (or itself one of this
  // node's static pods) the agent would never be ready, and systemd would restart it forever.
  // Its state shows in /healthz?verbose and the Node's Ready condition.
  auto ready_timer = clock.makeTimer(ioc.get_executor());
  std::function<void()> check_ready;
  check_ready = [&] {
    const auto configured = pc->sources();
    const bool local_answered = std::all_of(
        configured.begin(), configured.end(),
        [&](const auto& s) { return s == api::kApiserverSource || pc->sourceState(s).answered; });
    if (local_answered) {
      log->info("Local pod sources answered, ready sources={} all_seen={}", configured.size(),
                pc->seenAllSources(configured));
      sdNotify("READY=1");
      return;
    }
    ready_timer->asyncWaitFor(std::chrono::milliseconds(100), check_ready);
  };
  check_ready();
  // The watchdog is fed only while the sync loop ticks (a stuck loop gets the agent restarted)
  // and the PLEG relists.
  auto watchdog_timer = clock.makeTimer(ioc.get_executor());
  std::function<void()> watchdog;
  if (const char* usec = std::getenv("WATCHDOG_USEC"); usec != nullptr) {
    auto period = std::chrono::microseconds(std::strtoll(usec, nullptr, 10)) / 2;
    if (period.count() > 0) {
      watchdog = [&, period] {
        const auto since_tick = clock.now() - the_agent->syncLoop().lastTick();
        const bool loop_runs = since_tick <= period + kSyncLoopTickSlack;
        std::string why;
        if (loop_runs && the_agent->healthy(&why)) {
          sdNotify("WATCHDOG=1");
        } else {
          log->warn("Not feeding the systemd watchdog reason={}",
                    loop_runs
                        ? why
                        : "the sync loop has not ticked for " + base::formatDuration(since_tick));
        }
        watchdog_timer->asyncWaitFor(period, watchdog);
      };
      watchdog();
    }
  }

  // --exit-on-lock-contention: another agent waiting for the lock opens it; this one then stops
  // (its containers keep running and are adopted by the next one), as kubelet does.
  std::shared_ptr<asio::posix::stream_descriptor> lock_watch;
  if (f.exit_on_lock_contention) {
    int ifd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ifd < 0) {
      log->error("Cannot watch the lock files for contention err={}", std::strerror(errno));
      return 1;
    }
    lock_watch = std::make_shared<asio::posix::stream_descriptor>(ioc, ifd);
    for (const auto& lock : locks) {
      if (::inotify_add_watch(ifd, lock.path().c_str(), IN_OPEN | IN_DELETE_SELF) < 0) {
        log->error("Cannot watch the lock file path={} err={}", lock.path(), std::strerror(errno));
        return 1;
      }
    }
    base::asyncWaitReadable(lock_watch, [&log](const boost::system::error_code& ec) {
      if (ec) return;
      log->info("Another process wants the lock file, stopping (--exit-on-lock-contention)");
      ::kill(::getpid(), SIGTERM);
    });
  }

  HeapTrimmer trimmer(ioc.get_executor(), clock);
  trimmer.start();

  asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    log->info("Shutting down signal={}", sig);
    sdNotify("STOPPING=1");
    for (auto& s : sources) s->stop();
    if (status_syncer) status_syncer->stop();
    if (node_status) node_status->stop();
    if (node_lease) node_lease->stop();
    if (events) events->stop();
    ready_timer->cancel();
    watchdog_timer->cancel();
    if (lock_watch) lock_watch->cancel();
    trimmer.stop();
    if (read_only) read_only->stop();
    if (healthz) healthz->stop();
    the_agent->stop([&] {
      work.reset();
      ioc.stop();
    });
  });

  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) threads.emplace_back([&ioc] { ioc.run(); });
  for (auto& t : threads) t.join();
  if (read_only) read_only->stop();
  if (healthz) healthz->stop();
  // The api source and controllers hold the client: stop its calls before they go.
  if (rest) rest->shutdown();
  if (event_rest) event_rest->shutdown();
  sources.clear();
  status_syncer.reset();
  node_status.reset();
  node_lease.reset();
  events.reset();
  // Handlers still queued on the stopped io_context may hold controllers that use the client
  // when they are destroyed with it; the process is exiting, so the client is left to it.
  (void)rest.release();
  (void)event_rest.release();
  blocking.stop();
  blocking.join();
  log->info("Stopped; containers keep running");
  return 0;
}

}  // namespace nodeagent::cmd
