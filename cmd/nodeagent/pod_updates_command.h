// `nodeagent pod-updates`: runs only the file and HTTP sources and PodConfig (Incremental mode)
// and prints every PodUpdate PodConfig emits as one JSON line on stdout, flushed at once:
//   {"op":"ADD","source":"file","pods":[{"namespace":"default","name":"web-node1","uid":"..."}]}
// With --full each pod is printed whole. Logs go to stderr. Runs until SIGINT or SIGTERM, then
// exits 0. A tool for operators (what would the agent do with this manifest directory?) and the
// seam the end-to-end tests of the sources use.
#pragma once

namespace nodeagent::cmd {

// `argv[0]` is the subcommand name. Flags (kubelet's names; `--flag=value` or `--flag value`):
//   --pod-manifest-path=P  --manifest-url=U  --manifest-url-header=K:V (repeatable)
//   --hostname-override=NODE  --file-check-frequency=D (20s)  --http-check-frequency=D (20s)
//   --root-dir=R  --full  --v=N
// Durations use Go's form (20s, 1m, 500ms, 1h30m). Returns the exit code: 0 after a signal,
// 2 for bad flags (with a message naming the flag), 1 when the sources cannot start.
int runPodUpdates(int argc, char** argv);

}  // namespace nodeagent::cmd
