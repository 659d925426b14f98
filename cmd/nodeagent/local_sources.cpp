#include "cmd/nodeagent/local_sources.h"

#include "api/pod_update.h"
#include "config/file_source.h"

namespace nodeagent::cmd {

base::Status addLocalSources(const LocalSources& s, asio::any_io_executor ex,
                             asio::any_io_executor blocking, base::Clock& clock,
                             config::ManifestErrors& errors, config::PodConfig& pod_config,
                             std::vector<std::unique_ptr<config::PodSource>>& out) {
  if (!s.manifest_path.empty()) {
    config::FileSourceOptions o;
    o.path = s.manifest_path;
    o.node_name = s.node_name;
    o.check_frequency = s.file_check_frequency;
    o.errors = &errors;
    out.push_back(config::makeFileSource(ex, clock, std::move(o),
                                         pod_config.channel(std::string(api::kFileSource))));
  }
  if (!s.manifest_url.empty()) {
    config::HttpSourceOptions o;
    o.url = s.manifest_url;
    o.headers = s.headers;
    o.node_name = s.node_name;
    o.check_frequency = s.http_check_frequency;
    o.errors = &errors;
    auto http = config::HttpSource::create(ex, std::move(blocking), clock, std::move(o),
                                           pod_config.channel(std::string(api::kHttpSource)));
    if (!http.ok()) return http.status();
    out.push_back(std::move(*http));
  }
  return base::okStatus();
}

}  // namespace nodeagent::cmd
