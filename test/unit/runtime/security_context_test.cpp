// The effective security context and the decisions taken from it (runtime/security_context.h).
#include "agent/runtime/security_context.h"

#include <catch2/catch.hpp>

using namespace nodeagent;
using namespace nodeagent::runtime;

namespace {

constexpr uint32_t kRoot = 0;

api::Pod makePod(std::optional<api::PodSecurityContext> psc = std::nullopt) {
  api::Pod pod;
  pod.metadata.name = "web";
  pod.metadata.namespace_ = "default";
  pod.metadata.uid = "u1";
  pod.spec->security_context = std::move(psc);
  return pod;
}

api::Container makeContainer(std::optional<api::SecurityContext> sc = std::nullopt) {
  api::Container c;
  c.name = "main";
  c.security_context = std::move(sc);
  return c;
}

api::PodSecurityContext podContext(std::optional<int64_t> user, std::optional<int64_t> group = {},
                                   std::optional<bool> non_root = {}) {
  api::PodSecurityContext psc;
  psc.run_as_user = user;
  psc.run_as_group = group;
  psc.run_as_non_root = non_root;
  return psc;
}

api::SecurityContext containerContext(std::optional<int64_t> user,
                                      std::optional<int64_t> group = {},
                                      std::optional<bool> non_root = {}) {
  api::SecurityContext sc;
  sc.run_as_user = user;
  sc.run_as_group = group;
  sc.run_as_non_root = non_root;
  return sc;
}

std::optional<uint32_t> noPasswd(uint32_t) { return std::nullopt; }

ProcessCredentials credentials(const api::Pod& pod, const api::Container& c,
                               uint32_t agent_uid = kRoot,
                               const PrimaryGroupLookup& lookup = noPasswd) {
  auto creds =
      processCredentials(pod, c, determineEffectiveSecurityContext(pod, c), agent_uid, lookup);
  INFO(creds.status().toString());
  REQUIRE(creds.ok());
  return *creds;
}

base::Status credentialsError(const api::Pod& pod, const api::Container& c,
                              uint32_t agent_uid = kRoot) {
  auto creds =
      processCredentials(pod, c, determineEffectiveSecurityContext(pod, c), agent_uid, noPasswd);
  REQUIRE_FALSE(creds.ok());
  CHECK(creds.status().code() == base::StatusCode::kInvalidArgument);
  return creds.status();
}

uint64_t bit(int cap) { return uint64_t{1} << cap; }

}  // namespace

TEST_CASE("security context: container fields override the pod's, groups come from the pod",
          "[unit][runtime][security]") {
  SECTION("nothing set anywhere") {
    auto pod = makePod();
    auto sc = determineEffectiveSecurityContext(pod, makeContainer());
    CHECK_FALSE(sc.run_as_user);
    CHECK_FALSE(sc.run_as_group);
    CHECK_FALSE(sc.run_as_non_root);
    CHECK(sc.allow_privilege_escalation);
    CHECK_FALSE(sc.privileged);
  }
  SECTION("the pod's fields when the container sets none") {
    auto psc = podContext(65534, 65533, true);
    psc.supplemental_groups = {5, 6};
    psc.fs_group = 2000;
    auto pod = makePod(psc);
    auto sc = determineEffectiveSecurityContext(pod, makeContainer(api::SecurityContext{}));
    CHECK(sc.run_as_user == 65534);
    CHECK(sc.run_as_group == 65533);
    CHECK(sc.run_as_non_root);
    CHECK(sc.supplemental_groups == std::vector<int64_t>{5, 6});
    CHECK(sc.fs_group == 2000);
  }
  SECTION("each container field overrides its pod field on its own") {
    auto pod = makePod(podContext(1000, 1001, true));
    auto sc = determineEffectiveSecurityContext(pod, makeContainer(containerContext(2000)));
    CHECK(sc.run_as_user == 2000);
    CHECK(sc.run_as_group == 1001);
    CHECK(sc.run_as_non_root);
    sc = determineEffectiveSecurityContext(pod, makeContainer(containerContext({}, 7, false)));
    CHECK(sc.run_as_user == 1000);
    CHECK(sc.run_as_group == 7);
    CHECK_FALSE(sc.run_as_non_root);
    sc = determineEffectiveSecurityContext(pod, makeContainer(containerContext(0)));
    CHECK(sc.run_as_user == 0);
  }
  SECTION("container-only fields") {
    api::SecurityContext csc;
    csc.allow_privilege_escalation = false;
    csc.privileged = true;
    csc.read_only_root_filesystem = true;
    csc.capabilities = api::Capabilities{{"NET_ADMIN"}, {"ALL"}};
    auto pod = makePod();
    auto sc = determineEffectiveSecurityContext(pod, makeContainer(csc));
    CHECK_FALSE(sc.allow_privilege_escalation);
    CHECK(sc.privileged);
    CHECK(sc.read_only_root_filesystem);
    CHECK(sc.cap_add == std::vector<std::string>{"NET_ADMIN"});
    CHECK(sc.cap_drop == std::vector<std::string>{"ALL"});
  }
}

TEST_CASE("security context: runAsNonRoot is verified as kubelet does",
          "[unit][runtime][security]") {
  auto verify = [](const api::Pod& pod, const api::Container& c, std::optional<int64_t> uid) {
    return verifyRunAsNonRoot(pod, c, determineEffectiveSecurityContext(pod, c),
                              DefaultUser{uid, "", "the image's user is root"});
  };
  const std::string where = " (pod: \"web_default(u1)\", container: main)";
  SECTION("not asked: anything goes") {
    CHECK(verify(makePod(), makeContainer(containerContext(0)), 0).ok());
    CHECK(verify(makePod(podContext({}, {}, false)), makeContainer(), 0).ok());
  }
  SECTION("a non-zero runAsUser passes whatever the default") {
    CHECK(verify(makePod(podContext(65534, {}, true)), makeContainer(), 0).ok());
    CHECK(verify(makePod(podContext({}, {}, true)), makeContainer(containerContext(1)), 0).ok());
  }
  SECTION("runAsUser 0, from the pod or the container") {
    auto s = verify(makePod(podContext(0, {}, true)), makeContainer(), 1000);
    CHECK(s.code() == base::StatusCode::kInvalidArgument);
    CHECK(s.message() == "container's runAsUser breaks non-root policy" + where);
    s = verify(makePod(podContext(1000)), makeContainer(containerContext(0, {}, true)), 1000);
    CHECK(s.message() == "container's runAsUser breaks non-root policy" + where);
  }
  SECTION("no runAsUser: the default uid decides") {
    auto s = verify(makePod(podContext({}, {}, true)), makeContainer(), 0);
    CHECK(s.code() == base::StatusCode::kInvalidArgument);
    CHECK(s.message() == "container has runAsNonRoot and image will run as root" + where);
    CHECK(verify(makePod(podContext({}, {}, true)), makeContainer(), 1000).ok());
    CHECK(verify(makePod(podContext({}, {}, true)), makeContainer(), std::nullopt).ok());
  }
  SECTION("no runAsUser and an image user that is a name: cannot be verified") {
    const auto pod = makePod(podContext({}, {}, true));
    const auto c = makeContainer();
    auto s = verifyRunAsNonRoot(pod, c, determineEffectiveSecurityContext(pod, c),
                                DefaultUser{std::nullopt, "nobody", ""});
    CHECK(s.code() == base::StatusCode::kInvalidArgument);
    CHECK(s.message() ==
          "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify "
          "user is non-root" +
              where);
    const auto with_uid = makePod(podContext(1000, {}, true));
    CHECK(verifyRunAsNonRoot(with_uid, c, determineEffectiveSecurityContext(with_uid, c),
                             DefaultUser{std::nullopt, "nobody", ""})
              .ok());
  }
  SECTION("the container's runAsNonRoot: false overrides the pod's true") {
    CHECK(
        verify(makePod(podContext({}, {}, true)), makeContainer(containerContext({}, {}, false)), 0)
            .ok());
  }
}

TEST_CASE("security context: the non-root policy for apiserver pods", "[unit][runtime][security]") {
  auto check = [](const api::Pod& pod, const api::Container& c, int64_t default_uid) {
    return checkNonRootPolicy(
        pod, c, determineEffectiveSecurityContext(pod, c),
        DefaultUser{default_uid, "", "a process container runs as the agent's user"});
  };
  SECTION("no runAsUser with a root agent") {
    auto s = check(makePod(), makeContainer(), 0);
    CHECK(s.code() == base::StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("container \"main\" of pod default/web would run as "
                                            "root") &&
                                Catch::Contains("--allow-root-api-pods") &&
                                Catch::Contains("runAsUser"));
  }
  SECTION("runAsUser 0 from the pod or the container") {
    CHECK_FALSE(check(makePod(podContext(0)), makeContainer(), 0).ok());
    CHECK_FALSE(check(makePod(podContext(1000)), makeContainer(containerContext(0)), 0).ok());
  }
  SECTION("an image whose user is a name may be root: refused without runAsUser") {
    const auto pod = makePod();
    const auto c = makeContainer();
    auto s = checkNonRootPolicy(pod, c, determineEffectiveSecurityContext(pod, c),
                                DefaultUser{std::nullopt, "daemon", "the image's user is root"});
    CHECK(s.code() == base::StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("may run as root") && Catch::Contains("\"daemon\""));
    const auto with_uid = makePod(podContext(1000));
    CHECK(checkNonRootPolicy(with_uid, c, determineEffectiveSecurityContext(with_uid, c),
                             DefaultUser{std::nullopt, "daemon", ""})
              .ok());
  }
  SECTION("a non-root uid passes") {
    CHECK(check(makePod(podContext(1000)), makeContainer(), 0).ok());
    CHECK(check(makePod(), makeContainer(containerContext(65534)), 0).ok());
    CHECK(check(makePod(), makeContainer(), 1000).ok());  // an unprivileged agent
  }
  SECTION("privileged or added capabilities are refused even for a non-root uid") {
    auto priv = containerContext(1000);
    priv.privileged = true;
    auto s = check(makePod(), makeContainer(priv), 0);
    CHECK_THAT(s.message(), Catch::Contains("privileged: true"));
    auto caps = containerContext(1000);
    caps.capabilities = api::Capabilities{{"NET_BIND_SERVICE"}, {}};
    s = check(makePod(), makeContainer(caps), 0);
    CHECK_THAT(s.message(), Catch::Contains("capabilities.add [NET_BIND_SERVICE]"));
    caps.capabilities = api::Capabilities{{}, {"ALL"}};  // dropping is always fine
    CHECK(check(makePod(), makeContainer(caps), 0).ok());
  }
  SECTION("group 0, however it is asked for, is refused even for a non-root uid") {
    auto s = check(makePod(podContext(1000, 0)), makeContainer(), 0);
    CHECK_THAT(s.message(), Catch::Contains("group 0 (runAsGroup: 0)"));
    auto fs = podContext(1000);
    fs.fs_group = 0;
    CHECK_THAT(check(makePod(fs), makeContainer(), 0).message(),
               Catch::Contains("group 0 (fsGroup: 0)"));
    auto supplemental = podContext(1000);
    supplemental.supplemental_groups = {100, 0};
    CHECK_THAT(check(makePod(supplemental), makeContainer(), 0).message(),
               Catch::Contains("group 0 (supplementalGroups)"));
    auto fine = podContext(1000, 1000);
    fine.fs_group = 2000;
    fine.supplemental_groups = {3000};
    CHECK(check(makePod(fine), makeContainer(), 0).ok());
  }
}

TEST_CASE("security context: capability names", "[unit][runtime][security]") {
  CHECK(*parseCapabilities({}) == 0);
  CHECK(*parseCapabilities({"CHOWN"}) == bit(0));
  CHECK(*parseCapabilities({"CAP_NET_ADMIN", "net_raw"}) == (bit(12) | bit(13)));
  CHECK(*parseCapabilities({"SYS_ADMIN", "CHECKPOINT_RESTORE"}) == (bit(21) | bit(40)));
  CHECK(*parseCapabilities({"ALL"}) == allCapabilities());
  CHECK(allCapabilities() == (bit(41) - 1));
  auto bad = parseCapabilities({"NET_ADMIN", "FLY"});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "unknown capability \"FLY\"");
}

TEST_CASE("security context: process credentials", "[unit][runtime][security]") {
  SECTION("nothing set: the agent's identity, groups and capabilities") {
    auto c = credentials(makePod(), makeContainer());
    CHECK_FALSE(c.uid);
    CHECK_FALSE(c.gid);
    CHECK_FALSE(c.set_groups);
    CHECK_FALSE(c.capabilities);
    CHECK(c.ambient == 0);
    CHECK_FALSE(c.no_new_privs);
  }
  SECTION("pod-level user and group; groups replaced by supplementalGroups and fsGroup") {
    auto psc = podContext(65534, 65533);
    psc.supplemental_groups = {5, 2000};
    psc.fs_group = 2000;
    auto c = credentials(makePod(psc), makeContainer());
    CHECK(c.uid == 65534u);
    CHECK(c.gid == 65533u);
    CHECK(c.set_groups);
    CHECK(c.groups == std::vector<uint32_t>{5, 2000});
    psc.fs_group = 7;
    c = credentials(makePod(psc), makeContainer());
    CHECK(c.groups == std::vector<uint32_t>{5, 2000, 7});
  }
  SECTION("a new identity never keeps the agent's supplementary groups") {
    auto c = credentials(makePod(), makeContainer(containerContext(1000, 1000)));
    CHECK(c.set_groups);
    CHECK(c.groups.empty());
  }
  SECTION("runAsUser without runAsGroup: the passwd primary group, else nogroup, never 0") {
    auto pod = makePod(podContext(1000));
    auto c = credentials(pod, makeContainer(), kRoot, [](uint32_t uid) {
      return uid == 1000 ? std::optional<uint32_t>(1500) : std::nullopt;
    });
    CHECK(c.gid == 1500u);
    c = credentials(pod, makeContainer());
    CHECK(c.gid == kNoGroupGid);
    c = credentials(pod, makeContainer(), kRoot,
                    [](uint32_t) { return std::optional<uint32_t>(0); });
    CHECK(c.gid == kNoGroupGid);
    c = credentials(makePod(podContext(0)), makeContainer());
    CHECK(c.uid == 0u);
    CHECK_FALSE(c.gid);  // root keeps group 0
  }
  SECTION("allowPrivilegeEscalation: false sets no_new_privs") {
    api::SecurityContext sc;
    sc.allow_privilege_escalation = false;
    CHECK(credentials(makePod(), makeContainer(sc)).no_new_privs);
  }
  SECTION("drop ALL empties the bounding set; add keeps what it names") {
    api::SecurityContext sc;
    sc.capabilities = api::Capabilities{{}, {"ALL"}};
    auto c = credentials(makePod(), makeContainer(sc));
    CHECK(c.capabilities == 0u);
    CHECK(c.ambient == 0);
    sc.capabilities = api::Capabilities{{"NET_BIND_SERVICE"}, {"ALL"}};
    c = credentials(makePod(), makeContainer(sc));
    CHECK(c.capabilities == bit(10));
    CHECK(c.ambient == 0);  // a root process has it without ambient
    sc.capabilities = api::Capabilities{{}, {"NET_RAW", "CAP_SYS_ADMIN"}};
    c = credentials(makePod(), makeContainer(sc));
    CHECK(c.capabilities == (allCapabilities() & ~(bit(13) | bit(21))));
  }
  SECTION("capabilities.add for a non-root user become ambient") {
    auto sc = containerContext(1000);
    sc.capabilities = api::Capabilities{{"NET_BIND_SERVICE"}, {"ALL"}};
    auto c = credentials(makePod(), makeContainer(sc));
    CHECK(c.capabilities == bit(10));
    CHECK(c.ambient == bit(10));
  }
  SECTION("privileged keeps every capability, whatever drop says") {
    api::SecurityContext sc;
    sc.privileged = true;
    sc.capabilities = api::Capabilities{{}, {"ALL"}};
    CHECK_FALSE(credentials(makePod(), makeContainer(sc)).capabilities);
  }
  SECTION("refused: readOnlyRootFilesystem and unknown capability names") {
    api::SecurityContext sc;
    sc.read_only_root_filesystem = true;
    CHECK_THAT(credentialsError(makePod(), makeContainer(sc)).message(),
               Catch::Contains("readOnlyRootFilesystem: true cannot be honoured"));
    sc.read_only_root_filesystem = false;
    sc.capabilities = api::Capabilities{{}, {"NOPE"}};
    CHECK_THAT(credentialsError(makePod(), makeContainer(sc)).message(),
               Catch::Contains("capabilities.drop: unknown capability \"NOPE\""));
  }
  SECTION("a non-root agent refuses identities it cannot give") {
    CHECK_THAT(credentialsError(makePod(podContext(65534)), makeContainer(), 1000).message(),
               Catch::Contains("nodeagent runs as uid 1000"));
    auto psc = podContext({});
    psc.fs_group = 5;
    CHECK_FALSE(processCredentials(makePod(psc), makeContainer(),
                                   determineEffectiveSecurityContext(makePod(psc), makeContainer()),
                                   1000, noPasswd)
                    .ok());
    // Its own uid is fine.
    auto c = credentials(makePod(podContext(1000)), makeContainer(), 1000);
    CHECK_FALSE(c.uid);
    api::SecurityContext sc;
    sc.capabilities = api::Capabilities{{"NET_ADMIN"}, {}};
    CHECK_THAT(credentialsError(makePod(), makeContainer(sc), 1000).message(),
               Catch::Contains("capabilities.add needs nodeagent to run as root"));
    // Dropping: it has none, and no_new_privs keeps it from gaining any.
    sc.capabilities = api::Capabilities{{}, {"ALL"}};
    c = credentials(makePod(), makeContainer(sc), 1000);
    CHECK(c.no_new_privs);
    CHECK_FALSE(c.capabilities);
  }
}
