// Store's watches: Watcher (a bounded per-watch queue after the initial events) and the store's
// side of them (history, fan-out of events, start, bookmarks, closing).
#include <algorithm>
#include <string>

#include "cmd/test-apiserver/store.h"

namespace nodeagent::testapiserver {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Watcher

Watcher::Watcher(const ResourceInfo& resource, std::string ns, LabelSelector labels,
                 FieldSelector fields, uint64_t start_rv, size_t capacity)
    : resource_(resource),
      namespace_(std::move(ns)),
      labels_(std::move(labels)),
      fields_(std::move(fields)),
      start_rv_(start_rv),
      capacity_(capacity) {}

bool Watcher::matches(const json& object) const {
  if (!namespace_.empty() && fieldValue(object, "metadata.namespace") != namespace_) return false;
  if (!fields_.empty() &&
      !fields_.matches([&](std::string_view f) { return fieldValue(object, f); })) {
    return false;
  }
  if (!labels_.empty()) {
    static const json kNull;
    const json* labels = &kNull;
    if (auto m = object.find("metadata"); m != object.end() && m->is_object()) {
      if (auto l = m->find("labels"); l != m->end()) labels = &*l;
    }
    if (!labels_.matches(*labels)) return false;
  }
  return true;
}

void Watcher::push(std::shared_ptr<const WatchEvent> event) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    if (queue_.size() >= capacity_) {
      closed_ = true;
      close_reason_ = "watcher fell too far behind";
      queue_.clear();
      initial_.clear();
    } else {
      queue_.push_back(std::move(event));
    }
  }
  cv_.notify_one();
}

void Watcher::setInitial(std::deque<std::shared_ptr<const WatchEvent>> initial) {
  std::lock_guard lock(mu_);
  had_initial_ = !initial.empty();
  initial_ = std::move(initial);
}

std::optional<Watcher::Delivery> Watcher::popLocked() {
  while (!closed_ && !(initial_.empty() && queue_.empty())) {
    const bool from_initial = !initial_.empty();
    std::shared_ptr<const WatchEvent> ev;
    if (from_initial) {
      ev = std::move(initial_.front());
      initial_.pop_front();
    } else {
      ev = std::move(queue_.front());
      queue_.pop_front();
    }
    const bool last_initial = from_initial && initial_.empty();
    const bool now_matches = matches(*ev->object.object);
    std::optional<Delivery> d;
    switch (ev->type) {
      case WatchEvent::Type::kAdded:
      case WatchEvent::Type::kDeleted:
        if (now_matches) d = Delivery{ev->type, ev->object, last_initial};
        break;
      case WatchEvent::Type::kModified: {
        const bool was = ev->previous && matches(*ev->previous);
        if (was && now_matches) {
          d = Delivery{WatchEvent::Type::kModified, ev->object, last_initial};
        } else if (now_matches) {
          d = Delivery{WatchEvent::Type::kAdded, ev->object, last_initial};
        } else if (was) {
          d = Delivery{WatchEvent::Type::kDeleted, ev->object, last_initial};
        }
        break;
      }
    }
    if (d) return d;
    if (last_initial) {
      // The last initial event was filtered out: still report the end of the initial events.
      return Delivery{WatchEvent::Type::kAdded, StoredObject{}, true};
    }
  }
  return std::nullopt;
}

std::optional<Watcher::Delivery> Watcher::tryNext() {
  std::lock_guard lock(mu_);
  return popLocked();
}

std::optional<Watcher::Delivery> Watcher::next(base::MonotonicTime deadline) {
  std::unique_lock lock(mu_);
  while (true) {
    if (auto d = popLocked()) return d;
    if (closed_) return std::nullopt;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) return popLocked();
  }
}

void Watcher::close(std::string reason) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    close_reason_ = std::move(reason);
    queue_.clear();
    initial_.clear();
  }
  cv_.notify_all();
}

bool Watcher::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

std::string Watcher::closeReason() const {
  std::lock_guard lock(mu_);
  return close_reason_;
}

// ---------------------------------------------------------------------------------------------
// Store: watches

void Store::emitLocked(WatchEvent::Type type, const ResourceInfo& res, StoredObject object,
                       std::shared_ptr<const json> previous) {
  auto ev = std::make_shared<WatchEvent>();
  ev->type = type;
  ev->resource = &res;
  ev->resource_version = object.resource_version;
  ev->object = std::move(object);
  ev->previous = std::move(previous);
  std::shared_ptr<const WatchEvent> shared = ev;
  history_.push_back(shared);
  while (history_.size() > options_.history_window) {
    compacted_rv_ = history_.front()->resource_version;
    history_.pop_front();
  }
  auto it = watchers_.find(&res);
  if (it != watchers_.end()) {
    auto& list = it->second;
    for (auto& w : list) w->push(shared);
    list.erase(std::remove_if(list.begin(), list.end(),
                              [](const std::shared_ptr<Watcher>& w) { return w->closed(); }),
               list.end());
  }
  rv_cv_.notify_all();
}

base::StatusOr<std::shared_ptr<Watcher>> Store::watch(std::string_view resource,
                                                      std::string_view ns,
                                                      const WatchOptions& options) {
  ASSIGN_OR_RETURN(const ResourceInfo* res, resolve(resource));
  ASSIGN_OR_RETURN(LabelSelector labels, LabelSelector::parse(options.label_selector));
  ASSIGN_OR_RETURN(FieldSelector fields, FieldSelector::parse(options.field_selector));
  for (const auto& term : fields.terms()) {
    if (!res->supportsField(term.field)) {
      return base::invalidArgumentError("field label not supported: " + term.field);
    }
  }
  std::unique_lock lock(mu_);
  RETURN_IF_ERROR(waitForResourceVersionLocked(lock, options.resource_version, true));
  std::deque<std::shared_ptr<const WatchEvent>> initial;
  if (options.resource_version.empty() || options.resource_version == "0") {
    auto objs = objects_.find(res);
    if (objs != objects_.end()) {
      for (const auto& [key, stored] : objs->second) {
        if (!ns.empty() && res->namespaced && key.first != ns) continue;
        auto ev = std::make_shared<WatchEvent>();
        ev->type = WatchEvent::Type::kAdded;
        ev->resource = res;
        ev->resource_version = stored.resource_version;
        ev->object = stored;
        initial.push_back(std::move(ev));
      }
    }
  } else {
    // A number: waitForResourceVersionLocked checked it.
    const uint64_t from = std::stoull(options.resource_version);
    if (from < compacted_rv_) {
      const uint64_t oldest = history_.empty() ? rv_ + 1 : history_.front()->resource_version;
      return base::outOfRangeError("too old resource version: " + std::to_string(from) + " (" +
                                   std::to_string(oldest) + ")");
    }
    auto first = std::upper_bound(history_.begin(), history_.end(), from,
                                  [](uint64_t rv, const std::shared_ptr<const WatchEvent>& e) {
                                    return rv < e->resource_version;
                                  });
    for (auto it = first; it != history_.end(); ++it) {
      if ((*it)->resource == res) initial.push_back(*it);
    }
  }
  auto watcher =
      std::make_shared<Watcher>(*res, res->namespaced ? std::string(ns) : "", std::move(labels),
                                std::move(fields), rv_, options_.watcher_queue_capacity);
  watcher->setInitial(std::move(initial));
  watchers_[res].push_back(watcher);
  return watcher;
}

void Store::unwatch(const std::shared_ptr<Watcher>& watcher) {
  watcher->close("watch ended");
  std::lock_guard lock(mu_);
  auto it = watchers_.find(&watcher->resource());
  if (it == watchers_.end()) return;
  auto& list = it->second;
  list.erase(std::remove(list.begin(), list.end(), watcher), list.end());
}

std::optional<uint64_t> Store::bookmarkResourceVersion(const Watcher& watcher) const {
  std::lock_guard lock(mu_);
  std::lock_guard wlock(watcher.mu_);
  if (!watcher.idleLocked()) return std::nullopt;
  return rv_;
}

void Store::closeAllWatches(const std::string& reason) {
  std::map<const ResourceInfo*, std::vector<std::shared_ptr<Watcher>>> all;
  {
    std::lock_guard lock(mu_);
    all.swap(watchers_);
  }
  for (auto& [res, list] : all) {
    for (auto& w : list) w->close(reason);
  }
}

size_t Store::watcherCount() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [res, list] : watchers_) {
    for (const auto& w : list) n += w->closed() ? 0 : 1;
  }
  return n;
}

void Store::compact() {
  std::lock_guard lock(mu_);
  history_.clear();
  compacted_rv_ = rv_;
}

}  // namespace nodeagent::testapiserver
