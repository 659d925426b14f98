// The real kubectl (v1.32) against a spawned build/test-apiserver's OpenAPI documents: create and
// apply validated by the server (kubectl finds the fieldValidation parameter in /openapi/v3),
// unknown fields reported as against a real cluster, and kubectl explain.
#include <catch2/catch.hpp>

#include "test/integration/apiserver_test_util.h"

using namespace nodeagent::testing;

namespace {

const char* kPodYaml = R"(apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  restartPolicy: OnFailure
  containers:
  - name: web
    image: nginx:1.25
    command: ["nginx", "-g", "daemon off;"]
    ports:
    - containerPort: 80
      name: http
    resources:
      limits: {cpu: 100m, memory: 64Mi}
    livenessProbe:
      httpGet: {path: /, port: http}
    securityContext:
      runAsNonRoot: true
      capabilities: {drop: [ALL]}
  volumes:
  - name: config
    configMap: {name: web-config, optional: true}
  tolerations:
  - {key: example.com/special, operator: Exists, effect: NoSchedule}
)";

// kPodYaml named `name` with `image:` misspelt as `imagex:`.
std::string typoPod(const std::string& name) {
  std::string yaml = kPodYaml;
  yaml.replace(yaml.find("name: web"), 9, "name: " + name);
  yaml.replace(yaml.find("image:"), 6, "imagex:");
  return yaml;
}

}  // namespace

TEST_CASE("kubectl openapi: create and apply succeed without --validate",
          "[integration][apiserver]") {
  TempDir dir("apiserver-openapi");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  writeFile(dir / "pod.yaml", kPodYaml);

  auto created = kubectl.run({"create", "-f", (dir / "pod.yaml").string()});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  CHECK(created.out == "pod/web created\n");
  CHECK(created.err.empty());

  auto again = kubectl.run({"apply", "-f", (dir / "pod.yaml").string()});
  INFO(again.err);
  REQUIRE(again.exit_code == 0);
  CHECK(again.out == "pod/web configured\n");

  std::string renamed = kPodYaml;
  renamed.replace(renamed.find("name: web"), 9, "name: web2");
  writeFile(dir / "pod2.yaml", renamed);
  auto applied = kubectl.run({"apply", "-f", (dir / "pod2.yaml").string()});
  INFO(applied.err);
  REQUIRE(applied.exit_code == 0);
  CHECK(applied.out == "pod/web2 created\n");
  CHECK(applied.err.empty());
  // A change made by apply goes through the strategic merge patch kubectl computes from the
  // OpenAPI v3 schema (containers merged by name).
  renamed.replace(renamed.find("nginx:1.25"), 10, "nginx:1.26");
  writeFile(dir / "pod2.yaml", renamed);
  auto changed = kubectl.run({"apply", "-f", (dir / "pod2.yaml").string()});
  INFO(changed.err);
  REQUIRE(changed.exit_code == 0);
  CHECK(changed.out == "pod/web2 configured\n");
  CHECK(kubectl.run({"get", "pod", "web2", "-o", "jsonpath={.spec.containers[*].image}"}).out ==
        "nginx:1.26");
}

TEST_CASE("kubectl openapi: an unknown field fails as against a real cluster",
          "[integration][apiserver]") {
  TempDir dir("apiserver-openapi");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  const std::string path = (dir / "typo.yaml").string();
  writeFile(path, typoPod("typo") + "  foo: 1\n");

  auto created = kubectl.run({"create", "-f", path});
  REQUIRE(created.exit_code == 1);
  CHECK(created.err == "Error from server (BadRequest): error when creating \"" + path +
                           "\": Pod in version \"v1\" cannot be handled as a Pod: strict decoding "
                           "error: unknown field \"spec.containers[0].imagex\", unknown field "
                           "\"spec.foo\"\n");
  auto applied = kubectl.run({"apply", "-f", path});
  REQUIRE(applied.exit_code == 1);
  CHECK(applied.err.find("error when creating \"" + path +
                         "\": Pod in version \"v1\" cannot be handled as a Pod: strict decoding "
                         "error: unknown field \"spec.containers[0].imagex\"") !=
        std::string::npos);
  CHECK(kubectl.run({"get", "pod", "typo"}).exit_code == 1);
  // Server-side apply: kube-apiserver's typed conversion refuses the field whatever --validate.
  writeFile(dir / "ssa.yaml", typoPod("ssa"));
  auto server_side = kubectl.run({"apply", "--server-side", "-f", (dir / "ssa.yaml").string()});
  REQUIRE(server_side.exit_code == 1);
  CHECK(server_side.err ==
        "Error from server: failed to create typed patch object (default/ssa; /v1, Kind=Pod): "
        ".spec.containers[name=\"web\"].imagex: field not declared in schema\n");
  CHECK(kubectl.run({"get", "pod", "ssa"}).exit_code == 1);

  // An existing object patched by apply: the patch is checked.
  writeFile(dir / "pod.yaml", kPodYaml);
  REQUIRE(kubectl.run({"apply", "-f", (dir / "pod.yaml").string()}).exit_code == 0);
  writeFile(dir / "pod.yaml", typoPod("web"));
  auto patched = kubectl.run({"apply", "-f", (dir / "pod.yaml").string()});
  CHECK(patched.exit_code == 1);
  CHECK(patched.err.find("strict decoding error: unknown field \"spec.containers[0].imagex\"") !=
        std::string::npos);
}

TEST_CASE("kubectl openapi: --validate=warn prints the warning and creates",
          "[integration][apiserver]") {
  TempDir dir("apiserver-openapi");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  writeFile(dir / "typo.yaml", typoPod("typo"));

  auto warned = kubectl.run({"create", "-f", (dir / "typo.yaml").string(), "--validate=warn"});
  INFO(warned.err);
  // The pod has no image once the misspelt field is dropped, which the server then refuses.
  CHECK(warned.err.find("Warning: unknown field \"spec.containers[0].imagex\"\n") !=
        std::string::npos);

  std::string extra = kPodYaml;
  extra.replace(extra.find("name: web"), 9, "name: extra");
  extra += "  extraField: true\n";
  writeFile(dir / "extra.yaml", extra);
  auto created = kubectl.run({"create", "-f", (dir / "extra.yaml").string(), "--validate=warn"});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  CHECK(created.out == "pod/extra created\n");
  CHECK(created.err == "Warning: unknown field \"spec.extraField\"\n");

  extra.replace(extra.find("name: extra"), 11, "name: quiet");
  writeFile(dir / "quiet.yaml", extra);
  auto quiet = kubectl.run({"create", "-f", (dir / "quiet.yaml").string(), "--validate=ignore"});
  REQUIRE(quiet.exit_code == 0);
  CHECK(quiet.err.empty());
}

TEST_CASE("kubectl openapi: explain prints the served types' fields", "[integration][apiserver]") {
  TempDir dir("apiserver-openapi");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);

  auto containers = kubectl.run({"explain", "pod.spec.containers"});
  INFO(containers.err);
  REQUIRE(containers.exit_code == 0);
  const std::string& out = containers.out;
  CHECK(out.starts_with("KIND:       Pod\nVERSION:    v1\n\nFIELD: containers <[]Container>\n"));
  CHECK(out.find("A single application container that you want to run within a pod.") !=
        std::string::npos);
  CHECK(out.find("  image\t<string>\n") != std::string::npos);
  CHECK(out.find("  imagePullPolicy\t<string>\n  enum: Always, IfNotPresent, Never\n") !=
        std::string::npos);
  CHECK(out.find("  name\t<string> -required-\n") != std::string::npos);
  CHECK(out.find("  resources\t<ResourceRequirements>\n") != std::string::npos);
  CHECK(out.find("  restartPolicy\t<string>\n") != std::string::npos);

  auto pod = kubectl.run({"explain", "pod"});
  REQUIRE(pod.exit_code == 0);
  CHECK(pod.out.find("  spec\t<PodSpec>\n") != std::string::npos);

  auto limits = kubectl.run({"explain", "pod.spec.containers.resources.limits"});
  REQUIRE(limits.exit_code == 0);
  CHECK(limits.out.find("FIELD: limits <map[string]Quantity>\n") != std::string::npos);

  auto secret = kubectl.run({"explain", "secret.data"});
  REQUIRE(secret.exit_code == 0);
  CHECK(
      secret.out.starts_with("KIND:       Secret\nVERSION:    v1\n\nFIELD: data "
                             "<map[string]string>\n"));
  auto configmap = kubectl.run({"explain", "configmap"});
  REQUIRE(configmap.exit_code == 0);
  CHECK(configmap.out.find("  immutable\t<boolean>\n") != std::string::npos);
  CHECK(configmap.out.find("  binaryData\t<map[string]string>\n") != std::string::npos);

  auto lease = kubectl.run({"explain", "lease.spec"});
  REQUIRE(lease.exit_code == 0);
  CHECK(lease.out.starts_with("GROUP:      coordination.k8s.io\nKIND:       Lease\n"));
  CHECK(lease.out.find("  renewTime\t<string>\n") != std::string::npos);

  // The OpenAPI v2 form, which kubectl reads as protobuf.
  auto v2 = kubectl.run({"explain", "--output=plaintext-openapiv2", "pod.spec.containers"});
  INFO(v2.err);
  REQUIRE(v2.exit_code == 0);
  CHECK(v2.out.starts_with("KIND:     Pod\nVERSION:  v1\n\nRESOURCE: containers <[]Object>\n"));
  CHECK(v2.out.find("   image\t<string>\n") != std::string::npos);
  CHECK(v2.out.find("   name\t<string> -required-\n") != std::string::npos);

  auto missing = kubectl.run({"explain", "pod.spec.nope"});
  CHECK(missing.exit_code == 1);
  CHECK(missing.err.find("field \"nope\" does not exist") != std::string::npos);
}
