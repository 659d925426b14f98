// kubelet's /metrics/resource (the resource metrics endpoint metrics-server reads), in the
// Prometheus text format: the node's, each pod's and each container's CPU time and memory
// working set, with the time they were sampled at, and scrape_error (1 when there is no summary
// to read them from). Made from the summary's JSON (stats::SummaryProvider::json).
#pragma once

#include <string>
#include <string_view>

namespace nodeagent::stats {

// The metrics text of `summary_json` ("" when there is none yet: scrape_error 1 alone).
std::string resourceMetricsText(std::string_view summary_json);

}  // namespace nodeagent::stats
