#include "test/support/containerd.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "agent/volume/subpath.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"

extern char** environ;

namespace nodeagent::testing {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(10);

std::string findExecutable(const std::string& name) {
  for (const char* dir :
       {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}) {
    fs::path path = fs::path(dir) / name;
    if (::access(path.c_str(), X_OK) == 0) return path.string();
  }
  return "";
}

// Something accepts connections on the Unix socket `path`.
bool socketAccepts(const fs::path& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

bool hasOverlayFs() {
  std::ifstream in("/proc/filesystems");
  std::string line;
  while (std::getline(in, line)) {
    if (line.ends_with("\toverlay")) return true;
  }
  return false;
}

std::string makeTempDir() {
  std::string templ = (fs::temp_directory_path() / "nodeagent-containerd-XXXXXX").string();
  if (::mkdtemp(templ.data()) == nullptr) {
    throw std::runtime_error("containerd test harness: mkdtemp " + templ + ": " +
                             std::strerror(errno));
  }
  return templ;
}

std::string configToml(const fs::path& dir, const fs::path& socket,
                       const TestContainerdOptions& options) {
  const std::string d = dir.string();
  std::ostringstream out;
  out << "version = 2\n"
      << "root = \"" << d << "/root\"\n"
      << "state = \"" << d << "/state\"\n"
      << "disabled_plugins = [\"io.containerd.snapshotter.v1.btrfs\", "
         "\"io.containerd.snapshotter.v1.zfs\", \"io.containerd.snapshotter.v1.devmapper\", "
         "\"io.containerd.snapshotter.v1.aufs\", \"io.containerd.tracing.processor.v1.otlp\", "
         "\"io.containerd.internal.v1.tracing\"]\n\n"
      << "[grpc]\n  address = \"" << socket.string() << "\"\n"
      << "[ttrpc]\n  address = \"" << socket.string() << ".ttrpc\"\n"
      << "[debug]\n  address = \"\"\n  level = \"info\"\n"
      << "[metrics]\n  address = \"\"\n\n"
      << "[plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"" << d << "/opt\"\n"
      << "[plugins.\"io.containerd.grpc.v1.cri\"]\n"
      << "  disable_tcp_service = true\n"
      // Some machines (this project's VMs) refuse a negative oom_score_adj even to root, and
      // containerd gives every sandbox -998: clamp to containerd's own score instead.
      << "  restrict_oom_score_adj = true\n"
      << "  stream_server_address = \"127.0.0.1\"\n  stream_server_port = \"0\"\n"
      << "  sandbox_image = \"" << options.sandbox_image << "\"\n"
      << "  [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n"
      << "    snapshotter = \"overlayfs\"\n    default_runtime_name = \"runc\"\n"
      << "    [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n"
      << "      runtime_type = \"io.containerd.runc.v2\"\n"
      << "      [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n"
      << "        SystemdCgroup = false\n        Root = \"" << d << "/runc\"\n"
      << "  [plugins.\"io.containerd.grpc.v1.cri\".cni]\n"
      << "    bin_dir = \"" << (options.cni ? std::string(kCniBinDir) : d + "/cni/bin")
      << "\"\n    conf_dir = \"" << d << "/cni/conf\"\n";
  for (const auto& host : options.plain_http_registries) {
    out << "  [plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"" << host << "\"]\n"
        << "    endpoint = [\"http://" << host << "\"]\n";
  }
  return out.str();
}

// Runs `args` (args[0] a path) with no input or output; its exit status (-1: not run).
int runQuiet(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (int fd : {0, 1, 2}) {
    posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
  }
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// An IPv4 prefix in host byte order.
struct Prefix {
  uint32_t net = 0;
  uint32_t mask = 0;
};

// The machine's IPv4 routes but the default one (/proc/net/route: hex in network byte order).
std::vector<Prefix> hostRoutes() {
  std::vector<Prefix> routes;
  std::istringstream in(readFile("/proc/net/route"));
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string iface, dest, gateway, flags, refcnt, use, metric, mask;
    if (!(fields >> iface >> dest >> gateway >> flags >> refcnt >> use >> metric >> mask)) continue;
    Prefix route{ntohl(static_cast<uint32_t>(std::stoul(dest, nullptr, 16))),
                 ntohl(static_cast<uint32_t>(std::stoul(mask, nullptr, 16)))};
    if (route.mask != 0) routes.push_back(route);
  }
  return routes;
}

bool overlaps(const Prefix& a, const Prefix& b) { return ((a.net ^ b.net) & a.mask & b.mask) == 0; }

std::string dotted(uint32_t address) {
  return std::to_string(address >> 24) + "." + std::to_string((address >> 16) & 0xff) + "." +
         std::to_string((address >> 8) & 0xff) + "." + std::to_string(address & 0xff);
}

std::optional<uint32_t> parseDotted(const std::string& text) {
  in_addr address{};
  if (::inet_pton(AF_INET, text.c_str(), &address) != 1) return std::nullopt;
  return ntohl(address.s_addr);
}

// The bridge plugin with host-local addresses on `subnet`; no masquerading (no iptables rule).
std::string cniConflist(const std::string& bridge, const std::string& subnet,
                        const std::string& gateway, const fs::path& ipam_dir) {
  return R"({"cniVersion": "0.4.0", "name": "nodeagent-test", "plugins": [{"type": "bridge", )"
         R"("bridge": ")" +
         bridge +
         R"(", "isGateway": true, "ipMasq": false, "ipam": {"type": "host-local", )"
         R"("ranges": [[{"subnet": ")" +
         subnet + R"(", "gateway": ")" + gateway + R"("}]], "dataDir": ")" + ipam_dir.string() +
         R"("}}]})"
         "\n";
}

// Waits for our child `pid` to exit, up to `deadline`. True when it has been reaped.
bool waitChild(pid_t pid, std::chrono::milliseconds deadline) {
  auto end = Clock::now() + deadline;
  for (;;) {
    int status = 0;
    pid_t rc = ::waitpid(pid, &status, WNOHANG);
    if (rc == pid || (rc < 0 && errno == ECHILD)) return true;
    if (Clock::now() >= end) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
}

// pid -> parent pid, and pid -> command line, of every process.
struct ProcessTable {
  std::map<pid_t, pid_t> parent;
  std::map<pid_t, std::string> cmdline;
};

ProcessTable readProcessTable() {
  ProcessTable table;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    pid_t pid = std::stoi(name);
    std::string stat = readFile(entry.path() / "stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (state == 'Z') continue;  // already dead
    table.parent[pid] = ppid;
    std::string cmd = readFile(entry.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    table.cmdline[pid] = cmd;
  }
  return table;
}

// The shims of the containerd serving `socket` (their -address argument) and every process
// under them (the containers).
std::vector<pid_t> shimProcesses(const fs::path& socket) {
  ProcessTable table = readProcessTable();
  std::vector<pid_t> found;
  const std::string address = "-address " + socket.string() + " ";
  for (const auto& [pid, cmd] : table.cmdline) {
    if ((cmd + " ").find(address) != std::string::npos) found.push_back(pid);
  }
  for (size_t i = 0; i < found.size(); ++i) {  // grows while we walk it: descendants
    for (const auto& [pid, ppid] : table.parent) {
      if (ppid == found[i] && std::find(found.begin(), found.end(), pid) == found.end()) {
        found.push_back(pid);
      }
    }
  }
  return found;
}

void killShims(const fs::path& socket, std::chrono::milliseconds deadline) {
  auto end = Clock::now() + deadline;
  for (;;) {
    std::vector<pid_t> pids = shimProcesses(socket);
    if (pids.empty()) return;
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    if (Clock::now() >= end) return;
    std::this_thread::sleep_for(kPollInterval);
  }
}

// Mount points under `dir` (not `dir` itself) in this mount namespace, deepest first, lazily
// unmounted (normally none: containerd's mounts live in its own namespace). Mounts stacked on one
// point are listed once: one is detached per round, a bounded number of rounds.
void unmountUnder(const fs::path& dir) {
  std::error_code ec;
  fs::path self = fs::weakly_canonical(dir, ec);
  if (ec) self = dir;
  for (int round = 0; round < 8; ++round) {
    bool any = false;
    for (const auto& point : agent::mountPointsBelow(dir)) {
      if (point == self) continue;
      ::umount2(point.c_str(), MNT_DETACH);
      any = true;
    }
    if (!any) return;
  }
}

}  // namespace

void makeSharedMount(const fs::path& dir) {
  if (::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
      ::mount(nullptr, dir.c_str(), nullptr, MS_SHARED, nullptr) != 0) {
    throw std::runtime_error("cannot make " + dir.string() +
                             " a shared mount: " + std::strerror(errno));
  }
}

void unmountSharedMount(const fs::path& dir) {
  unmountUnder(dir);
  ::umount2(dir.c_str(), MNT_DETACH);
}

std::string containerdUnavailableReason() {
  if (::geteuid() != 0)
    return "containerd needs root (this test runs as uid " + std::to_string(::geteuid()) + ")";
  for (const char* tool :
       {"containerd", "containerd-shim-runc-v2", "runc", "unshare", "setpriv", "ctr"}) {
    if (findExecutable(tool).empty()) {
      return std::string("no ") + tool + " on this machine (deploy/install-deps.sh installs it)";
    }
  }
  if (!hasOverlayFs()) return "the kernel has no overlay file system (containerd's overlayfs)";
  return "";
}

void skipUnlessContainerdCanRun() {
  std::string why = containerdUnavailableReason();
  if (!why.empty()) skipTest("containerd cannot run here: " + why);
}

std::string cniUnavailableReason() {
  std::string why = containerdUnavailableReason();
  if (!why.empty()) return why;
  for (const char* plugin : {"bridge", "host-local", "loopback"}) {
    const fs::path path = fs::path(kCniBinDir) / plugin;
    if (::access(path.c_str(), X_OK) != 0) {
      return "no CNI plugin " + path.string() +
             " (deploy/install-deps.sh installs containernetworking-plugins)";
    }
  }
  if (findExecutable("ip").empty()) return "no ip tool (iproute2)";
  return "";
}

void skipUnlessCniCanRun() {
  std::string why = cniUnavailableReason();
  if (!why.empty()) skipTest("pods cannot have a network of their own here: " + why);
}

TestContainerd::TestContainerd(TestContainerdOptions options) : options_(std::move(options)) {
  dir_ = makeTempDir();
  socket_path_ = dir_ / "containerd.sock";
  try {
    fs::create_directories(dir_ / "cni" / "conf");
    if (options_.cni) setUpCni();
    launch();
    waitReady();
  } catch (...) {
    stop();
    throw;
  }
}

TestContainerd::~TestContainerd() { stop(); }

void TestContainerd::setUpCni() {
  const auto routes = hostRoutes();
  const fs::path lock_dir =
      fs::exists("/run/lock") ? fs::path("/run/lock") : fs::temp_directory_path();
  std::random_device random;
  // 10.200.0.0/13: 2048 subnets of 256 addresses.
  for (int tries = 0; tries < 100 && subnet_lock_fd_ < 0; ++tries) {
    const uint32_t index = random() % 2048;
    const Prefix subnet{(10u << 24) | (200u << 16) | (index << 8), 0xffffff00u};
    if (std::any_of(routes.begin(), routes.end(),
                    [&](const Prefix& r) { return overlaps(r, subnet); })) {
      continue;
    }
    const std::string name = dotted(subnet.net);
    const fs::path lock = lock_dir / ("nodeagent-test-cni-" + name + ".lock");
    int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      continue;
    }
    subnet_lock_fd_ = fd;
    subnet_ = name + "/24";
    gateway_ = dotted(subnet.net + 1);
    char bridge[16];
    std::snprintf(bridge, sizeof(bridge), "nabr%04x", index);
    bridge_ = bridge;
  }
  if (subnet_lock_fd_ < 0) {
    throw std::runtime_error("containerd test harness: no free /24 in 10.200.0.0/13 for pods");
  }
  // A bridge of this name is a stale one (its subnet's lock is ours now).
  if (fs::exists("/sys/class/net/" + bridge_))
    runQuiet({findExecutable("ip"), "link", "del", bridge_});
  if (options_.agent_writes_cni_config) return;
  fs::create_directories(dir_ / "cni" / "ipam");
  writeFile(dir_ / "cni" / "conf" / "10-nodeagent-test.conflist",
            cniConflist(bridge_, subnet_, gateway_, dir_ / "cni" / "ipam"));
}

std::vector<std::string> TestContainerd::agentCniFlags(bool pod_cidr) const {
  std::vector<std::string> flags = {"--cni-conf-dir=" + cniConfDir().string(),
                                    "--cni-bridge=" + bridge_, "--cni-masquerade=false"};
  if (pod_cidr) flags.push_back("--pod-cidr=" + subnet_);
  return flags;
}

void TestContainerd::tearDownCni() {
  if (!bridge_.empty() && fs::exists("/sys/class/net/" + bridge_)) {
    runQuiet({findExecutable("ip"), "link", "del", bridge_});
  }
  if (subnet_lock_fd_ >= 0) ::close(subnet_lock_fd_);
  subnet_lock_fd_ = -1;
  subnet_.clear();
  gateway_.clear();
  bridge_.clear();
}

bool TestContainerd::inPodSubnet(const std::string& ip) const {
  auto address = parseDotted(ip);
  auto subnet = parseDotted(subnet_.substr(0, subnet_.find('/')));
  return address && subnet && !subnet_.empty() && (*address & 0xffffff00u) == *subnet;
}

void TestContainerd::launch() {
  if (socket_path_.string().size() >= sizeof(sockaddr_un::sun_path)) {
    throw std::runtime_error("containerd test harness: socket path too long: " +
                             socket_path_.string() + " (set TMPDIR to a shorter path)");
  }
  fs::create_directories(dir_ / "run");
  writeFile(dir_ / "config.toml", configToml(dir_, socket_path_, options_));
  // setpriv: SIGKILL when the starting thread dies; unshare: a mount namespace of its own whose
  // mounts do not reach the machine's; then <dir>/run over /run (see the header). With CNI, a file
  // that says 1 over /proc/sys/net/ipv4/ip_forward there: the bridge plugin (isGateway) turns the
  // node's IP forwarding on unless it reads that it is on, and the test's traffic (node to pod,
  // pod to pod on the bridge) needs none, so the machine's setting is left as it is.
  std::string forward_file;
  if (options_.cni) {
    forward_file = (dir_ / "ip_forward").string();
    writeFile(forward_file, "1\n");
  }
  std::vector<std::string> args = {
      findExecutable("setpriv"),
      "--pdeathsig",
      "KILL",
      "--",
      findExecutable("unshare"),
      "--mount",
      "--propagation",
      "slave",
      "--",
      "/bin/sh",
      "-c",
      "mount --bind \"$1\" /run && "
      "{ [ -z \"$4\" ] || mount --bind \"$4\" /proc/sys/net/ipv4/ip_forward; } && "
      "exec \"$2\" --config \"$3\"",
      "sh",
      (dir_ / "run").string(),
      findExecutable("containerd"),
      (dir_ / "config.toml").string(),
      forward_file};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = (dir_ / "containerd.log").string();
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  int rc = ::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    pid_ = -1;
    throw std::runtime_error("containerd test harness: spawn " + args[0] + ": " +
                             std::strerror(rc));
  }
}

void TestContainerd::waitReady() {
  auto end = Clock::now() + options_.start_deadline;
  for (;;) {
    if (socketAccepts(socket_path_)) return;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("containerd exited before serving " + socket_path_.string() +
                               " (wait status " + std::to_string(status) + "); its log:\n" +
                               logTail());
    }
    if (Clock::now() >= end) {
      throw std::runtime_error("containerd did not serve " + socket_path_.string() + " within " +
                               std::to_string(options_.start_deadline.count()) + " ms; its log:\n" +
                               logTail());
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

std::string TestContainerd::logTail(size_t bytes) const {
  std::string log = readFile(dir_ / "containerd.log");
  return log.size() <= bytes ? log : log.substr(log.size() - bytes);
}

std::string TestContainerd::ctrCommand() const {
  return "ctr --address '" + socket_path_.string() + "' --namespace k8s.io";
}

void TestContainerd::importTestImages() {
  const fs::path script = testDataPath("../images/make-test-images.sh");
  const fs::path out = dir_ / "images.log";
  const std::string command = "'" + script.string() + "' '" + socket_path_.string() + "' '" +
                              (dir_ / "images").string() + "' >'" + out.string() + "' 2>&1";
  if (std::system(command.c_str()) != 0) {
    throw std::runtime_error("importing the test images failed (" + command + "):\n" +
                             readFile(out));
  }
}

std::vector<std::string> TestContainerd::imageReferences() const {
  const std::string command = ctrCommand() + " images ls -q 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run " + command);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  if (::pclose(pipe) != 0) throw std::runtime_error(command + " failed:\n" + out);
  std::vector<std::string> refs;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) refs.push_back(line);
  }
  std::sort(refs.begin(), refs.end());
  return refs;
}

std::map<pid_t, std::string> TestContainerd::containerProcesses() const {
  ProcessTable table = readProcessTable();
  const std::string address = "-address " + socket_path_.string() + " ";
  std::map<pid_t, std::string> found;
  for (pid_t pid : shimProcesses(socket_path_)) {
    const std::string& cmd = table.cmdline[pid];
    if ((cmd + " ").find(address) == std::string::npos) found[pid] = cmd;
  }
  return found;
}

void TestContainerd::restart() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    if (!waitChild(pid_, options_.stop_grace)) {
      ::kill(pid_, SIGKILL);
      waitChild(pid_, std::chrono::seconds(10));
    }
    pid_ = -1;
  }
  std::error_code ec;
  fs::remove(socket_path_, ec);
  launch();
  waitReady();
}

void TestContainerd::stop() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    if (!waitChild(pid_, options_.stop_grace)) {
      ::kill(pid_, SIGKILL);
      waitChild(pid_, std::chrono::seconds(10));
    }
    pid_ = -1;
  }
  if (dir_.empty()) return;
  killShims(socket_path_, std::chrono::seconds(10));
  unmountUnder(dir_);
  // The pods' network namespaces went with containerd's mount namespace and their processes, and
  // their veths with them: only the bridge is left.
  tearDownCni();
  std::error_code ec;
  fs::remove_all(dir_, ec);
  dir_.clear();
}

}  // namespace nodeagent::testing
