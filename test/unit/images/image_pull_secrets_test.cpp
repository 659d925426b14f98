// The image manager's pull credentials (kubelet's imagePullSecrets): the pod's docker secrets read
// through the ApiObjectSource, each matching credential tried in turn, an anonymous pull without
// a match, secrets that cannot be read skipped with kubelet's Warning, and no credential in any
// event or log.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/images/image_manager.h"
#include "agent/runtime/fake_runtime.h"
#include "agent/volume/api_objects.h"
#include "test/support/fake_clock.h"
#include "test/support/fake_secrets.h"
#include "test/support/log_capture.h"
#include "test/support/pod_builder.h"
#include "test/support/run_awaitable.h"
#include "test/unit/images/image_events.h"

using namespace nodeagent;
using agent::images::EnsureImageResult;

namespace {

constexpr const char* kImage = "127.0.0.1:5000/test/busybox:1";

using testing::base64Encode;

// Docker secrets of both types, and any other.
class Secrets {
 public:
  explicit Secrets(testing::FakeSecrets& source) : source_(source) {}
  void dockerConfigJson(const std::string& name, const std::string& registry,
                        const std::string& user, const std::string& password) {
    source_.add(name, testing::dockerConfigJsonSecret(registry, user, password));
  }
  void dockercfg(const std::string& name, const std::string& registry, const std::string& user,
                 const std::string& password) {
    nlohmann::json config = {{registry, {{"username", user}, {"password", password}}}};
    source_.add(name, {{"type", "kubernetes.io/dockercfg"},
                       {"data", {{".dockercfg", base64Encode(config.dump())}}}});
  }
  void raw(const std::string& name, nlohmann::json secret) { source_.add(name, std::move(secret)); }
  const std::vector<std::string>& reads() const { return source_.reads; }

 private:
  testing::FakeSecrets& source_;
};

using Event = testing::ImageEvent;

struct Harness {
  asio::io_context ioc;
  testing::FakeClock clock;
  runtime::FakeRuntime runtime{ioc.get_executor(), clock};
  std::shared_ptr<testing::FakeSecrets> source = std::make_shared<testing::FakeSecrets>();
  Secrets secrets_{*source};
  Secrets* secrets = &secrets_;
  std::vector<Event> events;
  agent::images::ImageManager images{clock, runtime, testing::recordInto(events), {}, source};

  Harness() {
    runtime.setRunsImages(true);
    runtime.setPullCredential(kImage, "alice", "hunter2-secret");
  }

  EnsureImageResult ensure(const api::PodPtr& pod) {
    events.clear();
    return testing::runAwaitable(ioc, images.ensureImageExists(pod, pod->spec->containers[0]));
  }
  std::vector<std::string> reasons() const { return testing::reasonsOf(events); }
  bool eventsMention(const std::string& text) const {
    for (const auto& e : events) {
      if (e.message.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

api::PodPtr podWithSecrets(const std::vector<std::string>& secrets, const std::string& uid = "u1") {
  return testing::PodBuilder()
      .name("web")
      .ns("team")
      .uid(uid)
      .container("main", {"sleep", "100"}, kImage)
      .edit([&](nlohmann::json& j) {
        j["spec"]["containers"][0]["imagePullPolicy"] = "Always";
        for (const auto& name : secrets) j["spec"]["imagePullSecrets"].push_back({{"name", name}});
      })
      .build();
}

}  // namespace

TEST_CASE("image pull secrets: a dockerconfigjson secret's credential pulls the image",
          "[unit][images]") {
  Harness h;
  h.secrets->dockerConfigJson("regcred", "127.0.0.1:5000", "alice", "hunter2-secret");
  testing::LogCapture logs("images");
  auto r = h.ensure(podWithSecrets({"regcred"}));
  CHECK(r.ok());
  CHECK(h.secrets->reads() == std::vector<std::string>{"team/regcred"});
  CHECK(h.runtime.pullUsers() == std::vector<std::string>{"alice"});
  CHECK(h.reasons() == std::vector<std::string>{"Pulling", "Pulled"});
  CHECK(logs.lines("hunter2-secret").empty());
  CHECK_FALSE(h.eventsMention("hunter2-secret"));
}

TEST_CASE("image pull secrets: each matching credential is tried until one works",
          "[unit][images]") {
  Harness h;
  // Most specific first: the path entry of "wrong", then the host entries of both secrets.
  h.secrets->dockerConfigJson("wrong", "127.0.0.1:5000/test", "mallory", "bad");
  h.secrets->dockercfg("right", "http://127.0.0.1:5000", "alice", "hunter2-secret");
  h.secrets->dockerConfigJson("elsewhere", "quay.io", "bob", "other");
  auto r = h.ensure(podWithSecrets({"wrong", "right", "elsewhere"}));
  CHECK(r.ok());
  CHECK(h.runtime.pullUsers() == std::vector<std::string>{"mallory", "alice"});
}

TEST_CASE("image pull secrets: when every credential fails, the pull fails with their errors",
          "[unit][images]") {
  Harness h;
  h.secrets->dockerConfigJson("a", "127.0.0.1:5000", "mallory", "bad1");
  h.secrets->dockerConfigJson("b", "127.0.0.1:5000/test", "eve", "bad2");
  testing::LogCapture logs("images");
  auto r = h.ensure(podWithSecrets({"a", "b"}));
  CHECK(r.reason == "ErrImagePull");
  // Both pulls failed the same way: kubelet's aggregate shows the message once.
  CHECK(r.message == "failed to pull 127.0.0.1:5000/test/busybox:1: 401 Unauthorized");
  CHECK(h.runtime.pullUsers() == std::vector<std::string>{"eve", "mallory"});
  CHECK(h.reasons() == std::vector<std::string>{"Pulling", "Failed"});
  CHECK(logs.lines("bad1").empty());
  CHECK(logs.lines("bad2").empty());
}

TEST_CASE("image pull secrets: no matching registry pulls anonymously", "[unit][images]") {
  Harness h;
  h.secrets->dockerConfigJson("quay", "quay.io", "bob", "other");
  h.secrets->raw("opaque", {{"type", "Opaque"}, {"data", {{"x", base64Encode("y")}}}});
  auto r = h.ensure(podWithSecrets({"quay", "opaque"}));
  CHECK(r.reason == "ErrImagePull");
  CHECK(r.message.find("401 Unauthorized") != std::string::npos);
  CHECK(h.runtime.pullUsers() == std::vector<std::string>{""});
  CHECK(h.reasons() == std::vector<std::string>{"Pulling", "Failed"});
}

TEST_CASE("image pull secrets: a secret that cannot be read is skipped with kubelet's warning",
          "[unit][images]") {
  Harness h;
  h.secrets->dockerConfigJson("regcred", "127.0.0.1:5000", "alice", "hunter2-secret");
  testing::LogCapture logs("images");
  auto r = h.ensure(podWithSecrets({"missing", "", "regcred", "gone"}));
  CHECK(r.ok());
  CHECK(h.secrets->reads() ==
        std::vector<std::string>{"team/missing", "team/regcred", "team/gone"});
  REQUIRE(h.events.size() == 3);
  CHECK(h.events[0] == Event{"Warning", "FailedToRetrieveImagePullSecret",
                             "Unable to retrieve some image pull secrets (missing, gone); "
                             "attempting to pull the image may not succeed.",
                             ""});
  CHECK(h.reasons() ==
        std::vector<std::string>{"FailedToRetrieveImagePullSecret", "Pulling", "Pulled"});
  CHECK_FALSE(logs.lines("Unable to retrieve pull secret").empty());
  CHECK(logs.lines("hunter2-secret").empty());
}

TEST_CASE("image pull secrets: a docker config that cannot be parsed fails the pull",
          "[unit][images]") {
  Harness h;
  h.secrets->raw("broken",
                 {{"type", "kubernetes.io/dockerconfigjson"},
                  {"data", {{".dockerconfigjson", base64Encode("{\"auths\": hunter2")}}}});
  auto r = h.ensure(podWithSecrets({"broken"}));
  CHECK(r.reason == "ErrImagePull");
  CHECK(r.message == "the dockerconfigjson is not valid JSON");
  CHECK(r.retry_in.has_value());
  CHECK(h.runtime.pulls().empty());
  CHECK_FALSE(h.eventsMention("hunter2"));
}

TEST_CASE("image pull secrets: without an apiserver every pull secret is one not read",
          "[unit][images]") {
  asio::io_context ioc;
  testing::FakeClock clock;
  runtime::FakeRuntime runtime{ioc.get_executor(), clock};
  runtime.setRunsImages(true);
  std::vector<std::string> reasons;
  agent::images::ImageManager images{
      clock, runtime,
      [&](const api::Pod&, const std::string&, const std::string& reason, const std::string&,
          const std::string&) { reasons.push_back(reason); }};
  auto pod = podWithSecrets({"regcred"});
  auto r = testing::runAwaitable(ioc, images.ensureImageExists(pod, pod->spec->containers[0]));
  CHECK(r.ok());
  CHECK(runtime.pullUsers() == std::vector<std::string>{""});
  CHECK(reasons ==
        std::vector<std::string>{"FailedToRetrieveImagePullSecret", "Pulling", "Pulled"});
}
