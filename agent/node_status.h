// Node registration and status (kubelet's kubelet_node_status.go): registers this node's Node
// object when the agent starts (POST; when it already exists, GET it and reconcile the labels the
// agent owns), then computes the node status every `update_frequency` (10 s) and PATCHes
// nodes/<name>/status when it changed or every `report_frequency` (5 min) as a heartbeat.
// The status carries capacity/allocatable (cpu, memory, ephemeral-storage when known, pods),
// addresses (InternalIP, Hostname), nodeInfo, daemonEndpoints and the conditions: Ready from the
// agent's health (KubeletReady / KubeletNotReady with the reason), and MemoryPressure,
// DiskPressure and PIDPressure from the eviction manager (`pressure`) with kubelet's reasons
// (KubeletHasInsufficientMemory, KubeletHasDiskPressure, KubeletHasInsufficientPID, and the
// False ones), each with its own lastTransitionTime. requestUpdate() sends a change at once.
//
// The Node answering 404 to the status PATCH after it was registered means the apiserver lost its
// state: the controller reports it (`on_state_lost`) and registers again at once, as it does when
// told of a loss seen elsewhere (reRegister()).
//
// Threading: start/stop/reRegister/nodeUid/registered are safe from any thread; the work runs on
// the controller's strand. Create with std::make_shared; the RestClient, API pool and Clock must
// outlive it.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "agent/admission.h"
#include "agent/eviction/eviction_manager.h"
#include "api/async_rest_client.h"
#include "api/objects.h"
#include "base/asio.h"
#include "base/clock.h"

namespace nodeagent::agent {

struct NodeInfo {
  std::string machine_id;
  std::string system_uuid;
  std::string boot_id;
  std::string kernel_version;
  std::string os_image;
  std::string container_runtime_version;
  std::string kubelet_version;
  std::string operating_system = "linux";
  std::string architecture;  // GOARCH spelling: amd64, arm64, ...
};

// Reads the host's node info: uname, /etc/os-release, /etc/machine-id, the boot ID. Missing files
// leave fields empty. `runtime_version` becomes containerRuntimeVersion.
NodeInfo readNodeInfo(const std::string& runtime_version);

// The Kubernetes release whose kubelet nodeagent follows.
inline constexpr const char* kKubernetesVersion = "1.18.0";
// nodeInfo.kubeletVersion: a Kubernetes version with nodeagent's own as its pre-release part,
// "v1.18.0-nodeagent.0.1.0", which tools that parse kubelet versions accept.
std::string kubeletVersion();

// An image the runtime holds, as the Node's status.images lists it (kubelet's ContainerImage).
struct NodeImage {
  std::vector<std::string> names;  // repo digests, then repo tags
  int64_t size_bytes = 0;
};

// kubelet's MaxNamesPerImageInNodeStatus.
inline constexpr size_t kMaxNamesPerImageInNodeStatus = 5;

struct NodeStatusOptions {
  std::string node_name;
  std::string node_ip;
  // Extra labels (--node-labels); the well-known hostname/os/arch labels are added.
  std::map<std::string, std::string> labels;
  // --register-with-taints: the Node's taints when the agent creates it (an existing Node keeps
  // its own, as with kubelet).
  std::vector<api::Taint> register_with_taints;
  NodeCapacity capacity;
  NodeAllocatable allocatable;
  NodeInfo info;
  int daemon_port = 10250;
  base::Duration update_frequency = std::chrono::seconds(10);
  base::Duration report_frequency = std::chrono::minutes(5);
  base::Duration register_backoff_initial = std::chrono::milliseconds(100);
  base::Duration register_backoff_max = std::chrono::seconds(7);
  // The agent's health; `why` gets the reason when unhealthy. Any thread. Unset: healthy.
  std::function<bool(std::string* why)> healthy;
  // The node's pressure conditions now (EvictionManager::conditions). Any thread; must not
  // block. Unset: no pressure.
  std::function<eviction::PressureConditions()> pressure;
  // Called on the strand when the registered Node is gone from the apiserver. Optional.
  std::function<void(const std::string& reason)> on_state_lost;
  // The images the runtime holds, largest first (kubelet's image manager's list, refreshed every
  // 30 s), for status.images; nullopt before the first listing. Any thread; must not block.
  // Unset: no images (the process runtime).
  std::function<std::optional<std::vector<NodeImage>>()> images;
  // --node-status-max-images: how many of them status.images lists (-1: all).
  int64_t max_images = 50;
  // kubelet's updatePodCIDR from the Node: called on the strand with the Node's spec.podCIDRs
  // (comma-joined; spec.podCIDR when podCIDRs is empty) whenever the Node read back from the
  // apiserver (registration, status PATCHes) has them. Until it had them once, each update period
  // reads the Node (GET) even when there is no status to send, as kubelet reads it each period.
  // Optional.
  std::function<void(std::string cidrs)> pod_cidrs;
};

// Parses --node-labels ("k=v,k2=v2"); InvalidArgument naming the bad entry.
base::StatusOr<std::map<std::string, std::string>> parseNodeLabels(const std::string& text);

// The Node object the agent registers (metadata + spec + status at `now`).
nlohmann::json buildNode(const NodeStatusOptions& options);

class NodeStatusController : public std::enable_shared_from_this<NodeStatusController> {
 public:
  NodeStatusController(asio::any_io_executor executor, base::Clock& clock, api::AsyncRestClient api,
                       NodeStatusOptions options);
  ~NodeStatusController();

  // nodeInfo.containerRuntimeVersion, once the runtime has said its version. Before start().
  void setContainerRuntimeVersion(std::string version) {
    options_.info.container_runtime_version = std::move(version);
  }

  void start();
  void stop();
  // Registers the Node again as soon as the step in flight (if any) is done: the apiserver lost
  // its state. Any thread.
  void reRegister();
  // Computes the status and sends it if it changed, as soon as the step in flight (if any) is
  // done, instead of at the next update period (the pressure conditions changed). Any thread.
  void requestUpdate();

  // The registered Node's UID; "" until registration succeeded. Any thread.
  std::string nodeUid() const;
  bool registered() const { return registered_.load(); }
  uint64_t statusPatches() const { return patches_.load(); }

  // The status the controller would send now. Runs on the controller's strand (it moves the
  // Ready condition's transition time).
  nlohmann::json computeStatus();

 private:
  asio::awaitable<void> registerNode();
  asio::awaitable<void> updateStatus();
  // Hands a Node read from the apiserver's pod CIDRs to options_.pod_cidrs.
  void notePodCidrs(const nlohmann::json& node);
  void schedule(base::Duration d, bool registering);

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  api::AsyncRestClient async_;
  NodeStatusOptions options_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> registered_{false};
  std::atomic<uint64_t> patches_{0};
  mutable std::mutex mu_;
  std::string node_uid_;

  // Strand only.
  base::TimerPtr timer_;
  base::Duration backoff_{0};
  bool busy_ = false;        // a registration or status step is running
  bool reregister_ = false;  // register once the running step is done
  std::optional<bool> ready_;
  std::string ready_transition_;  // formatted time of the Ready condition's last transition
  struct ConditionState {
    std::optional<bool> status;
    std::string transition;  // formatted time of its last transition
  };
  ConditionState memory_pressure_;
  ConditionState disk_pressure_;
  ConditionState pid_pressure_;
  bool update_requested_ = false;  // an update to run once the step in flight is done
  std::string last_sent_;          // the last status sent, without heartbeat times
  bool pod_cidrs_seen_ = false;    // a Node read back had spec.podCIDRs
  std::optional<base::MonotonicTime> last_report_;
};

}  // namespace nodeagent::agent
