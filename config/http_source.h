// HttpSource: static pods from `--manifest-url` (kubelet's config/http.go), polled every
// `check_frequency` (20s) with a 10s timeout. The body is one Pod or a PodList, YAML or JSON, at
// most 10 MiB, decoded with the static-pod defaults for source "http".
//
// The blocking GET (api::HttpConnection: headers <= 64 KiB and <= 100 fields, body <= 10 MiB,
// every step within the timeout) runs on a small blocking pool; its result is posted back to the
// source's strand, where all state lives and all timing uses the injected Clock. What is sent:
//  - a changed, valid body: SET with its pods;
//  - an empty body: an empty SET (kubelet does this: an empty answer removes every http pod);
//  - an unchanged body, a 304 (the source sends If-None-Match / If-Modified-Since once the
//    server gave ETag / Last-Modified), a connection error, a timeout or a non-200 status:
//    nothing, the pods stay. Failures are logged at warn for the first of a streak, then at most
//    once per `failure_log_interval` (kubelet drops to V(4) after 3);
//  - a body that fails to parse or validate: nothing; the error is logged and kept in
//    ManifestErrors (source "http", location = URL) until a good body arrives.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"
#include "config/manifest_errors.h"
#include "config/pod_source.h"

namespace nodeagent::config {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// Parses `--manifest-url-header` values (the flag repeats). Each value is a comma-separated list
// of `Key:Value` pairs (kubelet's colon-separated multimap: `a:hello,b:again`); keys and values
// are trimmed and a key may repeat. A piece without a colon continues the previous key's values
// (`Accept:a,b` gives Accept: a and Accept: b). Errors name the offending value.
base::StatusOr<HttpHeaders> parseManifestUrlHeaders(const std::vector<std::string>& values);

struct ParsedUrl {
  std::string scheme;  // "http" or "https"
  std::string host;
  int port = 0;
  std::string path;  // path and query, "/" when empty
  // "scheme://host:port" (IPv6 in brackets), for messages.
  std::string origin() const;
};
// Accepts http:// and https:// URLs with an optional port, path and query.
base::StatusOr<ParsedUrl> parseHttpUrl(std::string_view url);

struct HttpSourceOptions {
  std::string url;        // --manifest-url
  HttpHeaders headers;    // --manifest-url-header, sent as given (repeated keys repeat)
  std::string node_name;  // for the pods' name suffix, nodeName and UID
  base::Duration check_frequency = std::chrono::seconds(20);  // --http-check-frequency
  base::Duration timeout = std::chrono::seconds(10);
  size_t max_body_bytes = 10 * 1024 * 1024;
  std::string ca_file;  // extra CA bundle for https; the system bundle is always used
  base::Duration failure_log_interval = std::chrono::minutes(5);
  ManifestErrors* errors = nullptr;  // nullable
};

struct HttpSourceStats {
  uint64_t polls = 0;             // GETs issued
  uint64_t not_modified = 0;      // 304 answers
  uint64_t failures = 0;          // connection errors, timeouts, non-200, oversize bodies
  uint64_t failure_warnings = 0;  // failures logged at warn (the others are logged at debug)
  uint64_t decodes = 0;           // bodies decoded (changed bodies only)
  uint64_t updates_pushed = 0;    // SETs sent
};

class HttpSource final : public PodSource {
 public:
  // State lives on a strand of `ex`; GETs run on `blocking` (e.g. an asio::thread_pool's
  // executor), never on `ex`. Fails for a URL that does not parse.
  static base::StatusOr<std::unique_ptr<HttpSource>> create(asio::any_io_executor ex,
                                                            asio::any_io_executor blocking,
                                                            base::Clock& clock,
                                                            HttpSourceOptions options,
                                                            PodUpdateSink sink);
  // Calls stop(). Destroy it before the io_context and after the blocking pool has joined (or
  // while it still runs); handlers still holding the source's state release it later.
  ~HttpSource() override;

  // Any thread, once: polls now, then every check_frequency after each poll completes.
  void start() override;
  // Any thread, idempotent: no update is pushed after it returns; an in-flight GET is aborted.
  void stop() override;

  HttpSourceStats stats() const;

  class Impl;

 private:
  explicit HttpSource(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace nodeagent::config
