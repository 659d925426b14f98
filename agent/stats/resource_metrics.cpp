#include "agent/stats/resource_metrics.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <optional>

#include "api/time.h"

namespace nodeagent::stats {
namespace {

using nlohmann::json;

struct Family {
  const char* name;
  const char* help;
  const char* type;
  std::string samples;
};

// The sample time of a stats block in Unix milliseconds, when it has one.
std::optional<int64_t> sampleMillis(const json& block) {
  auto it = block.find("time");
  if (it == block.end() || !it->is_string()) return std::nullopt;
  auto t = api::parseTime(it->get<std::string>());
  if (!t.ok()) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::milliseconds>(t->time_since_epoch()).count();
}

std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// One sample of `block[field]` (scaled) with `labels`, when the block has it.
void addSample(Family& family, const std::string& labels, const json& parent, const char* block,
               const char* field, double scale) {
  auto b = parent.find(block);
  if (b == parent.end() || !b->is_object()) return;
  auto v = b->find(field);
  if (v == b->end() || !v->is_number()) return;
  char value[64];
  std::snprintf(value, sizeof value, "%.9g", v->get<double>() * scale);
  family.samples += std::string(family.name) + labels + " " + value;
  if (auto ms = sampleMillis(*b)) family.samples += " " + std::to_string(*ms);
  family.samples += "\n";
}

}  // namespace

std::string resourceMetricsText(std::string_view summary_json) {
  Family families[] = {
      {"container_cpu_usage_seconds_total",
       "[ALPHA] Cumulative cpu time consumed by the container in core-seconds", "counter", ""},
      {"container_memory_working_set_bytes",
       "[ALPHA] Current working set of the container in bytes", "gauge", ""},
      {"node_cpu_usage_seconds_total",
       "[ALPHA] Cumulative cpu time consumed by the node in core-seconds", "counter", ""},
      {"node_memory_working_set_bytes", "[ALPHA] Current working set of the node in bytes", "gauge",
       ""},
      {"pod_cpu_usage_seconds_total",
       "[ALPHA] Cumulative cpu time consumed by the pod in core-seconds", "counter", ""},
      {"pod_memory_working_set_bytes", "[ALPHA] Current working set of the pod in bytes", "gauge",
       ""},
  };
  const json summary = json::parse(summary_json, nullptr, /*allow_exceptions=*/false);
  const bool ok = summary.is_object() && summary.contains("node");
  if (ok) {
    const json& node = summary["node"];
    addSample(families[2], "", node, "cpu", "usageCoreNanoSeconds", 1e-9);
    addSample(families[3], "", node, "memory", "workingSetBytes", 1);
    for (const json& pod : summary.value("pods", json::array())) {
      const json ref = pod.value("podRef", json::object());
      const std::string pod_labels = "namespace=\"" + escape(ref.value("namespace", "")) +
                                     "\",pod=\"" + escape(ref.value("name", "")) + "\"";
      addSample(families[4], "{" + pod_labels + "}", pod, "cpu", "usageCoreNanoSeconds", 1e-9);
      addSample(families[5], "{" + pod_labels + "}", pod, "memory", "workingSetBytes", 1);
      for (const json& c : pod.value("containers", json::array())) {
        const std::string labels =
            "{container=\"" + escape(c.value("name", "")) + "\"," + pod_labels + "}";
        addSample(families[0], labels, c, "cpu", "usageCoreNanoSeconds", 1e-9);
        addSample(families[1], labels, c, "memory", "workingSetBytes", 1);
      }
    }
  }
  std::string out;
  for (const Family& f : families) {
    out += std::string("# HELP ") + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.type +
           "\n" + f.samples;
  }
  out +=
      "# HELP scrape_error [ALPHA] 1 if there was an error while getting container metrics, 0 "
      "otherwise\n# TYPE scrape_error gauge\nscrape_error ";
  out += ok ? "0\n" : "1\n";
  return out;
}

}  // namespace nodeagent::stats
