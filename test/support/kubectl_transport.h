// kubectl's two transports for exec, attach and cp, for tests that run each in both: WebSocket
// (kubectl 1.32's default) and SPDY (KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false in kubectl's
// environment).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "test/support/kubelet_env.h"

namespace nodeagent::testing {

enum class KubectlTransport { kWebSocket, kSpdy };

inline std::string transportName(KubectlTransport t) {
  return t == KubectlTransport::kSpdy ? "SPDY" : "WebSocket";
}

// `kubectl ARGS...` run to completion over `t`.
inline RunResult kubectlOver(KubeletEnv& env, KubectlTransport t,
                             const std::vector<std::string>& args,
                             std::chrono::milliseconds deadline = std::chrono::seconds(30)) {
  std::vector<std::string> argv = env.kubectlArgv(args);
  if (t == KubectlTransport::kSpdy) {
    argv.insert(argv.begin(), {"env", "KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"});
  }
  return runCommand(argv, env.dir, deadline);
}

// The kubectl command line for a shell script, over `t`.
inline std::string kubectlCommandOver(const KubeletEnv& env, KubectlTransport t) {
  return (t == KubectlTransport::kSpdy ? "KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false " : "") +
         env.kubectlCommand();
}

}  // namespace nodeagent::testing
