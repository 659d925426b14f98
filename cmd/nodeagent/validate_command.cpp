#include "cmd/nodeagent/validate_command.h"

#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/runtime/process_support.h"
#include "api/yaml.h"
#include "base/status.h"
#include "config/static_pod.h"

namespace nodeagent::cmd {
namespace {

constexpr const char* kUsage =
    "usage: nodeagent validate [--hostname-override=NODE] [--runtime=process|fake] FILE...\n"
    "Decodes, defaults and validates each pod manifest as the file source does, and reports\n"
    "what the runtime (default: process) will refuse to run. Prints each valid manifest's\n"
    "defaulted pod as one JSON line on stdout and each problem of an invalid one as\n"
    "'FILE: field: message' on stderr. Exit status: 0 all valid, 1 some invalid, 2 usage.\n";

int usageError(const std::string& message) {
  std::fprintf(stderr, "nodeagent validate: %s\n%s", message.c_str(), kUsage);
  return 2;
}

// kubelet's GetHostname: the override (or the host name) trimmed and lower-cased.
std::string normalizeNodeName(std::string_view name) {
  size_t begin = name.find_first_not_of(" \t\r\n");
  size_t end = name.find_last_not_of(" \t\r\n");
  std::string out = begin == std::string_view::npos
                        ? std::string()
                        : std::string(name.substr(begin, end - begin + 1));
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

base::StatusOr<std::string> hostName() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) {
    return base::unavailableError(std::string("cannot read the host name: ") +
                                  std::strerror(errno));
  }
  return normalizeNodeName(buf);
}

// The source recorded for the UID: the absolute path, as the file source names its files.
std::string sourcePath(const std::string& file) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(file, ec);
  if (ec) return file;
  return abs.lexically_normal().string();
}

std::string oneLine(std::string s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c != '\r') {
      out += c;
    }
  }
  return out;
}

struct Flags {
  std::optional<std::string> node_override;
  std::string runtime = "process";
  std::vector<std::string> files;
  bool help = false;
};

// Flags, then the files (also after "--"). The error is the usage message.
base::StatusOr<Flags> parseFlags(int argc, char** argv) {
  Flags f;
  bool flags_done = false;
  constexpr std::string_view kHostnameFlag = "--hostname-override";
  constexpr std::string_view kRuntimeFlag = "--runtime";
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      f.files.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
    } else if (arg == "-h" || arg == "--help") {
      f.help = true;
      return f;
    } else if (arg == kHostnameFlag) {
      if (i + 1 >= argc) return base::invalidArgumentError("--hostname-override needs a value");
      f.node_override = argv[++i];
    } else if (arg.starts_with(kHostnameFlag) && arg[kHostnameFlag.size()] == '=') {
      f.node_override = std::string(arg.substr(kHostnameFlag.size() + 1));
    } else if (arg == kRuntimeFlag) {
      if (i + 1 >= argc) return base::invalidArgumentError("--runtime needs a value");
      f.runtime = argv[++i];
    } else if (arg.starts_with(kRuntimeFlag) && arg[kRuntimeFlag.size()] == '=') {
      f.runtime = std::string(arg.substr(kRuntimeFlag.size() + 1));
    } else {
      return base::invalidArgumentError("unknown flag " + std::string(arg));
    }
  }
  if (f.files.empty()) return base::invalidArgumentError("no manifest files given");
  if (f.runtime != "process" && f.runtime != "fake") {
    return base::invalidArgumentError("--runtime: \"" + f.runtime + "\" is not process or fake");
  }
  return f;
}

// Validates one manifest file: prints its defaulted pod on stdout, or its problems on stderr.
// Returns false when it is invalid or the runtime would refuse it.
bool validateFile(const std::string& file, const std::string& node, const std::string& runtime) {
  auto content = config::readManifestFile(file, api::kMaxConfigLength);
  if (!content.ok()) {
    std::fprintf(stderr, "%s: %s\n", file.c_str(), content.status().message().c_str());
    return false;
  }
  config::ManifestSource source{node, sourcePath(file), /*is_file=*/true};
  auto result = config::decodeManifest(*content, source, /*allow_list=*/false);
  if (!result.ok()) {
    for (const auto& e : result.errors) {
      std::fprintf(stderr, "%s: %s\n", file.c_str(), oneLine(e.toString()).c_str());
    }
    return false;
  }
  bool refused = false;
  for (const auto& pod : result.pods) {
    if (runtime != "process") continue;
    for (const auto& refusal : runtime::processRuntimeRefusals(*pod)) {
      std::fprintf(stderr, "%s: %s\n", file.c_str(), refusal.c_str());
      refused = true;
    }
  }
  if (refused) return false;
  for (const auto& pod : result.pods) {
    for (std::string_view piece : pod->raw->pieces())
      std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fputc('\n', stdout);
  }
  return true;
}

}  // namespace

int runValidate(int argc, char** argv) {
  auto parsed = parseFlags(argc, argv);
  if (!parsed.ok()) return usageError(parsed.status().message());
  const Flags& flags = *parsed;
  if (flags.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }

  std::string node;
  if (flags.node_override) {
    node = normalizeNodeName(*flags.node_override);
    if (node.empty()) return usageError("--hostname-override is empty");
  } else {
    auto host = hostName();
    if (!host.ok()) {
      std::fprintf(stderr, "nodeagent validate: %s\n", host.status().message().c_str());
      return 1;
    }
    node = *host;
  }

  int rc = 0;
  for (const auto& file : flags.files) {
    if (!validateFile(file, node, flags.runtime)) rc = 1;
  }
  std::fflush(stdout);
  return rc;
}

}  // namespace nodeagent::cmd
