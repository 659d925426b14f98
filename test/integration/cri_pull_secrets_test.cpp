// Pulls with registry credentials on a containerd of the test's own: a registry of the test's own
// (test/support/test_registry.h) behind HTTP basic auth serves the busybox test image on the
// loopback, and containerd reaches it over plain HTTP. CRI PullImage with the right AuthConfig
// pulls it, without one or with a wrong password it fails with the registry's 401; the agent's
// ImageManager pulls it with the credential of the pod's dockerconfigjson imagePullSecret, and
// the password is in no log of the agent or of containerd.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/images/image_manager.h"
#include "agent/runtime/cri/cri_runtime.h"
#include "test/support/containerd.h"
#include "test/support/cri_runtime_fixture.h"
#include "test/support/fake_secrets.h"
#include "test/support/log_capture.h"
#include "test/support/pod_builder.h"
#include "test/support/run_awaitable.h"
#include "test/support/test_registry.h"

using namespace nodeagent;

namespace {

constexpr const char* kUser = "puller";
constexpr const char* kPassword = "pw-5b1e-not-for-logs";

testing::TestContainerdOptions trusting(const testing::TestRegistry& registry) {
  testing::TestContainerdOptions options;
  options.plain_http_registries = {registry.host()};
  return options;
}

struct Fixture {
  testing::TestRegistry registry{{kUser, kPassword}};
  testing::CriRuntimeFixture cri{trusting(registry)};
  std::string image = registry.host() + "/test/busybox:1";

  Fixture() {
    const auto layout = cri.containerd.dir() / "registry-layout";
    testing::unpackOciLayout(cri.containerd.dir() / "images" / "nodeagent.test_busybox_1.tar",
                             layout);
    registry.addRepository("test/busybox", layout);
  }
  base::StatusOr<std::string> pull(std::optional<runtime::RegistryAuth> auth) {
    return cri.run(cri.runtime->pullImage(image, std::move(auth)));
  }
};

runtime::RegistryAuth auth(const std::string& user, const std::string& password) {
  runtime::RegistryAuth a;
  a.username = user;
  a.password = password;
  return a;
}

}  // namespace

TEST_CASE("cri pull secrets: PullImage pulls with the registry's credentials and fails 401 without",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  Fixture f;

  auto anonymous = f.pull(std::nullopt);
  REQUIRE_FALSE(anonymous.ok());
  INFO(anonymous.status().message());
  CHECK(anonymous.status().message().find("401 Unauthorized") != std::string::npos);

  auto wrong = f.pull(auth(kUser, "wrong-password"));
  REQUIRE_FALSE(wrong.ok());
  INFO(wrong.status().message());
  CHECK(wrong.status().message().find("401 Unauthorized") != std::string::npos);
  CHECK(f.registry.manifestsServed() == 0);

  auto pulled = f.pull(auth(kUser, kPassword));
  INFO(pulled.status().message());
  REQUIRE(pulled.ok());
  CHECK(pulled->starts_with("sha256:"));
  CHECK(f.registry.manifestsServed() > 0);
  auto status = f.cri.run(f.cri.runtime->imageStatus(f.image));
  REQUIRE(status.ok());
  REQUIRE(status->has_value());
  CHECK((*status)->id == *pulled);
  CHECK(f.cri.containerd.logTail(1 << 20).find(kPassword) == std::string::npos);
}

TEST_CASE("cri pull secrets: the image manager pulls with the pod's dockerconfigjson secret",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  Fixture f;
  auto secrets = std::make_shared<testing::FakeSecrets>();
  secrets->add("regcred", testing::dockerConfigJsonSecret(f.registry.host(), kUser, kPassword));
  secrets->add("wrongcred",
               testing::dockerConfigJsonSecret(f.registry.host(), kUser, "wrong-password"));
  std::vector<std::string> reasons;
  std::vector<std::string> messages;
  agent::images::ImageManager images(
      base::realClock(), *f.cri.runtime,
      [&](const api::Pod&, const std::string&, const std::string& reason,
          const std::string& message, const std::string&) {
        reasons.push_back(reason);
        messages.push_back(message);
      },
      {}, secrets);
  auto ensure = [&](const std::vector<std::string>& pull_secrets, const std::string& uid) {
    auto pod = testing::PodBuilder()
                   .name("web")
                   .uid(uid)
                   .container("main", {"sleep", "100"}, f.image)
                   .edit([&](nlohmann::json& j) {
                     j["spec"]["containers"][0]["imagePullPolicy"] = "Always";
                     for (const auto& name : pull_secrets) {
                       j["spec"]["imagePullSecrets"].push_back({{"name", name}});
                     }
                   })
                   .build();
    reasons.clear();
    messages.clear();
    return testing::runAwaitable(f.cri.ioc,
                                 images.ensureImageExists(pod, pod->spec->containers[0]));
  };
  testing::LogCapture logs("images");

  SECTION("no secret: ErrImagePull with the registry's 401") {
    auto r = ensure({}, "uid-none");
    CHECK(r.reason == "ErrImagePull");
    INFO(r.message);
    CHECK(r.message.find("401 Unauthorized") != std::string::npos);
    CHECK(reasons == std::vector<std::string>{"Pulling", "Failed"});
  }
  SECTION("a wrong password: ErrImagePull with the registry's 401") {
    auto r = ensure({"wrongcred"}, "uid-wrong");
    CHECK(r.reason == "ErrImagePull");
    INFO(r.message);
    CHECK(r.message.find("401 Unauthorized") != std::string::npos);
  }
  SECTION("the right secret, after a wrong one and a missing one: pulled") {
    auto r = ensure({"missing", "wrongcred", "regcred"}, "uid-right");
    INFO(r.message);
    CHECK(r.ok());
    CHECK(r.image_ref.starts_with("sha256:"));
    CHECK(reasons ==
          std::vector<std::string>{"FailedToRetrieveImagePullSecret", "Pulling", "Pulled"});
  }
  for (const auto& message : messages) CHECK(message.find(kPassword) == std::string::npos);
  CHECK(logs.lines(kPassword).empty());
  CHECK(f.cri.containerd.logTail(1 << 20).find(kPassword) == std::string::npos);
}
