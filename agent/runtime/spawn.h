// Starting a shim process, and the wire format of the spawn helper that starts container shims for
// the agent. Pure libc (no Asio, no logging): nodeagent-shim links it too.
//
// Why a helper: posix_spawn copies the caller's whole descriptor table into the child, and the
// child's exec closes it again. The agent holds one descriptor per running container, so with N
// containers every start paid O(N) in the kernel, and a start burst O(N^2). The helper
// (`nodeagent-shim spawner`, started once by the agent) holds a handful of descriptors; the agent
// sends it the arguments and the few descriptors a shim needs, and gets back the shim's pid and a
// pidfd. The shims are then the helper's children (it reaps them); the agent watches them through
// the pidfd and reads their exits from their state files, as it does for shims adopted after a
// restart.
//
// The helper's socket is a SOCK_SEQPACKET socket pair, one message per request and per reply:
//   request: "<slots>\0<arg0>\0<arg1>\0...", where slot i is 'f' when descriptor i of the child
//            is the next of the message's SCM_RIGHTS descriptors and 'n' when it is /dev/null;
//   reply:   SpawnReply; its SCM_RIGHTS descriptor is the child's pidfd when `error` is 0.
// Before any request the helper sends kSpawnGreeting, so that the agent knows it speaks this
// format (a shim binary of another version would not). The helper exits when the agent's end
// closes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace nodeagent::runtime {

// At most this many descriptors (0, 1, ...) are set up in a spawned child.
constexpr size_t kMaxSpawnFds = 4;
// The largest request (the arguments).
constexpr size_t kMaxSpawnRequest = 64 * 1024;

// Starts args[0] with `args`, no environment, in a session of its own (the caller's terminal,
// process group and death do not reach it), default signal dispositions and an empty signal mask.
// fds[i] becomes its descriptor i (at most kMaxSpawnFds), /dev/null where fds[i] < 0 and for
// descriptor 0 when `fds` is empty; no other descriptor is inherited that is close-on-exec in the
// caller. Returns 0 with `pid` set, or the error number.
int spawnDetached(const std::vector<std::string>& args, std::span<const int> fds, pid_t& pid);

constexpr char kSpawnGreeting[] = "nodeagent-spawner 1";

// spawnDetached, and a pidfd of the child (close-on-exec, the caller's) in `pidfd`. When no pidfd
// can be had, the child is killed and reaped (its exit would go unnoticed) and the error returned.
// The caller must not reap children in another thread meanwhile (waitpid(-1) would free `pid`).
int spawnDetachedWithPidfd(const std::vector<std::string>& args, std::span<const int> fds,
                           pid_t& pid, int& pidfd);

// Every ignored signal back to its default disposition, also the two real-time signals the C
// library keeps for itself (32 and 33): glibc's posix_spawn leaves those ignored in the child of a
// threaded parent (the agent), and an exec keeps them ignored, so a container would start with
// them ignored. The shim calls it first thing (in every mode, the spawn helper's too).
void resetSignalDispositions();

struct SpawnReply {
  int32_t error = 0;  // an error number, 0 when the child started
  int32_t pid = 0;
};

// The helper's end of a request. Returns 0, or an error number; ECONNRESET when the other end
// closed. `fds` gets the child's descriptors (-1 for /dev/null), owned by the caller.
int receiveSpawnRequest(int sock, std::vector<std::string>& args, std::vector<int>& fds);
// The agent's end. Returns 0 or an error number (EPIPE when the helper has gone).
int sendSpawnRequest(int sock, const std::vector<std::string>& args, std::span<const int> fds);
// Returns 0 or an error number (EPROTO: the helper said something else).
int sendSpawnGreeting(int sock);
int receiveSpawnGreeting(int sock);
// Returns 0 or an error number.
int sendSpawnReply(int sock, const SpawnReply& reply, int pidfd);
// Returns 0 (with `pidfd` set, close-on-exec, when reply.error is 0) or an error number;
// ECONNRESET when the helper has gone.
int receiveSpawnReply(int sock, SpawnReply& reply, int& pidfd);

}  // namespace nodeagent::runtime
