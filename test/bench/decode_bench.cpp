// Static-pod decode throughput: YAML/JSON bytes -> API defaults -> static defaults (UID hash) ->
// typed decode -> validation, for a typical manifest, on one core. Prints manifests per second.
#include <cstdio>
#include <string>

#include "base/clock.h"
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

// Decodes `text` repeatedly for about `seconds` and returns manifests per second.
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
  auto deadline = start + std::chrono::duration_cast<nodeagent::base::Duration>(
                              std::chrono::duration<double>(seconds));
  long count = 0;
  size_t sink = 0;
  while (true) {
    for (int i = 0; i < 100; ++i) {
      auto result = decodeManifest(text, source, false);
      sink += result.pods.size();
    }
    count += 100;
    if (clock.now() >= deadline) break;
  }
  double elapsed = std::chrono::duration<double>(clock.now() - start).count();
  double rate = static_cast<double>(count) / elapsed;
  std::printf("%-5s %zu bytes: %ld manifests in %.2f s = %.0f manifests/s (%.1f us each)%s\n", label,
              text.size(), count, elapsed, rate, 1e6 / rate, sink == 0 ? " (no pods?)" : "");
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  if (seconds <= 0) seconds = 3.0;
  std::printf("decode + default + validate + hash of a typical manifest, one core\n");
  double yaml = measure("YAML", kTypicalYaml, seconds);
  double json = measure("JSON", kTypicalJson, seconds);
  return yaml > 0 && json > 0 ? 0 : 1;
}
