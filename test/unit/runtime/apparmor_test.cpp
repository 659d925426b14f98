// AppArmor profiles of pods (agent/runtime/apparmor.h) as kubelet reads them, and kubelet's
// AppArmor admission (agent/apparmor_admission.h).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "agent/apparmor_admission.h"
#include "agent/runtime/apparmor.h"
#include "test/support/test_util.h"
#include "test/unit/runtime/two_containers.h"

using namespace nodeagent;
using runtime::SecurityProfile;
using Type = runtime::SecurityProfile::Type;

namespace {

const std::string kKey = "container.apparmor.security.beta.kubernetes.io/";

std::optional<SecurityProfile> profile(const api::PodPtr& pod, const std::string& container) {
  auto p = runtime::appArmorProfileFor(*pod, container);
  INFO(p.status().message());
  REQUIRE(p.ok());
  return *p;
}

bool required(const api::PodPtr& pod) {
  return runtime::appArmorRequired(*pod, runtime::appArmorExtras(*pod));
}

}  // namespace

TEST_CASE(
    "apparmor: the container's appArmorProfile wins over the annotation, which wins over the "
    "pod's",
    "[unit][runtime]") {
  auto pod = testing::twoContainers()
                 .annotation(kKey + "app", "localhost/app-profile")
                 .annotation(kKey + "side", "runtime/default")
                 .edit([](nlohmann::json& j) {
                   j["spec"]["securityContext"]["appArmorProfile"] = {{"type", "Unconfined"}};
                   j["spec"]["containers"][1]["securityContext"]["appArmorProfile"] = {
                       {"type", "Localhost"}, {"localhostProfile", "side-profile"}};
                 })
                 .build();
  CHECK(profile(pod, "app") == SecurityProfile{Type::kLocalhost, "app-profile"});
  CHECK(profile(pod, "side") == SecurityProfile{Type::kLocalhost, "side-profile"});
  CHECK(profile(pod, "other") == SecurityProfile{Type::kUnconfined, ""});  // the pod's

  auto plain = testing::twoContainers().build();
  CHECK_FALSE(profile(plain, "app").has_value());
  CHECK_FALSE(required(plain));

  // The annotation's three spellings; anything else asks for nothing, as kubelet.
  auto annotated = testing::twoContainers()
                       .annotation(kKey + "app", "unconfined")
                       .annotation(kKey + "side", "confined-please")
                       .build();
  CHECK(profile(annotated, "app") == SecurityProfile{Type::kUnconfined, ""});
  CHECK_FALSE(profile(annotated, "side").has_value());
  CHECK(required(annotated));  // a value that is not "unconfined"

  CHECK(runtime::appArmorProfileName({Type::kRuntimeDefault, ""}) == "runtime/default");
  CHECK(runtime::appArmorProfileName({Type::kUnconfined, ""}) == "unconfined");
  CHECK(runtime::appArmorProfileName({Type::kLocalhost, "x"}) == "localhost/x");
}

TEST_CASE("apparmor: required only for a profile other than unconfined and bad fields are errors",
          "[unit][runtime]") {
  auto unconfined = testing::twoContainers()
                        .annotation(kKey + "app", "unconfined")
                        .edit([](nlohmann::json& j) {
                          j["spec"]["containers"][1]["securityContext"]["appArmorProfile"] = {
                              {"type", "Unconfined"}};
                        })
                        .build();
  CHECK_FALSE(required(unconfined));
  auto pod_level =
      testing::twoContainers()
          .edit([](nlohmann::json& j) {
            j["spec"]["securityContext"]["appArmorProfile"] = {{"type", "RuntimeDefault"}};
          })
          .build();
  CHECK(required(pod_level));
  CHECK(profile(pod_level, "side") == SecurityProfile{Type::kRuntimeDefault, ""});

  auto nameless =
      testing::twoContainers()
          .edit([](nlohmann::json& j) {
            j["spec"]["containers"][0]["securityContext"]["appArmorProfile"] = {
                {"type", "Localhost"}, {"localhostProfile", " "}};
            j["spec"]["containers"][1]["securityContext"]["appArmorProfile"] = {{"type", "Strict"}};
          })
          .build();
  auto bad = runtime::appArmorProfileFor(*nameless, "app");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "invalid empty AppArmor profile name for container \"app\"");
  bad = runtime::appArmorProfileFor(*nameless, "side");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "unknown AppArmor profile type \"Strict\" for container \"side\"");
  // Wrong JSON types ask for nothing and break nothing.
  auto odd = testing::twoContainers()
                 .edit([](nlohmann::json& j) {
                   j["spec"]["securityContext"]["appArmorProfile"] = "RuntimeDefault";
                   j["spec"]["containers"][0]["securityContext"] = {{"appArmorProfile", 7}};
                 })
                 .build();
  CHECK_FALSE(required(odd));
  CHECK_FALSE(profile(odd, "app").has_value());
}

TEST_CASE("apparmor: enabled when the kernel module says Y", "[unit][runtime]") {
  testing::TempDir sys("nodeagent-apparmor-sys");
  CHECK_FALSE(runtime::appArmorEnabled(sys.path()));
  std::filesystem::create_directories(sys / "module/apparmor/parameters");
  testing::writeFile(sys / "module/apparmor/parameters/enabled", "Y\n");
  CHECK_FALSE(runtime::appArmorEnabled(sys.path()));  // no AppArmor in securityfs
  std::filesystem::create_directories(sys / "kernel/security/apparmor");
  CHECK(runtime::appArmorEnabled(sys.path()));
  testing::writeFile(sys / "module/apparmor/parameters/enabled", "N\n");
  CHECK_FALSE(runtime::appArmorEnabled(sys.path()));
}

TEST_CASE(
    "apparmor admission: a pod asking for a profile is refused when the node cannot enforce it, "
    "with kubelet's reason and message",
    "[unit][runtime]") {
  auto confined = testing::twoContainers().annotation(kKey + "app", "runtime/default").build();
  auto refused = agent::admitAppArmor(*confined, false, "cri");
  CHECK_FALSE(refused.admit);
  CHECK(refused.reason == "AppArmor");
  CHECK(refused.message == "Cannot enforce AppArmor: AppArmor is not enabled on the host");

  refused = agent::admitAppArmor(*confined, true, "process");
  CHECK_FALSE(refused.admit);
  CHECK(refused.message ==
        "Cannot enforce AppArmor: the process runtime cannot confine containers");
  CHECK(agent::admitAppArmor(*confined, true, "cri").admit);

  // The annotation's localhost/ with no name is refused as the field's is (kubelet).
  auto nameless_annotation =
      testing::twoContainers().annotation(kKey + "side", "localhost/").build();
  refused = agent::admitAppArmor(*nameless_annotation, true, "cri");
  CHECK_FALSE(refused.admit);
  CHECK(refused.message ==
        "Cannot enforce AppArmor: invalid empty AppArmor profile name for container \"side\"");

  // Unconfined asks for nothing to enforce.
  auto loose = testing::twoContainers().annotation(kKey + "app", "unconfined").build();
  CHECK(agent::admitAppArmor(*loose, false, "process").admit);

  // A malformed profile is refused even where AppArmor works.
  auto nameless = testing::twoContainers()
                      .edit([](nlohmann::json& j) {
                        j["spec"]["initContainers"] = {
                            {{"name", "init"},
                             {"image", "busybox"},
                             {"command", {"true"}},
                             {"securityContext", {{"appArmorProfile", {{"type", "Localhost"}}}}}}};
                      })
                      .build();
  refused = agent::admitAppArmor(*nameless, true, "cri");
  CHECK_FALSE(refused.admit);
  CHECK(refused.message ==
        "Cannot enforce AppArmor: invalid empty AppArmor profile name for container \"init\"");

  // A pod past Pending is not checked again (kubelet).
  auto running = testing::twoContainers()
                     .annotation(kKey + "app", "runtime/default")
                     .edit([](nlohmann::json& j) { j["status"]["phase"] = "Running"; })
                     .build();
  CHECK(agent::admitAppArmor(*running, false, "cri").admit);
}
