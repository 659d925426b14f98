// The kubelet API's figures, on the e2e setup (test/support/kubelet_env.h: test-apiserver
// in-process, the nodeagent binary with the process runtime, the real kubectl), loopback only.
// One static pod: `idle` sleeps (exec target), `ticker` writes its own write time
// (`date +%s%N`) every 200 ms, `bulk` writes 100 MiB of 100-byte lines at once then sleeps.
//
// 1. exec round trip: `kubectl exec POD -c idle -- true` through test-apiserver, p50/p99 over 50
//    runs, kubectl's process start included, next to `kubectl version --client` (kubectl's start
//    alone); and the same exec straight to the agent's port over a WebSocket (v5.channel.k8s.io,
//    client certificate: TLS handshake, upgrade, spawn, exit status), the server side alone.
// 2. `kubectl logs -f` latency: each ticker line's arrival on kubectl's stdout (read through a
//    pipe as lines come) minus the time the container wrote it, p50/p99 over 30 lines; and the
//    same with a chunked HTTPS GET of /containerLogs?follow=true straight to the agent.
// 3. `kubectl logs` throughput on the 100 MiB log (MB/s of log text, kubectl's stdout read
//    through a pipe and counted), against `cat` of the log files (page cache, MB/s of file
//    bytes, CRI prefixes included) and a direct HTTPS GET of /containerLogs from the agent.
// 4. memory per open exec session: the agent's VmRSS and open descriptors with 0 and with 20
//    idle `kubectl exec -i POD -c idle -- cat` sessions (stdin a pipe the bench holds open),
//    (after - before) / 20.
// The agent's CPU time (utime + stime from /proc) is printed per operation where it explains the
// figure (for 3 also this process's, which runs test-apiserver, and the reader's). Arguments pick
// figures (exec, follow, logs, sessions; all by default). Every wait has a deadline; the
// containers are killed by KubeletEnv's destructor (or on SIGINT/SIGTERM by the signal thread).
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test/support/bench_signals.h"
#include "test/support/kubelet_env.h"
#include "test/support/ws_client.h"

extern char** environ;

namespace {

using namespace nodeagent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;
using testing::KubeletEnv;

constexpr size_t kBulkBytes = 100u << 20;
constexpr int kExecRuns = 50;
constexpr int kFollowLines = 30;
constexpr int kThroughputRuns = 3;
constexpr int kSessions = 20;

const std::string kPodYaml = R"(apiVersion: v1
kind: Pod
metadata: {name: bench, namespace: default}
spec:
  containers:
  - name: idle
    image: busybox
    command: ["sh", "-c", "exec sleep 3600"]
  - name: ticker
    image: busybox
    command: ["sh", "-c", "while true; do date +%s%N; sleep 0.2; done"]
  - name: bulk
    image: busybox
    command: ["sh", "-c", "yes 0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789 | head -c )" +
                             std::to_string(kBulkBytes) +
                             R"(; echo bulk-done; exec sleep 3600"]
)";

KubeletEnv* g_env = nullptr;

double msSince(SteadyClock::time_point start) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - start).count();
}

// "p50 X ms, p99 Y ms (n runs)" of `samples` in milliseconds.
std::string latencies(std::vector<double> samples) {
  if (samples.empty()) return "no samples";
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    return samples[std::min(samples.size() - 1, static_cast<size_t>(q * samples.size()))];
  };
  char buf[128];
  std::snprintf(buf, sizeof buf, "p50 %.1f ms, p99 %.1f ms (%zu runs)", at(0.5), at(0.99),
                samples.size());
  return buf;
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "kubelet_api_bench: %s\n", what.c_str());
  if (g_env) std::fprintf(stderr, "%s\n", g_env->diagnostics().c_str());
  throw std::runtime_error(what);
}

// A child process with its stdin and/or stdout on pipes the bench holds; killed and reaped when
// destroyed.
struct Child {
  pid_t pid = -1;
  int in = -1;          // the write end of its stdin, or -1
  int out = -1;         // the read end of its stdout, or -1
  std::string pending;  // stdout read but not yet taken as lines

  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    closeIn();
    if (out >= 0) ::close(out);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  void closeIn() {
    if (in >= 0) ::close(in);
    in = -1;
  }
};

// Starts `argv` with stdin from a pipe (or /dev/null) and stdout into a pipe (or /dev/null);
// stderr goes to `err`.
std::unique_ptr<Child> spawn(const std::vector<std::string>& argv, bool pipe_in, bool pipe_out,
                             const fs::path& err = "/dev/null") {
  auto c = std::make_unique<Child>();
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  if ((pipe_in && ::pipe2(in, O_CLOEXEC) != 0) || (pipe_out && ::pipe2(out, O_CLOEXEC) != 0))
    fail("pipe2");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (pipe_in)
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  else
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (pipe_out)
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  else
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int rc = posix_spawnp(&c->pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (pipe_in) {
    ::close(in[0]);
    c->in = in[1];
  }
  if (pipe_out) {
    ::close(out[1]);
    c->out = out[0];
  }
  if (rc != 0) fail("cannot start " + argv[0]);
  return c;
}

// The exit code of `c` once it ends within `deadline` (through a pidfd: no polling), else
// nullopt.
std::optional<int> waitExit(Child& c, std::chrono::milliseconds deadline) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, c.pid, 0));
  if (pidfd < 0) fail("pidfd_open");
  pollfd p{pidfd, POLLIN, 0};
  const int ready = ::poll(&p, 1, static_cast<int>(deadline.count()));
  ::close(pidfd);
  if (ready != 1) return std::nullopt;
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  c.pid = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The next line (without '\n') of `c`'s stdout, or nullopt at its end or at `deadline`.
std::optional<std::string> readLine(Child& c, SteadyClock::time_point deadline) {
  char buf[4096];
  for (;;) {
    if (auto nl = c.pending.find('\n'); nl != std::string::npos) {
      std::string line = c.pending.substr(0, nl);
      c.pending.erase(0, nl + 1);
      return line;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    pollfd p{c.out, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) != 1)
      return std::nullopt;
    const ssize_t n = ::read(c.out, buf, sizeof buf);
    if (n <= 0) return std::nullopt;
    c.pending.append(buf, static_cast<size_t>(n));
  }
}

// Bytes of `c`'s stdout until its end (its exit code must be 0 within `deadline`).
size_t drain(Child& c, std::chrono::milliseconds deadline) {
  std::vector<char> buf(256 * 1024);
  size_t bytes = 0;
  for (ssize_t n; (n = ::read(c.out, buf.data(), buf.size())) > 0;) bytes += static_cast<size_t>(n);
  if (waitExit(c, deadline) != 0) fail("a drained command failed");
  return bytes;
}

int64_t wallNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The agent's CPU time so far in milliseconds (utime + stime).
double agentCpuMs(pid_t pid) {
  const std::string stat = testing::readFile("/proc/" + std::to_string(pid) + "/stat");
  const std::string rest = stat.substr(stat.rfind(')') + 2);
  std::vector<std::string> fields;
  for (size_t i = 0, j; i < rest.size(); i = j + 1) {
    j = rest.find(' ', i);
    if (j == std::string::npos) j = rest.size();
    fields.push_back(rest.substr(i, j - i));
  }
  // Fields 14 and 15 of /proc/PID/stat; `rest` starts at field 3.
  const double ticks = std::stod(fields[11]) + std::stod(fields[12]);
  return ticks * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// CPU time (user + system) of this process or of its reaped children, in milliseconds.
double cpuMs(int who) {
  rusage u{};
  ::getrusage(who, &u);
  auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + t.tv_usec / 1e3; };
  return ms(u.ru_utime) + ms(u.ru_stime);
}

// A number field of /proc/PID/status ("VmRSS:" in KiB, "Threads:"), -1 when missing.
long statusKib(pid_t pid, const std::string& field) {
  const std::string status = testing::readFile("/proc/" + std::to_string(pid) + "/status");
  const size_t at = status.find("\n" + field);
  return at == std::string::npos ? -1 : std::stol(status.substr(at + 1 + field.size()));
}

// The open descriptors of `pid` by kind ("socket", "pipe", "anon_inode", a file's path...).
std::map<std::string, int> fdKinds(pid_t pid) {
  std::map<std::string, int> kinds;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const std::string target = fs::read_symlink(e.path(), ec).string();
    ++kinds[target.substr(0, target.find(':'))];
  }
  return kinds;
}

int total(const std::map<std::string, int>& kinds) {
  int n = 0;
  for (const auto& [kind, count] : kinds) n += count;
  return n;
}

// "2 socket, 3 pipe" for the kinds whose count grew from `before` to `after`, per `per`.
std::string fdGrowth(const std::map<std::string, int>& before,
                     const std::map<std::string, int>& after, int per) {
  std::string out;
  for (const auto& [kind, count] : after) {
    const auto it = before.find(kind);
    const int grown = count - (it == before.end() ? 0 : it->second);
    if (grown <= 0) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s%.1f %s", out.empty() ? "" : ", ",
                  static_cast<double>(grown) / per, kind.c_str());
    out += buf;
  }
  return out.empty() ? "none" : out;
}

// What the figures run against: the pod's mirror name, a client certificate for the agent's
// port and the agent's pid.
struct Bench {
  KubeletEnv& env;
  std::string pod = KubeletEnv::mirrorName("bench");
  testing::TestPki::Files cert;
  fs::path err;  // where the commands' stderr goes
  pid_t agent() const { return env.agent->pid(); }
};

// The bulk container's log files (the live one and any rotated one).
std::vector<fs::path> bulkLogFiles(const KubeletEnv& env) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(env.dir / "logs", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_regular_file() && it->path().parent_path().filename() == "bulk")
      files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// True once the bulk container's live log ends with its last line.
bool bulkWritten(const KubeletEnv& env) {
  for (const auto& f : bulkLogFiles(env)) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (ec || size < kBulkBytes) continue;
    std::FILE* file = std::fopen(f.c_str(), "rb");
    if (!file) continue;
    char tail[64] = {};
    std::fseek(file, -static_cast<long>(sizeof tail - 1), SEEK_END);
    std::fread(tail, 1, sizeof tail - 1, file);
    std::fclose(file);
    if (std::string(tail).find("bulk-done") != std::string::npos) return true;
  }
  return false;
}

Bench prepare(KubeletEnv& env) {
  testing::writeFile(env.manifests / "bench.yaml", kPodYaml);
  // The bulk log must fit one file: kubectl logs reads the live file only.
  env.startAgent({"--container-log-max-size=1Gi", "--v=0"});
  Bench b{env, KubeletEnv::mirrorName("bench"), env.pki.issueClient("bench", {"system:masters"}),
          env.dir / "commands.err"};
  const auto start = SteadyClock::now();
  if (!testing::eventually(
          [&] {
            return env.kubectl({"exec", b.pod, "-c", "idle", "--", "true"}, 10s).exit_code == 0;
          },
          60s))
    fail("the pod's idle container never answered an exec");
  if (!testing::eventually([&] { return bulkWritten(env); }, 120s))
    fail("the bulk container did not write its 100 MiB in time");
  std::printf("setup: agent (pid %d) up, pod running and 100 MiB log written after %.1f s\n",
              b.agent(), msSince(start) / 1000);
  return b;
}

// Milliseconds from spawning `argv` to its exit, which must be 0.
double timeRun(const Bench& b, const std::vector<std::string>& argv) {
  const auto start = SteadyClock::now();
  auto c = spawn(argv, false, false, b.err);
  if (waitExit(*c, 30s) != 0) fail(argv[0] + " " + argv.back() + " failed");
  return msSince(start);
}

// One exec of `true` straight to the agent's port; `connect_ms` gets the time until the upgrade
// was answered (TCP, TLS handshake, authentication, upgrade).
double wsExec(const Bench& b, double& connect_ms) {
  testing::WsClientOptions o;
  o.client_cert = b.cert.cert_file;
  o.client_key = b.cert.key_file;
  o.protocols = {"v5.channel.k8s.io"};
  const auto start = SteadyClock::now();
  testing::WsClient ws;
  if (!ws.connect(b.env.port, "/exec/default/" + b.pod + "/idle?command=true&output=1&error=1", o))
    fail("exec WebSocket: " + ws.error());
  connect_ms = msSince(start);
  const auto out = testing::readChannels(ws);
  if (out.error.find("Success") == std::string::npos) fail("exec WebSocket: " + out.error);
  return msSince(start);
}

void execFigures(const Bench& b) {
  std::vector<double> version, through_api, direct, connect;
  for (int i = 0; i < kExecRuns; ++i)
    version.push_back(timeRun(b, b.env.kubectlArgv({"version", "--client"})));
  double cpu = agentCpuMs(b.agent());
  for (int i = 0; i < kExecRuns; ++i)
    through_api.push_back(
        timeRun(b, b.env.kubectlArgv({"exec", b.pod, "-c", "idle", "--", "true"})));
  const double api_cpu = (agentCpuMs(b.agent()) - cpu) / kExecRuns;
  cpu = agentCpuMs(b.agent());
  for (int i = 0; i < kExecRuns; ++i) {
    double c = 0;
    direct.push_back(wsExec(b, c));
    connect.push_back(c);
  }
  const double direct_cpu = (agentCpuMs(b.agent()) - cpu) / kExecRuns;
  std::printf("1. exec round trip\n");
  std::printf("   kubectl version --client (kubectl start alone): %s\n",
              latencies(version).c_str());
  std::printf(
      "   kubectl exec POD -c idle -- true via test-apiserver: %s; agent CPU %.1f ms/exec\n",
      latencies(through_api).c_str(), api_cpu);
  std::printf(
      "   WebSocket exec straight to the agent (v5, client cert): %s; agent CPU %.1f ms/exec\n",
      latencies(direct).c_str(), direct_cpu);
  std::printf("     of which connect (TCP + TLS + auth + upgrade): %s\n",
              latencies(connect).c_str());
}

// The latency of a ticker line in ms (arrival now minus its write time), or nullopt for a line
// that is not a ticker line or was written before `since` (history, not followed).
std::optional<double> lineLatency(const std::string& line, int64_t since) {
  const int64_t arrived = wallNanos();
  char* end = nullptr;
  const long long written = std::strtoll(line.c_str(), &end, 10);
  if (end == line.c_str() || written < since) return std::nullopt;
  return static_cast<double>(arrived - written) / 1e6;
}

std::vector<double> followKubectl(const Bench& b) {
  auto c = spawn(b.env.kubectlArgv({"logs", "-f", b.pod, "-c", "ticker", "--tail=0"}), false, true,
                 b.err);
  const int64_t since = wallNanos();
  const auto deadline = SteadyClock::now() + 30s;
  std::vector<double> samples;
  while (samples.size() < kFollowLines) {
    auto line = readLine(*c, deadline);
    if (!line) fail("kubectl logs -f: no line before the deadline");
    if (auto l = lineLatency(*line, since)) samples.push_back(*l);
  }
  return samples;
}

std::vector<double> followDirect(const Bench& b) {
  auto client = b.env.direct(&b.cert);
  const int64_t since = wallNanos();
  std::string pending;
  std::vector<double> samples;
  client->Get("/containerLogs/default/" + b.pod + "/ticker?follow=true&tailLines=0",
              [&](const char* data, size_t n) {
                pending.append(data, n);
                for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
                  if (auto l = lineLatency(pending.substr(0, nl), since)) samples.push_back(*l);
                  pending.erase(0, nl + 1);
                }
                return samples.size() < kFollowLines;
              });
  if (samples.size() < kFollowLines) fail("direct follow: too few lines");
  return samples;
}

void followFigures(const Bench& b) {
  double cpu = agentCpuMs(b.agent());
  const auto through_api = followKubectl(b);
  const double api_cpu = agentCpuMs(b.agent()) - cpu;
  cpu = agentCpuMs(b.agent());
  const auto direct = followDirect(b);
  const double direct_cpu = agentCpuMs(b.agent()) - cpu;
  std::printf("2. logs -f: a line's arrival minus its write time (a line every 200 ms)\n");
  std::printf("   kubectl logs -f via test-apiserver: %s; agent CPU %.0f ms over %.0f s\n",
              latencies(through_api).c_str(), api_cpu, kFollowLines * 0.2);
  std::printf("   chunked HTTPS GET straight to the agent: %s; agent CPU %.0f ms over %.0f s\n",
              latencies(direct).c_str(), direct_cpu, kFollowLines * 0.2);
}

// One read of the bulk log: bytes, seconds and the agent's CPU milliseconds.
struct Read {
  size_t bytes = 0;
  double secs = 0;
  double agent_cpu_ms = 0;
  double self_cpu_ms = 0;   // this process: test-apiserver's tunnel and the reading end
  double child_cpu_ms = 0;  // the reaped reader (kubectl, cat)
  double mbps() const { return static_cast<double>(bytes) / secs / 1e6; }
};

// Runs `read` kThroughputRuns times; the median run by time.
template <typename F>
Read medianRead(const Bench& b, F read) {
  std::vector<Read> runs;
  for (int i = 0; i < kThroughputRuns; ++i) {
    const double cpu = agentCpuMs(b.agent());
    const double self = cpuMs(RUSAGE_SELF), children = cpuMs(RUSAGE_CHILDREN);
    const auto start = SteadyClock::now();
    Read r;
    r.bytes = read();
    r.secs = msSince(start) / 1000;
    r.agent_cpu_ms = agentCpuMs(b.agent()) - cpu;
    r.self_cpu_ms = cpuMs(RUSAGE_SELF) - self;
    r.child_cpu_ms = cpuMs(RUSAGE_CHILDREN) - children;
    if (r.bytes < kBulkBytes) fail("a read of the bulk log came short");
    runs.push_back(r);
  }
  std::sort(runs.begin(), runs.end(), [](const Read& x, const Read& y) { return x.secs < y.secs; });
  return runs[runs.size() / 2];
}

size_t directRead(const Bench& b) {
  auto client = b.env.direct(&b.cert);
  size_t bytes = 0;
  auto res = client->Get("/containerLogs/default/" + b.pod + "/bulk", [&](const char*, size_t n) {
    bytes += n;
    return true;
  });
  if (!res || res->status != 200) fail("direct GET of the bulk log failed");
  return bytes;
}

void printRead(const char* what, const char* of, const Read& r) {
  std::printf("   %s: %.0f MB/s of %s (%.2f s); CPU %.0f / %.0f / %.0f ms\n", what, r.mbps(), of,
              r.secs, r.agent_cpu_ms, r.self_cpu_ms, r.child_cpu_ms);
}

void throughputFigures(const Bench& b) {
  const auto files = bulkLogFiles(b.env);
  std::vector<std::string> cat = {"cat"};
  size_t on_disk = 0;
  for (const auto& f : files) {
    cat.push_back(f.string());
    on_disk += fs::file_size(f);
  }
  const Read disk = medianRead(b, [&] { return drain(*spawn(cat, false, true, b.err), 30s); });
  const Read kubectl = medianRead(b, [&] {
    return drain(*spawn(b.env.kubectlArgv({"logs", b.pod, "-c", "bulk"}), false, true, b.err), 60s);
  });
  const Read direct = medianRead(b, [&] { return directRead(b); });
  std::printf(
      "3. logs throughput: %.1f MiB of log text in %zu file(s) of %.1f MiB (CRI lines), "
      "median of %d runs; CPU ms: agent / this process (test-apiserver, reading end) / reader\n",
      static_cast<double>(kubectl.bytes) / (1 << 20), files.size(),
      static_cast<double>(on_disk) / (1 << 20), kThroughputRuns);
  printRead("cat of the log files (page cache) into a pipe", "file", disk);
  printRead("kubectl logs via test-apiserver into a pipe", "text", kubectl);
  printRead("HTTPS GET /containerLogs straight to the agent", "text", direct);
}

// An open `kubectl exec -i POD -c idle -- cat` whose stdin the bench holds; it echoed a line.
std::unique_ptr<Child> openSession(const Bench& b) {
  auto c =
      spawn(b.env.kubectlArgv({"exec", "-i", b.pod, "-c", "idle", "--", "cat"}), true, true, b.err);
  const std::string ping = "ping\n";
  if (::write(c->in, ping.data(), ping.size()) != static_cast<ssize_t>(ping.size()))
    fail("write to an exec session");
  if (readLine(*c, SteadyClock::now() + 30s) != "ping") fail("an exec session did not echo");
  return c;
}

void closeSessions(std::vector<std::unique_ptr<Child>>& sessions) {
  for (auto& s : sessions) s->closeIn();
  for (auto& s : sessions)
    if (waitExit(*s, 30s) != 0) fail("an exec session did not end with its stdin");
  sessions.clear();
}

void sessionFigures(const Bench& b) {
  std::vector<std::unique_ptr<Child>> sessions;
  sessions.push_back(openSession(b));  // warm-up
  closeSessions(sessions);
  const long rss_before = statusKib(b.agent(), "VmRSS:");
  const long threads_before = statusKib(b.agent(), "Threads:");
  const auto fds_before = fdKinds(b.agent());
  for (int i = 0; i < kSessions; ++i) sessions.push_back(openSession(b));
  const long rss_after = statusKib(b.agent(), "VmRSS:");
  const long threads_after = statusKib(b.agent(), "Threads:");
  const auto fds_after = fdKinds(b.agent());
  closeSessions(sessions);
  const bool fds_back =
      testing::eventually([&] { return total(fdKinds(b.agent())) <= total(fds_before); }, 10s);
  std::printf("4. open idle exec sessions (kubectl exec -i POD -- cat, stdin held open)\n");
  std::printf("   agent VmRSS %ld KiB with 0, %ld KiB with %d: %.1f KiB per session\n", rss_before,
              rss_after, kSessions, static_cast<double>(rss_after - rss_before) / kSessions);
  std::printf(
      "   agent fds per session: %s (%s); agent threads %ld -> %ld\n",
      fdGrowth(fds_before, fds_after, kSessions).c_str(),
      fds_back ? "all gone once the sessions ended" : "NOT all gone once the sessions ended",
      threads_before, threads_after);
}

std::atomic<KubeletEnv*> g_signal_env{nullptr};

// On SIGINT/SIGTERM/SIGHUP: the agent and the containers are killed, then the bench exits.
void killOnSignal() {
  testing::cleanUpOnSignal("kubelet_api_bench", "killing what it started", [] {
    if (KubeletEnv* env = g_signal_env.load()) {
      if (env->agent) ::kill(env->agent->pid(), SIGKILL);
      env->killContainers();
    }
  });
}

void printMachine() {
  std::string load = testing::readFile("/proc/loadavg");
  load = load.substr(0, load.find(' ', load.find(' ', load.find(' ') + 1) + 1));
  std::printf(
      "machine: %u cores, load average %s; the machine is shared with other work, so "
      "figures vary from run to run\n",
      std::thread::hardware_concurrency(), load.c_str());
}

}  // namespace

// With no arguments every figure; else those named: exec, follow, logs, sessions.
int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // figures show as they come, also into a file
  killOnSignal();
  const std::vector<std::string> only(argv + 1, argv + argc);
  auto wanted = [&](const std::string& name) {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  };
  try {
    printMachine();
    KubeletEnv env("nodeagent-bench-kubelet");
    g_env = &env;
    g_signal_env = &env;
    const Bench b = prepare(env);
    if (wanted("exec")) execFigures(b);
    if (wanted("follow")) followFigures(b);
    if (wanted("logs")) throughputFigures(b);
    if (wanted("sessions")) sessionFigures(b);
    g_signal_env = nullptr;
    g_env = nullptr;
  } catch (const std::exception& e) {
    g_signal_env = nullptr;
    g_env = nullptr;
    std::fprintf(stderr, "kubelet_api_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
