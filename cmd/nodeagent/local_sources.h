// The node's local pod sources as kubelet's --pod-manifest-path and --manifest-url make them: the
// file source and the HTTP source, each sending to its channel of a PodConfig. The daemon and
// `nodeagent pod-updates` build them the same way, here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"
#include "config/http_source.h"
#include "config/manifest_errors.h"
#include "config/pod_config.h"
#include "config/pod_source.h"

namespace nodeagent::cmd {

struct LocalSources {
  std::string manifest_path;  // empty: no file source
  std::string manifest_url;   // empty: no HTTP source
  config::HttpHeaders headers;
  std::string node_name;
  base::Duration file_check_frequency{};
  base::Duration http_check_frequency{};
};

// Appends the file source, then the HTTP source, that `s` asks for to `out`. An error names the
// manifest URL when it is not an http:// or https:// URL.
base::Status addLocalSources(const LocalSources& s, asio::any_io_executor ex,
                             asio::any_io_executor blocking, base::Clock& clock,
                             config::ManifestErrors& errors, config::PodConfig& pod_config,
                             std::vector<std::unique_ptr<config::PodSource>>& out);

}  // namespace nodeagent::cmd
