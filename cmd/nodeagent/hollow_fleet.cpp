#include "cmd/nodeagent/hollow_fleet.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/heap.h"
#include "base/log.h"
#include "cmd/nodeagent/client_certificate.h"
#include "cmd/nodeagent/daemon.h"
#include "cmd/nodeagent/daemon_command.h"
#include "cmd/nodeagent/daemon_config.h"
#include "cmd/nodeagent/daemon_support.h"
#include "cmd/nodeagent/flags.h"

namespace nodeagent::cmd {
namespace {

NODEAGENT_LOGGER("nodeagent")

constexpr char kUsage[] =
    "usage: nodeagent hollow-fleet --nodes=N --fleet-dir=DIR [fleet flags] [daemon flags]\n"
    "Runs N hollow nodes (the fake runtime) in one process. Node i is named <prefix><i>; its\n"
    "root dir, log dir, kubeconfig and certificates live under DIR/<name>. The daemon flags\n"
    "(nodeagent --help) apply to every node; with --bootstrap-kubeconfig each node joins\n"
    "with a CSR of its own.\n";

struct FleetFlags {
  int64_t nodes = 0;
  std::string fleet_dir;
  std::string name_prefix = "hollow-";
  int64_t threads = 2;
  int64_t api_threads = 8;
  bool help = false;
};

void registerFleetFlags(FlagSet& fs, FleetFlags& f) {
  fs.addInt("nodes", &f.nodes, "How many hollow nodes to run (at least 1).");
  fs.addString("fleet-dir", &f.fleet_dir,
               "Directory holding each node's root dir, logs, kubeconfig and certificates.");
  fs.addString("name-prefix", &f.name_prefix, "Node names are <prefix><i>.");
  fs.addInt("fleet-threads", &f.threads, "Threads running the nodes' shared io_context.");
  fs.addInt("fleet-api-threads", &f.api_threads,
            "Threads making the nodes' blocking apiserver calls (shared by all nodes).");
  fs.addBool("help", &f.help, "Show this help.");
  fs.addShorthand('h', "help");
}

// The flags the fleet sets for each node: given on the command line they would be every node's.
constexpr std::string_view kPerNodeFlags[] = {"hostname-override",
                                              "root-dir",
                                              "pod-log-dir",
                                              "runtime",
                                              "container-runtime",
                                              "port",
                                              "cert-dir",
                                              "read-only-port",
                                              "healthz-port",
                                              "lock-file",
                                              "exit-on-lock-contention"};

// "--name=value" and "--name" → "name"; anything else → "".
std::string flagName(std::string_view arg) {
  if (arg.size() < 3 || !arg.starts_with("--")) return {};
  return std::string(arg.substr(2, arg.find('=') - 2));
}

// argv[1..] split into the fleet's own flags and every node's daemon flags (in their order),
// and which kubeconfig flags the daemon flags hold.
struct SplitArgs {
  std::vector<std::string> fleet{"hollow-fleet"};
  std::vector<std::string> daemon;
  bool bootstrap = false;   // --bootstrap-kubeconfig
  bool kubeconfig = false;  // --kubeconfig
};

SplitArgs splitArgs(int argc, char** argv) {
  FleetFlags unused;
  FlagSet fleet_flags;
  registerFleetFlags(fleet_flags, unused);
  SplitArgs out;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string name = arg == "-h" ? "help" : flagName(arg);
    if (!fleet_flags.has(name)) {
      out.daemon.push_back(arg);
      out.bootstrap = out.bootstrap || name == "bootstrap-kubeconfig";
      out.kubeconfig = out.kubeconfig || name == "kubeconfig";
      continue;
    }
    out.fleet.push_back(arg);
    if (fleet_flags.takesValue(name) && arg.find('=') == std::string::npos && i + 1 < argc) {
      out.fleet.push_back(argv[++i]);
    }
  }
  return out;
}

int usageError(const std::string& message) {
  std::fprintf(stderr, "nodeagent hollow-fleet: %s\n%s", message.c_str(), kUsage);
  return 2;
}

std::string checkFleetFlags(const FleetFlags& f, const SplitArgs& args) {
  if (f.nodes < 1) return "--nodes must be at least 1";
  if (f.fleet_dir.empty()) return "--fleet-dir is required";
  if (f.threads < 1 || f.api_threads < 1) {
    return "--fleet-threads and --fleet-api-threads must be at least 1";
  }
  for (const auto& arg : args.daemon) {
    const std::string name = flagName(arg);
    if (std::find(std::begin(kPerNodeFlags), std::end(kPerNodeFlags), name) !=
        std::end(kPerNodeFlags)) {
      return "--" + name + " is set for each node by hollow-fleet (under --fleet-dir)";
    }
  }
  if (args.bootstrap && args.kubeconfig) {
    return "with --bootstrap-kubeconfig each node's kubeconfig is written under --fleet-dir: "
           "leave out --kubeconfig";
  }
  return {};
}

// Node `name`'s command line: every node's flags, then what the fleet sets for it.
std::vector<std::string> nodeArgs(const FleetFlags& f, const SplitArgs& split,
                                  const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(f.fleet_dir) / name;
  std::vector<std::string> args{"nodeagent"};
  args.insert(args.end(), split.daemon.begin(), split.daemon.end());
  args.insert(args.end(),
              {"--hostname-override=" + name, "--root-dir=" + dir.string(),
               "--pod-log-dir=" + (dir / "logs").string(), "--runtime=fake", "--port=0",
               "--read-only-port=0", "--healthz-port=0", "--cert-dir=" + (dir / "pki").string()});
  if (split.bootstrap) args.push_back("--kubeconfig=" + (dir / "kubeconfig").string());
  return args;
}

// One hollow node: its configuration (the daemon keeps a reference to it) and its daemon.
struct FleetNode {
  DaemonConfig config;
  std::unique_ptr<Daemon> daemon;
};

// Loads node `name`'s configuration, locks its root dir, joins (TLS bootstrap) and builds its
// daemon on the shared threads. On failure the exit code, with the reason logged or printed.
int buildNode(const FleetFlags& f, const SplitArgs& split, const std::string& name,
              DaemonThreads& threads, std::vector<std::unique_ptr<FleetNode>>& nodes) {
  auto args = nodeArgs(f, split, name);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  auto loaded = loadDaemonConfig(static_cast<int>(argv.size()), argv.data());
  if (!loaded.config) return loaded.exit_code == 0 ? 2 : loaded.exit_code;
  auto node = std::make_unique<FleetNode>();
  node->config = std::move(*loaded.config);
  auto locks = lockRootDir(node->config.flags);
  if (!locks.ok()) {
    log()->error("Cannot start node={}: {}", name, locks.status().message());
    return 1;
  }
  if (auto st = prepareClientCertificate(node->config, base::realClock()); !st.ok()) {
    log()->error("Cannot start node={}: {}", name, st.message());
    return 1;
  }
  auto clients = makeApiClients(node->config, base::realClock());
  if (!clients.ok()) {
    std::fprintf(stderr, "nodeagent hollow-fleet: node %s: %s\n", name.c_str(),
                 clients.status().message().c_str());
    return 2;
  }
  node->daemon = std::make_unique<Daemon>(node->config, std::move(*locks), std::move(*clients),
                                          nullptr, &threads);
  if (auto s = node->daemon->init(); !s.ok()) {
    log()->error("Cannot start node={}: {}", name, s.message());
    return 1;
  }
  nodes.push_back(std::move(node));
  return 0;
}

}  // namespace

int runHollowFleet(int argc, char** argv) {
  base::tuneMalloc();
  SplitArgs split = splitArgs(argc, argv);
  FleetFlags f;
  FlagSet fs;
  registerFleetFlags(fs, f);
  std::vector<char*> fleet_argv;
  for (auto& a : split.fleet) fleet_argv.push_back(a.data());
  if (auto s = fs.parse(static_cast<int>(fleet_argv.size()), fleet_argv.data()); !s.ok()) {
    return usageError(s.message());
  }
  if (f.help) {
    std::printf("%sfleet flags:\n%s", kUsage, fs.usage().c_str());
    return 0;
  }
  if (auto bad = checkFleetFlags(f, split); !bad.empty()) return usageError(bad);
  raiseOpenFileLimit();

  // Declared before the nodes: their daemons run on these threads and are destroyed first.
  DaemonThreads threads(static_cast<int>(f.api_threads));
  // Caught from here on: a SIGTERM while the nodes join is handled once they run.
  asio::signal_set signals(threads.ioc, SIGINT, SIGTERM);
  std::vector<std::unique_ptr<FleetNode>> nodes;
  for (int64_t i = 0; i < f.nodes; ++i) {
    const std::string name = f.name_prefix + std::to_string(i);
    if (int code = buildNode(f, split, name, threads, nodes); code != 0) return code;
  }

  base::HeapTrimmer trimmer(threads.ioc.get_executor(), base::realClock());
  std::atomic<size_t> stopped{0};
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    log()->info("Shutting down the hollow fleet signal={} nodes={}", sig, nodes.size());
    trimmer.stop();
    for (auto& node : nodes) {
      node->daemon->stop([&] {
        if (++stopped == nodes.size()) threads.ioc.stop();
      });
    }
  });
  for (auto& node : nodes) node->daemon->start();
  trimmer.start();
  log()->info("Hollow fleet running nodes={} first={} last={} threads={} api_threads={}",
              nodes.size(), nodes.front()->daemon->nodeName(), nodes.back()->daemon->nodeName(),
              f.threads, f.api_threads);
  threads.run(static_cast<int>(f.threads));
  // The io_context stopped: every node's apiserver calls end, then the shared pools drain.
  for (auto& node : nodes) node->daemon->joinAndRelease();
  threads.joinPools();
  nodes.clear();
  log()->info("Hollow fleet stopped");
  return 0;
}

}  // namespace nodeagent::cmd
