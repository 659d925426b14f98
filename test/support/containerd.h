// A containerd of the test's own, for the CRI runtime's integration and e2e tests.
//
// Everything lives under a fresh temp dir (<tmp>/nodeagent-containerd-XXXXXX): the config, root,
// state, runc's root, the gRPC socket (<dir>/containerd.sock) and containerd's log. containerd
// runs in a mount namespace of its own (slave propagation) where <dir>/run is bound over /run:
// containerd 1.6 keeps its shims' sockets in /run/containerd/s whatever its config says, and this
// keeps them, and every mount containerd and its shims make (rootfs overlays, shm, netns), out of
// the machine's /run and mount table. The machine's containerd (/run/containerd,
// /var/lib/containerd) is never touched.
//
// The config enables the CRI plugin with the overlayfs snapshotter, runc (io.containerd.runc.v2)
// and the cgroupfs driver (SystemdCgroup = false), the streaming server on 127.0.0.1, and
// restrict_oom_score_adj (an oom_score_adj below containerd's own is raised to it: machines that
// refuse a negative score even to root cannot otherwise start a sandbox, which gets -998).
//
// Pod networking (options.cni, on by default when the Debian package containernetworking-plugins
// is installed): the CNI plugins of /usr/lib/cni and a conflist of this containerd's own (in
// <dir>/cni/conf): a bridge of its own (`nabr<4 hex digits>`, isGateway: the bridge holds the
// subnet's first address, so the test reaches pods from the node) with host-local addresses (kept
// in <dir>/cni/ipam) on a /24 of 10.200.0.0/13 that no route of the machine covers, locked for
// this instance (a lock file in /run/lock) so that parallel tests never share one. A pod that is
// not hostNetwork gets a network namespace and an address there, with a route to the subnet only
// (no default route). Nothing else of the machine changes: ipMasq is off (no iptables rule), and
// the machine's IP forwarding stays as it is (the bridge plugin would turn it on: containerd's
// mount namespace shows it a file that says it is on). Traffic goes only between the node and
// the pods, over the bridge. The bridge (which CNI's DEL leaves behind) is deleted when this
// containerd stops, and a stale one of the same name (a test killed earlier) before it starts.
// Without CNI (options.cni false) there is no network config: host-network pods only, and the
// runtime reports NetworkReady false.
//
//   TEST_CASE("...") {
//     nodeagent::testing::skipUnlessContainerdCanRun();  // first: a loud SKIPPED otherwise
//     nodeagent::testing::TestContainerd containerd;      // throws if it does not come up
//     ... CriClient on containerd.endpoint() ...
//   }                                                     // stopped and removed, even on failure
//
// Stopping: SIGTERM, then SIGKILL after the grace; then every shim of this containerd (found by
// its -address argument) and the processes under it are killed, whatever is still mounted under
// the dir is unmounted, and the dir is removed. containerd gets SIGKILL if the thread that
// started it dies (PR_SET_PDEATHSIG), so a test process killed by ctest leaves no containerd
// behind (its shims, which daemonise, can outlive it in that case).
//
// Not thread-safe: one test thread starts, uses and stops it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace nodeagent::testing {

// Why containerd cannot run here (not root, a missing binary: containerd, containerd-shim-runc-v2,
// runc, unshare, setpriv, ctr; no overlay file system), or "" when it can.
std::string containerdUnavailableReason();

// skipTest() with that reason when containerd cannot run here. Call it first thing in a TEST_CASE.
void skipUnlessContainerdCanRun();

// Where the CNI plugins are (Debian's containernetworking-plugins).
inline constexpr const char* kCniBinDir = "/usr/lib/cni";

// Why pods cannot have a network of their own here (containerd cannot run, or no bridge,
// host-local or loopback plugin in kCniBinDir, or no `ip` tool), or "" when they can.
std::string cniUnavailableReason();

// skipTest() with that reason. Call it first thing in a TEST_CASE that needs pod networking.
void skipUnlessCniCanRun();

// Makes `dir` a shared mount (a bind mount of itself, shared), as / is on a systemd host, so that
// what is mounted below it afterwards (secret tmpfs volumes, subPath bind mounts) reaches a
// containerd started after this call in a mount namespace of its own, as it reaches the node's
// containerd. Throws (failing the test) when it cannot. Undo with unmountSharedMount().
void makeSharedMount(const std::filesystem::path& dir);
// Lazily unmounts everything below `dir`, then `dir` itself.
void unmountSharedMount(const std::filesystem::path& dir);

struct TestContainerdOptions {
  // How long containerd may take until its socket accepts connections.
  std::chrono::milliseconds start_deadline = std::chrono::seconds(30);
  // How long containerd may take to exit after SIGTERM before it gets SIGKILL.
  std::chrono::milliseconds stop_grace = std::chrono::seconds(10);
  // The CRI plugin's sandbox (pause) image; this machine reaches no registry, so a test that
  // runs a sandbox imports an image of this name first.
  std::string sandbox_image = "nodeagent.test/pause:1";
  // Pod networking with the CNI bridge (see the top of this file); off: no network config.
  bool cni = cniUnavailableReason().empty();
  // With cni: the harness picks the subnet and the bridge's name but writes no conflist; the agent
  // writes its own into cniConfDir() (agentCniFlags()).
  bool agent_writes_cni_config = false;
  // Registries ("127.0.0.1:<port>", such as a TestRegistry's host()) that containerd's CRI plugin
  // pulls from over plain HTTP (a registry mirror of the host on http://<host>).
  std::vector<std::string> plain_http_registries;
};

class TestContainerd {
 public:
  // Starts containerd and waits until its socket accepts connections. Throws std::runtime_error
  // naming what failed, with the end of containerd's log, after cleaning up.
  explicit TestContainerd(TestContainerdOptions options = {});
  ~TestContainerd();
  TestContainerd(const TestContainerd&) = delete;
  TestContainerd& operator=(const TestContainerd&) = delete;

  // "unix://<dir>/containerd.sock", for --container-runtime-endpoint.
  std::string endpoint() const { return "unix://" + socket_path_.string(); }
  // The agent's flags for this containerd (kubelet's --container-runtime=remote and endpoint).
  std::vector<std::string> agentFlags() const {
    return {"--container-runtime=remote", "--container-runtime-endpoint=" + endpoint()};
  }
  // The directory containerd loads its network config from.
  std::filesystem::path cniConfDir() const { return dir_ / "cni" / "conf"; }
  // The agent's flags that make it write the network config for this containerd (with
  // agent_writes_cni_config): the config dir, the harness's subnet as --pod-cidr (or none when
  // `pod_cidr` is false: the Node's spec.podCIDRs bring it), its bridge, no masquerading.
  std::vector<std::string> agentCniFlags(bool pod_cidr = true) const;
  const std::filesystem::path& socketPath() const { return socket_path_; }
  const std::filesystem::path& dir() const { return dir_; }
  pid_t pid() const { return pid_; }
  // The last `bytes` of containerd's log (for failure messages).
  std::string logTail(size_t bytes = 4000) const;
  // `ctr --address <socket> --namespace k8s.io` as a shell command line prefix. `ctr run` must be
  // given `--fifo-dir <dir>/fifo`: ctr makes its fifos on the client side (by default in the
  // machine's /run/containerd/fifo), and the shim must see them under the same path.
  std::string ctrCommand() const;

  // Builds the test images (test/images/make-test-images.sh: nodeagent.test/busybox:1,
  // nodeagent.test/busybox-nonroot:1, nodeagent.test/pause:1) and imports them into this
  // containerd's k8s.io namespace. Throws std::runtime_error with the script's output on failure.
  void importTestImages();
  // The references of the images in the k8s.io namespace (`ctr images ls -q`), sorted. Throws
  // std::runtime_error when ctr fails.
  std::vector<std::string> imageReferences() const;

  // With CNI: the pods' subnet ("10.201.17.0/24"), its gateway (the bridge's address,
  // "10.201.17.1") and the bridge's name. Empty without CNI.
  const std::string& podSubnet() const { return subnet_; }
  const std::string& podGateway() const { return gateway_; }
  const std::string& bridgeName() const { return bridge_; }
  // Whether `ip` (dotted IPv4) is in podSubnet().
  bool inPodSubnet(const std::string& ip) const;

  // The processes running under this containerd's shims (the containers' processes, the
  // sandboxes' pause processes), pid -> command line with spaces between the arguments. The
  // shims themselves are not listed.
  std::map<pid_t, std::string> containerProcesses() const;

  // Stops containerd alone (SIGTERM) and starts it again on the same dirs and socket, as an
  // operator's `systemctl restart containerd`: the shims and containers keep running and the new
  // containerd finds them. Throws as the constructor.
  void restart();

  // Stops containerd, kills its shims and their processes, unmounts and removes the dir.
  // Idempotent.
  void stop();

 private:
  void launch();
  void waitReady();
  // Picks and locks a subnet and a bridge name, deletes a stale bridge of that name, writes the
  // conflist.
  void setUpCni();
  // Deletes the bridge and releases the subnet's lock.
  void tearDownCni();

  TestContainerdOptions options_;
  std::filesystem::path dir_;
  std::filesystem::path socket_path_;
  pid_t pid_ = -1;
  std::string subnet_;
  std::string gateway_;
  std::string bridge_;
  int subnet_lock_fd_ = -1;
};

}  // namespace nodeagent::testing
