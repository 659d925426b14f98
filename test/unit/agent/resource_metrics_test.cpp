#include <catch2/catch.hpp>

#include <string>

#include "agent/stats/resource_metrics.h"

using nodeagent::stats::resourceMetricsText;

TEST_CASE("resource metrics: node, pod and container cpu and memory with their sample times",
          "[stats][resource_metrics]") {
  const std::string summary = R"({
    "node": {"nodeName": "n1",
             "cpu": {"time": "2026-01-02T03:04:05Z", "usageCoreNanoSeconds": 2500000000},
             "memory": {"time": "2026-01-02T03:04:05Z", "workingSetBytes": 1048576}},
    "pods": [{"podRef": {"name": "web", "namespace": "default", "uid": "u1"},
              "cpu": {"time": "2026-01-02T03:04:06Z", "usageCoreNanoSeconds": 1000000000},
              "memory": {"time": "2026-01-02T03:04:06Z", "workingSetBytes": 4096},
              "containers": [{"name": "main",
                              "cpu": {"time": "2026-01-02T03:04:06.5Z",
                                      "usageCoreNanoSeconds": 500000000},
                              "memory": {"time": "2026-01-02T03:04:06Z",
                                         "workingSetBytes": 2048}},
                             {"name": "no-stats"}]}]})";
  const std::string text = resourceMetricsText(summary);
  CHECK_THAT(text, Catch::Contains("node_cpu_usage_seconds_total 2.5 1767323045000\n"));
  CHECK_THAT(text, Catch::Contains("node_memory_working_set_bytes 1048576 1767323045000\n"));
  CHECK_THAT(text,
             Catch::Contains("pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 1 "
                             "1767323046000\n"));
  CHECK_THAT(text, Catch::Contains("container_cpu_usage_seconds_total{container=\"main\","
                                   "namespace=\"default\",pod=\"web\"} 0.5 1767323046500\n"));
  CHECK_THAT(text, Catch::Contains("container_memory_working_set_bytes{container=\"main\","
                                   "namespace=\"default\",pod=\"web\"} 2048 1767323046000\n"));
  CHECK_THAT(text, !Catch::Contains("no-stats"));
  CHECK_THAT(text, Catch::Contains("# TYPE container_cpu_usage_seconds_total counter\n"));
  CHECK_THAT(text, Catch::EndsWith("scrape_error 0\n"));
}

TEST_CASE("resource metrics: without a summary only scrape_error 1", "[stats][resource_metrics]") {
  for (const char* summary : {"", "not json", "{}"}) {
    const std::string text = resourceMetricsText(summary);
    CHECK_THAT(text, Catch::EndsWith("scrape_error 1\n"));
    CHECK_THAT(text, !Catch::Contains("\nnode_cpu_usage_seconds_total "));
  }
}
