// A running agent (process runtime) attacked with each hostile input it must withstand: a
// manifest URL that streams headers without end, manifests that try to escape the agent's
// directories, an oversized manifest, a file name that would forge log lines, slow and idle
// connections on its port, and a garbled container state file across a restart. The agent stays
// up and answers, its memory stays bounded, nothing is written outside its directories, and the
// good pod's container is never duplicated.
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <set>

#include "test/e2e/daemon_fixture.h"
#include "test/support/hostile_http_server.h"

using namespace nodeagent;
using namespace nodeagent::e2e;
using namespace std::chrono_literals;

namespace {

// A process' memory figure from /proc/<pid>/status ("VmRSS", "VmHWM"), in KiB; -1 if unknown.
long procStatusKb(int pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) == 0)
      return std::strtol(line.c_str() + key.size() + 1, nullptr, 10);
  }
  return -1;
}

// A connection to 127.0.0.1:port that has sent `bytes` (maybe nothing); closed on destruction.
class OpenConnection {
 public:
  OpenConnection(int port, const std::string& bytes) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        !bytes.empty()) {
      (void)::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    }
  }
  ~OpenConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  OpenConnection(const OpenConnection&) = delete;
  OpenConnection& operator=(const OpenConnection&) = delete;
  void send(const std::string& bytes) {
    (void)::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }

 private:
  int fd_ = -1;
};

// Everything under `dir`, as paths relative to it.
std::set<std::string> entriesUnder(const fs::path& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    out.insert(fs::relative(it->path(), dir).string());
  }
  return out;
}

}  // namespace

TEST_CASE(
    "daemon under attack stays up, answers, stays bounded, writes only its own directories "
    "and never duplicates a container",
    "[e2e][daemon][attack]") {
  using Hostile = testing::HostileHttpServer;
  Hostile url(Hostile::endlessHeaders());
  Daemon d;
  const auto m = marker("attack-web");
  d.writeManifest("web.yaml", shPod("web", m, "sleep 1000 & wait"));
  // Names that try to leave --root-dir: a UID with "..", a container and a volume named as paths.
  d.writeManifest(
      "escape-uid.yaml",
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: escape\n  uid: ../../escaped-uid\n"
      "spec:\n  containers:\n  - name: main\n    image: x\n    command: [sleep, '1']\n");
  d.writeManifest("escape-names.yaml",
                  "apiVersion: v1\nkind: Pod\nmetadata:\n  name: names\nspec:\n  volumes:\n"
                  "  - name: ../../../escaped-volume\n    emptyDir: {}\n  containers:\n"
                  "  - name: ../../escaped-container\n    image: x\n    command: [sleep, '1']\n");
  d.writeManifest("big.yaml", "# " + std::string(11u << 20, 'x') + "\n");
  d.writeManifest("forged\nI0101 00:00:00.000000 1 fake.go:1] forged line\xff.yaml", "garbage: [");
  const auto outside_before = entriesUnder(d.dir());
  d.start({"--manifest-url=" + url.url("/pods"), "--http-check-frequency=1s"});

  // Slow and idle connections on the read-only port while the URL attacks.
  std::vector<std::unique_ptr<OpenConnection>> conns;
  for (int i = 0; i < 200; ++i) conns.push_back(std::make_unique<OpenConnection>(d.port(), ""));
  for (int i = 0; i < 8; ++i) {
    conns.push_back(std::make_unique<OpenConnection>(d.port(), "GET /pods HTTP/1.1\r\n"));
  }

  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web"); }, 20s);
  REQUIRE_EVENTUALLY(
      d, [&] { return url.connections() >= 3; }, 20s);  // several polls refused
  // /healthz answers promptly all along (each GET has a 5 s read timeout; none may fail).
  auto slowest = 0ms;
  for (int i = 0; i < 10; ++i) {
    for (auto& c : conns) {
      if (i % 3 == 0) c->send("X");  // the slow ones drip
    }
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(d.get("/healthz"));
    slowest = std::max(slowest, std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::steady_clock::now() - t0));
  }
  WARN("slowest /healthz under attack: " << slowest.count() << " ms");
  // Bounded: the endless headers were cut at 64 KiB, the big manifest never read.
  const long peak_kb = procStatusKb(d.pid(), "VmHWM");
  WARN("agent peak RSS under attack: " << peak_kb << " KiB");
  CHECK(peak_kb > 0);
  CHECK(peak_kb < 150 * 1024);
  const std::string log = readOr(d.dir() / "agent.log");
  CHECK_THAT(log, Catch::Contains("response headers larger than 65536 bytes"));
  CHECK_THAT(log, Catch::Contains("larger than 10485760 bytes"));
  CHECK(log.find("\nI0101 00:00:00.000000 1 fake.go:1] forged line") == std::string::npos);
  auto errors = d.get("/manifest-errors");
  REQUIRE(errors);
  CHECK_THAT(*errors, Catch::Contains("escape-uid.yaml") && Catch::Contains("escape-names.yaml"));
  CHECK_FALSE(d.pod("escape"));
  CHECK_FALSE(d.pod("names"));

  // Nothing outside the agent's own directories: the test directory holds only what it held
  // plus what lies under root, logs and the agent's log.
  for (const auto& p : entriesUnder(d.dir())) {
    if (outside_before.count(p)) continue;
    INFO(p);
    CHECK((p.rfind("root", 0) == 0 || p.rfind("logs", 0) == 0 || p == "agent.log"));
  }
  for (const char* escaped : {"escaped-uid", "escaped-volume", "escaped-container"}) {
    CHECK_FALSE(fs::exists(d.dir().parent_path() / escaped));
    CHECK_FALSE(fs::exists(d.dir() / escaped));
  }

  // A garbled state file across a restart: the running container is adopted, never started twice.
  const int container_pid = onePid(m);
  REQUIRE(container_pid != 0);
  int garbled = 0;
  for (const auto& e : fs::directory_iterator(d.root() / "containers")) {
    const auto config = readOr(e.path() / "config");
    if (config.find(m) == std::string::npos) continue;
    testing::writeFile(e.path() / "state", "\x01\x02garbage");
    ++garbled;
  }
  REQUIRE(garbled == 1);
  REQUIRE(d.stop(SIGTERM) == 0);
  conns.clear();
  d.start({"--manifest-url=" + url.url("/pods"), "--http-check-frequency=1s"});
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web"); }, 20s);
  for (int i = 0; i < 5; ++i) {
    CHECK(pidsWithArg(m) == std::vector<int>{container_pid});
    REQUIRE(d.get("/healthz"));
  }
  auto p = d.pod("web");
  REQUIRE(p);
  CHECK((*p)["status"]["containerStatuses"][0]["restartCount"] == 0);
  // The rebuilt state is written back: operators' commands and the next agent can read it.
  for (const auto& e : fs::directory_iterator(d.root() / "containers")) {
    if (readOr(e.path() / "config").find(m) == std::string::npos) continue;
    runtime::ShimState st;
    std::string error;
    CHECK(runtime::decodeShimState(readOr(e.path() / "state"), st, error));
    CHECK(st.shim_pid > 0);
  }
}
