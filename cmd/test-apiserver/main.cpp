// build/test-apiserver: the mock Kubernetes apiserver as a program (see test_api_server.h).
// Prints "listening on http(s)://ADDR:PORT" as its first stdout line, then serves until SIGTERM
// or SIGINT.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "cmd/test-apiserver/test_api_server.h"

namespace {

void usage() {
  std::cerr << "usage: test-apiserver [--bind-address=127.0.0.1] [--port=6443|0]\n"
               "         [--token-auth-file=CSV] [--tls-cert-file=F --tls-private-key-file=K]\n"
               "         [--write-kubeconfig=PATH] [--history-window=N]\n";
}

}  // namespace

int main(int argc, char** argv) {
  using nodeagent::testapiserver::ServerOptions;
  using nodeagent::testapiserver::TestApiServer;
  ServerOptions options;
  options.port = 6443;
  std::string kubeconfig_path;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    auto eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (arg != "--help" && arg != "-h") {
      if (i + 1 >= argc) {
        std::cerr << "test-apiserver: " << arg << " needs a value\n";
        usage();
        return 2;
      }
      value = argv[++i];
    }
    try {
      if (arg == "--bind-address") {
        options.bind_address = value;
      } else if (arg == "--port") {
        options.port = std::stoi(value);
      } else if (arg == "--token-auth-file") {
        options.token_auth_file = value;
      } else if (arg == "--tls-cert-file") {
        options.tls_cert_file = value;
      } else if (arg == "--tls-private-key-file") {
        options.tls_private_key_file = value;
      } else if (arg == "--write-kubeconfig") {
        kubeconfig_path = value;
      } else if (arg == "--history-window") {
        options.store.history_window = std::stoul(value);
      } else if (arg == "--help" || arg == "-h") {
        usage();
        return 0;
      } else {
        std::cerr << "test-apiserver: unknown flag " << arg << "\n";
        usage();
        return 2;
      }
    } catch (const std::exception&) {
      std::cerr << "test-apiserver: bad value for " << arg << ": " << value << "\n";
      return 2;
    }
  }
  if (options.port < 0 || options.port > 65535) {
    std::cerr << "test-apiserver: --port must be 0..65535\n";
    return 2;
  }

  // Block the stop signals before any thread exists, so only sigwait() below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto server = TestApiServer::start(options);
  if (!server.ok()) {
    std::cerr << "test-apiserver: " << server.status().toString() << "\n";
    return 1;
  }
  if (!kubeconfig_path.empty()) {
    auto st = (*server)->writeKubeconfig(kubeconfig_path);
    if (!st.ok()) {
      std::cerr << "test-apiserver: " << st.toString() << "\n";
      return 1;
    }
  }
  std::printf("listening on %s\n", (*server)->url().c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::cerr << "test-apiserver: signal " << sig << ", stopping\n";
  (*server)->stop();
  return 0;
}
