#include "cmd/nodeagent/operator_commands.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/cm/cgroup_fs.h"
#include "agent/runtime/cri_log.h"
#include "agent/runtime/state_file.h"
#include "base/clock.h"
#include "base/duration.h"
#include "cmd/nodeagent/flags.h"
#include "cmd/nodeagent/lock_file.h"

namespace nodeagent::cmd {
namespace {

// Kills every process left in a container's cgroup (best effort: a cgroup already removed is
// fine).
void killContainerCgroup(const cm::CgroupPaths& cgroup) {
  std::string error;
  if (cm::killCgroup(cgroup, error) < 0) {
    std::fprintf(stderr, "nodeagent stop-all: %s\n", error.c_str());
  }
}

namespace fs = std::filesystem;
constexpr const char* kDefaultRootDir = "/var/lib/nodeagent";

// One container of the root dir as its files describe it.
struct Container {
  runtime::ShimConfig config;
  std::optional<runtime::ShimState> state;  // nullopt: no usable state file
  bool alive = false;                       // its process runs (checked against its start time)
};

std::vector<Container> listContainers(const fs::path& root) {
  std::vector<Container> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root / "containers", ec)) {
    Container c;
    std::string text, error;
    if (!runtime::readWholeFile((entry.path() / runtime::kConfigFileName).string(), text, error) ||
        !runtime::decodeShimConfig(text, c.config, error)) {
      continue;  // not identifiable
    }
    runtime::ShimState state;
    if (runtime::readWholeFile((entry.path() / runtime::kStateFileName).string(), text, error) &&
        runtime::decodeShimState(text, state, error)) {
      c.state = state;
      // As the runtime decides it: this boot's process, still the one recorded (start time),
      // still leading its own process group (stop-all signals the group).
      c.alive = state.status != runtime::ShimStatus::kExited && state.pid > 1 &&
                runtime::containerProcessAlive(state) && ::getpgid(state.pid) == state.pid;
    }
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(), [](const Container& a, const Container& b) {
    return std::tie(a.config.pod_namespace, a.config.pod_name, a.config.container_name,
                    a.config.attempt) < std::tie(b.config.pod_namespace, b.config.pod_name,
                                                 b.config.container_name, b.config.attempt);
  });
  return out;
}

std::string stateText(const Container& c) {
  if (!c.state) return "unknown";
  switch (c.state->status) {
    case runtime::ShimStatus::kCreated:
      return c.alive ? "created" : "unknown";
    case runtime::ShimStatus::kRunning:
      return c.alive ? "running" : "unknown";
    case runtime::ShimStatus::kExited:
      return "exited(" + std::to_string(c.state->exit_code) + ")";
  }
  return "unknown";
}

int usage(const char* text, const std::string& message, const FlagSet& flags) {
  std::fprintf(stderr, "nodeagent: %s\n%s%s", message.c_str(), text, flags.usage().c_str());
  return 2;
}

constexpr const char* kPsUsage =
    "usage: nodeagent ps [--root-dir=DIR] [-a]\n"
    "Lists the containers of this root dir from its state files: running and created ones, and\n"
    "with -a exited ones too. Works whether or not the agent runs.\n";

constexpr const char* kLogsUsage =
    "usage: nodeagent logs [--root-dir=DIR] [-n NAMESPACE] [-f] POD [CONTAINER]\n"
    "Prints the log of the newest instance of a container of POD (its name as in /pods, e.g.\n"
    "web-node1); CONTAINER may be left out when the pod has one. -f follows it.\n";

constexpr const char* kStopAllUsage =
    "usage: nodeagent stop-all [--root-dir=DIR] [--grace=DURATION]\n"
    "Stops every running container of this root dir: SIGTERM to its process group, SIGKILL after\n"
    "its grace period (at most --grace). Refuses while an agent holds the root dir (it would\n"
    "start them again): stop the agent first (systemctl stop nodeagent).\n";

// The newest instance of each container of pod `pod` (in namespace `ns` when given, named
// `container` when given).
std::vector<Container> newestContainersOf(const fs::path& root, const std::string& ns,
                                          const std::string& pod, const std::string& container) {
  std::vector<Container> matches;
  for (auto& c : listContainers(root)) {
    if (c.config.pod_name != pod || (!ns.empty() && c.config.pod_namespace != ns)) continue;
    if (!container.empty() && c.config.container_name != container) continue;
    auto same = std::find_if(matches.begin(), matches.end(), [&](const Container& m) {
      return m.config.pod_namespace == c.config.pod_namespace &&
             m.config.container_name == c.config.container_name;
    });
    if (same == matches.end()) {
      matches.push_back(std::move(c));
    } else if (c.config.created_at > same->config.created_at) {
      *same = std::move(c);
    }
  }
  return matches;
}

// Prints the text of each CRI log record of `f` (a partial record without its newline); with
// `follow`, keeps printing what is appended.
void printCriLog(FILE* f, bool follow) {
  std::string pending;  // a line read without its newline yet
  char buf[65536];
  for (;;) {
    size_t n = std::fread(buf, 1, sizeof(buf), f);
    if (n > 0) {
      pending.append(buf, n);
      size_t start = 0;
      for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
        auto record = runtime::parseCriRecord(std::string_view(pending).substr(start, nl - start));
        if (!record) continue;
        std::fwrite(record->text.data(), 1, record->text.size(), stdout);
        if (!record->partial) std::fputc('\n', stdout);
      }
      pending.erase(0, start);
      continue;
    }
    std::fflush(stdout);
    if (!follow) break;
    std::clearerr(f);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace

int runPs(int argc, char** argv) {
  std::string root = kDefaultRootDir;
  bool all = false, help = false;
  FlagSet flags;
  flags.addString("root-dir", &root, "the agent's state directory");
  flags.addBool("all", &all, "exited containers too");
  flags.addBool("help", &help, "show this help");
  flags.addShorthand('a', "all");
  flags.addShorthand('h', "help");
  if (auto s = flags.parse(argc, argv); !s.ok()) return usage(kPsUsage, s.message(), flags);
  if (help) {
    std::printf("%s%s", kPsUsage, flags.usage().c_str());
    return 0;
  }
  std::printf("%-14s %-12s %-40s %-16s %-8s %-12s %s\n", "CONTAINER ID", "NAMESPACE", "POD",
              "CONTAINER", "ATTEMPT", "STATE", "PID");
  for (const auto& c : listContainers(root)) {
    if (!all && !c.alive) continue;
    std::printf("%-14s %-12s %-40s %-16s %-8d %-12s %d\n",
                c.config.container_id.substr(0, 13).c_str(), c.config.pod_namespace.c_str(),
                c.config.pod_name.c_str(), c.config.container_name.c_str(), c.config.attempt,
                stateText(c).c_str(), c.alive ? c.state->pid : 0);
  }
  return 0;
}

int runLogs(int argc, char** argv) {
  std::string root = kDefaultRootDir, ns;
  bool follow = false, help = false;
  FlagSet flags;
  flags.addString("root-dir", &root, "the agent's state directory");
  flags.addString("namespace", &ns, "the pod's namespace (any when not given)");
  flags.addBool("follow", &follow, "keep printing what is appended");
  flags.addBool("help", &help, "show this help");
  flags.addShorthand('n', "namespace");
  flags.addShorthand('f', "follow");
  flags.addShorthand('h', "help");
  std::vector<std::string> args;
  if (auto s = flags.parse(argc, argv, &args); !s.ok())
    return usage(kLogsUsage, s.message(), flags);
  if (help) {
    std::printf("%s%s", kLogsUsage, flags.usage().c_str());
    return 0;
  }
  if (args.empty() || args.size() > 2) return usage(kLogsUsage, "give POD [CONTAINER]", flags);
  const std::string pod = args[0];
  const std::string container = args.size() > 1 ? args[1] : "";
  const std::vector<Container> matches = newestContainersOf(root, ns, pod, container);
  if (matches.empty()) {
    const std::string what =
        (container.empty() ? "no container" : "no container \"" + container + "\"") + " of pod " +
        pod + (ns.empty() ? "" : " in namespace " + ns);
    std::fprintf(stderr, "nodeagent logs: %s under %s\n", what.c_str(), root.c_str());
    return 1;
  }
  if (matches.size() > 1) {
    std::string which;
    for (const auto& m : matches)
      which += " " + m.config.pod_namespace + "/" + m.config.container_name;
    std::fprintf(stderr, "nodeagent logs: pod %s has several containers, name one:%s\n",
                 pod.c_str(), which.c_str());
    return 1;
  }
  const std::string path = matches[0].config.log_path;
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) {
    std::fprintf(stderr, "nodeagent logs: cannot open %s\n", path.c_str());
    return 1;
  }
  printCriLog(f, follow);
  std::fclose(f);
  return 0;
}

int runStopAll(int argc, char** argv) {
  std::string root = kDefaultRootDir;
  base::Duration grace = std::chrono::seconds(30);
  bool help = false;
  FlagSet flags;
  flags.addString("root-dir", &root, "the agent's state directory");
  flags.addDuration("grace", &grace, "the longest grace period given to a container");
  flags.addBool("help", &help, "show this help");
  flags.addShorthand('h', "help");
  if (auto s = flags.parse(argc, argv); !s.ok()) return usage(kStopAllUsage, s.message(), flags);
  if (help) {
    std::printf("%s%s", kStopAllUsage, flags.usage().c_str());
    return 0;
  }
  // Holding the agent's lock keeps an agent from starting (and restarting them) meanwhile.
  auto lock = LockFile::acquire((fs::path(root) / "nodeagent.lock").string(), /*wait=*/false);
  if (!lock.ok()) {
    std::fprintf(stderr,
                 "nodeagent stop-all: %s\nAn agent runs on %s and would start the containers "
                 "again: stop it first (systemctl stop nodeagent).\n",
                 lock.status().message().c_str(), root.c_str());
    return 1;
  }
  struct Target {
    Container c;
    base::MonotonicTime deadline;
  };
  std::vector<Target> targets;
  base::Clock& clock = base::realClock();
  const auto now = clock.now();
  for (auto& c : listContainers(root)) {
    if (!c.alive) continue;
    const auto own = std::chrono::seconds(std::max<int64_t>(c.config.grace_period_seconds, 0));
    const auto wait = std::min<base::Duration>(own, grace);
    ::kill(-c.state->pid, SIGTERM);
    std::printf("stopping %s/%s container %s (pid %d, grace %s)\n", c.config.pod_namespace.c_str(),
                c.config.pod_name.c_str(), c.config.container_name.c_str(), c.state->pid,
                base::formatDuration(wait).c_str());
    targets.push_back({std::move(c), now + wait});
  }
  int killed = 0;
  while (!targets.empty()) {
    const auto t = clock.now();
    std::erase_if(targets, [&](Target& target) {
      const auto& st = *target.c.state;
      // What the container left (a child in a session of its own) goes with it: through its
      // cgroup when it has one (its shim does the same, unless it is gone too).
      const auto& cgroup = target.c.config.cgroup;
      if (!runtime::processAlive(st.pid, st.pid_start_ticks)) {
        if (!cgroup.empty()) killContainerCgroup(cgroup);
        return true;
      }
      if (t < target.deadline) return false;
      ::kill(-st.pid, SIGKILL);
      if (!cgroup.empty()) killContainerCgroup(cgroup);
      ++killed;
      return true;
    });
    if (!targets.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (killed > 0) {
    std::printf("done (%d killed after their grace period)\n", killed);
  } else {
    std::printf("done\n");
  }
  return 0;
}

}  // namespace nodeagent::cmd
