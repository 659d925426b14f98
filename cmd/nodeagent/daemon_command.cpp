#include "cmd/nodeagent/daemon_command.h"

#include <ifaddrs.h>
#include <malloc.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "agent/admission.h"
#include "agent/agent.h"
#include "agent/api_mirror_client.h"
#include "agent/event_recorder.h"
#include "agent/node_lease.h"
#include "agent/node_status.h"
#include "agent/status/status_syncer.h"
#include "api/kubeconfig.h"
#include "api/rest_client.h"
#include "agent/read_only_server.h"
#include "agent/runtime/fake_runtime.h"
#include "agent/runtime/process_runtime.h"
#include "agent/status/status_manager.h"
#include "api/pod_update.h"
#include "api/yaml.h"
#include "base/asio.h"
#include "base/duration.h"
#include "base/log.h"
#include "cmd/nodeagent/flags.h"
#include "config/apiserver_source.h"
#include "config/file_source.h"
#include "config/http_source.h"
#include "config/manifest_errors.h"
#include "config/pod_config.h"
#include "podmanager/mirror_client.h"
#include "podmanager/pod_manager.h"

namespace nodeagent::cmd {
namespace {

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
  double kube_api_qps = 50;
  int64_t kube_api_burst = 100;
  base::Duration file_check_frequency = std::chrono::seconds(20);
  base::Duration http_check_frequency = std::chrono::seconds(20);
  base::Duration sync_frequency = std::chrono::minutes(1);
  base::Duration pleg_relist_period = std::chrono::seconds(10);
  base::Duration crashloop_backoff_initial = std::chrono::seconds(10);
  base::Duration crashloop_backoff_max = std::chrono::seconds(300);
  base::Duration node_status_update_frequency = std::chrono::seconds(10);
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
  fs.addString("node-labels", &f.node_labels, "labels of the Node object, k=v,k2=v2 (with --kubeconfig)");
  fs.addDuration("node-status-update-frequency", &f.node_status_update_frequency,
                 "how often the node status is computed and posted when changed");
  fs.addString("system-reserved", &f.system_reserved, "resources kept from pods, e.g. cpu=500m,memory=1Gi");
  fs.addString("container-log-max-size", &f.container_log_max_size, "rotate a container log at this size");
  fs.addInt("container-log-max-files", &f.container_log_max_files, "log files kept per container");
  fs.addInt("read-only-port", &f.read_only_port, "read-only HTTP port (0 disables)");
  fs.addInt("healthz-port", &f.healthz_port, "healthz HTTP port (0 disables)");
  fs.addInt("max-pods", &f.max_pods, "pods this node admits");
  fs.addInt("v", &f.verbosity, "log verbosity");
  fs.addDouble("kube-api-qps", &f.kube_api_qps, "apiserver requests per second");
  fs.addInt("kube-api-burst", &f.kube_api_burst, "apiserver request burst");
  fs.addDuration("file-check-frequency", &f.file_check_frequency, "manifest directory relist period");
  fs.addDuration("http-check-frequency", &f.http_check_frequency, "manifest URL poll period");
  fs.addDuration("sync-frequency", &f.sync_frequency, "periodic pod resync");
  fs.addDuration("pleg-relist-period", &f.pleg_relist_period, "PLEG safety-net relist period");
  fs.addDuration("crashloop-backoff-initial", &f.crashloop_backoff_initial, "first restart backoff");
  fs.addDuration("crashloop-backoff-max", &f.crashloop_backoff_max, "restart backoff cap");
  fs.addBool("help", &f.help, "show this help");
}

// KubeletConfiguration keys -> flags, applied to flags the command line did not set.
base::Status applyConfigFile(FlagSet& fs, const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return base::notFoundError("--config: cannot open " + path);
  std::string bytes;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), file)) > 0) bytes.append(buf, n);
  std::fclose(file);
  auto json = api::yamlToJson(bytes);
  if (!json.ok()) return json.status().withContext(path);
  if (!json->is_object()) return base::invalidArgumentError(path + ": expected a mapping");
  if (json->contains("kind") && (*json)["kind"] != "KubeletConfiguration") {
    return base::invalidArgumentError(path + ": kind: expected KubeletConfiguration");
  }
  static const std::map<std::string, std::string> kKeys = {
      {"staticPodPath", "pod-manifest-path"},
      {"staticPodURL", "manifest-url"},
      {"syncFrequency", "sync-frequency"},
      {"fileCheckFrequency", "file-check-frequency"},
      {"httpCheckFrequency", "http-check-frequency"},
      {"maxPods", "max-pods"},
      {"readOnlyPort", "read-only-port"},
      {"healthzPort", "healthz-port"},
      {"address", "address"},
      {"podLogsDir", "pod-log-dir"},
      {"containerLogMaxSize", "container-log-max-size"},
      {"containerLogMaxFiles", "container-log-max-files"},
      {"kubeAPIQPS", "kube-api-qps"},
      {"kubeAPIBurst", "kube-api-burst"},
      {"nodeStatusUpdateFrequency", "node-status-update-frequency"},
  };
  for (const auto& [key, value] : json->items()) {
    if (key == "kind" || key == "apiVersion") continue;
    if (key == "staticPodURLHeader") {
      if (fs.isSet("manifest-url-header")) continue;
      if (!value.is_object()) return base::invalidArgumentError(path + ": staticPodURLHeader: expected a mapping");
      for (const auto& [header, values] : value.items()) {
        if (!values.is_array()) {
          return base::invalidArgumentError(path + ": staticPodURLHeader." + header +
                                            ": expected a list of strings");
        }
        for (const auto& v : values) {
          if (!v.is_string()) {
            return base::invalidArgumentError(path + ": staticPodURLHeader." + header +
                                              ": expected a list of strings");
          }
          RETURN_IF_ERROR(fs.setValue("manifest-url-header", header + ":" + v.get<std::string>()));
        }
      }
      continue;
    }
    if (key == "systemReserved") {
      if (fs.isSet("system-reserved")) continue;
      if (!value.is_object()) return base::invalidArgumentError(path + ": systemReserved: expected a mapping");
      std::string joined;
      for (const auto& [res, q] : value.items()) {
        if (!q.is_string()) return base::invalidArgumentError(path + ": systemReserved." + res + ": expected a string");
        joined += (joined.empty() ? "" : ",") + res + "=" + q.get<std::string>();
      }
      RETURN_IF_ERROR(fs.setValue("system-reserved", joined));
      continue;
    }
    auto it = kKeys.find(key);
    if (it == kKeys.end()) {
      base::logger("nodeagent")->warn("Ignoring unsupported configuration key file={} key={}", path, key);
      continue;
    }
    if (fs.isSet(it->second)) continue;
    std::string text;
    if (value.is_string()) {
      text = value.get<std::string>();
    } else if (value.is_number_integer()) {
      text = std::to_string(value.get<int64_t>());
    } else if (value.is_number()) {
      text = std::to_string(value.get<double>());
    } else {
      return base::invalidArgumentError(path + ": " + key + ": expected a string or a number");
    }
    RETURN_IF_ERROR(fs.setValue(it->second, text).withContext(path + ": " + key));
  }
  return base::okStatus();
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
  if (!f.config.empty()) {
    if (auto s = applyConfigFile(fs, f.config); !s.ok()) return usageError(s.message(), fs);
  }
  base::initLogging({.verbosity = static_cast<int>(f.verbosity)});
  auto log = base::logger("nodeagent");

  if (f.runtime != "process" && f.runtime != "fake") {
    return usageError("--runtime: \"" + f.runtime + "\" is not process or fake", fs);
  }
  auto log_size = api::Quantity::parse(f.container_log_max_size);
  if (!log_size.ok() || log_size->value() <= 0) {
    return usageError("--container-log-max-size: \"" + f.container_log_max_size +
                          "\" is not a positive quantity",
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

  std::error_code ec;
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
    if (!event_client.ok()) return usageError("--kubeconfig: " + event_client.status().message(), fs);
    event_rest = std::move(*event_client);
  }
  std::shared_ptr<agent::NodeStatusController> node_status;
  std::shared_ptr<agent::NodeLeaseController> node_lease;
  std::shared_ptr<agent::StatusSyncer> status_syncer;
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
      ioc.get_executor(), clock, random, *rt, pod_manager, status_manager,
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
    sources.push_back(
        config::makeApiserverSource(ioc.get_executor(), clock, random, *rest, ao2, api_sink));

    agent::NodeStatusOptions no;
    no.node_name = node_name;
    no.node_ip = node_ip;
    no.labels = node_labels;
    no.capacity = *capacity;
    no.allocatable = *allocatable;
    no.info = agent::readNodeInfo(std::string("process://") + NODEAGENT_VERSION);
    if (f.runtime == "fake") no.info.container_runtime_version = std::string("fake://") + NODEAGENT_VERSION;
    no.daemon_port = f.read_only_port > 0 ? static_cast<int>(f.read_only_port) : 10250;
    no.update_frequency = f.node_status_update_frequency;
    if (fs.isSet("node-status-update-frequency")) no.report_frequency = f.node_status_update_frequency;
    no.healthy = [&the_agent](std::string* why) { return the_agent->healthy(why); };
    node_status = std::make_shared<agent::NodeStatusController>(ioc.get_executor(), clock, *rest, no);

    agent::NodeLeaseOptions lo;
    lo.node_name = node_name;
    lo.node_uid = [&node_status] { return node_status->nodeUid(); };
    lo.on_repeated_failure = [client = rest.get()] { client->closeIdleConnections(); };
    node_lease = std::make_shared<agent::NodeLeaseController>(ioc.get_executor(), clock, *rest, lo);

    agent::StatusSyncerOptions so;
    so.pod_resources_reclaimed = [&the_agent](const std::string& uid) {
      return !the_agent->podWorkers().couldHaveRunningContainers(uid);
    };
    status_syncer = std::make_shared<agent::StatusSyncer>(ioc.get_executor(), clock, *rest,
                                                          status_manager, pod_manager, so);
  }
  if (sources.empty()) {
    log->warn("No pod source configured: give --pod-manifest-path, --manifest-url or --kubeconfig");
  }

  auto manifest_errors_json = [&manifest_errors] {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : manifest_errors.list()) {
      out.push_back({{"source", e.source}, {"location", e.location}, {"message", e.message}});
    }
    return out.dump();
  };
  auto errors_metrics = [&manifest_errors] {
    std::string out =
        "# HELP nodeagent_manifest_errors Current manifest errors by source and location.\n"
        "# TYPE nodeagent_manifest_errors gauge\n";
    for (const auto& e : manifest_errors.list()) {
      nlohmann::json loc = e.location;
      out += "nodeagent_manifest_errors{source=\"" + e.source + "\",location=" + loc.dump() + "} 1\n";
    }
    return out;
  };
  std::unique_ptr<agent::ReadOnlyServer> read_only;
  if (f.read_only_port > 0) {
    agent::ReadOnlyServerOptions ro;
    ro.address = f.address;
    ro.port = static_cast<int>(f.read_only_port);
    ro.manifest_errors_json = manifest_errors_json;
    ro.extra_metrics = errors_metrics;
    read_only = std::make_unique<agent::ReadOnlyServer>(*the_agent, ro);
    if (auto s = read_only->start(); !s.ok()) {
      log->error("Cannot serve the read-only port err={}", s.toString());
      return 1;
    }
  }
  std::unique_ptr<agent::ReadOnlyServer> healthz;
  if (f.healthz_port > 0 && f.healthz_port != f.read_only_port) {
    agent::ReadOnlyServerOptions ho;
    ho.address = f.address;
    ho.port = static_cast<int>(f.healthz_port);
    healthz = std::make_unique<agent::ReadOnlyServer>(*the_agent, ho);
    if (auto s = healthz->start(); !s.ok()) log->warn("Cannot serve the healthz port err={}", s.toString());
  }

  log->info("Starting nodeagent version={} node={} node_ip={} runtime={} root_dir={}",
            NODEAGENT_VERSION, node_name, node_ip, f.runtime, f.root_dir);
  if (node_status) node_status->start();
  if (node_lease) node_lease->start();
  if (status_syncer) status_syncer->start();
  the_agent->start();
  for (auto& s : sources) s->start();

  // systemd readiness once every source has been seen, and the watchdog at half its period.
  auto ready_timer = clock.makeTimer(ioc.get_executor());
  std::function<void()> check_ready;
  check_ready = [&] {
    if (pc->seenAllSources(pc->sources())) {
      log->info("All sources ready sources={}", pc->sources().size());
      sdNotify("READY=1");
      return;
    }
    ready_timer->asyncWaitFor(std::chrono::milliseconds(100), check_ready);
  };
  check_ready();
  auto watchdog_timer = clock.makeTimer(ioc.get_executor());
  std::function<void()> watchdog;
  if (const char* usec = std::getenv("WATCHDOG_USEC"); usec != nullptr) {
    auto period = std::chrono::microseconds(std::strtoll(usec, nullptr, 10)) / 2;
    if (period.count() > 0) {
      watchdog = [&, period] {
        if (the_agent->healthy(nullptr)) sdNotify("WATCHDOG=1");
        watchdog_timer->asyncWaitFor(period, watchdog);
      };
      watchdog();
    }
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
    trimmer.stop();
    the_agent->stop([&] { work.reset(); ioc.stop(); });
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
