// kube-apiserver's validation rules and wording (pkg/apis/core/validation, apimachinery).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "api/pod_json.h"
#include "config/pod_validation.h"
#include "config/static_pod.h"
#include "test/unit/config/static_pod_test_util.h"

namespace nodeagent::config {
namespace {

using namespace validation;
using test::decodeFile;
using test::errorLines;
using test::manifest;

using Lines = std::vector<std::string>;

const std::string kLabelMsg =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

TEST_CASE("DNS-1123 labels", "[unit][config]") {
  for (const char* good : {"a", "0", "web", "web-1", "1-web", "a-b-c"}) {
    CAPTURE(good);
    CHECK(isDns1123Label(good).empty());
  }
  for (const char* bad : {"", "-a", "a-", "A", "a_b", "a.b", "a b", "ä"}) {
    CAPTURE(bad);
    CHECK(isDns1123Label(bad) == Lines{kLabelMsg});
  }
  CHECK(isDns1123Label(std::string(63, 'a')).empty());
  CHECK(isDns1123Label(std::string(64, 'a')) == Lines{"must be no more than 63 characters"});
  CHECK(isDns1123Label(std::string(64, 'A')).size() == 2);
}

TEST_CASE("DNS-1123 subdomains", "[unit][config]") {
  for (const char* good : {"a", "example.com", "a-b.c-d", "1.2.3"}) {
    CAPTURE(good);
    CHECK(isDns1123Subdomain(good).empty());
  }
  for (const char* bad : {"", ".a", "a.", "a..b", "A.com", "a_b.com", "a.-b"}) {
    CAPTURE(bad);
    REQUIRE(isDns1123Subdomain(bad).size() == 1);
    CHECK(isDns1123Subdomain(bad)[0].starts_with("a lowercase RFC 1123 subdomain must consist"));
  }
  std::string long_name(254, 'a');
  CHECK(isDns1123Subdomain(std::string(253, 'a')).empty());
  CHECK(isDns1123Subdomain(long_name) == Lines{"must be no more than 253 characters"});
}

TEST_CASE("qualified names and label values", "[unit][config]") {
  for (const char* good :
       {"app", "App.Name_1", "example.com/app", "kubernetes.io/config.hash", "a/b"}) {
    CAPTURE(good);
    CHECK(isQualifiedName(good).empty());
  }
  CHECK(isQualifiedName("/app") == Lines{"prefix part must be non-empty"});
  CHECK(isQualifiedName("example.com/").size() == 2);  // empty, and does not match
  CHECK(isQualifiedName("example.com/")[0] == "name part must be non-empty");
  CHECK(isQualifiedName(std::string(64, 'a')) ==
        Lines{"name part must be no more than 63 characters"});
  CHECK(isQualifiedName("a/b/c").size() == 1);
  CHECK(isQualifiedName("a/b/c")[0].starts_with("a qualified name must consist"));
  CHECK(isQualifiedName("Example.com/app")[0].starts_with("prefix part a lowercase RFC 1123"));

  CHECK(isValidLabelValue("").empty());
  CHECK(isValidLabelValue("My_Value.1").empty());
  CHECK(isValidLabelValue("-x").size() == 1);
  CHECK(isValidLabelValue(std::string(64, 'a')) == Lines{"must be no more than 63 characters"});
}

TEST_CASE("port names follow IANA_SVC_NAME", "[unit][config]") {
  CHECK(isValidPortName("http").empty());
  CHECK(isValidPortName("web-8080").empty());
  CHECK(isValidPortName("8080") == Lines{"must contain at least one letter or number (a-z, 0-9)"});
  CHECK(isValidPortName("a--b") == Lines{"must not contain consecutive hyphens"});
  CHECK(isValidPortName("-ab") == Lines{"must not begin or end with a hyphen"});
  CHECK(isValidPortName("abcdefghijklmnop") == Lines{"must be no more than 15 characters"});
  CHECK(isValidPortName("HTTP") ==
        Lines{"must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
              "must contain at least one letter or number (a-z, 0-9)"});
  CHECK(isValidPortNum(1).empty());
  CHECK(isValidPortNum(65535).empty());
  CHECK(isValidPortNum(0) == Lines{"must be between 1 and 65535, inclusive"});
  CHECK(isValidPortNum(65536) == Lines{"must be between 1 and 65535, inclusive"});
}

TEST_CASE("environment variable names", "[unit][config]") {
  for (const char* good : {"A", "_a", "my.env-name", "MY_ENV.NAME", "MyEnvName1", "-x", ".a"}) {
    CAPTURE(good);
    CHECK(isEnvVarName(good).empty());
  }
  CHECK(isEnvVarName("1A").size() == 1);
  CHECK(isEnvVarName("A B").size() == 1);
  CHECK(isEnvVarName(".") == Lines{"must not be '.'"});
  CHECK(isEnvVarName("..") == Lines{"must not be '..'"});
  CHECK(isEnvVarName("..a") == Lines{"must not start with '..'"});
}

TEST_CASE("bad values are quoted like Go's %q", "[unit][config]") {
  CHECK(goQuote("web") == "\"web\"");
  CHECK(goQuote("a\"b\\c") == R"("a\"b\\c")");
  CHECK(goQuote("tab\there\nnl") == R"("tab\there\nnl")");
  CHECK(goQuote(std::string("\x01\x7f", 2)) == R"("\x01\x7f")");
  CHECK(goQuote("héllo") == "\"héllo\"");
  CHECK(goQuote("\xff") == R"("\xff")");
  CHECK(goQuote("\xc2\x85") == R"("\u0085")");
}

TEST_CASE("field errors use kube-apiserver's wording", "[unit][config]") {
  CHECK(required("spec.containers[1].name").toString() ==
        "spec.containers[1].name: Required value");
  CHECK(required("metadata.name", "name or generateName is required").toString() ==
        "metadata.name: Required value: name or generateName is required");
  CHECK(invalid("spec.x", "v", "bad").toString() == R"(spec.x: Invalid value: "v": bad)");
  CHECK(invalid("spec.x", int64_t{-1}, "bad").toString() == "spec.x: Invalid value: -1: bad");
  CHECK(duplicate("spec.containers[1].name", "web").toString() ==
        R"(spec.containers[1].name: Duplicate value: "web")");
  CHECK(notFound("a", "b").toString() == R"(a: Not found: "b")");
  CHECK(forbidden("a", "no").toString() == "a: Forbidden: no");
  CHECK(
      notSupported("spec.restartPolicy", "Sometimes", {"Always", "OnFailure", "Never"})
          .toString() ==
      R"(spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never")");
}

TEST_CASE("validatePod reports every problem of a decoded pod", "[unit][config]") {
  auto pod = api::decodePodJson(R"({"apiVersion":"v1","kind":"Pod",
      "metadata":{"name":"web","namespace":"default"},
      "spec":{"restartPolicy":"Sometimes","dnsPolicy":"ClusterFirst",
        "containers":[{"name":"web","image":"nginx","imagePullPolicy":"Always",
                       "terminationMessagePolicy":"File"},
                      {"name":"web","imagePullPolicy":"Always","terminationMessagePolicy":"File"}],
        "volumes":[{"name":"a","emptyDir":{},"hostPath":{"path":"/x"}}]}})");
  REQUIRE(pod.ok());
  auto lines = [](const std::vector<FieldError>& errors) {
    Lines out;
    for (const auto& e : errors) out.push_back(e.toString());
    return out;
  };
  Lines expected = {
      "spec.volumes[0].hostPath: Forbidden: may not specify more than 1 volume type",
      R"(spec.containers[1].name: Duplicate value: "web")",
      "spec.containers[1].image: Required value",
      R"(spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never")"};
  CHECK(lines(validatePod(*pod)) == expected);
}

TEST_CASE("a valid typical pod has no problems", "[unit][config]") {
  auto result = decodeFile(manifest(
      "web",
      "    ports:\n    - name: http\n      containerPort: 8080\n      hostPort: 8080\n"
      "    env:\n    - name: POD_IP\n      valueFrom:\n        fieldRef:\n          fieldPath: "
      "status.podIP\n"
      "    - name: CPU\n      valueFrom:\n        resourceFieldRef:\n          resource: "
      "limits.cpu\n"
      "    resources:\n      requests:\n        cpu: 100m\n      limits:\n        cpu: 200m\n"
      "        example.com/dongle: \"2\"\n"
      "    livenessProbe:\n      httpGet:\n        port: http\n        httpHeaders:\n"
      "        - name: X-Probe\n          value: \"1\"\n"
      "    volumeMounts:\n    - name: data\n      mountPath: /data\n      subPath: sub/dir\n",
      "  volumes:\n  - name: data\n    hostPath:\n      path: /srv/data\n      type: "
      "DirectoryOrCreate\n"
      "  readinessGates:\n  - conditionType: example.com/ready\n"));
  CHECK(errorLines(result) == Lines{});
  CHECK(result.ok());
}

TEST_CASE("requests of non-overcommitable resources must equal their limits", "[unit][config]") {
  auto result =
      decodeFile(manifest("web",
                          "    resources:\n      requests:\n        example.com/gpu: \"1\"\n"
                          "      limits:\n        example.com/gpu: \"2\"\n"));
  CHECK(
      errorLines(result) ==
      Lines{
          R"(spec.containers[0].resources.requests: Invalid value: "1": must be equal to example.com/gpu limit)"});
  auto fractional =
      decodeFile(manifest("web", "    resources:\n      limits:\n        example.com/gpu: 500m\n"));
  CHECK(
      errorLines(fractional) ==
      Lines{
          R"(spec.containers[0].resources.limits[example.com/gpu]: Invalid value: "500m": must be an integer)",
          R"(spec.containers[0].resources.requests[example.com/gpu]: Invalid value: "500m": must be an integer)"});
}

TEST_CASE("a resourceFieldRef names a request or limit and a divisor of its unit",
          "[unit][config]") {
  auto env = [](const std::string& resource, const std::string& divisor) {
    return "    env:\n    - name: R\n      valueFrom:\n        resourceFieldRef:\n"
           "          resource: " +
           resource + "\n" + (divisor.empty() ? "" : "          divisor: " + divisor + "\n");
  };
  for (const auto& [resource, divisor] :
       std::vector<std::pair<std::string, std::string>>{{"limits.cpu", "1m"},
                                                        {"requests.cpu", "1"},
                                                        {"limits.memory", "1Mi"},
                                                        {"requests.memory", "1k"},
                                                        {"limits.ephemeral-storage", "1Gi"},
                                                        {"requests.ephemeral-storage", ""},
                                                        {"limits.hugepages-2Mi", "1Mi"}}) {
    CAPTURE(resource, divisor);
    CHECK(errorLines(decodeFile(manifest("web", env(resource, divisor)))) == Lines{});
  }
  CHECK(
      errorLines(decodeFile(manifest("web", env("limits.gpu", "")))) ==
      Lines{
          R"(spec.containers[0].env[0].valueFrom.resourceFieldRef.resource: Unsupported value: "limits.gpu": supported values: "limits.cpu", "limits.ephemeral-storage", "limits.memory", "requests.cpu", "requests.ephemeral-storage", "requests.memory")"});
  CHECK(
      errorLines(decodeFile(manifest("web", env("limits.cpu", "2")))) ==
      Lines{
          R"(spec.containers[0].env[0].valueFrom.resourceFieldRef.divisor: Invalid value: "limits.cpu": only divisor's values 1m and 1 are supported with the cpu resource)"});
  CHECK(
      errorLines(decodeFile(manifest("web", env("requests.memory", "1m")))) ==
      Lines{
          R"(spec.containers[0].env[0].valueFrom.resourceFieldRef.divisor: Invalid value: "requests.memory": only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the memory resource)"});
}

}  // namespace
}  // namespace nodeagent::config

namespace nodeagent::config {
namespace {

TEST_CASE("a manifest's metadata.uid must be a single path component", "[unit][config]") {
  for (const char* bad : {"../../../../tmp/u", "/tmp/u", "..", "."}) {
    CAPTURE(bad);
    auto result = decodeFile(manifest("web", "", "", std::string("  uid: \"") + bad + "\"\n"));
    REQUIRE(result.pods.empty());
    REQUIRE_FALSE(result.errors.empty());
    CHECK(result.errors.front().field == "metadata.uid");
    CHECK(result.errors.front().message.starts_with("Invalid value: " + goQuote(bad) +
                                                    ": must be a valid path component: "));
  }
  auto nul = decodeFile(manifest("web", "", "", "  uid: \"a\\0b\"\n"));
  REQUIRE_FALSE(nul.errors.empty());
  CHECK(nul.errors.front().toString() ==
        "metadata.uid: Invalid value: \"a\\x00b\": must be a valid path component: must not "
        "contain a NUL byte");
  auto good = decodeFile(manifest("web", "", "", "  uid: 6d1f9e2a-0000-4000-8000-00000000abcd\n"));
  REQUIRE(good.pods.size() == 1);
  CHECK(good.pods.front()->metadata.uid == "6d1f9e2a-0000-4000-8000-00000000abcd");
}

TEST_CASE("validatePodNames checks only the names a node turns into paths", "[unit][config]") {
  api::Pod pod;
  pod.metadata.name = "web";
  pod.metadata.namespace_ = "default";
  pod.metadata.uid = "u1";
  pod.spec->containers.push_back(api::Container{});
  pod.spec->containers.back().name = "main";
  CHECK(validatePodNames(pod).empty());

  auto bad = pod;
  bad.spec->containers.back().name = "../../../../tmp/x";
  bad.spec->init_containers.push_back(api::Container{});
  bad.spec->init_containers.back().name = "/tmp/i";
  bad.spec->volumes.push_back(api::Volume{});
  bad.spec->volumes.back().name = "/tmp/y/z";
  bad.metadata.uid = "../../u";
  bad.metadata.namespace_ = "Default";
  Lines fields;
  for (const auto& e : validatePodNames(bad)) fields.push_back(e.field);
  CHECK(fields == Lines{"metadata.namespace", "metadata.uid", "spec.volumes[0].name",
                        "spec.initContainers[0].name", "spec.containers[0].name"});

  auto no_uid = pod;
  no_uid.metadata.uid.clear();
  auto errors = validatePodNames(no_uid);
  REQUIRE(errors.size() == 1);
  CHECK(errors.front().toString() == "metadata.uid: Required value");
}

}  // namespace
}  // namespace nodeagent::config
