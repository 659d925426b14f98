// nodeagent: the node agent daemon and its subcommands.
#include <cstdio>
#include <cstring>
#include <string_view>

#include "cmd/nodeagent/daemon_command.h"
#include "cmd/nodeagent/hollow_fleet.h"
#include "cmd/nodeagent/lazy_openssl.h"
#include "cmd/nodeagent/operator_commands.h"
#include "cmd/nodeagent/pod_updates_command.h"
#include "cmd/nodeagent/validate_command.h"

namespace {

struct Subcommand {
  std::string_view name;
  int (*run)(int argc, char** argv);  // argv[0] is the subcommand name
};

constexpr Subcommand kSubcommands[] = {
    {"validate", nodeagent::cmd::runValidate},
    {"pod-updates", nodeagent::cmd::runPodUpdates},
    {"ps", nodeagent::cmd::runPs},
    {"logs", nodeagent::cmd::runLogs},
    {"stop-all", nodeagent::cmd::runStopAll},
    {"hollow-fleet", nodeagent::cmd::runHollowFleet},
};

}  // namespace

int main(int argc, char** argv) {
  nodeagent::cmd::allowOpenSslInit();
  std::string_view first = argc > 1 ? argv[1] : "";
  if (first == "--version") {
    std::printf("nodeagent %s\n", NODEAGENT_VERSION);
    return 0;
  }
  for (const auto& sub : kSubcommands) {
    if (first == sub.name) return sub.run(argc - 1, argv + 1);
  }
  // No subcommand: the daemon itself (its flags start with "--").
  if (first.empty() || first.starts_with("-")) return nodeagent::cmd::runDaemon(argc, argv);
  std::fprintf(stderr,
               "nodeagent: unknown command \"%s\"\n"
               "usage: nodeagent [flags]                  run the agent (--help lists the flags)\n"
               "       nodeagent validate [flags] FILE... check manifests\n"
               "       nodeagent pod-updates [flags]      print the merged pod updates\n"
               "       nodeagent ps [-a]                  list this node's containers\n"
               "       nodeagent logs POD [CONTAINER] [-f] print a container's log\n"
               "       nodeagent stop-all                 stop every container (agent stopped)\n"
               "       nodeagent hollow-fleet --nodes=N --fleet-dir=DIR [flags]\n"
               "                                          run N hollow nodes (scale tests)\n",
               argv[1]);
  return 2;
}
