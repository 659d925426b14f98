#include "cmd/nodeagent/pod_updates_command.h"

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/pod_update.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/duration.h"
#include "base/log.h"
#include "cmd/nodeagent/local_sources.h"
#include "config/apiserver_source.h"
#include "config/file_source.h"
#include "config/http_source.h"
#include "config/manifest_errors.h"
#include "config/pod_config.h"

namespace nodeagent::cmd {
namespace {

NODEAGENT_LOGGER("cmd")

constexpr const char* kUsage =
    "usage: nodeagent pod-updates [--pod-manifest-path=P] [--manifest-url=U] [--kubeconfig=K]\n"
    "         [--manifest-url-header=K:V]... [--hostname-override=NODE]\n"
    "         [--file-check-frequency=D] [--http-check-frequency=D] [--root-dir=R] [--full] "
    "[--v=N]\n"
    "Runs the file, HTTP and apiserver pod sources and the PodConfig merge (incremental mode) and "
    "prints\n"
    "every pod update as one JSON line on stdout until SIGINT or SIGTERM. Durations use Go's form\n"
    "(20s, 1m, 500ms, 1h30m).\n";

int usageError(const std::string& message) {
  std::fprintf(stderr, "nodeagent pod-updates: %s\n%s", message.c_str(), kUsage);
  return 2;
}

struct Flags {
  std::string manifest_path;
  std::string manifest_url;
  std::string kubeconfig;
  std::vector<std::string> url_headers;
  std::optional<std::string> hostname_override;
  base::Duration file_check_frequency = std::chrono::seconds(20);
  base::Duration http_check_frequency = std::chrono::seconds(20);
  std::string root_dir = "/var/lib/nodeagent";
  bool full = false;
  int verbosity = 0;
  bool help = false;
};

// --full, alone or as --full=true|false.
base::Status applyFullFlag(const std::optional<std::string>& value, Flags& f) {
  if (value && *value != "true" && *value != "false") {
    return base::invalidArgumentError("--full takes no value (or true/false), got \"" + *value +
                                      "\"");
  }
  f.full = !value || *value == "true";
  return base::okStatus();
}

bool isValuedFlag(const std::string& name) {
  static const char* kValued[] = {"pod-manifest-path",
                                  "manifest-url",
                                  "manifest-url-header",
                                  "hostname-override",
                                  "file-check-frequency",
                                  "http-check-frequency",
                                  "root-dir",
                                  "v",
                                  "kubeconfig"};
  bool known = false;
  for (const char* k : kValued) known = known || name == k;
  return known;
}

// A positive Go-style duration for --`name`.
base::Status parsePositiveDuration(const std::string& name, const std::string& value,
                                   base::Duration& out) {
  auto d = base::parseDuration(value);
  if (!d.ok()) return d.status().withContext("--" + name);
  if (*d <= base::Duration::zero()) {
    return base::invalidArgumentError("--" + name + " must be positive, got \"" + value + "\"");
  }
  out = *d;
  return base::okStatus();
}

// Sets one of the flags isValuedFlag knows.
base::Status applyValuedFlag(const std::string& name, const std::string& value, Flags& f) {
  if (name == "pod-manifest-path") {
    f.manifest_path = value;
  } else if (name == "manifest-url") {
    f.manifest_url = value;
  } else if (name == "manifest-url-header") {
    f.url_headers.push_back(value);
  } else if (name == "hostname-override") {
    f.hostname_override = value;
  } else if (name == "file-check-frequency") {
    RETURN_IF_ERROR(parsePositiveDuration(name, value, f.file_check_frequency));
  } else if (name == "http-check-frequency") {
    RETURN_IF_ERROR(parsePositiveDuration(name, value, f.http_check_frequency));
  } else if (name == "kubeconfig") {
    f.kubeconfig = value;
  } else if (name == "root-dir") {
    if (value.empty()) return base::invalidArgumentError("--root-dir must not be empty");
    f.root_dir = value;
  } else if (name == "v") {
    char* end = nullptr;
    long v = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < 0 || v > 10) {
      return base::invalidArgumentError("--v must be a number from 0 to 10, got \"" + value + "\"");
    }
    f.verbosity = static_cast<int>(v);
  }
  return base::okStatus();
}

// Parses the flags (--name=value or --name value); the error names the flag.
base::StatusOr<Flags> parseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      f.help = true;
      continue;
    }
    if (!arg.starts_with("--")) {
      return base::invalidArgumentError("unexpected argument \"" + std::string(arg) + "\"");
    }
    std::string name;
    std::optional<std::string> value;
    if (auto eq = arg.find('='); eq != std::string_view::npos) {
      name = std::string(arg.substr(2, eq - 2));
      value = std::string(arg.substr(eq + 1));
    } else {
      name = std::string(arg.substr(2));
    }
    if (name == "full") {
      RETURN_IF_ERROR(applyFullFlag(value, f));
      continue;
    }
    if (!isValuedFlag(name)) return base::invalidArgumentError("unknown flag --" + name);
    if (!value) {
      if (i + 1 >= argc) return base::invalidArgumentError("flag --" + name + " needs a value");
      value = argv[++i];
    }
    RETURN_IF_ERROR(applyValuedFlag(name, *value, f));
  }
  return f;
}

// kubelet's GetHostname: the override (or the host name) trimmed and lower-cased.
base::StatusOr<std::string> nodeName(const std::optional<std::string>& override_name) {
  std::string name;
  if (override_name) {
    name = *override_name;
  } else {
    char buf[HOST_NAME_MAX + 1] = {};
    if (gethostname(buf, sizeof(buf) - 1) != 0) {
      return base::unavailableError(std::string("cannot read the host name: ") +
                                    std::strerror(errno));
    }
    name = buf;
  }
  auto begin = name.find_first_not_of(" \t\r\n");
  auto end = name.find_last_not_of(" \t\r\n");
  name = begin == std::string::npos ? std::string() : name.substr(begin, end - begin + 1);
  for (char& c : name) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  if (name.empty()) return base::invalidArgumentError("--hostname-override: empty node name");
  return name;
}

// Keys in the documented order: op, source, pods; each pod's namespace, name, uid (with --full,
// the pod's own order).
std::string updateLine(const api::PodUpdate& u, bool full) {
  using Json = nlohmann::ordered_json;
  Json pods = Json::array();
  for (const auto& pod : u.pods) {
    if (full) {
      pods.push_back(pod->raw ? Json::parse(pod->raw->str(), nullptr, /*allow_exceptions=*/false)
                              : Json::object());
    } else {
      Json ref = Json::object();
      ref["namespace"] = pod->metadata.namespace_;
      ref["name"] = pod->metadata.name;
      ref["uid"] = pod->metadata.uid;
      pods.push_back(std::move(ref));
    }
  }
  Json line = Json::object();
  line["op"] = std::string(api::podOperationName(u.op));
  line["source"] = u.source;
  line["pods"] = std::move(pods);
  return line.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// What the sources need beyond the flags, checked before anything starts.
struct SourceInputs {
  config::HttpHeaders headers;
  std::string node;
};

// The usage error, if any, of the flags that choose and configure the sources.
base::StatusOr<SourceInputs> checkSourceFlags(const Flags& flags) {
  if (flags.manifest_path.empty() && flags.manifest_url.empty() && flags.kubeconfig.empty()) {
    return base::invalidArgumentError(
        "nothing to watch: give --pod-manifest-path, --manifest-url and/or --kubeconfig");
  }
  SourceInputs in;
  ASSIGN_OR_RETURN(in.headers, config::parseManifestUrlHeaders(flags.url_headers));
  if (!flags.manifest_url.empty()) {
    auto url = config::parseHttpUrl(flags.manifest_url);
    if (!url.ok()) return base::invalidArgumentError("--manifest-url: " + url.status().message());
  }
  ASSIGN_OR_RETURN(in.node, nodeName(flags.hostname_override));
  return in;
}

// Prints each update as one JSON line, whole (the lock keeps lines from interleaving).
config::PodConfig::Output printUpdates(std::mutex& out_mu, bool full) {
  return [&out_mu, full](api::PodUpdate u) {
    std::string line = updateLine(u, full);
    std::lock_guard lock(out_mu);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  };
}

// The sources the flags ask for, in file, HTTP, apiserver order, each sending to its channel of
// `pod_config`. With an apiserver, checkpointed pods are restored first.
base::StatusOr<std::vector<std::unique_ptr<config::PodSource>>> makeSources(
    asio::io_context& ioc, asio::thread_pool& blocking, base::Clock& clock, const Flags& flags,
    const SourceInputs& in, config::ManifestErrors& errors, config::PodConfig& pod_config,
    spdlog::logger& log) {
  std::vector<std::unique_ptr<config::PodSource>> sources;
  LocalSources local{flags.manifest_path,        flags.manifest_url,        in.headers, in.node,
                     flags.file_check_frequency, flags.http_check_frequency};
  RETURN_IF_ERROR(addLocalSources(local, ioc.get_executor(), blocking.get_executor(), clock, errors,
                                  pod_config, sources));
  if (!flags.kubeconfig.empty()) {
    auto api_sink = pod_config.channel(std::string(api::kApiserverSource));
    // Checkpointed pods come back as one RESTORE before the apiserver source starts.
    if (auto restored = pod_config.restore(); !restored.ok()) {
      log.warn("Checkpoint restore failed err={}", restored.status().toString());
    }
    config::ApiserverSourceOptions o;
    o.kubeconfig = flags.kubeconfig;
    o.node_name = in.node;
    ASSIGN_OR_RETURN(auto api_source,
                     config::makeApiserverSource(ioc.get_executor(), clock, base::defaultRandom(),
                                                 std::move(o), api_sink));
    sources.push_back(std::move(api_source));
  }
  return sources;
}

}  // namespace

int runPodUpdates(int argc, char** argv) {
  auto parsed = parseFlags(argc, argv);
  if (!parsed.ok()) return usageError(parsed.status().message());
  const Flags& flags = *parsed;
  if (flags.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  auto inputs = checkSourceFlags(flags);
  if (!inputs.ok()) return usageError(inputs.status().message());

  base::initLogging({.verbosity = flags.verbosity, .quiet = false});

  // A broken pipe on stdout must end the program through write errors, not a signal.
  ::signal(SIGPIPE, SIG_IGN);

  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);
  asio::thread_pool blocking(2);
  base::Clock& clock = base::realClock();
  config::ManifestErrors errors;

  std::mutex out_mu;
  config::PodConfigOptions pc_options;
  pc_options.mode = config::PodConfigNotificationMode::kIncremental;
  pc_options.checkpoint_dir = std::filesystem::path(flags.root_dir) / "pod-checkpoints";
  config::PodConfig pod_config(ioc.get_executor(), clock, printUpdates(out_mu, flags.full),
                               pc_options);

  auto made = makeSources(ioc, blocking, clock, flags, *inputs, errors, pod_config, *log());
  if (!made.ok()) {
    std::fprintf(stderr, "nodeagent pod-updates: %s\n", made.status().message().c_str());
    return 1;
  }
  std::vector<std::unique_ptr<config::PodSource>>& sources = *made;

  asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    log()->info("Stopping on signal signal={}", signo);
    // After stop() no source pushes; what is already queued may still print, then the loop ends.
    for (auto& s : sources) s->stop();
    guard.reset();
    asio::post(ioc, [&] { ioc.stop(); });
  });

  log()->info("Starting pod sources node={} file={} url={}", inputs->node, flags.manifest_path,
              flags.manifest_url);
  for (auto& s : sources) s->start();

  std::thread second([&] { ioc.run(); });
  ioc.run();
  second.join();
  sources.clear();
  blocking.join();
  return 0;
}

}  // namespace nodeagent::cmd
