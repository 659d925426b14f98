#include "test/support/kubelet_env.h"

#include <signal.h>

#include <cctype>
#include <stdexcept>

#include "test/support/cgroup_root.h"
#include "test/support/integration_env.h"

namespace nodeagent::testing {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

KubeletEnv::KubeletEnv(const std::string& temp_prefix)
    : dir(temp_prefix), cgroup_root(isolatedCgroupRoot()), port(unusedLoopbackPort()) {
  writeFile(dir / "tokens.csv", "admin-token,admin,1,\"system:masters\"\nnobody-token,nobody,2\n");
  writeSelfSignedCert(dir / "apiserver");
  auto client = pki.issueClient("kube-apiserver-kubelet-client", {"system:masters"});
  testapiserver::ServerOptions o;
  o.token_auth_file = (dir / "tokens.csv").string();
  // Only system:masters may do anything (admin; nobody gets 403s from the kubelet API).
  o.authorization_mode = "ABAC";
  o.tls_cert_file = (dir / "apiserver" / "cert.pem").string();
  o.tls_private_key_file = (dir / "apiserver" / "key.pem").string();
  o.kubelet_client_certificate = client.cert_file.string();
  o.kubelet_client_key = client.key_file.string();
  o.kubelet_certificate_authority = pki.caFile().string();
  auto started = testapiserver::TestApiServer::start(std::move(o));
  if (!started.ok()) throw std::runtime_error("test apiserver: " + started.status().toString());
  server = std::move(started).value();
  auto written = server->writeKubeconfig(kubeconfig);
  if (!written.ok()) throw std::runtime_error("kubeconfig: " + written.toString());
  fs::create_directories(manifests);
}

KubeletEnv::~KubeletEnv() {
  if (agent) {
    agent->signal(SIGTERM);
    agent->wait(10s);
  }
  killContainers();
  removeCgroupTree(cgroup_root);
  if (server) server->stop();
}

void KubeletEnv::startAgent(const std::vector<std::string>& extra_args) {
  auto serving = pki.issueServing(kNode, {"127.0.0.1"}, {kNode});
  std::vector<std::string> argv = {
      binaryPath("nodeagent").string(),
      "--kubeconfig=" + kubeconfig.string(),
      "--hostname-override=" + std::string(kNode),
      "--node-ip=127.0.0.1",
      "--address=127.0.0.1",
      "--port=" + std::to_string(port),
      "--tls-cert-file=" + serving.cert_file.string(),
      "--tls-private-key-file=" + serving.key_file.string(),
      "--client-ca-file=" + pki.caFile().string(),
      "--authentication-token-webhook",
      "--pod-manifest-path=" + manifests.string(),
      "--file-check-frequency=1s",
      "--root-dir=" + (dir / "root").string(),
      "--pod-log-dir=" + (dir / "logs").string(),
      "--read-only-port=0",
      "--healthz-port=0",
      "--crashloop-backoff-initial=1s",
      "--node-status-update-frequency=1s",
      "--cgroup-root=" + cgroup_root,
      "--v=1",
  };
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  agent = std::make_unique<ChildProcess>(argv, dir / "agent.out", dir / "agent.err");
  if (!agent->started()) throw std::runtime_error("nodeagent did not start");
}

void KubeletEnv::killContainers() {
  const std::string root = (dir / "root").string();
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::string cmdline;
    try {
      cmdline = readFile(e.path() / "cmdline");
    } catch (...) {
      continue;
    }
    if (cmdline.find(root) != std::string::npos) ::kill(std::stoi(name), SIGKILL);
  }
}

std::vector<std::string> KubeletEnv::kubectlArgv(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {"kubectl", "--kubeconfig=" + kubeconfig.string(),
                                   "--request-timeout=60s"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

RunResult KubeletEnv::kubectl(const std::vector<std::string>& args,
                              std::chrono::milliseconds deadline) {
  return runCommand(kubectlArgv(args), dir, deadline);
}

RunResult KubeletEnv::shell(const std::string& script, std::chrono::milliseconds deadline) {
  return runCommand({"sh", "-c", script}, dir, deadline);
}

std::string KubeletEnv::kubectlCommand() const {
  return "kubectl --kubeconfig=" + kubeconfig.string() + " --request-timeout=60s";
}

bool KubeletEnv::logsShow(const std::string& pod, const std::string& container,
                          const std::string& text) {
  return eventually(
      [&] {
        auto r = kubectl({"logs", pod, "-c", container}, 10s);
        return r.exit_code == 0 && r.out.find(text) != std::string::npos;
      },
      40s);
}

std::string KubeletEnv::diagnostics() { return "agent stderr:\n" + (agent ? agent->err() : ""); }

std::unique_ptr<httplib::SSLClient> KubeletEnv::direct(const TestPki::Files* cert) const {
  auto c = cert ? std::make_unique<httplib::SSLClient>("127.0.0.1", port, cert->cert_file.string(),
                                                       cert->key_file.string())
                : std::make_unique<httplib::SSLClient>("127.0.0.1", port);
  c->enable_server_certificate_verification(false);
  c->set_read_timeout(10, 0);
  return c;
}

std::string KubeletEnv::mirrorName(const std::string& pod) { return pod + "-" + kNode; }

}  // namespace nodeagent::testing
