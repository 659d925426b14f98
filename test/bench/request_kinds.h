// What an apiserver request recorded by the test apiserver is, for the benchmarks' counts:
// "<METHOD> lease", "node", "event", "pod status", "pod watch", "pod", else the path.
#pragma once

#include <string>

#include "cmd/test-apiserver/test_api_server.h"

namespace nodeagent::bench {

inline std::string requestKind(const testapiserver::RecordedRequest& r) {
  if (r.path.find("/leases") != std::string::npos) return r.method + " lease";
  if (r.path.find("/nodes") != std::string::npos) return r.method + " node";
  if (r.path.find("/events") != std::string::npos) return r.method + " event";
  if (r.path.ends_with("/status")) return r.method + " pod status";
  if (r.path.find("/pods") != std::string::npos) {
    return r.method + (r.query.find("watch=") != std::string::npos ? " pod watch" : " pod");
  }
  return r.method + " " + r.path;
}

}  // namespace nodeagent::bench
