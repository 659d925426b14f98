// The in-memory object store of the test apiserver: objects of every served resource as JSON,
// one global resourceVersion counter, a bounded event history for watch resumption, and watchers
// with bounded queues. It implements kube-apiserver's storage semantics (create defaults and
// validation, optimistic concurrency, the three patch types, graceful pod deletion, finalizers,
// list paging, watch from a resourceVersion with 410 Expired for a compacted one) without HTTP, so
// unit tests and other engineers' tests can drive it directly. ConfigMaps and Secrets are
// decoded and validated as config_objects.h says; every namespace has a ServiceAccount "default".
//
// Threading: every Store method may be called from any thread (one internal mutex, never held
// while waiting for a watcher or doing I/O). A Watcher is consumed by one thread at a time; its
// close() may be called from any thread.
//
// Errors are base::Status values whose message is the one kube-apiserver sends; the code maps to
// the HTTP code as api_status.h says (NotFound 404, AlreadyExists/Aborted 409, OutOfRange 410...).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/status.h"
#include "cmd/test-apiserver/admission.h"
#include "cmd/test-apiserver/managed_fields.h"
#include "cmd/test-apiserver/patch.h"
#include "cmd/test-apiserver/resources.h"
#include "cmd/test-apiserver/selectors.h"

namespace nodeagent::testapiserver {

// One version of an object: the JSON (with kind and apiVersion) and its serialized text, shared
// between the store, the history and every watcher that delivers it.
struct StoredObject {
  std::shared_ptr<const nlohmann::json> object;
  std::shared_ptr<const std::string> text;
  uint64_t resource_version = 0;
};

struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted };
  Type type = Type::kAdded;
  const ResourceInfo* resource = nullptr;
  uint64_t resource_version = 0;
  // The new state; for kDeleted the last state carrying the deletion's resourceVersion.
  StoredObject object;
  // The state before a kModified (used to turn it into ADDED/DELETED for selector watchers).
  std::shared_ptr<const nlohmann::json> previous;
};

const char* watchEventTypeName(WatchEvent::Type type);

struct StoreOptions {
  // Events kept for watch resumption; a watch from an older resourceVersion gets 410 Expired.
  size_t history_window = 10000;
  // Events a watcher may have queued; one that falls further behind is closed (its client
  // re-watches from its last resourceVersion, like after kube-apiserver drops a slow watcher).
  size_t watcher_queue_capacity = 4096;
  // How long a list or watch with a resourceVersion newer than the store's waits for it before
  // failing with 504 "Too large resource version" (kube-apiserver waits 3 s).
  std::chrono::milliseconds too_large_resource_version_wait{3000};
  // The resourceVersion the store starts from (history before it counts as compacted): a server
  // restarted on storage that moved on, rather than one whose resourceVersions start again and
  // collide with the ones its clients remember.
  uint64_t initial_resource_version = 0;
  // false: pods are stored without kube-apiserver's name checks (metadata.name still is), so a
  // test can hand a node the hostile pods another apiserver could serve it.
  bool validate_pods = true;
  // Like kube-controller-manager's service account controller: every namespace gets a
  // ServiceAccount "default" when it is created, and again whenever that one is deleted.
  bool default_service_accounts = true;
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  int64_t limit = 0;  // 0 = no paging
  std::string continue_token;
  std::string resource_version;  // "" / "0" / N (N newer than the store waits, then 504)
};

struct ListResult {
  uint64_t resource_version = 0;
  std::vector<StoredObject> items;
  std::string continue_token;
  std::optional<int64_t> remaining_item_count;
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  // "" or "0": synthetic ADDED events for the current objects first; "N": events after N.
  std::string resource_version;
};

struct DeleteOptions {
  std::optional<int64_t> grace_period_seconds;
  std::optional<std::string> precondition_uid;
  std::optional<std::string> precondition_resource_version;
};

// A server-side apply's outcome: the stored object (created or updated), or the conflicts that
// refused it.
struct ApplyOutcome {
  nlohmann::json object;
  bool created = false;
  std::vector<ApplyConflict> conflicts;
};

struct DeleteResult {
  // The object as deleted (removed) or as marked for deletion (deletionTimestamp set).
  nlohmann::json object;
  bool removed = false;
};

class Store;

// The consumer side of one watch. Events are filtered (namespace, selectors) as they are taken,
// and a MODIFIED that moves an object into or out of the selection is delivered as ADDED or
// DELETED, like kube-apiserver's watch cache.
class Watcher {
 public:
  struct Delivery {
    WatchEvent::Type type = WatchEvent::Type::kAdded;
    StoredObject object;
    // True for the last of the initial events (synthetic ADDED or replayed history).
    bool last_initial = false;
  };

  Watcher(const ResourceInfo& resource, std::string ns, LabelSelector labels, FieldSelector fields,
          uint64_t start_rv, size_t capacity);

  // Non-blocking: the next deliverable event, or nullopt when none is queued (or closed()).
  std::optional<Delivery> tryNext();
  // Blocks until an event is deliverable, the watcher is closed, or `deadline` passes.
  std::optional<Delivery> next(base::MonotonicTime deadline);
  // Any thread. Wakes a blocked next(); queued events are dropped.
  void close(std::string reason);
  bool closed() const;
  std::string closeReason() const;
  // Whether the watcher had initial events at all (false: the watch started with none).
  bool hadInitialEvents() const { return had_initial_; }
  // The store's resourceVersion when the watch started (the end of its initial events).
  uint64_t startResourceVersion() const { return start_rv_; }
  const ResourceInfo& resource() const { return resource_; }
  bool matches(const nlohmann::json& object) const;

 private:
  friend class Store;
  // Called by the store under its lock; closes the watcher when its queue is full.
  void push(std::shared_ptr<const WatchEvent> event);
  void setInitial(std::deque<std::shared_ptr<const WatchEvent>> initial);
  bool idleLocked() const { return initial_.empty() && queue_.empty(); }
  std::optional<Delivery> popLocked();

  const ResourceInfo& resource_;
  const std::string namespace_;
  const LabelSelector labels_;
  const FieldSelector fields_;
  const uint64_t start_rv_;
  const size_t capacity_;
  bool had_initial_ = false;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<const WatchEvent>> initial_;
  std::deque<std::shared_ptr<const WatchEvent>> queue_;
  bool closed_ = false;
  std::string close_reason_;
};

class Store {
 public:
  // `clock` stamps creationTimestamp/deletionTimestamp and must outlive the store. Creates the
  // namespaces default, kube-system, kube-node-lease and kube-public (with their ServiceAccount
  // "default").
  Store(base::Clock& clock, StoreOptions options = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // `resource` is a plural ("pods", "nodes", "namespaces", "events", "leases", "configmaps",
  // "secrets", "serviceaccounts"). `ns` is ignored
  // for cluster-scoped resources; for namespaced ones an empty `ns` means the object's
  // metadata.namespace (or "default"). Each returns the stored object.
  // `write` names the field manager the write is recorded for in metadata.managedFields
  // (managed_fields.h; its time is the store's clock); without a manager the object keeps the
  // managedFields it had.
  // `admit` (admission.h) sees each write before it is stored, under the store's lock; its error
  // refuses the write. A create shows it the object with its defaults, before a generateName
  // becomes a name.
  base::StatusOr<nlohmann::json> create(std::string_view resource, std::string_view ns,
                                        nlohmann::json object, const FieldWrite& write = {},
                                        const AdmissionCheck& admit = {});
  base::StatusOr<nlohmann::json> get(std::string_view resource, std::string_view ns,
                                     std::string_view name) const;
  // PUT. `subresource` "" or "status". A set metadata.resourceVersion must match (409 Conflict).
  base::StatusOr<nlohmann::json> update(std::string_view resource, std::string_view ns,
                                        std::string_view name, nlohmann::json object,
                                        std::string_view subresource = "",
                                        const FieldWrite& write = {},
                                        const AdmissionCheck& admit = {});
  // PATCH. A metadata.uid or metadata.resourceVersion in the patch acts as a precondition.
  base::StatusOr<nlohmann::json> patch(std::string_view resource, std::string_view ns,
                                       std::string_view name, PatchType type,
                                       const nlohmann::json& patch,
                                       std::string_view subresource = "",
                                       const FieldWrite& write = {},
                                       const AdmissionCheck& admit = {});
  // Server-side apply (PATCH application/apply-patch+yaml) of the configuration `applied` by
  // `write.manager`: creates the object when it does not exist (not through a subresource).
  base::StatusOr<ApplyOutcome> apply(std::string_view resource, std::string_view ns,
                                     std::string_view name, const nlohmann::json& applied,
                                     const FieldWrite& write, bool force,
                                     const AdmissionCheck& admit = {});
  // DELETE. Pods bound to a node are deleted gracefully (deletionTimestamp set, removed by a
  // later grace-0 delete); objects with finalizers stay until an update empties them.
  base::StatusOr<DeleteResult> remove(std::string_view resource, std::string_view ns,
                                      std::string_view name, const DeleteOptions& options = {},
                                      const AdmissionCheck& admit = {});
  // An empty `ns` lists every namespace. May block up to too_large_resource_version_wait.
  base::StatusOr<ListResult> list(std::string_view resource, std::string_view ns,
                                  const ListOptions& options = {}) const;
  // The list as a `<Kind>List` JSON document.
  base::StatusOr<nlohmann::json> listJson(std::string_view resource, std::string_view ns,
                                          const ListOptions& options = {}) const;
  // Starts a watch: OutOfRange (410 Expired) when the resourceVersion is older than the history,
  // DeadlineExceeded (504) when it stays newer than the store's after the wait. The returned
  // watcher stays registered until unwatch() or its close().
  base::StatusOr<std::shared_ptr<Watcher>> watch(std::string_view resource, std::string_view ns,
                                                 const WatchOptions& options);
  void unwatch(const std::shared_ptr<Watcher>& watcher);

  // The resourceVersion a BOOKMARK may carry for `watcher`: the store's current one when the
  // watcher has nothing queued, nullopt otherwise.
  std::optional<uint64_t> bookmarkResourceVersion(const Watcher& watcher) const;
  uint64_t resourceVersion() const;
  // Ends every open watch (their streams end cleanly; clients re-watch).
  void closeAllWatches(const std::string& reason);
  size_t watcherCount() const;
  // Drops the whole history: every resourceVersion older than the current one gets 410.
  void compact();

  base::Clock& clock() const { return clock_; }

 private:
  using Key = std::pair<std::string, std::string>;  // namespace, name
  using Objects = std::map<Key, StoredObject>;

  base::StatusOr<const ResourceInfo*> resolve(std::string_view resource) const;
  std::string effectiveNamespace(const ResourceInfo& res, std::string_view ns,
                                 const nlohmann::json& object) const;
  StoredObject makeStored(nlohmann::json object, uint64_t rv) const;
  base::Status waitForResourceVersionLocked(std::unique_lock<std::mutex>& lock,
                                            std::string_view rv_text, bool allow_wait) const;
  base::StatusOr<nlohmann::json> commitUpdateLocked(const ResourceInfo& res, const Key& key,
                                                    const StoredObject& current,
                                                    nlohmann::json desired,
                                                    std::string_view subresource,
                                                    const std::optional<FieldWrite>& write,
                                                    const AdmissionCheck& admit);
  // metadata.managedFields of `next` after a write from `current` (nullptr: a create): recorded
  // for `write`'s manager, or `current`'s kept when it names none.
  void trackWrite(const nlohmann::json* current, nlohmann::json& next, FieldWrite write) const;
  // InvalidArgument unless `applied` is an object of the resource's kind and apiVersion whose
  // name (when set) is `name`.
  base::Status checkApplyBody(const ResourceInfo& res, std::string_view name,
                              const nlohmann::json& applied) const;
  void emitLocked(WatchEvent::Type type, const ResourceInfo& res, StoredObject object,
                  std::shared_ptr<const nlohmann::json> previous);
  // The name a created object gets: its own, or generateName plus a free random suffix; an
  // invalid name is refused (422).
  base::StatusOr<std::string> nameForCreateLocked(const ResourceInfo& res, const Objects& objects,
                                                  const std::string& namespace_name,
                                                  nlohmann::json& object);
  // Stores a new object under `key` (uid, creationTimestamp, resourceVersion; ADDED event).
  nlohmann::json insertLocked(const ResourceInfo& res, const Key& key, nlohmann::json object);
  bool namespaceExistsLocked(const std::string& ns) const;
  // Creates namespace `ns`'s ServiceAccount "default" when it is missing (and the namespace
  // exists).
  void ensureDefaultServiceAccountLocked(const std::string& ns);
  // Deletes a namespace and, first, everything in it (the built-in ones are forbidden).
  base::StatusOr<DeleteResult> removeNamespaceLocked(const ResourceInfo& res, const Key& key);
  // The stored objects of `res` (in `ns` when given and namespaced) in key order, after
  // `start_after` when given.
  std::vector<StoredObject> snapshotLocked(const ResourceInfo& res, std::string_view ns,
                                           const Key* start_after) const;
  // Removes the object now (DELETED event); returns the deleted state.
  nlohmann::json removeLocked(const ResourceInfo& res, const Key& key);
  std::string newUid();
  std::string randomSuffix();

  base::Clock& clock_;
  const StoreOptions options_;

  mutable std::mutex mu_;
  mutable std::condition_variable rv_cv_;
  std::map<const ResourceInfo*, Objects> objects_;
  uint64_t rv_ = 0;
  std::deque<std::shared_ptr<const WatchEvent>> history_;
  uint64_t compacted_rv_ = 0;  // events up to this resourceVersion are no longer available
  std::map<const ResourceInfo*, std::vector<std::shared_ptr<Watcher>>> watchers_;
  std::mt19937_64 rng_;
};

}  // namespace nodeagent::testapiserver
