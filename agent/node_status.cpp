#include "agent/node_status.h"

#include <sys/utsname.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "api/async_rest_client.h"

#include "api/api_errors.h"
#include "api/canonical_json.h"
#include "api/quantity.h"
#include "api/time.h"
#include "base/log.h"
#include "base/printable.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("node")

std::string readFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) {
    line.pop_back();
  }
  return line;
}

std::string goArch(const std::string& machine) {
  if (machine == "x86_64") return "amd64";
  if (machine == "aarch64") return "arm64";
  if (machine == "i686" || machine == "i386") return "386";
  if (machine.rfind("arm", 0) == 0) return "arm";
  return machine;
}

nlohmann::json resources(int64_t cpu_milli, int64_t memory, int64_t ephemeral_storage,
                         int64_t pods) {
  nlohmann::json j = {{"cpu", api::Quantity::fromMilli(cpu_milli).toString()},
                      {"memory", api::Quantity::fromBytes(memory).toString()},
                      {"pods", std::to_string(pods)}};
  if (ephemeral_storage > 0) {
    j["ephemeral-storage"] = api::Quantity::fromBytes(ephemeral_storage).toString();
  }
  return j;
}

}  // namespace

std::string kubeletVersion() {
  return std::string("v") + kKubernetesVersion + "-nodeagent." + NODEAGENT_VERSION;
}

NodeInfo readNodeInfo(const std::string& runtime_version) {
  NodeInfo info;
  utsname u{};
  if (uname(&u) == 0) {
    info.kernel_version = u.release;
    info.architecture = goArch(u.machine);
  }
  std::ifstream os("/etc/os-release");
  std::string line;
  while (std::getline(os, line)) {
    if (line.rfind("PRETTY_NAME=", 0) != 0) continue;
    std::string v = line.substr(12);
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'')) v = v.substr(1, v.size() - 2);
    info.os_image = v;
  }
  info.machine_id = readFirstLine("/etc/machine-id");
  info.system_uuid = readFirstLine("/sys/class/dmi/id/product_uuid");  // root only, as kubelet
  info.boot_id = readFirstLine("/proc/sys/kernel/random/boot_id");
  info.container_runtime_version = runtime_version;
  info.kubelet_version = kubeletVersion();
  return info;
}

base::StatusOr<std::map<std::string, std::string>> parseNodeLabels(const std::string& text) {
  std::map<std::string, std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return base::invalidArgumentError("--node-labels: \"" + item + "\" is not key=value");
    }
    out[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return out;
}

namespace {

nlohmann::json nodeSpec(const NodeStatusOptions& o) {
  nlohmann::json spec = nlohmann::json::object();
  if (o.register_with_taints.empty()) return spec;
  nlohmann::json taints = nlohmann::json::array();
  for (const auto& t : o.register_with_taints) {
    nlohmann::json tj = {{"key", t.key}, {"effect", t.effect}};
    if (!t.value.empty()) tj["value"] = t.value;
    taints.push_back(std::move(tj));
  }
  spec["taints"] = std::move(taints);
  return spec;
}

}  // namespace

nlohmann::json buildNode(const NodeStatusOptions& o) {
  nlohmann::json labels = nlohmann::json::object();
  for (const auto& [k, v] : o.labels) labels[k] = v;
  labels["kubernetes.io/hostname"] = o.node_name;
  labels["kubernetes.io/os"] = o.info.operating_system;
  labels["kubernetes.io/arch"] = o.info.architecture;
  labels["beta.kubernetes.io/os"] = o.info.operating_system;
  labels["beta.kubernetes.io/arch"] = o.info.architecture;
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", o.node_name},
            {"labels", labels},
            {"annotations", {{"node.alpha.kubernetes.io/ttl", "0"}}}}},
          {"spec", nodeSpec(o)}};
}

NodeStatusController::NodeStatusController(asio::any_io_executor executor, base::Clock& clock,
                                           api::AsyncRestClient api, NodeStatusOptions options)
    : strand_(asio::make_strand(executor)),
      clock_(clock),
      async_(std::move(api)),
      options_(std::move(options)) {}

NodeStatusController::~NodeStatusController() = default;

std::string NodeStatusController::nodeUid() const {
  std::lock_guard lock(mu_);
  return node_uid_;
}

void NodeStatusController::start() {
  asio::post(strand_, [self = shared_from_this()] {
    self->timer_ = self->clock_.makeTimer(self->strand_);
    self->schedule(base::Duration(0), true);
  });
}

void NodeStatusController::stop() {
  stopped_ = true;
  asio::post(strand_, [self = shared_from_this()] {
    if (self->timer_) self->timer_->cancel();
  });
}

void NodeStatusController::reRegister() {
  // At once, not on the strand: the lease must not be created with the lost Node as owner.
  {
    std::lock_guard lock(mu_);
    node_uid_.clear();
  }
  asio::post(strand_, [self = shared_from_this()] {
    if (self->stopped_ || !self->timer_) return;
    self->reregister_ = true;
    // A running step ends by scheduling the next one, which then registers.
    if (!self->busy_) self->schedule(base::Duration(0), true);
  });
}

void NodeStatusController::requestUpdate() {
  asio::post(strand_, [self = shared_from_this()] {
    // Before registration the registration sends the status anyway.
    if (self->stopped_ || !self->timer_ || !self->registered_) return;
    if (self->busy_) {
      self->update_requested_ = true;
      return;
    }
    // Between steps: the armed timer is the next step; run it now (registration when not yet
    // registered).
    self->schedule(base::Duration(0), false);
  });
}

void NodeStatusController::schedule(base::Duration d, bool registering) {
  busy_ = false;
  if (stopped_) return;
  if (update_requested_) {
    update_requested_ = false;
    d = base::Duration(0);
  }
  if (reregister_) {
    reregister_ = false;
    d = base::Duration(0);
    registering = true;
    registered_ = false;
  }
  timer_->asyncWaitFor(d, [self = shared_from_this(), registering] {
    if (self->stopped_) return;
    self->busy_ = true;
    asio::co_spawn(
        self->strand_,
        [](std::shared_ptr<NodeStatusController> s, bool reg) -> asio::awaitable<void> {
          try {
            if (reg) {
              co_await s->registerNode();
            } else {
              co_await s->updateStatus();
            }
          } catch (const std::exception& e) {
            log()->error("Node status step failed err={}", e.what());
            s->schedule(s->options_.update_frequency, !s->registered_);
          }
        }(self, registering),
        asio::detached);
  });
}

nlohmann::json NodeStatusController::computeStatus() {
  const auto& o = options_;
  std::string why;
  bool healthy = !o.healthy || o.healthy(&why);
  const std::string now = api::formatTime(api::Timestamp(clock_.wallNow().time_since_epoch()));
  if (!ready_ || *ready_ != healthy) {
    ready_ = healthy;
    ready_transition_ = now;
  }
  const eviction::PressureConditions pressure =
      o.pressure ? o.pressure() : eviction::PressureConditions{};
  auto track = [&](ConditionState& state, bool value) -> const std::string& {
    if (!state.status || *state.status != value) {
      state.status = value;
      state.transition = now;
    }
    return state.transition;
  };
  const std::string& memory_transition = track(memory_pressure_, pressure.memory);
  const std::string& disk_transition = track(disk_pressure_, pressure.disk);
  const std::string& pid_transition = track(pid_pressure_, pressure.pid);
  auto cond = [&](const char* type, const char* status, const char* reason, std::string message,
                  const std::string& transition) {
    return nlohmann::json{
        {"type", type},       {"status", status},         {"reason", reason},
        {"message", message}, {"lastHeartbeatTime", now}, {"lastTransitionTime", transition}};
  };
  nlohmann::json conditions = nlohmann::json::array({
      pressure.memory ? cond("MemoryPressure", "True", "KubeletHasInsufficientMemory",
                             "kubelet has insufficient memory available", memory_transition)
                      : cond("MemoryPressure", "False", "KubeletHasSufficientMemory",
                             "kubelet has sufficient memory available", memory_transition),
      pressure.disk ? cond("DiskPressure", "True", "KubeletHasDiskPressure",
                           "kubelet has disk pressure", disk_transition)
                    : cond("DiskPressure", "False", "KubeletHasNoDiskPressure",
                           "kubelet has no disk pressure", disk_transition),
      pressure.pid ? cond("PIDPressure", "True", "KubeletHasInsufficientPID",
                          "kubelet has insufficient PID available", pid_transition)
                   : cond("PIDPressure", "False", "KubeletHasSufficientPID",
                          "kubelet has sufficient PID available", pid_transition),
      healthy ? cond("Ready", "True", "KubeletReady", "kubelet is posting ready status",
                     ready_transition_)
              : cond("Ready", "False", "KubeletNotReady",
                     why.empty() ? "agent is not healthy" : why, ready_transition_),
  });
  nlohmann::json addresses = nlohmann::json::array();
  if (!o.node_ip.empty()) addresses.push_back({{"type", "InternalIP"}, {"address", o.node_ip}});
  addresses.push_back({{"type", "Hostname"}, {"address", o.node_name}});
  nlohmann::json status = {
      {"capacity", resources(o.capacity.cpu_milli, o.capacity.memory_bytes,
                             o.capacity.ephemeral_storage_bytes, o.allocatable.pods)},
      {"allocatable", resources(o.allocatable.cpu_milli, o.allocatable.memory_bytes,
                                o.allocatable.ephemeral_storage_bytes, o.allocatable.pods)},
      {"conditions", conditions},
      {"addresses", addresses},
      {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", o.daemon_port}}}}},
      {"nodeInfo",
       {{"machineID", o.info.machine_id},
        {"systemUUID", o.info.system_uuid},
        {"bootID", o.info.boot_id},
        {"kernelVersion", o.info.kernel_version},
        {"osImage", o.info.os_image},
        {"containerRuntimeVersion", o.info.container_runtime_version},
        {"kubeletVersion", o.info.kubelet_version},
        {"kubeProxyVersion", ""},
        {"operatingSystem", o.info.operating_system},
        {"architecture", o.info.architecture}}}};
  // kubelet's Images setter: the largest images first, at most max_images of them, each with at
  // most five names. Once listed, the member is always sent (null when there is none): the status
  // goes as a merge patch, where a member left out would keep the images the Node had.
  if (auto listed = o.images ? o.images() : std::nullopt) {
    nlohmann::json images = nlohmann::json::array();
    for (const auto& image : *listed) {
      if (o.max_images >= 0 && images.size() >= static_cast<size_t>(o.max_images)) break;
      nlohmann::json names = nlohmann::json::array();
      for (const auto& name : image.names) {
        if (names.size() == kMaxNamesPerImageInNodeStatus) break;
        names.push_back(name);
      }
      images.push_back({{"names", names}, {"sizeBytes", image.size_bytes}});
    }
    status["images"] = images.empty() ? nlohmann::json(nullptr) : std::move(images);
  }
  return status;
}

asio::awaitable<void> NodeStatusController::registerNode() {
  nlohmann::json node = buildNode(options_);
  node["status"] = computeStatus();
  const std::string name = options_.node_name;
  auto call = [node, name](api::RestClient& c) -> base::StatusOr<nlohmann::json> {
    auto created = c.createJson(api::nodesPath(), node);
    if (created.ok() || !api::isAlreadyExists(created.status())) return created;
    auto existing = c.getJson(api::nodePath(name));
    if (!existing.ok()) return existing;
    // Reconcile the labels the agent owns; everything else another writer set stays.
    nlohmann::json want = node["metadata"]["labels"];
    nlohmann::json have =
        existing->value(nlohmann::json::json_pointer("/metadata/labels"), nlohmann::json::object());
    nlohmann::json patch_labels = nlohmann::json::object();
    for (const auto& [k, v] : want.items()) {
      if (!have.contains(k) || have[k] != v) patch_labels[k] = v;
    }
    if (patch_labels.empty()) return existing;
    return c.patchJson(api::nodePath(name), {{"metadata", {{"labels", patch_labels}}}},
                       api::PatchType::kStrategicMerge);
  };
  auto r = co_await api::runOnPool(async_, call);
  if (stopped_) co_return;
  if (!r.ok()) {
    backoff_ = backoff_.count() == 0 ? options_.register_backoff_initial
                                     : std::min(backoff_ * 2, options_.register_backoff_max);
    // Quoted whole: the apiserver's reason and its "[apiserver code=403 ...]" tail stay one value.
    log()->warn("Unable to register node node={} err={} retry_in_ms={}", name,
                base::goQuote(r.status().toString()),
                std::chrono::duration_cast<std::chrono::milliseconds>(backoff_).count());
    schedule(backoff_, true);
    co_return;
  }
  backoff_ = base::Duration(0);
  {
    std::lock_guard lock(mu_);
    node_uid_ = r->value(nlohmann::json::json_pointer("/metadata/uid"), std::string());
  }
  registered_ = true;
  log()->info("Node registered node={} uid={}", name, nodeUid());
  notePodCidrs(*r);
  last_sent_.clear();  // send the full status right away
  co_await updateStatus();
}

void NodeStatusController::notePodCidrs(const nlohmann::json& node) {
  if (!options_.pod_cidrs || !node.is_object()) return;
  const auto spec = node.find("spec");
  if (spec == node.end() || !spec->is_object()) return;
  std::string joined;
  if (auto list = spec->find("podCIDRs"); list != spec->end() && list->is_array()) {
    for (const auto& cidr : *list) {
      if (!cidr.is_string()) continue;
      if (!joined.empty()) joined += ',';
      joined += cidr.get<std::string>();
    }
  }
  if (auto one = spec->find("podCIDR"); joined.empty() && one != spec->end() && one->is_string()) {
    joined = one->get<std::string>();
  }
  if (joined.empty()) return;
  pod_cidrs_seen_ = true;
  options_.pod_cidrs(std::move(joined));
}

asio::awaitable<void> NodeStatusController::updateStatus() {
  auto status = computeStatus();
  nlohmann::json comparable = status;
  for (auto& c : comparable["conditions"]) c.erase("lastHeartbeatTime");
  std::string key = api::canonicalJson(comparable);
  const auto now = clock_.now();
  bool due = !last_report_ || now - *last_report_ >= options_.report_frequency;
  const std::string name = options_.node_name;
  if (key == last_sent_ && !due) {
    if (options_.pod_cidrs && !pod_cidrs_seen_) {
      auto get = [name](api::RestClient& c) { return c.getJson(api::nodePath(name)); };
      auto node = co_await api::runOnPool(async_, get);
      if (stopped_) co_return;
      if (node.ok()) notePodCidrs(*node);
    }
    schedule(options_.update_frequency, false);
    co_return;
  }
  nlohmann::json order = nlohmann::json::array();
  for (const auto& c : status["conditions"]) order.push_back({{"type", c["type"]}});
  nlohmann::json patch = {{"status", status}};
  patch["status"]["$setElementOrder/conditions"] = order;
  auto call = [name, patch](api::RestClient& c) {
    return c.patchJson(api::nodeStatusPath(name), patch, api::PatchType::kStrategicMerge);
  };
  auto r = co_await api::runOnPool(async_, call);
  if (stopped_) co_return;
  if (!r.ok()) {
    log()->warn("Error updating node status node={} err={}", name,
                base::goQuote(r.status().toString()));
    if (api::isNotFound(r.status())) {
      // We registered it, so the apiserver lost its state (or someone deleted the Node): its
      // UID is no owner any more, and everything else we created there is gone too.
      registered_ = false;
      {
        std::lock_guard lock(mu_);
        node_uid_.clear();
      }
      if (options_.on_state_lost) options_.on_state_lost("Node " + name + " not found");
      schedule(options_.register_backoff_initial, true);
      co_return;
    }
    schedule(options_.update_frequency, false);
    co_return;
  }
  patches_.fetch_add(1);
  notePodCidrs(*r);
  last_sent_ = key;
  last_report_ = now;
  schedule(options_.update_frequency, false);
}

}  // namespace nodeagent::agent
