// The effective security context of a container (kubelet's securitycontext and kuberuntime
// determineEffectiveSecurityContext / verifyRunAsNonRoot) and the decisions a runtime takes from
// it: whether the container may start at all, and which identity and capabilities it gets.
//
// Pure functions of the pod spec and a few facts about the node (the uid a container runs as
// when its spec names none, how to find a user's primary group), so every runtime uses the same
// rules and unit tests cover them without processes. An error is kInvalidArgument, which the
// agent reports as the container's CreateContainerConfigError.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::runtime {

// The container's securityContext merged with the pod's: container fields override the pod's
// for runAsUser, runAsGroup and runAsNonRoot; supplementalGroups and fsGroup come from the pod;
// the rest only exists on the container.
struct EffectiveSecurityContext {
  std::optional<int64_t> run_as_user;
  std::optional<int64_t> run_as_group;
  bool run_as_non_root = false;
  std::vector<int64_t> supplemental_groups;
  std::optional<int64_t> fs_group;
  bool privileged = false;
  bool allow_privilege_escalation = true;
  bool read_only_root_filesystem = false;
  std::vector<std::string> cap_add;
  std::vector<std::string> cap_drop;
};

// kubelet's HasPrivilegedContainer: an init or app container asks for privileged: true.
bool hasPrivilegedContainer(const api::Pod& pod);

EffectiveSecurityContext determineEffectiveSecurityContext(const api::Pod& pod,
                                                           const api::Container& container);

// Who a container runs as when its spec sets no runAsUser: for a host process the agent's uid,
// for an image its user (kubelet's getImageUser: a numeric user, else a user name whose uid only
// the image knows, else root).
struct DefaultUser {
  std::optional<int64_t> uid;  // nullopt: unknown (a user name, or not known at all)
  std::string name;            // the image's non-numeric user
  // How the container comes to run as it, for messages: "a process container runs as the
  // agent's user", "the image's user is root".
  std::string origin;
};

// kubelet's verifyRunAsNonRoot, against `default_user` when no runAsUser is set. Errors carry
// kubelet's messages.
base::Status verifyRunAsNonRoot(const api::Pod& pod, const api::Container& container,
                                const EffectiveSecurityContext& sc,
                                const DefaultUser& default_user);

// The policy for pods whose source is the apiserver when root is not allowed for them: a
// container whose uid would be 0 (the default user's when no runAsUser is set, or one that
// cannot be known), or that asks for privileged: true, capabilities.add or group 0 (runAsGroup,
// fsGroup, supplementalGroups: root's group owns much of the node), is refused with a message
// naming the container and the flag that allows it.
base::Status checkNonRootPolicy(const api::Pod& pod, const api::Container& container,
                                const EffectiveSecurityContext& sc,
                                const DefaultUser& default_user);

// Capability numbers (linux/capability.h) as a bit set; bit n is capability n.
using CapabilitySet = uint64_t;
// Every capability this table knows (CAP_CHOWN .. CAP_CHECKPOINT_RESTORE).
CapabilitySet allCapabilities();
// "NET_ADMIN", "CAP_NET_ADMIN" (any case) or "ALL"; kInvalidArgument for an unknown name.
base::StatusOr<CapabilitySet> parseCapabilities(const std::vector<std::string>& names);

// What a host-process runtime applies before exec, from the effective context.
struct ProcessCredentials {
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  // Replace the supplementary groups with `groups` (supplementalGroups, then fsGroup); set
  // whenever the identity changes, so a container never keeps the agent's groups.
  bool set_groups = false;
  std::vector<uint32_t> groups;
  // The bounding set (and the ceiling of every other set) when capabilities are restricted;
  // nullopt keeps the agent's.
  std::optional<CapabilitySet> capabilities;
  // Raised as ambient capabilities for a non-root uid (capabilities.add).
  CapabilitySet ambient = 0;
  bool no_new_privs = false;
};

// The gid a process runs as when runAsUser is set without runAsGroup: the user's primary group
// from the node's passwd database if it has one that is not 0, else kNoGroupGid (never group 0
// by accident). uid 0 keeps gid 0.
inline constexpr uint32_t kNoGroupGid = 65534;
using PrimaryGroupLookup = std::function<std::optional<uint32_t>(uint32_t uid)>;
// getpwuid_r.
std::optional<uint32_t> passwdPrimaryGroup(uint32_t uid);

// The credentials of a host process for `sc`; `agent_uid` is the uid the process runs as when
// no runAsUser is set. Refuses (kInvalidArgument, a clear message) what a host process cannot
// honour: readOnlyRootFilesystem, unknown capability names, and identity changes when the agent
// is not root.
base::StatusOr<ProcessCredentials> processCredentials(const api::Pod& pod,
                                                      const api::Container& container,
                                                      const EffectiveSecurityContext& sc,
                                                      uint32_t agent_uid,
                                                      const PrimaryGroupLookup& primary_group);

}  // namespace nodeagent::runtime
