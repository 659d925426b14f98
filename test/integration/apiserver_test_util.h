// Helpers for the test-apiserver integration tests: spawning processes (kubectl, python3, the
// test-apiserver binary) with their output in files, waiting for them with deadlines, and a
// node's client certificate from the server's CA.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "agent/certificate/pki.h"
#include "test/support/test_util.h"

extern char** environ;

namespace nodeagent::testing {

// A child process whose stdout and stderr go to files; killed (SIGKILL) and reaped on
// destruction if still running.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::filesystem::path& out,
               const std::filesystem::path& err)
      : out_(out), err_(err) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~ChildProcess() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  bool running() {
    if (pid_ <= 0 || exit_code_) return false;
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return false;
    }
    return r == 0;
  }
  // The exit code once the process ended within `deadline`, nullopt otherwise.
  std::optional<int> wait(std::chrono::milliseconds deadline) {
    eventually([&] { return !running(); }, deadline);
    return exit_code_;
  }
  void signal(int sig) {
    if (running()) ::kill(pid_, sig);
  }
  std::string out() const { return readFile(out_); }
  std::string err() const { return readFile(err_); }

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::filesystem::path out_, err_;
};

struct RunResult {
  std::optional<int> exit_code;  // nullopt: killed at the deadline
  std::string out;
  std::string err;
};

// Runs a command to completion (killed after `deadline`).
inline RunResult runCommand(const std::vector<std::string>& argv, const TempDir& dir,
                            std::chrono::milliseconds deadline = std::chrono::seconds(30)) {
  static int counter = 0;
  const std::string tag = "cmd" + std::to_string(++counter);
  ChildProcess child(argv, dir / (tag + ".out"), dir / (tag + ".err"));
  auto code = child.wait(deadline);
  return RunResult{code, child.out(), child.err()};
}

// build/test-apiserver spawned on port 0 with a kubeconfig written into `dir`: plain HTTP
// (--insecure-serve-http) unless `extra_args` name --tls-cert-file or --cert-dir. SIGTERM at the
// end, SIGKILL if it does not exit.
class SpawnedApiServer {
 public:
  SpawnedApiServer(const TempDir& dir, std::vector<std::string> extra_args = {})
      : kubeconfig_(dir / "kubeconfig") {
    std::vector<std::string> argv = {binaryPath("test-apiserver").string(), "--port=0",
                                     "--write-kubeconfig=" + kubeconfig_.string()};
    const bool tls = std::any_of(extra_args.begin(), extra_args.end(), [](const auto& arg) {
      return arg.starts_with("--tls-cert-file") || arg.starts_with("--cert-dir");
    });
    if (!tls) argv.push_back("--insecure-serve-http");
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    process_ = std::make_unique<ChildProcess>(argv, dir / "apiserver.out", dir / "apiserver.err");
    eventually(
        [&] { return process_->out().find('\n') != std::string::npos || !process_->running(); },
        std::chrono::seconds(10));
    std::string out = process_->out();
    const std::string prefix = "listening on ";
    if (out.starts_with(prefix) && out.find('\n') != std::string::npos) {
      url_ = out.substr(prefix.size(), out.find('\n') - prefix.size());
    }
  }
  ~SpawnedApiServer() {
    process_->signal(SIGTERM);
    process_->wait(std::chrono::seconds(10));
  }
  bool ok() const { return !url_.empty(); }
  const std::string& url() const { return url_; }
  int port() const { return std::stoi(url_.substr(url_.rfind(':') + 1)); }
  const std::filesystem::path& kubeconfig() const { return kubeconfig_; }
  ChildProcess& process() { return *process_; }
  std::string log() const { return process_->err(); }

 private:
  std::filesystem::path kubeconfig_;
  std::unique_ptr<ChildProcess> process_;
  std::string url_;
};

// The arguments of a test-apiserver with --authorization-mode=Node that trusts the client
// certificates of its --cert-dir CA (`dir`/certs, see issueNodeCertificate): a first start makes
// that CA, which the server started with these arguments then trusts for clients.
inline std::vector<std::string> nodeAuthorizedServerArgs(const TempDir& dir) {
  { SpawnedApiServer first(dir, {"--cert-dir=" + (dir / "certs").string()}); }
  return {"--cert-dir=" + (dir / "certs").string(),
          "--client-ca-file=" + (dir / "certs" / "ca.crt").string(), "--authorization-mode=Node"};
}

// The real kubectl with the server's written kubeconfig and a cache directory of the test's own.
class Kubectl {
 public:
  Kubectl(const TempDir& dir, const SpawnedApiServer& server)
      : dir_(dir), kubeconfig_(server.kubeconfig()) {}

  std::vector<std::string> argv(std::vector<std::string> args) const {
    std::vector<std::string> out = {"kubectl", "--kubeconfig=" + kubeconfig_.string(),
                                    "--cache-dir=" + (dir_ / "kube-cache").string()};
    out.insert(out.end(), args.begin(), args.end());
    return out;
  }
  RunResult run(std::vector<std::string> args) const {
    return runCommand(argv(std::move(args)), dir_);
  }

 private:
  const TempDir& dir_;
  std::filesystem::path kubeconfig_;
};

// A client certificate for system:node:<node> (group system:nodes), as a kubelet holds, issued
// by the CA of a test-apiserver's --cert-dir `certs` (its ca.crt and ca.key); `request` gives
// the validity.
inline base::StatusOr<certificate::KeyPair> issueNodeCertificate(
    const std::filesystem::path& certs, const std::string& node,
    certificate::CertificateRequest request = {}) {
  auto ca = certificate::loadKeyPair(certs / "ca.crt", certs / "ca.key");
  if (!ca.ok()) return ca.status();
  request.common_name = "system:node:" + node;
  request.organizations = {"system:nodes"};
  request.client_auth = true;
  return certificate::issueCertificate(*ca, request);
}

}  // namespace nodeagent::testing
