// `nodeagent hollow-fleet`: many hollow nodes in one process, for scale tests of an apiserver and
// of the agent's own API traffic, as kubemark's hollow-node. Each node is a whole daemon
// (cmd::Daemon: sources, pod manager, pod workers, status manager and syncer, Node status, lease,
// events) with the fake runtime and its own apiserver clients (its own connections, QPS budget
// and identity); all of them share one io_context, one blocking pool and one API pool
// (DaemonThreads), so a hundred nodes do not cost a hundred sets of threads.
//
//   nodeagent hollow-fleet --nodes=N --fleet-dir=DIR [--name-prefix=hollow-]
//                          [--fleet-threads=2] [--fleet-api-threads=8] [daemon flags...]
//
// Node i (0 ≤ i < N) is named <prefix><i>; its root dir, log dir, kubeconfig and certificates
// live under DIR/<name>. The daemon flags are every node's (e.g. --kubeconfig shared by all, or
// --bootstrap-kubeconfig so that each node joins as system:node:<name> through its own CSR);
// the flags the fleet sets per node are refused.
#pragma once

namespace nodeagent::cmd {

int runHollowFleet(int argc, char** argv);

}  // namespace nodeagent::cmd
