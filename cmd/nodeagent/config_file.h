// The agent's --config file: a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) in YAML or
// JSON, decoded strictly as kubelet decodes it. Each key nodeagent supports fills the flag of the
// same meaning unless the command line set it. A KubeletConfiguration field nodeagent does not
// implement is named in a warning and ignored; anything else is an error that names the file, the
// key and its line: an unknown key (a typo such as `staticPodPth` must never leave the agent
// without its pods), a duplicate key, a value of the wrong type, another kind or apiVersion.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "cmd/nodeagent/flags.h"

namespace nodeagent::cmd {

struct ConfigFileResult {
  // KubeletConfiguration fields present in the file that nodeagent ignores.
  std::vector<std::string> ignored_keys;
};

// Reads `path` and applies it to `fs`. InvalidArgument (the caller exits 2) for every problem
// with the file's content; NotFound when it cannot be read.
base::StatusOr<ConfigFileResult> applyConfigFile(FlagSet& fs, const std::string& path);

// The 1-based line of top-level `key` in YAML or JSON `text`, 0 when it cannot be told.
int configKeyLine(std::string_view text, std::string_view key);

}  // namespace nodeagent::cmd
