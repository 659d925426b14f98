// `nodeagent [flags]`: the node agent daemon (sources, PodConfig, sync loop, pod workers,
// runtime, read-only endpoints) until SIGINT/SIGTERM.
#pragma once

namespace nodeagent::cmd {

int runDaemon(int argc, char** argv);

}  // namespace nodeagent::cmd
