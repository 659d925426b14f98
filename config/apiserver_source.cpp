#include "config/apiserver_source.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "api/kubeconfig.h"
#include "api/pod_json.h"
#include "api/pod_update.h"
#include "api/rest_client.h"
#include "base/log.h"
#include "base/printable.h"
#include "base/strings.h"
#include "config/pod_validation.h"

namespace nodeagent::config {
namespace {

NODEAGENT_LOGGER("config")

std::string uidOf(const nlohmann::json& obj) {
  auto meta = obj.find("metadata");
  if (meta == obj.end() || !meta->is_object()) return {};
  auto uid = meta->find("uid");
  if (uid == meta->end() || !uid->is_string()) return {};
  return uid->get<std::string>();
}

std::string stringMember(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return {};
  return it->get<std::string>();
}

std::string refOf(const nlohmann::json& obj) {
  auto meta = obj.find("metadata");
  if (meta == obj.end() || !meta->is_object()) return "?";
  return stringMember(*meta, "namespace") + "/" + stringMember(*meta, "name");
}

// The source's view of the node's pods, fed by the reflector on its strand. Emits PodUpdates to
// PodConfig; close() guarantees nothing is emitted afterwards.
class PodStore final : public Reflector::Handler {
 public:
  PodStore(std::string node_name, PodUpdateSink sink,
           std::function<base::StatusOr<api::PodPtr>(const nlohmann::json&)> decode,
           base::Clock& clock, ManifestErrors* errors)
      : node_name_(std::move(node_name)),
        sink_(std::move(sink)),
        decode_(std::move(decode)),
        clock_(clock),
        errors_(errors) {}

  void close() {
    std::lock_guard lock(sink_mu_);
    closed_ = true;
  }

  void onReplace(std::vector<nlohmann::json> items, const std::string& rv) override {
    std::unordered_map<std::string, api::PodPtr> next;
    next.reserve(items.size());
    std::vector<api::PodPtr> pods;
    pods.reserve(items.size());
    // Refusals still listed stay reported; the others were deleted meanwhile.
    auto previously_refused = std::move(refused_);
    refused_.clear();
    for (auto& item : items) {
      if (!item.is_object()) continue;
      auto pod = decodeForNode(item);
      if (!pod) continue;
      if (!next.emplace((*pod)->metadata.uid, *pod).second) continue;
      pods.push_back(std::move(*pod));
    }
    for (const auto& location : previously_refused) {
      if (!refused_.contains(location) && errors_) errors_->clear(api::kApiserverSource, location);
    }
    pods_ = std::move(next);
    log()->debug("Apiserver source listed pods count={} resourceVersion={}", pods.size(), rv);
    emit(api::PodOperation::kSet, std::move(pods));
  }

  void onWatchEvent(api::WatchEventType type, nlohmann::json object) override {
    if (!object.is_object()) return;
    if (type == api::WatchEventType::kDeleted) {
      if (refused_.erase(refOf(object)) > 0 && errors_) {
        errors_->clear(api::kApiserverSource, refOf(object));
      }
      auto it = pods_.find(uidOf(object));
      if (it == pods_.end()) return;
      auto pod = it->second;
      pods_.erase(it);
      emit(api::PodOperation::kRemove, {std::move(pod)});
      return;
    }
    auto pod = decodeForNode(object);
    if (!pod) {
      // Defence: a known pod that now claims another node is gone from this one.
      auto it = pods_.find(uidOf(object));
      if (it != pods_.end() && nodeNameOf(object) != node_name_) {
        auto old = it->second;
        pods_.erase(it);
        emit(api::PodOperation::kRemove, {std::move(old)});
      }
      return;
    }
    auto [it, inserted] = pods_.try_emplace((*pod)->metadata.uid, *pod);
    if (!inserted) it->second = *pod;
    emit(inserted ? api::PodOperation::kAdd : api::PodOperation::kUpdate, {std::move(*pod)});
  }

 private:
  static std::string nodeNameOf(const nlohmann::json& obj) {
    auto spec = obj.find("spec");
    if (spec == obj.end() || !spec->is_object()) return {};
    auto n = spec->find("nodeName");
    if (n == spec->end() || !n->is_string()) return {};
    return n->get<std::string>();
  }

  std::optional<api::PodPtr> decodeForNode(const nlohmann::json& obj) {
    // Checked on the JSON first so that other nodes' pods cost no decode.
    if (nodeNameOf(obj) != node_name_) {
      log()->debug("Ignoring pod of another node pod={} nodeName={}", base::goQuote(refOf(obj)),
                   base::goQuote(nodeNameOf(obj)));
      return std::nullopt;
    }
    auto pod = decode_(obj);
    if (!pod.ok()) {
      log()->warn("Skipping pod that failed to decode source=api pod={} error={}",
                  base::goQuote(refOf(obj)), base::goQuote(pod.status().toString()));
      return std::nullopt;
    }
    if (auto errors = validatePodNames(**pod); !errors.empty()) {
      refuse(**pod, refOf(obj), errors);
      return std::nullopt;
    }
    if (refused_.erase(refOf(obj)) > 0 && errors_) {
      errors_->clear(api::kApiserverSource, refOf(obj));
    }
    return *pod;
  }

  // A pod whose names would become paths outside the agent's directories (or that an apiserver
  // validating as kube-apiserver does would have refused) never reaches PodConfig.
  void refuse(const api::Pod& pod, const std::string& location,
              const std::vector<FieldError>& errors) {
    std::string invalid;
    for (const auto& e : errors) {
      if (!invalid.empty()) invalid += '\n';
      invalid += e.toString();
    }
    if (refused_.insert(location).second) {
      log()->warn("Refusing pod with invalid names source=api pod={} uid={} errors={}",
                  base::goQuote(location), base::goQuote(pod.metadata.uid), base::goQuote(invalid));
    }
    if (!errors_) return;
    ManifestErrorDetail detail;
    detail.invalid = invalid;
    // The event is about the pod when its own metadata is valid, else about the node.
    if (std::none_of(errors.begin(), errors.end(),
                     [](const FieldError& e) { return e.field.starts_with("metadata."); })) {
      detail.pod = ManifestPodRef{pod.metadata.namespace_, pod.metadata.name, pod.metadata.uid};
    }
    errors_->set(api::kApiserverSource, location, "pod refused: " + invalid, clock_.wallNow(),
                 std::move(detail));
  }

  void emit(api::PodOperation op, std::vector<api::PodPtr> pods) {
    api::PodUpdate u;
    u.op = op;
    u.source = std::string(api::kApiserverSource);
    u.pods = std::move(pods);
    std::lock_guard lock(sink_mu_);
    if (closed_) return;
    sink_(std::move(u));
  }

  const std::string node_name_;
  PodUpdateSink sink_;
  std::function<base::StatusOr<api::PodPtr>(const nlohmann::json&)> decode_;
  base::Clock& clock_;
  ManifestErrors* errors_;
  std::unordered_map<std::string, api::PodPtr> pods_;  // strand only
  std::set<std::string> refused_;                      // locations of refused pods; strand only
  std::mutex sink_mu_;
  bool closed_ = false;
};

class ApiserverSourceImpl final : public ApiserverSource {
 public:
  ApiserverSourceImpl(asio::any_io_executor ex, base::Clock& clock, base::Random& random,
                      std::shared_ptr<ListerWatcher> lw,
                      std::shared_ptr<ThreadedListerWatcher> threaded,
                      std::unique_ptr<api::RestClient> owned_client, ApiserverSourceOptions options,
                      PodUpdateSink sink)
      : owned_client_(std::move(owned_client)), threaded_(std::move(threaded)) {
    auto decode = options.decode;
    if (!decode) decode = [](const nlohmann::json& j) { return api::decodePodPtr(j); };
    store_ = std::make_shared<PodStore>(options.node_name, std::move(sink), std::move(decode),
                                        clock, options.errors);
    auto reflector_options = options.reflector;
    reflector_options.name = "pods of node " + options.node_name;
    reflector_ = std::make_shared<Reflector>(asio::make_strand(ex), clock, random, std::move(lw),
                                             store_, std::move(reflector_options));
    node_name_ = options.node_name;
  }

  ~ApiserverSourceImpl() override { stop(); }

  void start() override {
    std::call_once(started_, [&] {
      log()->info("Starting apiserver pod source node={}", node_name_);
      reflector_->start();
    });
  }

  void relist(std::string reason) override { reflector_->relist(std::move(reason)); }

  void stop() override {
    store_->close();
    reflector_->stop();
    if (threaded_) threaded_->stop();
  }

 private:
  std::unique_ptr<api::RestClient> owned_client_;  // destroyed last: the thread uses it
  std::shared_ptr<ThreadedListerWatcher> threaded_;
  std::shared_ptr<PodStore> store_;
  std::shared_ptr<Reflector> reflector_;
  std::string node_name_;
  std::once_flag started_;
};

std::string fieldSelectorFor(const std::string& node) { return "spec.nodeName=" + node; }

}  // namespace

std::string resolveNodeName(std::string_view hostname_override) {
  std::string name(hostname_override);
  if (name.empty()) {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) == 0) name = buf;
  }
  // Trim and lower-case, like kubelet's nodeutil.GetHostname.
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  size_t start = 0;
  while (start < name.size() && std::isspace(static_cast<unsigned char>(name[start]))) ++start;
  name = name.substr(start);
  return base::asciiLower(name);
}

std::unique_ptr<ApiserverSource> makeApiserverSource(asio::any_io_executor ex, base::Clock& clock,
                                                     base::Random& random,
                                                     std::shared_ptr<ListerWatcher> lister_watcher,
                                                     ApiserverSourceOptions options,
                                                     PodUpdateSink sink) {
  return std::make_unique<ApiserverSourceImpl>(std::move(ex), clock, random,
                                               std::move(lister_watcher), nullptr, nullptr,
                                               std::move(options), std::move(sink));
}

std::unique_ptr<ApiserverSource> makeApiserverSource(asio::any_io_executor ex, base::Clock& clock,
                                                     base::Random& random, api::RestClient& client,
                                                     ApiserverSourceOptions options,
                                                     PodUpdateSink sink) {
  auto threaded = std::make_shared<ThreadedListerWatcher>(client, api::podsPath(),
                                                          fieldSelectorFor(options.node_name));
  return std::make_unique<ApiserverSourceImpl>(std::move(ex), clock, random, threaded, threaded,
                                               nullptr, std::move(options), std::move(sink));
}

base::StatusOr<std::unique_ptr<PodSource>> makeApiserverSource(asio::any_io_executor ex,
                                                               base::Clock& clock,
                                                               base::Random& random,
                                                               ApiserverSourceOptions options,
                                                               PodUpdateSink sink) {
  if (options.node_name.empty()) options.node_name = resolveNodeName("");
  if (options.node_name.empty())
    return base::invalidArgumentError("apiserver source: empty node name");
  auto cfg = api::loadKubeconfig(options.kubeconfig);
  if (!cfg.ok()) return cfg.status();
  api::RestClientOptions copts;
  copts.qps = options.kube_api_qps;
  copts.burst = options.kube_api_burst;
  // A LIST of every pod on a full node can be large and slow; watches set their own timeout.
  copts.request_timeout = std::chrono::seconds(60);
  auto client = api::RestClient::create(std::move(*cfg), copts, clock);
  if (!client.ok()) return client.status();
  auto threaded = std::make_shared<ThreadedListerWatcher>(**client, api::podsPath(),
                                                          fieldSelectorFor(options.node_name));
  return std::unique_ptr<PodSource>(std::make_unique<ApiserverSourceImpl>(
      std::move(ex), clock, random, threaded, threaded, std::move(*client), std::move(options),
      std::move(sink)));
}

}  // namespace nodeagent::config
