#include "agent/api_mirror_client.h"

#include <nlohmann/json.hpp>

#include "api/api_errors.h"
#include "api/pod_json.h"
#include "api/pod_update.h"
#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("mirror")

// Decrements the in-flight count when the pool finishes the call (not when the caller times out).
struct InFlight {
  std::shared_ptr<std::atomic<int>> n;
  ~InFlight() {
    if (n) n->fetch_sub(1);
  }
};

}  // namespace

nlohmann::json buildMirrorPod(const api::Pod& pod, const std::string& node_name,
                              const std::string& node_uid) {
  nlohmann::json j = api::encodePod(pod);
  j["apiVersion"] = "v1";
  j["kind"] = "Pod";
  j.erase("status");
  auto& meta = j["metadata"];
  for (const char* k : {"uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                        "deletionGracePeriodSeconds", "selfLink", "managedFields", "generation"}) {
    meta.erase(k);
  }
  meta["annotations"][std::string(api::kConfigMirrorAnnotationKey)] = api::configHash(pod);
  nlohmann::json owner = {
      {"apiVersion", "v1"}, {"kind", "Node"}, {"name", node_name}, {"controller", true}};
  if (!node_uid.empty()) owner["uid"] = node_uid;
  meta["ownerReferences"] = nlohmann::json::array({owner});
  return j;
}

ApiMirrorClient::ApiMirrorClient(api::AsyncRestClient api, base::Clock& clock,
                                 ApiMirrorClientOptions options)
    : async_(std::move(api)),
      clock_(clock),
      options_(std::move(options)),
      in_flight_(std::make_shared<std::atomic<int>>(0)) {}

ApiMirrorClient::~ApiMirrorClient() = default;

asio::awaitable<base::Status> ApiMirrorClient::createMirrorPod(api::PodPtr pod) {
  if (!pod) co_return base::invalidArgumentError("createMirrorPod: null pod");
  const std::string hash = api::configHash(*pod);
  if (hash.empty()) {
    co_return base::invalidArgumentError("createMirrorPod: pod " + api::podRef(*pod) +
                                         " has no kubernetes.io/config.hash annotation");
  }
  if (in_flight_->fetch_add(1) >= options_.max_in_flight) {
    in_flight_->fetch_sub(1);
    co_return base::unavailableError("createMirrorPod: too many mirror calls in flight");
  }
  std::string node_uid = options_.node_uid ? options_.node_uid() : "";
  if (options_.node_uid && node_uid.empty()) {
    // kubelet creates mirror pods only once it can read its Node: NodeRestriction refuses a
    // mirror pod the node's own Node does not own. No request until the node is registered.
    in_flight_->fetch_sub(1);
    // Said once per wait, not at each of the static pods' syncs (every second) meanwhile.
    if (!waiting_for_node_.exchange(true)) {
      log()->info(
          "Mirror pods wait for the node's registration: NodeRestriction refuses a mirror pod its "
          "Node does not own node={} pod={}",
          options_.node_name, api::podRef(*pod));
    }
    co_return base::failedPreconditionError("node " + options_.node_name +
                                            " is not registered yet");
  }
  waiting_for_node_ = false;
  auto fn = [guard = InFlight{in_flight_}, pod, hash, node_uid,
             node_name = options_.node_name](api::RestClient& c) mutable -> base::Status {
    if (node_uid.empty()) {
      auto node = c.getJson(api::nodePath(node_name));
      if (node.ok())
        node_uid = node->value(nlohmann::json::json_pointer("/metadata/uid"), std::string());
    }
    auto body = buildMirrorPod(*pod, node_name, node_uid);
    auto created = c.createJson(api::podsPath(pod->metadata.namespace_), body);
    if (created.ok()) return base::okStatus();
    if (!api::isAlreadyExists(created.status())) return created.status();
    auto existing = c.getJson(api::podPath(pod->metadata.namespace_, pod->metadata.name));
    if (!existing.ok()) return created.status();
    auto mirror_hash = existing->value(
        nlohmann::json::json_pointer("/metadata/annotations/kubernetes.io~1config.mirror"),
        std::string());
    if (mirror_hash == hash) return base::okStatus();
    return created.status();
  };
  const base::Status timed_out =
      base::deadlineExceededError("createMirrorPod " + api::podRef(*pod) + ": timed out");
  auto s = co_await api::runWithTimeout(async_, clock_, options_.call_timeout, fn, timed_out);
  if (s.ok()) {
    created_.fetch_add(1);
    log()->info("Created mirror pod pod={} hash={}", api::podRef(*pod), hash);
  }
  co_return s;
}

asio::awaitable<base::StatusOr<bool>> ApiMirrorClient::deleteMirrorPod(
    std::string full_name, std::optional<std::string> uid) {
  auto parsed = api::parsePodFullName(full_name);
  if (!parsed.ok()) co_return parsed.status();
  if (in_flight_->fetch_add(1) >= options_.max_in_flight) {
    in_flight_->fetch_sub(1);
    co_return base::unavailableError("deleteMirrorPod: too many mirror calls in flight");
  }
  auto [name, ns] = *parsed;
  auto fn = [guard = InFlight{in_flight_}, name = name, ns = ns,
             uid](api::RestClient& c) -> base::StatusOr<bool> {
    nlohmann::json options = {{"gracePeriodSeconds", 0}};
    if (uid && !uid->empty()) options["preconditions"] = {{"uid", *uid}};
    auto r = c.deleteJson(api::podPath(ns, name), &options);
    if (r.ok()) return true;
    if (api::isNotFound(r.status()) || api::isConflict(r.status())) return false;
    return r.status();
  };
  const base::StatusOr<bool> timed_out =
      base::deadlineExceededError("deleteMirrorPod " + full_name + ": timed out");
  auto r = co_await api::runWithTimeout(async_, clock_, options_.call_timeout, fn, timed_out);
  if (r.ok() && *r) {
    deleted_.fetch_add(1);
    log()->info("Deleted mirror pod pod={}/{} uid={}", ns, name, uid.value_or(""));
  }
  co_return r;
}

}  // namespace nodeagent::agent
