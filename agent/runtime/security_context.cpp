#include "agent/runtime/security_context.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>

namespace nodeagent::runtime {
namespace {

// linux/capability.h, by number.
constexpr std::array<std::string_view, 41> kCapabilityNames = {"CHOWN",
                                                               "DAC_OVERRIDE",
                                                               "DAC_READ_SEARCH",
                                                               "FOWNER",
                                                               "FSETID",
                                                               "KILL",
                                                               "SETGID",
                                                               "SETUID",
                                                               "SETPCAP",
                                                               "LINUX_IMMUTABLE",
                                                               "NET_BIND_SERVICE",
                                                               "NET_BROADCAST",
                                                               "NET_ADMIN",
                                                               "NET_RAW",
                                                               "IPC_LOCK",
                                                               "IPC_OWNER",
                                                               "SYS_MODULE",
                                                               "SYS_RAWIO",
                                                               "SYS_CHROOT",
                                                               "SYS_PTRACE",
                                                               "SYS_PACCT",
                                                               "SYS_ADMIN",
                                                               "SYS_BOOT",
                                                               "SYS_NICE",
                                                               "SYS_RESOURCE",
                                                               "SYS_TIME",
                                                               "SYS_TTY_CONFIG",
                                                               "MKNOD",
                                                               "LEASE",
                                                               "AUDIT_WRITE",
                                                               "AUDIT_CONTROL",
                                                               "SETFCAP",
                                                               "MAC_OVERRIDE",
                                                               "MAC_ADMIN",
                                                               "SYSLOG",
                                                               "WAKE_ALARM",
                                                               "BLOCK_SUSPEND",
                                                               "AUDIT_READ",
                                                               "PERFMON",
                                                               "BPF",
                                                               "CHECKPOINT_RESTORE"};

// kubelet's format.Pod: "name_namespace(uid)".
std::string formatPod(const api::Pod& pod) {
  return pod.metadata.name + "_" + pod.metadata.namespace_ + "(" + pod.metadata.uid + ")";
}

std::string containerRef(const api::Pod& pod, const api::Container& container) {
  return "container \"" + container.name + "\" of pod " + api::podRef(pod);
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

}  // namespace

bool hasPrivilegedContainer(const api::Pod& pod) {
  auto privileged = [](const api::Container& c) {
    return c.security_context && c.security_context->privileged.value_or(false);
  };
  return std::any_of(pod.spec->init_containers.begin(), pod.spec->init_containers.end(),
                     privileged) ||
         std::any_of(pod.spec->containers.begin(), pod.spec->containers.end(), privileged);
}

EffectiveSecurityContext determineEffectiveSecurityContext(const api::Pod& pod,
                                                           const api::Container& container) {
  EffectiveSecurityContext out;
  std::optional<bool> non_root;
  if (const auto& psc = pod.spec->security_context) {
    out.run_as_user = psc->run_as_user;
    out.run_as_group = psc->run_as_group;
    non_root = psc->run_as_non_root;
    out.supplemental_groups = psc->supplemental_groups;
    out.fs_group = psc->fs_group;
  }
  if (const auto& csc = container.security_context) {
    if (csc->run_as_user) out.run_as_user = csc->run_as_user;
    if (csc->run_as_group) out.run_as_group = csc->run_as_group;
    if (csc->run_as_non_root) non_root = csc->run_as_non_root;
    out.privileged = csc->privileged.value_or(false);
    out.allow_privilege_escalation = csc->allow_privilege_escalation.value_or(true);
    out.read_only_root_filesystem = csc->read_only_root_filesystem.value_or(false);
    if (csc->capabilities) {
      out.cap_add = csc->capabilities->add;
      out.cap_drop = csc->capabilities->drop;
    }
  }
  out.run_as_non_root = non_root.value_or(false);
  return out;
}

base::Status verifyRunAsNonRoot(const api::Pod& pod, const api::Container& container,
                                const EffectiveSecurityContext& sc,
                                const DefaultUser& default_user) {
  if (!sc.run_as_non_root) return base::okStatus();
  const std::string where = " (pod: \"" + formatPod(pod) + "\", container: " + container.name + ")";
  if (sc.run_as_user) {
    if (*sc.run_as_user == 0) {
      return base::invalidArgumentError("container's runAsUser breaks non-root policy" + where);
    }
    return base::okStatus();
  }
  if (default_user.uid == 0) {
    return base::invalidArgumentError("container has runAsNonRoot and image will run as root" +
                                      where);
  }
  if (!default_user.uid && !default_user.name.empty()) {
    return base::invalidArgumentError(
        "container has runAsNonRoot and image has non-numeric user (" + default_user.name +
        "), cannot verify user is non-root" + where);
  }
  return base::okStatus();
}

namespace {

// What checkNonRootPolicy refuses in `sc`, "" for nothing.
std::string rootAccess(const EffectiveSecurityContext& sc, const DefaultUser& default_user) {
  if (sc.run_as_user == 0) return "would run as root (runAsUser: 0)";
  if (!sc.run_as_user && default_user.uid == 0) {
    return "would run as root (no runAsUser is set, and " + default_user.origin + ")";
  }
  if (!sc.run_as_user && !default_user.uid) {
    return "may run as root (no runAsUser is set, and the image's user \"" + default_user.name +
           "\" is not a number)";
  }
  if (sc.privileged) return "asks for privileged: true";
  if (!sc.cap_add.empty()) return "asks for capabilities.add [" + joined(sc.cap_add) + "]";
  if (sc.run_as_group == 0) return "asks for group 0 (runAsGroup: 0)";
  if (sc.fs_group == 0) return "asks for group 0 (fsGroup: 0)";
  if (std::find(sc.supplemental_groups.begin(), sc.supplemental_groups.end(), 0) !=
      sc.supplemental_groups.end()) {
    return "asks for group 0 (supplementalGroups)";
  }
  return "";
}

}  // namespace

base::Status checkNonRootPolicy(const api::Pod& pod, const api::Container& container,
                                const EffectiveSecurityContext& sc,
                                const DefaultUser& default_user) {
  const std::string what = rootAccess(sc, default_user);
  if (what.empty()) return base::okStatus();
  return base::invalidArgumentError(
      containerRef(pod, container) + " " + what +
      " on the node; pods from the apiserver may not run as root: set securityContext.runAsUser "
      "to a non-zero uid (without privileged, capabilities.add or group 0), or start nodeagent "
      "with --allow-root-api-pods");
}

CapabilitySet allCapabilities() { return (CapabilitySet{1} << kCapabilityNames.size()) - 1; }

base::StatusOr<CapabilitySet> parseCapabilities(const std::vector<std::string>& names) {
  CapabilitySet set = 0;
  for (const auto& name : names) {
    std::string upper;
    for (char ch : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    std::string_view bare = upper;
    if (bare == "ALL") {
      set |= allCapabilities();
      continue;
    }
    if (bare.substr(0, 4) == "CAP_") bare.remove_prefix(4);
    auto it = std::find(kCapabilityNames.begin(), kCapabilityNames.end(), bare);
    if (it == kCapabilityNames.end()) {
      return base::invalidArgumentError("unknown capability \"" + name + "\"");
    }
    set |= CapabilitySet{1} << (it - kCapabilityNames.begin());
  }
  return set;
}

std::optional<uint32_t> passwdPrimaryGroup(uint32_t uid) {
  struct passwd pw {};
  struct passwd* result = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &result) != 0 || result == nullptr) {
    return std::nullopt;
  }
  return static_cast<uint32_t>(pw.pw_gid);
}

namespace {

// supplementalGroups, then fsGroup unless it is one of them.
std::vector<uint32_t> supplementaryGroups(const EffectiveSecurityContext& sc) {
  std::vector<uint32_t> groups;
  for (int64_t g : sc.supplemental_groups) groups.push_back(static_cast<uint32_t>(g));
  if (sc.fs_group && std::find(groups.begin(), groups.end(), static_cast<uint32_t>(*sc.fs_group)) ==
                         groups.end()) {
    groups.push_back(static_cast<uint32_t>(*sc.fs_group));
  }
  return groups;
}

// The uid, gid and supplementary groups of `creds`. `where` prefixes errors.
base::Status setIdentity(ProcessCredentials& creds, const EffectiveSecurityContext& sc,
                         uint32_t agent_uid, const PrimaryGroupLookup& primary_group,
                         const std::string& where) {
  std::vector<uint32_t> groups = supplementaryGroups(sc);
  if (agent_uid != 0) {
    // Without root the agent cannot change a process' identity: refuse what would be ignored.
    if ((sc.run_as_user && *sc.run_as_user != agent_uid) || sc.run_as_group || !groups.empty()) {
      return base::invalidArgumentError(
          where + "nodeagent runs as uid " + std::to_string(agent_uid) +
          " and cannot run a container as another user or with runAsGroup, supplementalGroups or "
          "fsGroup; run nodeagent as root");
    }
    return base::okStatus();
  }
  if (sc.run_as_user) creds.uid = static_cast<uint32_t>(*sc.run_as_user);
  if (sc.run_as_group) {
    creds.gid = static_cast<uint32_t>(*sc.run_as_group);
  } else if (creds.uid && *creds.uid != 0) {
    auto primary = primary_group ? primary_group(*creds.uid) : std::nullopt;
    creds.gid = primary && *primary != 0 ? *primary : kNoGroupGid;
  }
  creds.set_groups = creds.uid || creds.gid || !groups.empty();
  creds.groups = std::move(groups);
  return base::okStatus();
}

// The capability sets of `creds` (after setIdentity) from capabilities.add and .drop. `where`
// prefixes errors.
base::Status setCapabilities(ProcessCredentials& creds, const EffectiveSecurityContext& sc,
                             uint32_t agent_uid, const std::string& where) {
  const bool root_agent = agent_uid == 0;
  const bool non_root_process = creds.uid ? *creds.uid != 0 : agent_uid != 0;
  if (sc.privileged) return base::okStatus();  // every capability, as a privileged container has
  if (sc.cap_add.empty() && sc.cap_drop.empty()) return base::okStatus();
  auto add = parseCapabilities(sc.cap_add);
  if (!add.ok())
    return base::invalidArgumentError(where + "capabilities.add: " + add.status().message());
  auto drop = parseCapabilities(sc.cap_drop);
  if (!drop.ok())
    return base::invalidArgumentError(where + "capabilities.drop: " + drop.status().message());
  if (!root_agent) {
    if (*add != 0) {
      return base::invalidArgumentError(where + "capabilities.add needs nodeagent to run as root");
    }
    // A process of a non-root agent has no capabilities and cannot shrink its bounding set;
    // no_new_privs keeps it from gaining any through a set-user-ID or file-capability program.
    creds.no_new_privs = true;
    return base::okStatus();
  }
  creds.capabilities = (allCapabilities() & ~*drop) | *add;
  if (non_root_process) creds.ambient = *add;
  return base::okStatus();
}

}  // namespace

base::StatusOr<ProcessCredentials> processCredentials(const api::Pod& pod,
                                                      const api::Container& container,
                                                      const EffectiveSecurityContext& sc,
                                                      uint32_t agent_uid,
                                                      const PrimaryGroupLookup& primary_group) {
  const std::string where = containerRef(pod, container) + ": ";
  if (sc.read_only_root_filesystem) {
    return base::invalidArgumentError(
        where +
        "readOnlyRootFilesystem: true cannot be honoured by the process runtime (a host process "
        "shares the node's root filesystem); remove it or use a container runtime");
  }
  ProcessCredentials creds;
  creds.no_new_privs = !sc.allow_privilege_escalation;
  RETURN_IF_ERROR(setIdentity(creds, sc, agent_uid, primary_group, where));
  RETURN_IF_ERROR(setCapabilities(creds, sc, agent_uid, where));
  return creds;
}

}  // namespace nodeagent::runtime
