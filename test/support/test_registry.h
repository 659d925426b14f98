// A minimal Docker Registry HTTP API v2 server for the CRI tests' pulls (no registry is reachable
// from the test machines): on 127.0.0.1:<ephemeral>, plain HTTP, it serves OCI image layouts
// (oci-layout, index.json, blobs/sha256/...), such as test/images/make-test-images.sh writes,
// read-only:
//   GET|HEAD /v2/                                  200 (the API version check)
//   GET|HEAD /v2/<name>/manifests/<tag|digest>     the manifest, with its media type as
//                                                  Content-Type and Docker-Content-Digest
//   GET|HEAD /v2/<name>/blobs/<digest>             the blob
// Anything else is 404 with the registry's error JSON (MANIFEST_UNKNOWN, BLOB_UNKNOWN, ...).
//
// With a username and password, every request must carry them as HTTP basic auth: without them
// or with others the answer is 401 with `WWW-Authenticate: Basic realm="..."` and an
// UNAUTHORIZED error, as a registry behind basic auth answers.
//
// containerd reaches it over plain HTTP when its CRI registry config says so
// (TestContainerdOptions::plain_http_registries).
//
// Thread-safe; serves on a thread of its own until destroyed.
#pragma once

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace nodeagent::testing {

struct TestRegistryOptions {
  // Both empty: anonymous pulls.
  std::string username;
  std::string password;
  std::string realm = "nodeagent test registry";
};

class TestRegistry {
 public:
  // Listens on 127.0.0.1 port 0. Throws std::runtime_error when it cannot.
  explicit TestRegistry(TestRegistryOptions options = {});
  ~TestRegistry();
  TestRegistry(const TestRegistry&) = delete;
  TestRegistry& operator=(const TestRegistry&) = delete;

  // Serves the OCI image layout in `layout` as repository `name` ("test/busybox"): each manifest
  // of its index.json under its org.opencontainers.image.ref.name tag (and by digest). Throws
  // std::runtime_error when the layout cannot be read.
  void addRepository(const std::string& name, const std::filesystem::path& layout);

  int port() const { return port_; }
  // "127.0.0.1:<port>", the registry part of an image reference.
  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }

  // Requests answered 401, and manifests served (GET or HEAD), since the start.
  int unauthorized() const { return unauthorized_.load(); }
  int manifestsServed() const { return manifests_served_.load(); }

 private:
  struct Repository {
    std::filesystem::path layout;
    std::map<std::string, std::string> tags;  // tag -> manifest digest
  };
  void handle(const httplib::Request& req, httplib::Response& res);
  bool authorized(const httplib::Request& req) const;

  TestRegistryOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  int port_ = -1;
  mutable std::mutex mu_;
  std::map<std::string, Repository> repositories_;
  std::atomic<int> unauthorized_{0};
  std::atomic<int> manifests_served_{0};
};

// Unpacks an OCI layout tar (as make-test-images.sh leaves in its work dir) into `dir`. Throws
// std::runtime_error on failure.
void unpackOciLayout(const std::filesystem::path& tar, const std::filesystem::path& dir);

}  // namespace nodeagent::testing
