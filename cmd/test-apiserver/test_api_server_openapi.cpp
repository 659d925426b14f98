// TestApiServer::Impl: the OpenAPI documents (openapi.h) and the field validation of request
// bodies against them.
#include "cmd/test-apiserver/patch.h"
#include "cmd/test-apiserver/protobuf.h"
#include "cmd/test-apiserver/test_api_server_impl.h"

namespace nodeagent::testapiserver {
namespace {

constexpr std::string_view kOpenApiV2Protobuf = "application/com.github.proto-openapi.spec.v2";

// Whether an Accept header admits a JSON answer (no header admits anything).
bool acceptsJson(const std::string& accept) {
  if (accept.empty()) return true;
  return accept.find("application/json") != std::string::npos ||
         accept.find("*/*") != std::string::npos ||
         accept.find("application/*") != std::string::npos;
}

// Replaces the Cache-Control every answer starts with.
void setCacheControl(httplib::Response& res, const char* value) {
  res.headers.erase("Cache-Control");
  res.set_header("Cache-Control", value);
}

// kube-apiserver's Warning header value: code 299, no agent, the text quoted.
std::string warningHeader(const std::string& text) { return "299 - " + json(text).dump(); }

}  // namespace

void TestApiServer::Impl::serveOpenApiV2(const httplib::Request& req, httplib::Response& res) {
  const std::string accept = req.get_header_value("Accept");
  const size_t protobuf = accept.find(kOpenApiV2Protobuf);
  const size_t json_type = accept.find("application/json");
  if (protobuf != std::string::npos && (json_type == std::string::npos || protobuf < json_type)) {
    res.status = 200;
    res.set_content(openApiV2Protobuf(), std::string(kOpenApiV2Protobuf) + ".v1.0+protobuf");
    return;
  }
  if (!acceptsJson(accept)) {
    return sendCode(res, 406,
                    "only application/json and " + std::string(kOpenApiV2Protobuf) +
                        ".v1.0+protobuf are served");
  }
  sendJson(res, 200, openApiV2Document());
}

bool TestApiServer::Impl::serveOpenApi(const httplib::Request& req, httplib::Response& res) {
  const std::string& path = req.path;
  if (path != "/openapi/v2" && path != "/openapi/v3" && !path.starts_with("/openapi/v3/")) {
    return false;
  }
  if (req.method != "GET") {
    sendCode(res, 405, "the server does not allow this method on the requested resource");
    return true;
  }
  if (path == "/openapi/v2") {
    serveOpenApiV2(req, res);
    return true;
  }
  if (path == "/openapi/v3" || path == "/openapi/v3/") {
    setCacheControl(res, "no-cache, private");
    sendJson(res, 200, openApiV3Index());
    return true;
  }
  const std::string group_version = path.substr(std::string_view("/openapi/v3/").size());
  const json* doc = openApiV3Document(group_version);
  if (!doc) {
    notFound(res);
    return true;
  }
  const std::string& hash = openApiV3Hash(group_version);
  const std::string asked = param(req, "hash");
  if (!asked.empty() && asked != hash) {
    // As kube-apiserver: a stale hash is sent to the current one.
    res.status = 301;
    res.set_header("Location", path + "?hash=" + hash);
    return true;
  }
  res.set_header("ETag", "\"" + hash + "\"");
  setCacheControl(res, asked.empty() ? "no-cache, private" : "public, immutable");
  if (req.get_header_value("If-None-Match") == "\"" + hash + "\"") {
    res.status = 304;
    return true;
  }
  sendJson(res, 200, *doc);
  return true;
}

bool TestApiServer::Impl::checkFields(const httplib::Request& req, httplib::Response& res,
                                      const ResourcePath& t) {
  const std::string value = param(req, "fieldValidation");
  std::optional<FieldValidation> mode = parseFieldValidation(value);
  if (!mode) {
    const char* options = req.method == "POST"  ? "CreateOptions"
                          : req.method == "PUT" ? "UpdateOptions"
                                                : "PatchOptions";
    sendJson(res, 422, invalidFieldValidationStatus(value, options));
    return false;
  }
  if (*mode == FieldValidation::kIgnore) return true;
  const std::string type = kindTypeName(*t.resource);
  if (type.empty()) return true;
  const std::string content_type = mediaType(req.get_header_value("Content-Type"));
  const bool patch_body = req.method == "PATCH";
  std::optional<PatchType> patch_type;
  if (patch_body) {
    patch_type = patchTypeFromContentType(content_type);
    if (!patch_type || *patch_type == PatchType::kJsonPatch) return true;
  } else if (content_type == kProtobufContentType) {
    return true;
  }
  const bool strategic = patch_type == PatchType::kStrategicMergePatch;
  std::vector<std::string> problems = fieldProblems(type, req.body, strategic);
  if (problems.empty()) return true;
  if (*mode == FieldValidation::kWarn) {
    for (const auto& p : problems) res.set_header("Warning", warningHeader(p));
    return true;
  }
  std::string message = "strict decoding error: ";
  for (size_t i = 0; i < problems.size(); ++i) message += (i ? ", " : "") + problems[i];
  if (!patch_body) {
    const std::string& kind = t.resource->kind;
    message = kind + " in version " + json(t.resource->version).dump() +
              " cannot be handled as a " + kind + ": " + message;
  }
  sendCode(res, 400, message);
  return false;
}

bool TestApiServer::Impl::checkApplyFields(httplib::Response& res, const ResourcePath& t,
                                           const json& applied) {
  const std::string type = kindTypeName(*t.resource);
  if (type.empty()) return true;
  std::vector<std::string> problems = applyProblems(type, applied);
  if (problems.empty()) return true;
  // structured-merge-diff's ValidationErrors: one as it is, several listed under "errors:".
  std::string errors = problems.size() == 1 ? problems[0] : "errors:";
  for (size_t i = 0; problems.size() > 1 && i < problems.size(); ++i) {
    errors += "\n  " + problems[i];
  }
  const json meta = applied.value("metadata", json::object());
  const std::string ns = meta.contains("namespace") ? meta.value("namespace", "") : t.ns;
  const ResourceInfo& r = *t.resource;
  // kube-apiserver answers this error of the typed conversion as an unknown error: 500 without a
  // reason.
  json status = statusObject(500, "failed to create typed patch object (" + ns + "/" +
                                      meta.value("name", t.name) + "; " + r.group + "/" +
                                      r.version + ", Kind=" + r.kind + "): " + errors);
  status.erase("reason");
  sendJson(res, 500, status);
  return false;
}

}  // namespace nodeagent::testapiserver
