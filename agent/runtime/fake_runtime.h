// FakeRuntime: an in-memory Runtime for unit tests and hollow nodes (`--runtime=fake`). Starting
// a container makes it "running" at once, killing makes it exit at once (or after a delay on the
// injected clock, see setKillDelay); nothing is executed.
// Exec and attach sessions are scripted (agent/runtime/fake_stream_session.cpp), for tests of the
// kubelet API's /exec and /attach handlers:
//   execStream on a running container: stdout first gets the command joined by spaces + "\n";
//     `exit N` then ends with exit code N; without stdin it ends with 0; with stdin every
//     writeStdin comes back on stdout (echo) until closeStdin ends it with 0.
//   attach on a running container: echoes stdin to stdout the same way (nothing first);
//     without stdin it ends at once with 0.
//   With tty, resize(w, h) writes "resize <w>x<h>\n" to stdout. With stdout false the echo is
//   dropped. Errors as the process runtime's (NotFound, FailedPrecondition, InvalidArgument).
// Images (for tests of the agent's image pulls): off by default, as the process runtime, the fake
// runs no images; setRunsImages(true) makes it a runtime that does (runsImages), holding the
// images a test adds, answering imageStatus from them and pulls as the test scripts them (by
// default a pull succeeds and the image is then held).
// Every start/kill/remove is recorded, and tests can make containers exit with a code or make
// starts fail. It holds only a few small structs per container, so 50,000 pods are cheap.
//
// Threading: all methods (including the test controls) may be called from any thread; state is
// guarded by one mutex never held across a co_await or while calling the event handler.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/runtime/runtime.h"

namespace nodeagent::runtime {

class FakeRuntime final : public Runtime {
 public:
  struct Action {
    enum class Kind { kStart, kKill, kRemove };
    Kind kind = Kind::kStart;
    std::string pod_uid;
    std::string container_name;
    int attempt = 0;
    ContainerId id;
    KillOptions kill_options;   // kills: as passed
    int64_t grace_seconds = 0;  // kills: the grace period that applied (after the preStop hook)
    std::string reason;         // kills
    // Starts: the cgroup parent, resources, image info, node allocatable and sandbox config of
    // StartContainerOptions, as passed.
    std::string cgroup_parent{};
    cm::LinuxContainerResources resources{};
    std::optional<ImageInfo> image_info{};
    NodeAllocatableResources node_allocatable{};
    std::shared_ptr<const PodSandboxConfig> sandbox_config{};
  };

  // Events are posted to `event_executor` (give it a strand or a single-threaded context).
  FakeRuntime(asio::any_io_executor event_executor, base::Clock& clock);
  ~FakeRuntime() override;

  std::string type() const override { return "fake"; }
  base::Status recover() override { return base::okStatus(); }
  // A sandbox's ID is its pod's UID; a pod with containers but no sandbox (containers a test put
  // there) has a ready one, as adopted containers have in ProcessRuntime.
  asio::awaitable<base::StatusOr<std::string>> runPodSandbox(PodSandboxConfig config) override;
  asio::awaitable<base::Status> stopPodSandbox(std::string id) override;
  asio::awaitable<base::Status> removePodSandbox(std::string id) override;
  // runPodSandbox calls so far (tests).
  size_t sandboxesRun() const;
  // Gives pod `uid` an older sandbox (listed after its current one; removePodSandbox(id) drops
  // it) in which the containers `container_ids` were made (Container::sandbox_id in getPods).
  void addOlderSandbox(const std::string& uid, PodSandboxStatus sandbox,
                       const std::vector<std::string>& container_ids = {});
  void setEventHandler(ContainerEventHandler handler) override;
  // The runner is called, as ProcessRuntime calls it, for a running container whose spec has a
  // preStop hook.
  void setPreStopHookRunner(PreStopHookRunner runner) override;
  asio::awaitable<base::StatusOr<std::vector<Pod>>> getPods(bool all) override;
  std::optional<uint64_t> podsVersion() const override;
  std::optional<uint64_t> podStatusVersion(const std::string& uid) const override;
  // How often getPods ran (tests of relist skipping).
  size_t getPodsCalls() const;
  // getPods lists each pod's sandbox too, as a CRI runtime does (off, the default: none, as the
  // process runtime; a hollow node then keeps one PLEG record per container only).
  void setListsSandboxes(bool lists);
  asio::awaitable<base::StatusOr<PodStatus>> getPodStatus(std::string uid, std::string name,
                                                          std::string namespace_) override;
  asio::awaitable<base::StatusOr<ContainerId>> startContainer(
      api::PodPtr pod, api::Container container, int attempt,
      StartContainerOptions options) override;
  asio::awaitable<base::Status> killContainer(api::PodPtr pod, ContainerId id, KillOptions options,
                                              std::string reason) override;
  asio::awaitable<base::Status> killPod(api::PodPtr pod, Pod running_pod,
                                        std::optional<int64_t> grace_override) override;
  asio::awaitable<base::Status> removeContainer(ContainerId id) override;
  asio::awaitable<base::StatusOr<ExecResult>> execInContainer(ContainerId id,
                                                              std::vector<std::string> command,
                                                              base::Duration timeout) override;
  asio::awaitable<base::StatusOr<StreamSessionPtr>> execStream(ContainerId id,
                                                               std::vector<std::string> command,
                                                               StreamOptions options) override;
  asio::awaitable<base::StatusOr<StreamSessionPtr>> attach(ContainerId id,
                                                           StreamOptions options) override;
  bool runsImages() const override;
  // The image whose reference or ID is `image`, when held. Fails while setImageStatusError holds.
  asio::awaitable<base::StatusOr<std::optional<ImageInfo>>> imageStatus(std::string image) override;
  // Records the pull, waits the pull delay on the clock, then answers the scripted result; a
  // successful pull holds the image (ID "sha256:fake-<image>" unless it was held with another).
  asio::awaitable<base::StatusOr<std::string>> pullImage(std::string image,
                                                         std::optional<RegistryAuth> auth) override;
  // The held images, one entry per ID.
  asio::awaitable<base::StatusOr<std::vector<ImageInfo>>> listImages() override;
  // Drops every reference to the image whose ID or reference is `image` (OK when none is held),
  // unless setRemoveImageError scripted a failure for it; recorded in removedImages().
  asio::awaitable<base::Status> removeImage(std::string image) override;
  // As setImageFs set it (Unavailable until then).
  asio::awaitable<base::StatusOr<ImageFsInfo>> imageFsInfo() override;
  // Records the CIDRs (podCidrUpdates) and answers setPodCidrError's status (OK by default).
  asio::awaitable<base::Status> updatePodCidr(std::string cidrs) override;
  std::vector<std::string> podCidrUpdates() const;
  void setPodCidrError(base::Status status);
  // The IDs of the held images that containers (any state) name, and the names of those not held.
  asio::awaitable<base::StatusOr<std::set<std::string>>> imagesInUse() override;
  std::filesystem::path podLogsDirectory(std::string_view pod_namespace, std::string_view pod_name,
                                         std::string_view pod_uid) const override;
  std::filesystem::path containerLogsPath(std::string_view pod_namespace, std::string_view pod_name,
                                          std::string_view pod_uid, std::string_view container_name,
                                          int restart_count) const override;

  // Test controls.
  std::vector<Action> actions() const;
  void clearActions();
  // Stops recording actions (hollow nodes with many pods).
  void setRecordActions(bool record);
  // Off: podStatusVersion tells nothing (as a runtime without per-pod versions).
  void setReportsPodStatusVersions(bool reports);
  // Makes the newest running container `name` of pod `uid` exit with `exit_code` (emits a died
  // event), with `reason` (default: kubelet's "Completed" for 0, else "Error"). False when no
  // such container runs.
  bool exitContainer(const std::string& uid, const std::string& name, int exit_code,
                     std::string reason = "");
  // Every later start of container `name` in pod `uid` ("" matches any pod) fails with `status`
  // until cleared. InvalidArgument leaves nothing behind; other errors leave an exited container
  // with reason ContainerCannotRun, as ProcessRuntime does.
  void injectStartError(const std::string& uid, const std::string& name, base::Status status);
  void clearStartErrors();
  // The exit code a killed container reports (default 0: it handled SIGTERM).
  void setKillExitCode(int exit_code);
  // Every later kill of a running container takes `delay` on the clock before the container
  // exits (a process slow to stop). Zero (the default) kills at once.
  void setKillDelay(base::Duration delay);
  // The newest status of a container, if any.
  std::optional<ContainerStatus> containerStatus(const std::string& uid,
                                                 const std::string& name) const;
  // The cgroup parent and resources the newest container `name` of pod `uid` was started with
  // (recorded even when actions are not).
  struct StartedResources {
    std::string cgroup_parent;
    cm::LinuxContainerResources resources;
    bool operator==(const StartedResources&) const = default;
  };
  std::optional<StartedResources> startedResources(const std::string& uid,
                                                   const std::string& name) const;
  size_t runningContainerCount() const;
  // What an exec in container `name` returns (default: exit 0, no output). Called without the
  // runtime's lock held.
  using ExecFn = std::function<ExecResult(const std::string& container_name,
                                          const std::vector<std::string>& command)>;
  void setExecHandler(ExecFn fn);
  // Commands run through execInContainer, as (container name, argv).
  std::vector<std::pair<std::string, std::vector<std::string>>> execs() const;
  // Commands run through execStream, as (container name, argv).
  std::vector<std::pair<std::string, std::vector<std::string>>> streamExecs() const;

  // Image controls (see the top of this file).
  void setRunsImages(bool runs_images);
  // Holds `image` (a reference as containers name it, e.g. "busybox:1"); an empty info.id becomes
  // "sha256:fake-<image>".
  void addImage(const std::string& image, ImageInfo info = {});
  bool hasImage(const std::string& image) const;
  // What imageFsInfo answers from now on.
  void setImageFs(ImageFsInfo info);
  // Every later removeImage of `image` (an ID) fails with `status` (OK: it succeeds again).
  void setRemoveImageError(const std::string& image, base::Status status);
  // Every later removeImage takes `delay` on the clock before it acts (zero, the default: at once).
  void setRemoveImageDelay(base::Duration delay);
  // The images removeImage was asked for and did not fail, in order (one no longer held too, so
  // that a repeat shows).
  std::vector<std::string> removedImages() const;
  // Every later pull of `image` answers `result` until set again (OK, the default: the pull
  // succeeds).
  void setPullResult(const std::string& image, base::Status result);
  // Every later pull takes `delay` on the clock (zero, the default: at once).
  void setPullDelay(base::Duration delay);
  // Every later imageStatus fails with `status` (OK, the default: answers from the held images).
  void setImageStatusError(base::Status status);
  // The images pulls were asked for, in order, failed ones included.
  std::vector<std::string> pulls() const;
  // How many pulls were given credentials.
  size_t pullsWithAuth() const;
  // The user of each pull, in order ("" for an anonymous one).
  std::vector<std::string> pullUsers() const;
  // Every later pull of `image` needs these credentials: a pull with others, or none, fails as a
  // registry's 401 (Unknown) before any scripted result.
  void setPullCredential(const std::string& image, std::string username, std::string password);

 private:
  struct PodRecord {
    std::string name;
    std::string namespace_;
    std::vector<ContainerStatus> containers;  // oldest first
    std::optional<PodSandboxStatus> sandbox;
    std::vector<PodSandboxStatus> older_sandboxes;  // newest first (addOlderSandbox)
    std::map<std::string, std::string> container_sandboxes;  // container ID -> older sandbox
    uint64_t version = 0;  // version_ at the record's last change (podStatusVersion)
  };

  void emit(ContainerEvent event);
  ContainerStatus* findLocked(const std::string& id, std::string* uid);
  // NotFound or FailedPrecondition unless the container runs (mu_ held).
  base::Status checkRunningLocked(const ContainerId& id);
  void record(Action action);

  asio::any_io_executor event_executor_;
  base::Clock& clock_;
  mutable std::mutex mu_;
  ContainerEventHandler handler_;
  PreStopHookRunner pre_stop_runner_;
  std::unordered_map<std::string, PodRecord> pods_;
  std::unordered_map<std::string, std::string> pod_of_container_;
  // Container ID -> what it was started with; only containers given a cgroup parent or resources
  // (hollow nodes with many pods give neither).
  std::unordered_map<std::string, StartedResources> started_resources_;
  std::vector<Action> actions_;
  bool record_actions_ = true;
  bool reports_pod_status_versions_ = true;
  bool lists_sandboxes_ = false;
  std::map<std::pair<std::string, std::string>, base::Status> start_errors_;
  int kill_exit_code_ = 0;
  base::Duration kill_delay_{0};
  ExecFn exec_fn_;
  std::vector<std::pair<std::string, std::vector<std::string>>> execs_;
  std::vector<std::pair<std::string, std::vector<std::string>>> stream_execs_;
  bool runs_images_ = false;
  std::map<std::string, ImageInfo> images_;  // by reference
  std::map<std::string, base::Status> pull_results_;
  base::Duration pull_delay_{0};
  base::Status image_status_error_;
  std::optional<ImageFsInfo> image_fs_;
  std::map<std::string, base::Status> remove_image_errors_;
  std::vector<std::string> pod_cidr_updates_;
  base::Status pod_cidr_error_;
  std::vector<std::string> removed_images_;
  base::Duration remove_image_delay_{0};
  std::vector<std::string> pulls_;
  size_t pulls_with_auth_ = 0;
  std::vector<std::string> pull_users_;
  std::map<std::string, std::pair<std::string, std::string>> pull_credentials_;
  uint64_t next_id_ = 1;
  uint64_t version_ = 0;  // bumped by every change of pods_
  size_t get_pods_calls_ = 0;
  size_t sandboxes_run_ = 0;
};

}  // namespace nodeagent::runtime
