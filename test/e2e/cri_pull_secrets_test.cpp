// The daemon on the CRI runtime joined to the test apiserver pulls an API pod's image with the
// credentials of its imagePullSecrets: a registry of the test's own (test/support/test_registry.h)
// behind HTTP basic auth serves the busybox test image on the loopback. With a dockerconfigjson
// secret the pod runs (Pulled); without one it waits in ErrImagePull/ImagePullBackOff with the
// registry's 401 in its Failed event; the password is in no log of the agent or of containerd.
#include <string>

#include "test/e2e/apiserver_env.h"
#include "test/support/containerd.h"
#include "test/support/test_registry.h"

namespace nodeagent::apiserver_e2e {
namespace {

constexpr char kUser[] = "puller";
constexpr char kPassword[] = "pw-e2e-3c9d-not-for-logs";

std::string podYaml(const std::string& name, const std::string& image,
                    const std::string& pull_secret) {
  std::string yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
                     "\n  namespace: default\nspec:\n  nodeName: " + std::string(kNode) +
                     "\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n";
  if (!pull_secret.empty()) yaml += "  imagePullSecrets:\n  - name: " + pull_secret + "\n";
  return yaml + "  containers:\n  - name: main\n    image: " + image +
         "\n    imagePullPolicy: Always\n"
         "    command: [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & wait\"]\n";
}

}  // namespace

TEST_CASE("cri: an API pod pulls its image with its imagePullSecrets and fails 401 without them",
          "[e2e][apiserver][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestRegistry registry({kUser, kPassword});
  testing::TestContainerdOptions options;
  options.plain_http_registries = {registry.host()};
  testing::TestContainerd containerd(options);
  containerd.importTestImages();
  testing::unpackOciLayout(containerd.dir() / "images" / "nodeagent.test_busybox_1.tar",
                           containerd.dir() / "registry-layout");
  registry.addRepository("test/busybox", containerd.dir() / "registry-layout");
  const std::string image = registry.host() + "/test/busybox:1";

  Env env;
  env.startCriAgent(containerd.endpoint());

  // A kubernetes.io/dockerconfigjson Secret, as a user makes one.
  auto secret =
      env.kubectl({"create", "secret", "docker-registry", "regcred", "-n", "default",
                   "--docker-server=" + registry.host(), std::string("--docker-username=") + kUser,
                   std::string("--docker-password=") + kPassword});
  INFO(secret.out << secret.err);
  REQUIRE(secret.exit_code == 0);

  env.createFrom("pull-ok.yaml", podYaml("pull-ok", image, "regcred"));
  env.createFrom("pull-denied.yaml", podYaml("pull-denied", image, ""));

  std::optional<json> pod;
  const bool running = testing::eventually(
      [&] {
        pod = env.pod("pull-ok");
        return pod && (*pod)["status"].value("phase", "") == "Running";
      },
      60s);
  INFO(env.diagnostics());
  REQUIRE(running);
  CHECK(env.hasEvent("pull-ok", "Pulled", "Successfully pulled image \"" + image + "\""));
  CHECK(registry.manifestsServed() > 0);

  std::string reason, message;
  CHECK(testing::eventually(
      [&] {
        auto denied = env.pod("pull-denied");
        if (!denied) return false;
        reason = waitingReason(*denied, &message);
        return reason == "ErrImagePull" || reason == "ImagePullBackOff";
      },
      60s));
  INFO(reason << ": " << message);
  CHECK(testing::eventually(
      [&] { return env.hasEvent("pull-denied", "Failed", "401 Unauthorized"); }, 30s));
  CHECK(env.pod("pull-denied").value_or(json::object())["status"].value("phase", "") == "Pending");

  // The password is in no log.
  CHECK(env.agent->err().find(kPassword) == std::string::npos);
  CHECK(testing::readFile(env.dir / "agent.out").find(kPassword) == std::string::npos);
  CHECK(containerd.logTail(1 << 20).find(kPassword) == std::string::npos);
  auto events = env.kubectl({"get", "events", "-n", "default", "-o", "json"});
  CHECK(events.out.find(kPassword) == std::string::npos);

  for (const char* name : {"pull-ok", "pull-denied"}) {
    auto del = env.kubectl({"delete", "pod", name, "-n", "default"}, 60s);
    INFO(del.err);
    CHECK(del.exit_code == 0);
  }
}

}  // namespace nodeagent::apiserver_e2e
