#include "test/support/test_registry.h"

#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace nodeagent::testing {
namespace {

namespace fs = std::filesystem;

std::string readAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("test registry: cannot read " + path.string());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void registryError(httplib::Response& res, int status, const std::string& code,
                   const std::string& message) {
  res.status = status;
  nlohmann::json body = {{"errors", {{{"code", code}, {"message", message}}}}};
  res.set_content(body.dump(), "application/json");
}

// A digest names a blob of the layout only as "sha256:<64 hex>".
bool validDigest(const std::string& digest) {
  static const std::regex pattern("sha256:[0-9a-f]{64}");
  return std::regex_match(digest, pattern);
}

}  // namespace

TestRegistry::TestRegistry(TestRegistryOptions options)
    : options_(std::move(options)), server_(std::make_unique<httplib::Server>()) {
  // containerd keeps its connections; a short keep-alive lets the destructor end them soon.
  server_->set_keep_alive_timeout(1);
  server_->Get(".*",
               [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); });
  port_ = server_->bind_to_any_port("127.0.0.1");
  if (port_ <= 0) throw std::runtime_error("test registry: cannot listen on 127.0.0.1");
  listener_ = std::thread([this] { server_->listen_after_bind(); });
}

TestRegistry::~TestRegistry() {
  // stop() does nothing until the listener thread has marked the server running.
  while (!server_->is_running() && listener_.joinable()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  server_->stop();
  if (listener_.joinable()) listener_.join();
}

void TestRegistry::addRepository(const std::string& name, const fs::path& layout) {
  auto index = nlohmann::json::parse(readAll(layout / "index.json"), nullptr, false);
  if (index.is_discarded() || !index.contains("manifests")) {
    throw std::runtime_error("test registry: no OCI index in " + layout.string());
  }
  Repository repository{layout, {}};
  for (const auto& manifest : index["manifests"]) {
    const auto& annotations = manifest.value("annotations", nlohmann::json::object());
    const std::string tag = annotations.value("org.opencontainers.image.ref.name", "");
    if (!tag.empty()) repository.tags[tag] = manifest.value("digest", "");
  }
  std::lock_guard lock(mu_);
  repositories_[name] = std::move(repository);
}

bool TestRegistry::authorized(const httplib::Request& req) const {
  if (options_.username.empty() && options_.password.empty()) return true;
  const auto expected =
      httplib::make_basic_authentication_header(options_.username, options_.password);
  return req.get_header_value("Authorization") == expected.second;
}

void TestRegistry::handle(const httplib::Request& req, httplib::Response& res) {
  res.set_header("Docker-Distribution-API-Version", "registry/2.0");
  if (!authorized(req)) {
    ++unauthorized_;
    res.set_header("WWW-Authenticate", "Basic realm=\"" + options_.realm + "\"");
    registryError(res, 401, "UNAUTHORIZED", "authentication required");
    return;
  }
  if (req.path == "/v2/" || req.path == "/v2") {
    res.set_content("{}", "application/json");
    return;
  }
  static const std::regex route("/v2/(.+)/(manifests|blobs)/([^/]+)");
  std::smatch match;
  if (!std::regex_match(req.path, match, route)) {
    registryError(res, 404, "NOT_FOUND", "no such route");
    return;
  }
  const std::string name = match[1];
  const bool manifest = match[2] == "manifests";
  std::string reference = match[3];
  fs::path layout;
  {
    std::lock_guard lock(mu_);
    auto repository = repositories_.find(name);
    if (repository == repositories_.end()) {
      registryError(res, 404, "NAME_UNKNOWN", "repository name not known to registry");
      return;
    }
    layout = repository->second.layout;
    auto tag = repository->second.tags.find(reference);
    if (manifest && tag != repository->second.tags.end()) reference = tag->second;
  }
  if (!validDigest(reference) || !fs::exists(layout / "blobs" / "sha256" / reference.substr(7))) {
    registryError(res, 404, manifest ? "MANIFEST_UNKNOWN" : "BLOB_UNKNOWN",
                  manifest ? "manifest unknown" : "blob unknown to registry");
    return;
  }
  std::string content = readAll(layout / "blobs" / "sha256" / reference.substr(7));
  std::string type = "application/octet-stream";
  if (manifest) {
    auto parsed = nlohmann::json::parse(content, nullptr, false);
    type = parsed.is_object()
               ? parsed.value("mediaType", "application/vnd.oci.image.manifest.v1+json")
               : "application/vnd.oci.image.manifest.v1+json";
    ++manifests_served_;
  }
  res.set_header("Docker-Content-Digest", reference);
  res.set_content(std::move(content), type.c_str());
}

void unpackOciLayout(const fs::path& tar, const fs::path& dir) {
  fs::create_directories(dir);
  const std::string command = "tar -xf '" + tar.string() + "' -C '" + dir.string() + "'";
  if (std::system(command.c_str()) != 0) {
    throw std::runtime_error("test registry: cannot unpack " + tar.string());
  }
}

}  // namespace nodeagent::testing
