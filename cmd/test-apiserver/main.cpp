// build/test-apiserver: the mock Kubernetes apiserver as a program (see test_api_server.h).
// Prints "listening on https://ADDR:PORT" (http:// with --insecure-serve-http) as its first stdout
// line, then serves until SIGTERM or SIGINT.
//
// HTTPS by default, as kube-apiserver: with the certificate given by --tls-cert-file and
// --tls-private-key-file, else one issued at start by a CA kept under --cert-dir
// (serving_certs.h); plain HTTP only with --insecure-serve-http.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "cmd/test-apiserver/kubelet_location.h"
#include "cmd/test-apiserver/serving_certs.h"
#include "cmd/test-apiserver/test_api_server.h"

namespace {

using nodeagent::testapiserver::ServerOptions;
using nodeagent::testapiserver::TestApiServer;

void usage() {
  std::cerr << "usage: test-apiserver [--bind-address=127.0.0.1] [--secure-port=6443|0]\n"
               "         [--token-auth-file=CSV] [--tls-cert-file=F --tls-private-key-file=K]\n"
               "         [--cert-dir=DIR] [--insecure-serve-http] [--client-ca-file=CA]\n"
               "         [--enable-bootstrap-token-auth] [--csr-auto-approve=true|false]\n"
               "         [--cluster-signing-cert-file=F --cluster-signing-key-file=K]\n"
               "         [--authorization-mode=MODE[,MODE...]] (AlwaysAllow, ABAC, Node;\n"
               "          the first mode that allows a request wins)\n"
               "         [--enable-admission-plugins=NodeRestriction] (on by default)\n"
               "         [--disable-admission-plugins=NodeRestriction]\n"
               "         [--authorization-policy-file=ABAC-JSONL]\n"
               "         [--service-account-signing-key-file=PEM]\n"
               "         [--service-account-issuer=URL] [--api-audiences=A,B]\n"
               "         [--service-account-extend-token-expiration=true|false]\n"
               "         [--kubelet-client-certificate=F --kubelet-client-key=K]\n"
               "         [--kubelet-certificate-authority=CA]\n"
               "         [--kubelet-preferred-address-types=InternalIP,Hostname,...]\n"
               "         [--write-kubeconfig=PATH] [--history-window=N]\n";
}

// "true" or "false"; anything else throws (applyFlag reports the flag and value).
bool boolValue(const std::string& value) {
  if (value != "true" && value != "false") throw std::invalid_argument(value);
  return value == "true";
}

// The admission plugins of --enable-admission-plugins or --disable-admission-plugins: only
// NodeRestriction is known (the others kube-apiserver has are not implemented).
bool admissionPlugins(const std::string& value) {
  std::istringstream list(value);
  for (std::string plugin; std::getline(list, plugin, ',');) {
    if (plugin != "NodeRestriction") {
      std::cerr << "test-apiserver: unknown admission plugin \"" << plugin
                << "\" (supported: NodeRestriction)\n";
      return false;
    }
  }
  return true;
}

struct Flags {
  ServerOptions options;
  std::string kubeconfig_path;
  bool insecure_http = false;
};

// Sets one flag. Returns the exit code when the program should stop here (--help, a bad flag or
// value).
std::optional<int> applyFlag(const std::string& arg, const std::string& value, Flags& flags) {
  ServerOptions& options = flags.options;
  try {
    if (arg == "--bind-address") {
      options.bind_address = value;
    } else if (arg == "--secure-port" || arg == "--port") {
      options.port = std::stoi(value);
    } else if (arg == "--token-auth-file") {
      options.token_auth_file = value;
    } else if (arg == "--tls-cert-file") {
      options.tls_cert_file = value;
    } else if (arg == "--tls-private-key-file") {
      options.tls_private_key_file = value;
    } else if (arg == "--cert-dir") {
      if (value.empty()) throw std::invalid_argument(value);
      options.cert_dir = value;
    } else if (arg == "--insecure-serve-http") {
      flags.insecure_http = boolValue(value);
    } else if (arg == "--authorization-policy-file") {
      options.authorization_policy_file = value;
    } else if (arg == "--enable-bootstrap-token-auth") {
      options.enable_bootstrap_token_auth = boolValue(value);
    } else if (arg == "--cluster-signing-cert-file") {
      options.cluster_signing_cert_file = value;
    } else if (arg == "--cluster-signing-key-file") {
      options.cluster_signing_key_file = value;
    } else if (arg == "--csr-auto-approve") {
      options.csr_auto_approve = boolValue(value);
    } else if (arg == "--client-ca-file") {
      options.client_ca_file = value;
    } else if (arg == "--authorization-mode") {
      options.authorization_mode = value;
    } else if (arg == "--enable-admission-plugins" || arg == "--disable-admission-plugins") {
      if (!admissionPlugins(value)) return 2;
      options.node_restriction = arg == "--enable-admission-plugins";
    } else if (arg == "--service-account-signing-key-file") {
      options.service_account_signing_key_file = value;
    } else if (arg == "--service-account-issuer") {
      options.service_accounts.issuer = value;
    } else if (arg == "--api-audiences") {
      options.service_accounts.api_audiences.clear();
      std::istringstream list(value);
      for (std::string audience; std::getline(list, audience, ',');) {
        if (!audience.empty()) options.service_accounts.api_audiences.push_back(audience);
      }
    } else if (arg == "--service-account-extend-token-expiration") {
      options.service_accounts.extend_expiration = boolValue(value);
    } else if (arg == "--kubelet-client-certificate") {
      options.kubelet_client_certificate = value;
    } else if (arg == "--kubelet-client-key") {
      options.kubelet_client_key = value;
    } else if (arg == "--kubelet-certificate-authority") {
      options.kubelet_certificate_authority = value;
    } else if (arg == "--kubelet-preferred-address-types") {
      auto types = nodeagent::testapiserver::parsePreferredAddressTypes(value);
      if (!types.ok()) {
        std::cerr << "test-apiserver: " << types.status().message() << "\n";
        return 2;
      }
      options.kubelet_preferred_address_types = std::move(*types);
    } else if (arg == "--write-kubeconfig") {
      flags.kubeconfig_path = value;
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
  return std::nullopt;
}

// Flags as --name=value or --name value. Returns the exit code when the program should stop
// here.
std::optional<int> parseFlags(int argc, char** argv, Flags& flags) {
  flags.options.port = 6443;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    auto eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (arg == "--insecure-serve-http" || arg == "--enable-bootstrap-token-auth") {
      value = "true";
    } else if (arg != "--help" && arg != "-h") {
      if (i + 1 >= argc) {
        std::cerr << "test-apiserver: " << arg << " needs a value\n";
        usage();
        return 2;
      }
      value = argv[++i];
    }
    if (std::optional<int> exit_code = applyFlag(arg, value, flags)) return exit_code;
  }
  if (flags.options.port < 0 || flags.options.port > 65535) {
    std::cerr << "test-apiserver: --secure-port must be 0..65535\n";
    return 2;
  }
  ServerOptions& options = flags.options;
  if (flags.insecure_http) {
    if (!options.cert_dir.empty() || !options.tls_cert_file.empty()) {
      std::cerr << "test-apiserver: --insecure-serve-http cannot be combined with --cert-dir or "
                   "--tls-cert-file\n";
      return 2;
    }
  } else if (options.cert_dir.empty()) {
    options.cert_dir = nodeagent::testapiserver::defaultCertDir();
  }
  return std::nullopt;
}

// Blocks the stop signals before any thread exists, so only sigwait() in main sees them.
sigset_t blockStopSignals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return stop_signals;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (std::optional<int> exit_code = parseFlags(argc, argv, flags)) return *exit_code;
  sigset_t stop_signals = blockStopSignals();

  auto server = TestApiServer::start(flags.options);
  if (!server.ok()) {
    std::cerr << "test-apiserver: " << server.status().toString() << "\n";
    return 1;
  }
  if (!flags.kubeconfig_path.empty()) {
    auto st = (*server)->writeKubeconfig(flags.kubeconfig_path);
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
