// The kubelet API's end-to-end setup, shared by e2e tests and benches: the test apiserver
// in-process (TLS, a token file, a client certificate of its own for reaching kubelets) and the
// built nodeagent binary joined to it with the process runtime, static pods from a manifest
// folder (mirror pods named `<pod>-<node>`) and the kubelet API on a loopback port. kubectl runs
// against it through a kubeconfig; direct() reaches the agent's port.
//
// Setup failures throw std::runtime_error (a test reports it; a bench stops with it). The
// destructor stops the agent, kills every container process left under its root folder and
// removes the cgroups and the temporary folder.
#pragma once

#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cmd/test-apiserver/test_api_server.h"
#include "test/integration/apiserver_test_util.h"
#include "test/support/test_util.h"
#include "test/support/tls_cert.h"

namespace nodeagent::testing {

class KubeletEnv {
 public:
  static constexpr char kNode[] = "node-kubelet";

  explicit KubeletEnv(const std::string& temp_prefix = "nodeagent-e2e-kubelet");
  ~KubeletEnv();
  KubeletEnv(const KubeletEnv&) = delete;
  KubeletEnv& operator=(const KubeletEnv&) = delete;

  // Starts nodeagent on the manifest folder; `extra_args` come after the usual flags (a later
  // flag wins), e.g. "--container-log-max-size=1Gi".
  void startAgent(const std::vector<std::string>& extra_args = {});
  // SIGKILLs every process whose command line names the agent's root folder (the containers).
  void killContainers();

  // `kubectl --kubeconfig=... --request-timeout=60s ARGS...`: its argv, and run to completion.
  std::vector<std::string> kubectlArgv(const std::vector<std::string>& args) const;
  RunResult kubectl(const std::vector<std::string>& args,
                    std::chrono::milliseconds deadline = std::chrono::seconds(30));
  // A shell script run with `sh -c` (for pipelines with kubectlCommand()).
  RunResult shell(const std::string& script,
                  std::chrono::milliseconds deadline = std::chrono::seconds(30));
  std::string kubectlCommand() const;

  // Waits (40 s at most) until kubectl logs of the pod's container answers with `text` in it.
  bool logsShow(const std::string& pod, const std::string& container, const std::string& text);
  std::string diagnostics();

  // An HTTPS client of the agent's port (server certificate not verified), presenting `cert`
  // when given.
  std::unique_ptr<httplib::SSLClient> direct(const TestPki::Files* cert = nullptr) const;

  // The mirror pod's name of the static pod `pod`.
  static std::string mirrorName(const std::string& pod);

  TempDir dir;
  TestPki pki{dir / "pki"};
  std::unique_ptr<testapiserver::TestApiServer> server;
  std::filesystem::path kubeconfig = dir / "kubeconfig";
  std::filesystem::path manifests = dir / "manifests";
  std::unique_ptr<ChildProcess> agent;
  std::string cgroup_root;
  int port = 0;
};

}  // namespace nodeagent::testing
