// Operator commands that read (and for stop-all, act on) an agent's root dir directly, whether
// or not the agent runs: `nodeagent ps`, `nodeagent logs POD [CONTAINER] [-f]`,
// `nodeagent stop-all`. argv[0] is the subcommand's name.
#pragma once

namespace nodeagent::cmd {

int runPs(int argc, char** argv);
int runLogs(int argc, char** argv);
int runStopAll(int argc, char** argv);

}  // namespace nodeagent::cmd
