// TestApiServer::Impl: watch streams (chunked events, bookmarks, Table rows, timeouts, 410).
#include "cmd/test-apiserver/test_api_server_impl.h"

namespace nodeagent::testapiserver {
namespace {

// An idle watch wakes this often to notice a stopping server.
constexpr std::chrono::milliseconds kWatchPoll{250};
// A watch response chunk holds at most this many events (batching keeps syscalls down).
constexpr size_t kMaxEventsPerChunk = 256;

}  // namespace

std::string TestApiServer::Impl::bookmarkLine(const ResourceInfo& resource, uint64_t rv,
                                              bool initial_end) {
  json meta = {{"resourceVersion", std::to_string(rv)}};
  if (initial_end) meta["annotations"] = {{"k8s.io/initial-events-end", "true"}};
  json ev = {
      {"type", "BOOKMARK"},
      {"object",
       {{"kind", resource.kind}, {"apiVersion", resource.apiVersion()}, {"metadata", meta}}}};
  return ev.dump() + "\n";
}

std::string TestApiServer::Impl::eventLine(WatchStream& st, const Watcher::Delivery& d) {
  const char* type = watchEventTypeName(d.type);
  if (!st.table) {
    std::string line;
    line.reserve(d.object.text->size() + 40);
    line += R"({"type":")";
    line += type;
    line += R"(","object":)";
    line += *d.object.text;
    line += "}\n";
    return line;
  }
  json meta = {{"resourceVersion", std::to_string(d.object.resource_version)}};
  json table = makeTable(*st.resource, {d.object.object.get()}, clock_.wallNow(), st.include, meta,
                         st.first_table_event);
  st.first_table_event = false;
  return json{{"type", type}, {"object", std::move(table)}}.dump() + "\n";
}

void TestApiServer::Impl::serveWatch(const httplib::Request& req, httplib::Response& res,
                                     const ResourceInfo& resource, const std::string& ns,
                                     const std::string& name) {
  WatchOptions wopts;
  wopts.label_selector = param(req, "labelSelector");
  wopts.field_selector = param(req, "fieldSelector");
  wopts.resource_version = param(req, "resourceVersion");
  if (!name.empty()) {
    wopts.field_selector +=
        (wopts.field_selector.empty() ? "" : ",") + std::string("metadata.name=") + name;
  }
  auto st = std::make_shared<WatchStream>();
  st->resource = &resource;
  st->table = wantsTable(req);
  st->include = includeObject(req);
  st->bookmarks = truthy(param(req, "allowWatchBookmarks"));
  st->initial_events_end = truthy(param(req, "sendInitialEvents"));
  std::chrono::seconds timeout = options_.default_watch_timeout;
  if (req.has_param("timeoutSeconds")) {
    try {
      timeout = std::chrono::seconds(std::stoll(param(req, "timeoutSeconds")));
    } catch (const std::exception&) {
      return sendCode(res, 400, "timeoutSeconds must be an integer");
    }
  }
  const auto now = wait_clock_.now();
  st->deadline = now + timeout;
  st->next_bookmark = now + options_.bookmark_interval;

  auto watcher = store_.watch(resource.plural, ns, wopts);
  if (!watcher.ok()) {
    if (watcher.status().code() != base::StatusCode::kOutOfRange) {
      return sendError(res, watcher.status(), "", resource.plural);
    }
    // Like kube-apiserver: a 200 whose stream carries one ERROR event with the 410 Status.
    st->error_line =
        json{{"type", "ERROR"}, {"object", statusFromError(watcher.status())}}.dump() + "\n";
  } else {
    st->watcher = *watcher;
    if (stopping_) st->watcher->close("server stopping");
  }
  res.status = 200;
  // "application/json;stream=watch" (not bare application/json) also keeps httplib from
  // gzip-buffering the stream: every event must reach the client at once.
  res.set_chunked_content_provider(
      "application/json;stream=watch",
      [this, st](size_t /*offset*/, httplib::DataSink& sink) { return pump(*st, sink); },
      [this, st](bool /*success*/) {
        if (st->watcher) store_.unwatch(st->watcher);
      });
}

bool TestApiServer::Impl::pump(WatchStream& st, httplib::DataSink& sink) {
  if (!st.error_line.empty()) {
    bool ok = sink.write(st.error_line.data(), st.error_line.size());
    sink.done();
    return ok;
  }
  std::string out;
  if (!st.started) {
    st.started = true;
    if (st.initial_events_end && st.bookmarks && !st.watcher->hadInitialEvents()) {
      out += bookmarkLine(*st.resource, st.watcher->startResourceVersion(), true);
    }
  }
  auto now = wait_clock_.now();
  const auto wait_until = std::min({st.deadline, st.next_bookmark, now + kWatchPoll});
  size_t events = 0;
  while (events < kMaxEventsPerChunk) {
    auto d = out.empty() ? st.watcher->next(wait_until) : st.watcher->tryNext();
    if (!d) break;
    ++events;
    if (d->object.object) out += eventLine(st, *d);
    if (d->last_initial && st.initial_events_end && st.bookmarks) {
      out += bookmarkLine(*st.resource, st.watcher->startResourceVersion(), true);
    }
  }
  if (!out.empty()) return sink.write(out.data(), out.size());
  now = wait_clock_.now();
  if (st.watcher->closed() || stopping_ || now >= st.deadline) {
    sink.done();
    return true;
  }
  if (st.bookmarks && now >= st.next_bookmark) {
    st.next_bookmark = now + options_.bookmark_interval;
    if (auto rv = store_.bookmarkResourceVersion(*st.watcher)) {
      std::string line = bookmarkLine(*st.resource, *rv, false);
      return sink.write(line.data(), line.size());
    }
  }
  return true;
}

}  // namespace nodeagent::testapiserver
