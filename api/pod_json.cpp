#include "api/pod_json.h"

#include <cstring>
#include <exception>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/canonical_json.h"
#include "api/json_util.h"
#include "api/list_interner.h"
#include "api/yaml.h"

namespace nodeagent::api {
namespace {

using nlohmann::json;
using namespace json_util;

// `Opt` is a std::optional or a Boxed.
template <typename Opt, typename Fn>
base::Status readOptional(const json& obj, const Path& p, std::string_view key, Opt* out,
                          Fn decode_one) {
  ASSIGN_OR_RETURN(const json* m, objectMember(obj, p, key));
  if (m == nullptr) return base::okStatus();
  typename Opt::value_type item;
  RETURN_IF_ERROR(decode_one(*m, p.field(key), &item));
  *out = std::move(item);
  return base::okStatus();
}

base::Status decodeIntOrString(const json& obj, const Path& p, std::string_view key,
                               IntOrString* out) {
  const json* m = obj.contains(key) ? &obj.find(key).value() : nullptr;
  if (m == nullptr || m->is_null()) return base::okStatus();
  if (m->is_string()) {
    out->is_string = true;
    out->string_value = m->get<std::string>();
    return base::okStatus();
  }
  if (!m->is_number()) return typeError(p.field(key), "an integer or a string", *m);
  return readInt32(obj, p, key, &out->int_value);
}

base::Status decodeHandler(const json& j, const Path& p, Handler* h) {
  RETURN_IF_ERROR(
      readOptional(j, p, "exec", &h->exec, [](const json& e, const Path& ep, ExecAction* a) {
        return readStringList(e, ep, "command", &a->command);
      }));
  RETURN_IF_ERROR(readOptional(
      j, p, "httpGet", &h->http_get, [](const json& e, const Path& ep, HTTPGetAction* a) {
        RETURN_IF_ERROR(readString(e, ep, "path", &a->path));
        RETURN_IF_ERROR(decodeIntOrString(e, ep, "port", &a->port));
        RETURN_IF_ERROR(readString(e, ep, "host", &a->host));
        RETURN_IF_ERROR(readString(e, ep, "scheme", &a->scheme));
        return readList(e, ep, "httpHeaders", &a->http_headers,
                        [](const json& hj, const Path& hp, HTTPHeader* hh) {
                          RETURN_IF_ERROR(readString(hj, hp, "name", &hh->name));
                          return readString(hj, hp, "value", &hh->value);
                        });
      }));
  return readOptional(j, p, "tcpSocket", &h->tcp_socket,
                      [](const json& e, const Path& ep, TCPSocketAction* a) {
                        RETURN_IF_ERROR(decodeIntOrString(e, ep, "port", &a->port));
                        return readString(e, ep, "host", &a->host);
                      });
}

base::Status decodeProbe(const json& j, const Path& p, Probe* probe) {
  RETURN_IF_ERROR(decodeHandler(j, p, &probe->handler));
  RETURN_IF_ERROR(readInt32(j, p, "initialDelaySeconds", &probe->initial_delay_seconds));
  RETURN_IF_ERROR(readInt32(j, p, "timeoutSeconds", &probe->timeout_seconds));
  RETURN_IF_ERROR(readInt32(j, p, "periodSeconds", &probe->period_seconds));
  RETURN_IF_ERROR(readInt32(j, p, "successThreshold", &probe->success_threshold));
  RETURN_IF_ERROR(readInt32(j, p, "failureThreshold", &probe->failure_threshold));
  return readInt64(j, p, "terminationGracePeriodSeconds", &probe->termination_grace_period_seconds);
}

base::Status decodeResourceField(const json& j, const Path& p, ResourceFieldSelector* s) {
  RETURN_IF_ERROR(readString(j, p, "containerName", &s->container_name));
  RETURN_IF_ERROR(readString(j, p, "resource", &s->resource));
  return readQuantity(j, p, "divisor", &s->divisor);
}

base::Status decodeEnvVar(const json& j, const Path& p, EnvVar* env) {
  RETURN_IF_ERROR(readString(j, p, "name", &env->name));
  RETURN_IF_ERROR(readString(j, p, "value", &env->value));
  ASSIGN_OR_RETURN(const json* from, objectMember(j, p, "valueFrom"));
  if (from == nullptr) return base::okStatus();
  Path fp = p.field("valueFrom");
  if (!from->empty()) env->value_from_kind = from->begin().key();
  RETURN_IF_ERROR(readOptional(*from, fp, "fieldRef", &env->field_ref,
                               [](const json& e, const Path& ep, ObjectFieldSelector* s) {
                                 RETURN_IF_ERROR(readString(e, ep, "apiVersion", &s->api_version));
                                 return readString(e, ep, "fieldPath", &s->field_path);
                               }));
  return readOptional(*from, fp, "resourceFieldRef", &env->resource_field_ref, decodeResourceField);
}

base::Status decodeContainer(const json& j, const Path& p, Container* c) {
  RETURN_IF_ERROR(readString(j, p, "name", &c->name));
  RETURN_IF_ERROR(readString(j, p, "image", &c->image));
  RETURN_IF_ERROR(readString(j, p, "imagePullPolicy", &c->image_pull_policy));
  RETURN_IF_ERROR(readStringList(j, p, "command", &c->command));
  RETURN_IF_ERROR(readStringList(j, p, "args", &c->args));
  RETURN_IF_ERROR(readString(j, p, "workingDir", &c->working_dir));
  RETURN_IF_ERROR(
      readList(j, p, "ports", &c->ports, [](const json& e, const Path& ep, ContainerPort* port) {
        RETURN_IF_ERROR(readString(e, ep, "name", &port->name));
        RETURN_IF_ERROR(readInt32(e, ep, "containerPort", &port->container_port));
        RETURN_IF_ERROR(readInt32(e, ep, "hostPort", &port->host_port));
        RETURN_IF_ERROR(readString(e, ep, "protocol", &port->protocol));
        return readString(e, ep, "hostIP", &port->host_ip);
      }));
  RETURN_IF_ERROR(readList(j, p, "env", &c->env, decodeEnvVar));
  ASSIGN_OR_RETURN(const json* res, objectMember(j, p, "resources"));
  if (res != nullptr) {
    Path rp = p.field("resources");
    RETURN_IF_ERROR(readQuantityMap(*res, rp, "requests", &c->resources.requests));
    RETURN_IF_ERROR(readQuantityMap(*res, rp, "limits", &c->resources.limits));
  }
  RETURN_IF_ERROR(readList(j, p, "volumeMounts", &c->volume_mounts,
                           [](const json& e, const Path& ep, VolumeMount* m) {
                             RETURN_IF_ERROR(readString(e, ep, "name", &m->name));
                             RETURN_IF_ERROR(readString(e, ep, "mountPath", &m->mount_path));
                             RETURN_IF_ERROR(readBool(e, ep, "readOnly", &m->read_only));
                             return readString(e, ep, "subPath", &m->sub_path);
                           }));
  RETURN_IF_ERROR(readOptional(j, p, "livenessProbe", &c->liveness_probe, decodeProbe));
  RETURN_IF_ERROR(readOptional(j, p, "readinessProbe", &c->readiness_probe, decodeProbe));
  RETURN_IF_ERROR(readOptional(j, p, "startupProbe", &c->startup_probe, decodeProbe));
  RETURN_IF_ERROR(readOptional(
      j, p, "lifecycle", &c->lifecycle, [](const json& e, const Path& ep, Lifecycle* l) {
        RETURN_IF_ERROR(readOptional(e, ep, "postStart", &l->post_start, decodeHandler));
        return readOptional(e, ep, "preStop", &l->pre_stop, decodeHandler);
      }));
  RETURN_IF_ERROR(readString(j, p, "terminationMessagePath", &c->termination_message_path));
  RETURN_IF_ERROR(readString(j, p, "terminationMessagePolicy", &c->termination_message_policy));
  RETURN_IF_ERROR(readOptional(
      j, p, "securityContext", &c->security_context,
      [](const json& e, const Path& ep, SecurityContext* s) {
        RETURN_IF_ERROR(readInt64(e, ep, "runAsUser", &s->run_as_user));
        RETURN_IF_ERROR(readInt64(e, ep, "runAsGroup", &s->run_as_group));
        RETURN_IF_ERROR(readBool(e, ep, "runAsNonRoot", &s->run_as_non_root));
        RETURN_IF_ERROR(
            readBool(e, ep, "allowPrivilegeEscalation", &s->allow_privilege_escalation));
        RETURN_IF_ERROR(readBool(e, ep, "privileged", &s->privileged));
        RETURN_IF_ERROR(readOptional(e, ep, "capabilities", &s->capabilities,
                                     [](const json& ce, const Path& cp, Capabilities* caps) {
                                       RETURN_IF_ERROR(readStringList(ce, cp, "add", &caps->add));
                                       return readStringList(ce, cp, "drop", &caps->drop);
                                     }));
        return readBool(e, ep, "readOnlyRootFilesystem", &s->read_only_root_filesystem);
      }));
  RETURN_IF_ERROR(readBool(j, p, "stdin", &c->stdin));
  RETURN_IF_ERROR(readBool(j, p, "stdinOnce", &c->stdin_once));
  // c->hash is set by decodeChecked, from the pod's canonical JSON.
  return readBool(j, p, "tty", &c->tty);
}

base::Status decodeVolume(const json& j, const Path& p, Volume* v) {
  RETURN_IF_ERROR(readString(j, p, "name", &v->name));
  for (const auto& [key, value] : j.items()) {
    if (key != "name" && !value.is_null()) {
      v->source_type = key;
      break;
    }
  }
  ASSIGN_OR_RETURN(const json* host_path, objectMember(j, p, "hostPath"));
  if (host_path != nullptr) {
    Path hp = p.field("hostPath");
    RETURN_IF_ERROR(readString(*host_path, hp, "path", &v->host_path));
    RETURN_IF_ERROR(readString(*host_path, hp, "type", &v->host_path_type));
  }
  ASSIGN_OR_RETURN(const json* empty_dir, objectMember(j, p, "emptyDir"));
  if (empty_dir != nullptr) {
    Path ep = p.field("emptyDir");
    RETURN_IF_ERROR(readString(*empty_dir, ep, "medium", &v->empty_dir_medium));
    RETURN_IF_ERROR(readQuantity(*empty_dir, ep, "sizeLimit", &v->empty_dir_size_limit));
  }
  return base::okStatus();
}

base::StatusOr<PodSpec> decodeSpec(const json& j, const Path& p) {
  RETURN_IF_ERROR(checkObject(j, p));
  PodSpec s;
  std::vector<Container> init_containers;
  std::vector<Container> containers;
  RETURN_IF_ERROR(readList(j, p, "initContainers", &init_containers, decodeContainer));
  RETURN_IF_ERROR(readList(j, p, "containers", &containers, decodeContainer));
  s.init_containers = std::move(init_containers);
  s.containers = std::move(containers);
  RETURN_IF_ERROR(readString(j, p, "restartPolicy", &s.restart_policy));
  RETURN_IF_ERROR(
      readInt64(j, p, "terminationGracePeriodSeconds", &s.termination_grace_period_seconds));
  RETURN_IF_ERROR(readInt64(j, p, "activeDeadlineSeconds", &s.active_deadline_seconds));
  RETURN_IF_ERROR(readString(j, p, "dnsPolicy", &s.dns_policy));
  RETURN_IF_ERROR(readString(j, p, "nodeName", &s.node_name));
  RETURN_IF_ERROR(readString(j, p, "serviceAccountName", &s.service_account_name));
  RETURN_IF_ERROR(readList(j, p, "imagePullSecrets", &s.image_pull_secrets,
                           [](const json& e, const Path& ep, std::string* name) {
                             return readString(e, ep, "name", name);
                           }));
  RETURN_IF_ERROR(readBool(j, p, "hostNetwork", &s.host_network));
  RETURN_IF_ERROR(readBool(j, p, "hostPID", &s.host_pid));
  RETURN_IF_ERROR(readBool(j, p, "hostIPC", &s.host_ipc));
  RETURN_IF_ERROR(readString(j, p, "schedulerName", &s.scheduler_name));
  RETURN_IF_ERROR(readList(j, p, "tolerations", &s.tolerations,
                           [](const json& e, const Path& ep, Toleration* t) {
                             RETURN_IF_ERROR(readString(e, ep, "key", &t->key));
                             RETURN_IF_ERROR(readString(e, ep, "operator", &t->operator_));
                             RETURN_IF_ERROR(readString(e, ep, "value", &t->value));
                             RETURN_IF_ERROR(readString(e, ep, "effect", &t->effect));
                             return readInt64(e, ep, "tolerationSeconds", &t->toleration_seconds);
                           }));
  RETURN_IF_ERROR(readList(j, p, "volumes", &s.volumes, decodeVolume));
  RETURN_IF_ERROR(readList(j, p, "readinessGates", &s.readiness_gates,
                           [](const json& e, const Path& ep, std::string* gate) {
                             return readString(e, ep, "conditionType", gate);
                           }));
  RETURN_IF_ERROR(readInt32(j, p, "priority", &s.priority));
  RETURN_IF_ERROR(readString(j, p, "priorityClassName", &s.priority_class_name));
  RETURN_IF_ERROR(readOptional(
      j, p, "securityContext", &s.security_context,
      [](const json& e, const Path& ep, PodSecurityContext* sc) {
        RETURN_IF_ERROR(readInt64(e, ep, "runAsUser", &sc->run_as_user));
        RETURN_IF_ERROR(readInt64(e, ep, "runAsGroup", &sc->run_as_group));
        RETURN_IF_ERROR(readBool(e, ep, "runAsNonRoot", &sc->run_as_non_root));
        RETURN_IF_ERROR(readInt64List(e, ep, "supplementalGroups", &sc->supplemental_groups));
        return readInt64(e, ep, "fsGroup", &sc->fs_group);
      }));
  return s;
}

base::Status decodeState(const json& j, const Path& p, ContainerState* st) {
  RETURN_IF_ERROR(readOptional(j, p, "waiting", &st->waiting,
                               [](const json& e, const Path& ep, ContainerStateWaiting* w) {
                                 RETURN_IF_ERROR(readString(e, ep, "reason", &w->reason));
                                 return readString(e, ep, "message", &w->message);
                               }));
  RETURN_IF_ERROR(readOptional(j, p, "running", &st->running,
                               [](const json& e, const Path& ep, ContainerStateRunning* r) {
                                 return readTime(e, ep, "startedAt", &r->started_at);
                               }));
  return readOptional(j, p, "terminated", &st->terminated,
                      [](const json& e, const Path& ep, ContainerStateTerminated* t) {
                        RETURN_IF_ERROR(readInt32(e, ep, "exitCode", &t->exit_code));
                        RETURN_IF_ERROR(readInt32(e, ep, "signal", &t->signal));
                        RETURN_IF_ERROR(readString(e, ep, "reason", &t->reason));
                        RETURN_IF_ERROR(readString(e, ep, "message", &t->message));
                        RETURN_IF_ERROR(readTime(e, ep, "startedAt", &t->started_at));
                        RETURN_IF_ERROR(readTime(e, ep, "finishedAt", &t->finished_at));
                        return readString(e, ep, "containerID", &t->container_id);
                      });
}

base::Status decodeContainerStatus(const json& j, const Path& p, ContainerStatus* cs) {
  RETURN_IF_ERROR(readString(j, p, "name", &cs->name));
  ASSIGN_OR_RETURN(const json* state, objectMember(j, p, "state"));
  if (state != nullptr) RETURN_IF_ERROR(decodeState(*state, p.field("state"), &cs->state));
  ASSIGN_OR_RETURN(const json* last, objectMember(j, p, "lastState"));
  if (last != nullptr) RETURN_IF_ERROR(decodeState(*last, p.field("lastState"), &cs->last_state));
  RETURN_IF_ERROR(readBool(j, p, "ready", &cs->ready));
  RETURN_IF_ERROR(readBool(j, p, "started", &cs->started));
  RETURN_IF_ERROR(readInt32(j, p, "restartCount", &cs->restart_count));
  RETURN_IF_ERROR(readString(j, p, "image", &cs->image));
  RETURN_IF_ERROR(readString(j, p, "imageID", &cs->image_id));
  return readString(j, p, "containerID", &cs->container_id);
}

base::StatusOr<PodStatus> decodeStatusAt(const json& j, const Path& p) {
  RETURN_IF_ERROR(checkObject(j, p));
  PodStatus s;
  RETURN_IF_ERROR(readString(j, p, "phase", &s.phase));
  std::vector<PodCondition> conditions;
  RETURN_IF_ERROR(
      readList(j, p, "conditions", &conditions, [](const json& e, const Path& ep, PodCondition* c) {
        RETURN_IF_ERROR(readString(e, ep, "type", &c->type));
        RETURN_IF_ERROR(readString(e, ep, "status", &c->status));
        RETURN_IF_ERROR(readString(e, ep, "reason", &c->reason));
        RETURN_IF_ERROR(readString(e, ep, "message", &c->message));
        RETURN_IF_ERROR(readTime(e, ep, "lastProbeTime", &c->last_probe_time));
        return readTime(e, ep, "lastTransitionTime", &c->last_transition_time);
      }));
  s.conditions = std::move(conditions);
  RETURN_IF_ERROR(readString(j, p, "message", &s.message));
  RETURN_IF_ERROR(readString(j, p, "reason", &s.reason));
  RETURN_IF_ERROR(readString(j, p, "hostIP", &s.host_ip));
  RETURN_IF_ERROR(readString(j, p, "podIP", &s.pod_ip));
  RETURN_IF_ERROR(readList(
      j, p, "podIPs", &s.pod_ips,
      [](const json& e, const Path& ep, std::string* ip) { return readString(e, ep, "ip", ip); }));
  RETURN_IF_ERROR(readTime(j, p, "startTime", &s.start_time));
  RETURN_IF_ERROR(
      readList(j, p, "initContainerStatuses", &s.init_container_statuses, decodeContainerStatus));
  RETURN_IF_ERROR(
      readList(j, p, "containerStatuses", &s.container_statuses, decodeContainerStatus));
  RETURN_IF_ERROR(readString(j, p, "qosClass", &s.qos_class));
  return s;
}

json encodeState(const ContainerState& st) {
  json j = json::object();
  if (st.waiting) {
    json w = json::object();
    if (!st.waiting->reason.empty()) w["reason"] = st.waiting->reason;
    if (!st.waiting->message.empty()) w["message"] = st.waiting->message;
    j["waiting"] = std::move(w);
  }
  if (st.running) {
    json r = json::object();
    if (st.running->started_at) r["startedAt"] = formatTime(*st.running->started_at);
    j["running"] = std::move(r);
  }
  if (st.terminated) {
    const auto& t = *st.terminated;
    json tj = {{"exitCode", t.exit_code}};
    if (t.signal != 0) tj["signal"] = t.signal;
    if (!t.reason.empty()) tj["reason"] = t.reason;
    if (!t.message.empty()) tj["message"] = t.message;
    if (t.started_at) tj["startedAt"] = formatTime(*t.started_at);
    if (t.finished_at) tj["finishedAt"] = formatTime(*t.finished_at);
    if (!t.container_id.empty()) tj["containerID"] = t.container_id;
    j["terminated"] = std::move(tj);
  }
  return j;
}

json encodeContainerStatus(const ContainerStatus& cs) {
  // Field presence follows core/v1: ready, restartCount, image and imageID are always written.
  json j = {{"name", cs.name},
            {"state", encodeState(cs.state)},
            {"lastState", encodeState(cs.last_state)},
            {"ready", cs.ready},
            {"restartCount", cs.restart_count},
            {"image", cs.image},
            {"imageID", cs.image_id}};
  if (cs.started) j["started"] = *cs.started;
  if (!cs.container_id.empty()) j["containerID"] = cs.container_id;
  return j;
}

// One copy of each distinct container list among the decoded pods alive: replicas of one
// template (and static pods written from one) share their containers. Keyed by the containers'
// content hashes.
SharedList<Container> internContainers(const SharedList<Container>& list) {
  static auto* lists = new ListInterner<Container>();  // never destroyed: pods may outlive it
  if (list.empty()) return list;
  std::string key_bytes;
  key_bytes.reserve(list.size() * 2 * sizeof(uint64_t));
  for (const Container& c : list) {
    key_bytes.append(reinterpret_cast<const char*>(&c.hash.high), sizeof c.hash.high);
    key_bytes.append(reinterpret_cast<const char*>(&c.hash.low), sizeof c.hash.low);
  }
  return lists->intern(list, hash128(key_bytes));
}

SharedBox<PodSpec> internSpec(const SharedBox<PodSpec>& spec, const Hash128& spec_hash) {
  static auto* specs = new BoxInterner<PodSpec>();  // never destroyed: pods may outlive it
  return specs->intern(spec, spec_hash);
}

// The spec's canonical text, one copy among the pods alive with that spec.
std::shared_ptr<const std::string> internSpecText(std::string_view text, const Hash128& spec_hash) {
  static auto* texts = new detail::WeakTable<std::string>();  // never destroyed, as above
  return texts->internWith(
      spec_hash, [&](const std::string& held) { return held == text; },
      [&] { return std::make_shared<std::string>(text); });
}

base::StatusOr<Pod> decodeChecked(const json& object) {
  Path root;
  RETURN_IF_ERROR(checkObject(object, root));
  RETURN_IF_ERROR(checkKind(object, "Pod", "v1"));
  Pod pod;
  ASSIGN_OR_RETURN(const json* meta, objectMember(object, root, "metadata"));
  if (meta != nullptr) {
    ASSIGN_OR_RETURN(pod.metadata, decodeObjectMeta(*meta, root.field("metadata")));
  }
  ASSIGN_OR_RETURN(const json* spec, objectMember(object, root, "spec"));
  if (spec != nullptr) {
    ASSIGN_OR_RETURN(pod.spec, decodeSpec(*spec, root.field("spec")));
  }
  ASSIGN_OR_RETURN(const json* status, objectMember(object, root, "status"));
  if (status != nullptr) {
    ASSIGN_OR_RETURN(PodStatus decoded, decodeStatusAt(*status, root.field("status")));
    // The status every static pod is decoded with (its defaults set phase Pending): one copy for
    // all of them.
    static auto* const kPendingOnly = [] {
      auto pending = std::make_shared<PodStatus>();
      pending->phase = "Pending";
      return new std::shared_ptr<PodStatus>(std::move(pending));  // outlives every pod
    }();
    if (decoded == **kPendingOnly) {
      pod.status = SharedBox<PodStatus>::shared(*kPendingOnly);
    } else {
      pod.status = std::move(decoded);
    }
  }
  // One serialization gives the raw text and, as substrings of it, the canonical JSON of the spec
  // and of every container for their hashes.
  std::vector<CanonicalMark> marks;
  if (spec != nullptr) {
    marks.push_back({spec});
    for (const char* key : {"initContainers", "containers"}) {
      auto list = spec->find(key);
      if (list == spec->end() || !list->is_array()) continue;
      for (const json& c : *list) marks.push_back({&c});
    }
  }
  std::string raw;
  raw.reserve(1024);
  appendCanonicalJson(object, raw, marks);
  pod.content_hash = hash128(raw);
  // An absent spec hashes like an empty one.
  pod.spec_hash = spec != nullptr ? hash128(marks[0].in(raw)) : hash128("{}");
  if (spec == nullptr) {
    pod.raw = std::make_shared<const PodText>(std::move(raw));
    return pod;
  }
  // The decoded containers are the items of the spec's lists, in order.
  size_t next = 1;
  for (auto* list : {&pod.spec->init_containers, &pod.spec->containers}) {
    for (Container& c : *list) c.hash = hash128(marks.at(next++).in(raw));
    *list = internContainers(*list);
  }
  // The spec is a function of its JSON alone: pods with the same spec text share one copy of
  // it, and of that text.
  pod.spec = internSpec(pod.spec, pod.spec_hash);
  pod.raw = std::make_shared<const PodText>(raw, marks[0].begin, marks[0].end,
                                            internSpecText(marks[0].in(raw), pod.spec_hash));
  return pod;
}

}  // namespace

base::StatusOr<Pod> decodePod(const json& object) {
  try {
    return decodeChecked(object);
  } catch (const std::exception& e) {
    return base::invalidArgumentError(std::string("decoding pod: ") + e.what());
  }
}

base::StatusOr<PodPtr> decodePodPtr(const json& object) {
  ASSIGN_OR_RETURN(Pod pod, decodePod(object));
  return std::make_shared<const Pod>(std::move(pod));
}

base::StatusOr<Pod> decodePodJson(std::string_view json_text) {
  ASSIGN_OR_RETURN(json j, parseJson(json_text));
  return decodePod(j);
}

json encodePod(const Pod& pod) {
  if (!pod.raw) {
    // Only a default-constructed Pod lacks raw (decoded pods always carry it).
    json j = {{"apiVersion", "v1"}, {"kind", "Pod"}};
    j["metadata"] = encodeObjectMeta(pod.metadata);
    return j;
  }
  return json::parse(pod.raw->str());
}

base::StatusOr<PodPtr> withAnnotations(const Pod& pod, const StringMap& set,
                                       const std::vector<std::string>& remove) {
  return withJsonEdit(pod, [&](json& j) {
    json& meta = j["metadata"];
    if (!meta.is_object()) meta = json::object();
    json& ann = meta["annotations"];
    if (!ann.is_object()) ann = json::object();
    for (const auto& [k, v] : set) ann[k] = v;
    for (const auto& k : remove) ann.erase(k);
    if (ann.empty()) meta.erase("annotations");
  });
}

namespace {

// The end of the string starting at the quote at `i` in valid JSON text (past its closing quote).
size_t skipString(std::string_view text, size_t i) {
  for (++i;;) {
    const void* hit = std::memchr(text.data() + i, '"', text.size() - i);
    if (hit == nullptr) return text.size();
    size_t q = static_cast<const char*>(hit) - text.data();
    size_t backslashes = 0;
    while (q - backslashes > i && text[q - backslashes - 1] == '\\') ++backslashes;
    if (backslashes % 2 == 0) return q + 1;
    i = q + 1;
  }
}

// The end of the JSON value starting at `i` in canonical (compact, valid) JSON text.
size_t skipValue(std::string_view text, size_t i) {
  if (text[i] == '"') return skipString(text, i);
  if (text[i] != '{' && text[i] != '[') {
    while (i < text.size() && text[i] != ',' && text[i] != '}' && text[i] != ']') ++i;
    return i;
  }
  int depth = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"') {
      i = skipString(text, i);
      continue;
    }
    if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
    ++i;
  }
  return i;
}

// The slot of "status" among the members of a JSON object in `text` from `i` (a member's key or
// the closing brace) on; `first` when no member comes before `i`.
std::optional<StatusSlot> scanForStatus(std::string_view text, size_t i, bool first) {
  constexpr std::string_view kKey = R"("status")";
  while (i < text.size() && text[i] != '}') {
    const size_t key_start = i;
    const size_t key_end = skipValue(text, i);
    const size_t value_end = skipValue(text, key_end + 1);  // past the ':'
    const std::string_view key = text.substr(key_start, key_end - key_start);
    if (key == kKey) return StatusSlot{key_start, value_end, false, false};
    // Canonical JSON sorts keys: the first one after "status" marks its place.
    if (key > kKey) return StatusSlot{key_start, key_start, false, true};
    first = false;
    i = value_end;
    if (i < text.size() && text[i] == ',') ++i;
  }
  if (i >= text.size()) return std::nullopt;
  return StatusSlot{i, i, !first, false};
}

}  // namespace

void appendPodJsonWithStatus(const Pod& pod, const PodStatus* status, std::string& out) {
  std::string status_json;
  if (status != nullptr) appendCanonicalJson(encodePodStatus(*status), status_json);
  appendPodJsonWithStatusJson(pod, status_json, out);
}

std::optional<StatusSlot> findStatusSlot(const PodText& raw) {
  const std::string_view tail = raw.tail();
  if (!raw.hasSpec()) {  // the whole object
    if (tail.size() < 2 || tail.front() != '{') return std::nullopt;
    return scanForStatus(tail, 1, /*first=*/true);
  }
  // The members after the spec's value ("spec" sorts before "status").
  if (tail.empty()) return std::nullopt;
  return scanForStatus(tail, tail.front() == ',' ? 1 : 0, /*first=*/false);
}

std::array<std::string_view, 8> withStatusAtPieces(const PodText& raw, const StatusSlot& slot,
                                                   std::string_view status_json) {
  const std::string_view tail = raw.tail();
  return {raw.head(),     raw.spec(),  tail.substr(0, slot.head),   slot.comma_before ? "," : "",
          R"("status":)", status_json, slot.comma_after ? "," : "", tail.substr(slot.tail)};
}

void appendWithStatusAt(const PodText& raw, const StatusSlot& slot, std::string_view status_json,
                        std::string& out) {
  for (std::string_view piece : withStatusAtPieces(raw, slot, status_json)) out.append(piece);
}

void appendPodJsonWithStatusJson(const Pod& pod, std::string_view status_json, std::string& out) {
  const bool replace = !status_json.empty();
  std::optional<StatusSlot> slot;
  if (pod.raw) {
    slot = findStatusSlot(*pod.raw);
    if (slot && !replace) {
      pod.raw->appendTo(out);
      return;
    }
  }
  if (!slot) {
    json j = encodePod(pod);
    if (replace) j["status"] = json::parse(status_json);
    appendCanonicalJson(j, out);
    return;
  }
  appendWithStatusAt(*pod.raw, *slot, status_json, out);
}

base::StatusOr<PodPtr> withStatus(const Pod& pod, const PodStatus& status) {
  return withJsonEdit(pod, [&](json& j) { j["status"] = encodePodStatus(status); });
}

base::StatusOr<PodPtr> withJsonEdit(const Pod& pod, const std::function<void(json&)>& edit) {
  json j;
  try {
    j = encodePod(pod);
    edit(j);
  } catch (const std::exception& e) {
    return base::invalidArgumentError("editing pod " + podRef(pod) + ": " + e.what());
  }
  return decodePodPtr(j);
}

json encodePodStatus(const PodStatus& s) {
  json j = json::object();
  auto str = [&](const char* key, const std::string& v) {
    if (!v.empty()) j[key] = v;
  };
  str("phase", s.phase);
  if (!s.conditions.empty()) {
    json conds = json::array();
    for (const auto& c : s.conditions) {
      json cj = {{"type", c.type}, {"status", c.status}};
      if (!c.reason.empty()) cj["reason"] = c.reason;
      if (!c.message.empty()) cj["message"] = c.message;
      if (c.last_probe_time) cj["lastProbeTime"] = formatTime(*c.last_probe_time);
      if (c.last_transition_time) cj["lastTransitionTime"] = formatTime(*c.last_transition_time);
      conds.push_back(std::move(cj));
    }
    j["conditions"] = std::move(conds);
  }
  str("message", s.message);
  str("reason", s.reason);
  str("hostIP", s.host_ip);
  str("podIP", s.pod_ip);
  if (!s.pod_ips.empty()) {
    json ips = json::array();
    for (const auto& ip : s.pod_ips) ips.push_back({{"ip", ip}});
    j["podIPs"] = std::move(ips);
  }
  if (s.start_time) j["startTime"] = formatTime(*s.start_time);
  auto statuses = [&](const char* key, const std::vector<ContainerStatus>& list) {
    if (list.empty()) return;
    json arr = json::array();
    for (const auto& cs : list) arr.push_back(encodeContainerStatus(cs));
    j[key] = std::move(arr);
  };
  statuses("initContainerStatuses", s.init_container_statuses);
  statuses("containerStatuses", s.container_statuses);
  str("qosClass", s.qos_class);
  return j;
}

base::StatusOr<PodStatus> decodePodStatus(const json& status) {
  try {
    Path root;
    return decodeStatusAt(status, root.field("status"));
  } catch (const std::exception& e) {
    return base::invalidArgumentError(std::string("decoding pod status: ") + e.what());
  }
}

base::StatusOr<ResourceFieldSelector> decodeResourceFieldSelector(const json& object,
                                                                  std::string_view path) {
  ResourceFieldSelector s;
  RETURN_IF_ERROR(decodeResourceField(object, Path{nullptr, path, -1}, &s));
  return s;
}

}  // namespace nodeagent::api
