// Static-pod decode throughput: YAML/JSON bytes -> API defaults -> static defaults (UID hash) ->
// typed decode -> validation, for a typical manifest, on one core. Prints manifests per second.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <functional>

#include <nlohmann/json.hpp>

#include "api/pod_json.h"
#include "api/yaml.h"
#include "base/clock.h"
#include "config/pod_defaults.h"
#include "config/pod_validation.h"
#include "config/static_pod.h"

namespace {

using nodeagent::config::decodeManifest;
using nodeagent::config::ManifestSource;

const char* const kTypicalYaml = R"(apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: kube-system
  labels:
    app: web
    tier: frontend
  annotations:
    example.com/owner: platform-team
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: server
    image: registry.example.com:5000/team/web-server:1.4.2
    command: ["/usr/bin/web-server"]
    args: ["--port=8080", "--log-level=info"]
    ports:
    - name: http
      containerPort: 8080
      hostPort: 8080
    - name: metrics
      containerPort: 9090
    env:
    - name: LOG_FORMAT
      value: json
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    resources:
      requests:
        cpu: 100m
        memory: 64Mi
      limits:
        cpu: "1"
        memory: 256Mi
    livenessProbe:
      httpGet:
        port: http
        path: /healthz
      initialDelaySeconds: 5
    readinessProbe:
      tcpSocket:
        port: 8080
    volumeMounts:
    - name: config
      mountPath: /etc/web
      readOnly: true
    - name: cache
      mountPath: /var/cache/web
  volumes:
  - name: config
    hostPath:
      path: /etc/web
      type: Directory
  - name: cache
    emptyDir: {}
)";

const char* const kTypicalJson = R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"web",
"namespace":"kube-system","labels":{"app":"web","tier":"frontend"},"annotations":{
"example.com/owner":"platform-team"}},"spec":{"terminationGracePeriodSeconds":10,"containers":[{
"name":"server","image":"registry.example.com:5000/team/web-server:1.4.2","command":[
"/usr/bin/web-server"],"args":["--port=8080","--log-level=info"],"ports":[{"name":"http",
"containerPort":8080,"hostPort":8080},{"name":"metrics","containerPort":9090}],"env":[{
"name":"LOG_FORMAT","value":"json"},{"name":"NODE_NAME","valueFrom":{"fieldRef":{
"fieldPath":"spec.nodeName"}}}],"resources":{"requests":{"cpu":"100m","memory":"64Mi"},
"limits":{"cpu":"1","memory":"256Mi"}},"livenessProbe":{"httpGet":{"port":"http",
"path":"/healthz"},"initialDelaySeconds":5},"readinessProbe":{"tcpSocket":{"port":8080}},
"volumeMounts":[{"name":"config","mountPath":"/etc/web","readOnly":true},{"name":"cache",
"mountPath":"/var/cache/web"}]}],"volumes":[{"name":"config","hostPath":{"path":"/etc/web",
"type":"Directory"}},{"name":"cache","emptyDir":{}}]}})";

// CPU time of this thread: the machine may be shared, and "per core" means per CPU second.
double threadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Decodes `text` repeatedly for about `seconds` of CPU time and returns manifests per CPU second.
double measure(const char* label, const std::string& text, double seconds) {
  ManifestSource source{"node1", "/etc/nodeagent/manifests/web.yaml", true};
  auto check = decodeManifest(text, source, false);
  if (!check.ok()) {
    std::fprintf(stderr, "%s: the benchmark manifest does not decode:\n%s\n", label,
                 check.errorText().c_str());
    return -1;
  }
  auto& clock = nodeagent::base::realClock();
  auto start = clock.now();
  double cpu_start = threadCpuSeconds();
  long count = 0;
  size_t sink = 0;
  while (true) {
    for (int i = 0; i < 100; ++i) {
      auto result = decodeManifest(text, source, false);
      sink += result.pods.size();
    }
    count += 100;
    if (threadCpuSeconds() - cpu_start >= seconds) break;
  }
  double cpu = threadCpuSeconds() - cpu_start;
  double wall = std::chrono::duration<double>(clock.now() - start).count();
  double rate = static_cast<double>(count) / cpu;
  std::printf(
      "%-5s %zu bytes: %ld manifests in %.2f CPU s (%.2f wall s) = %.0f manifests/s per core "
      "(%.1f us each)%s\n",
      label, text.size(), count, cpu, wall, rate, 1e6 / rate, sink == 0 ? " (no pods?)" : "");
  return rate;
}

// CPU microseconds per call of `fn`, over about `seconds`.
double usPerCall(double seconds, const std::function<void()>& fn) {
  double start = threadCpuSeconds();
  long count = 0;
  while (threadCpuSeconds() - start < seconds) {
    for (int i = 0; i < 100; ++i) fn();
    count += 100;
  }
  return (threadCpuSeconds() - start) * 1e6 / static_cast<double>(count);
}

// Where the time goes, stage by stage (each stage measured alone on prepared input).
void breakdown(const std::string& text, double seconds) {
  using namespace nodeagent;
  ManifestSource source{"node1", "/etc/nodeagent/manifests/web.yaml", true};
  auto parsed = *api::yamlToJson(text);
  auto api_defaulted = parsed;
  config::applyApiDefaults(api_defaulted);
  auto defaulted = api_defaulted;
  config::applyStaticPodDefaults(defaulted, source);
  auto pod = *api::decodePod(defaulted);
  size_t sink = 0;
  std::printf("  yamlToJson        %6.1f us\n",
              usPerCall(seconds, [&] { sink += api::yamlToJson(text)->size(); }));
  std::printf("  API defaults      %6.1f us (with a copy of the JSON)\n", usPerCall(seconds, [&] {
                auto j = parsed;
                config::applyApiDefaults(j);
                sink += j.size();
              }));
  std::printf("  copy of the JSON  %6.1f us\n", usPerCall(seconds, [&] {
                auto j = parsed;
                sink += j.size();
              }));
  std::printf("  static defaults   %6.1f us (with a copy, includes the UID hash)\n",
              usPerCall(seconds, [&] {
                auto j = api_defaulted;
                config::applyStaticPodDefaults(j, source);
                sink += j.size();
              }));
  std::printf("  decodePod         %6.1f us\n", usPerCall(seconds, [&] {
                const auto decoded = api::decodePod(defaulted);  // const: reads share the spec
                sink += decoded->spec->containers.size();
              }));
  std::printf("  validation        %6.1f us\n", usPerCall(seconds, [&] {
                sink += config::validatePodWithJson(pod, &defaulted).size();
              }));
  if (sink == 0) std::printf("(nothing decoded?)\n");
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  if (seconds <= 0) seconds = 3.0;
  std::printf("decode + default + validate + hash of a typical manifest, one core\n");
  double yaml = measure("YAML", kTypicalYaml, seconds);
  double json = measure("JSON", kTypicalJson, seconds);
  std::printf("YAML stages, CPU time per manifest:\n");
  breakdown(kTypicalYaml, seconds / 3);
  return yaml > 0 && json > 0 ? 0 : 1;
}
