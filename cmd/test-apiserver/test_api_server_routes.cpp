// TestApiServer::Impl: the REST routing. Discovery documents, then /api/v1/... and
// /apis/<group>/v1/... resolved to a resource, namespace, name and subresource, and served by
// method.
#include <exception>

#include "api/yaml.h"
#include "cmd/test-apiserver/csr.h"
#include "cmd/test-apiserver/protobuf.h"
#include "cmd/test-apiserver/test_api_server_impl.h"

namespace nodeagent::testapiserver {

void TestApiServer::Impl::route(const httplib::Request& req, httplib::Response& res) {
  if (serveDiscovery(req, res)) return;
  if (serveOpenApi(req, res)) return;
  if (serveKubeletApi(req, res)) return;
  if (serveTokenRequest(req, res)) return;
  std::optional<ResourcePath> target = resolveResourcePath(req, res);
  if (!target) return;
  const std::string& m = req.method;
  if (m == "GET") return serveGet(req, res, *target);
  if (m == "POST") return serveCreate(req, res, *target);
  if (m == "PUT") return serveUpdate(req, res, *target);
  if (m == "PATCH") return servePatch(req, res, *target);
  if (m == "DELETE") return serveDelete(req, res, *target);
  return sendCode(res, 405, "method " + m + " is not allowed");
}

bool TestApiServer::Impl::serveDiscovery(const httplib::Request& req, httplib::Response& res) {
  const std::string& path = req.path;
  if (path == "/healthz" || path == "/livez" || path == "/readyz" ||
      path.starts_with("/healthz/") || path.starts_with("/livez/") ||
      path.starts_with("/readyz/")) {
    res.status = 200;
    res.set_content("ok", "text/plain; charset=utf-8");
    return true;
  }
  if (req.method != "GET" && (path == "/version" || path == "/api" || path == "/apis")) {
    sendCode(res, 405, "the server does not allow this method on the requested resource");
    return true;
  }
  if (path == "/version") {
    sendJson(res, 200, versionDocument());
    return true;
  }
  if (path == "/api" || path == "/api/") {
    sendJson(res, 200, apiVersionsDocument(host() + ":" + std::to_string(port_)));
    return true;
  }
  if (path == "/apis" || path == "/apis/") {
    sendJson(res, 200, apiGroupListDocument());
    return true;
  }
  return false;
}

std::optional<TestApiServer::Impl::ResourcePath> TestApiServer::Impl::resolveResourcePath(
    const httplib::Request& req, httplib::Response& res) {
  std::vector<std::string> segs = splitPath(req.path);
  std::string group;
  size_t i = 0;
  if (!segs.empty() && segs[0] == "api") {
    if (segs.size() < 2 || segs[1] != "v1") return notFoundPath(res);
    i = 2;
  } else if (!segs.empty() && segs[0] == "apis" && segs.size() >= 2) {
    group = segs[1];
    if (segs.size() == 2) {
      json doc = apiGroupDocument(group);
      if (doc.is_null()) return notFoundPath(res);
      sendJson(res, 200, doc);
      return std::nullopt;
    }
    if (segs[2] != "v1") return notFoundPath(res);
    i = 3;
  } else {
    return notFoundPath(res);
  }
  if (i == segs.size()) {
    json doc = apiResourceListDocument(group, "v1");
    if (doc.is_null()) return notFoundPath(res);
    if (req.method != "GET") {
      sendCode(res, 405, "method not allowed");
    } else {
      sendJson(res, 200, doc);
    }
    return std::nullopt;
  }
  return resolveResourceSegments(req, res, segs, i, group);
}

std::optional<TestApiServer::Impl::ResourcePath> TestApiServer::Impl::resolveResourceSegments(
    const httplib::Request& req, httplib::Response& res, const std::vector<std::string>& segs,
    size_t i, const std::string& group) {
  ResourcePath target;
  if (segs[i] == "watch") {
    target.watch = true;
    ++i;
  }
  if (segs.size() - i >= 3 && segs[i] == "namespaces") {
    const ResourceInfo* inner = findResource(group, segs[i + 2]);
    if (inner && inner->namespaced) {
      target.ns = segs[i + 1];
      target.ns_given = true;
      i += 2;
    }
  }
  if (i >= segs.size()) return notFoundPath(res);
  target.resource = findResource(group, segs[i]);
  if (!target.resource || segs.size() - i > 3) return notFoundPath(res);
  if (target.ns_given && !target.resource->namespaced) return notFoundPath(res);
  target.name = segs.size() - i >= 2 ? segs[i + 1] : "";
  target.sub = segs.size() - i >= 3 ? segs[i + 2] : "";
  if (!target.sub.empty() && !target.resource->hasSubresource(target.sub)) {
    return notFoundPath(res);
  }
  if (target.watch && (req.method != "GET" || !target.sub.empty())) {
    sendCode(res, 405, "watch paths only support GET");
    return std::nullopt;
  }
  return target;
}

std::optional<TestApiServer::Impl::ResourcePath> TestApiServer::Impl::notFoundPath(
    httplib::Response& res) {
  notFound(res);
  return std::nullopt;
}

void TestApiServer::Impl::serveGet(const httplib::Request& req, httplib::Response& res,
                                   const ResourcePath& t) {
  const ResourceInfo& resource = *t.resource;
  if (t.watch || (t.name.empty() && truthy(param(req, "watch")))) {
    return serveWatch(req, res, resource, t.ns, t.name);
  }
  if (t.name.empty()) return serveList(req, res, resource, t.ns);
  auto obj = store_.get(resource.plural, t.ns, t.name);
  if (!obj.ok()) return sendError(res, obj.status(), t.name, resource.plural);
  if (wantsTable(req)) {
    json meta = {{"resourceVersion", (*obj)["metadata"].value("resourceVersion", "")}};
    return sendJson(res, 200,
                    makeTable(resource, {&*obj}, clock_.wallNow(), includeObject(req), meta));
  }
  return sendJson(res, 200, *obj);
}

void TestApiServer::Impl::serveCreate(const httplib::Request& req, httplib::Response& res,
                                      const ResourcePath& t) {
  if (!t.name.empty()) return sendCode(res, 405, "POST is not allowed on a named object");
  if (t.resource->namespaced && !t.ns_given) {
    return sendCode(res, 405, "POST needs the namespace in the path");
  }
  if (!checkFields(req, res, t)) return;
  auto body = parseBody(req, res);
  if (!body) return;
  const bool csr = t.resource->plural == "certificatesigningrequests";
  if (csr) {
    base::Status valid = prepareCertificateSigningRequest(*body, requestUser(req));
    if (!valid.ok()) return sendError(res, valid, "", t.resource->plural);
  }
  auto created = store_.create(t.resource->plural, t.ns, std::move(*body), fieldWrite(req, t),
                               nodeAdmission(req));
  if (!created.ok()) return sendError(res, created.status(), "", t.resource->plural);
  sendJson(res, 201, *created);
  if (csr) runCertificateControllers(stringAt((*created)["metadata"], "name"), /*approve=*/true);
}

void TestApiServer::Impl::serveUpdate(const httplib::Request& req, httplib::Response& res,
                                      const ResourcePath& t) {
  if (t.name.empty()) return sendCode(res, 405, "PUT needs an object name");
  if (!checkFields(req, res, t)) return;
  auto body = parseBody(req, res);
  if (!body) return;
  auto updated = store_.update(t.resource->plural, t.ns, t.name, std::move(*body), t.sub,
                               fieldWrite(req, t), nodeAdmission(req));
  if (!updated.ok()) return sendError(res, updated.status(), t.name, t.resource->plural);
  sendJson(res, 200, *updated);
  if (t.resource->plural == "certificatesigningrequests") {
    runCertificateControllers(t.name, /*approve=*/false);
  }
}

void TestApiServer::Impl::servePatch(const httplib::Request& req, httplib::Response& res,
                                     const ResourcePath& t) {
  if (t.name.empty()) return sendCode(res, 405, "PATCH needs an object name");
  const std::string ct = req.get_header_value("Content-Type");
  if (ct.starts_with("application/apply-patch+yaml")) return serveApply(req, res, t);
  if (req.has_param("force")) {
    return sendJson(res, 422,
                    patchOptionsInvalid("force: Forbidden: may not be specified for "
                                        "non-apply patch"));
  }
  auto type = patchTypeFromContentType(ct);
  if (!type) {
    return sendCode(res, 415,
                    "the body of the request was in an unknown format - accepted "
                    "media types include: application/json-patch+json, "
                    "application/merge-patch+json, application/apply-patch+yaml, "
                    "application/strategic-merge-patch+json");
  }
  if (refuseDeepBody(req, res)) return;
  json patch_doc = json::parse(req.body, nullptr, false);
  if (patch_doc.is_discarded()) return sendCode(res, 400, "the patch is not valid JSON");
  if (!checkFields(req, res, t)) return;
  auto patched = store_.patch(t.resource->plural, t.ns, t.name, *type, patch_doc, t.sub,
                              fieldWrite(req, t), nodeAdmission(req));
  if (!patched.ok()) return sendError(res, patched.status(), t.name, t.resource->plural);
  sendJson(res, 200, *patched);
  if (t.resource->plural == "certificatesigningrequests") {
    runCertificateControllers(t.name, /*approve=*/false);
  }
}

void TestApiServer::Impl::serveApply(const httplib::Request& req, httplib::Response& res,
                                     const ResourcePath& t) {
  // A namespaced object is applied through its namespace's path (as it is created), never
  // through the cluster-wide one.
  if (t.resource->namespaced && !t.ns_given) return notFound(res);
  FieldWrite write = fieldWrite(req, t);
  if (param(req, "fieldManager").empty()) {
    return sendJson(
        res, 422, patchOptionsInvalid("fieldManager: Required value: is required for apply patch"));
  }
  if (refuseDeepBody(req, res)) return;
  auto applied = api::yamlToJson(req.body);
  if (!applied.ok()) {
    return sendCode(res, 400, "error decoding YAML: " + std::string(applied.status().message()));
  }
  if (!checkApplyFields(res, t, *applied)) return;
  auto outcome = store_.apply(t.resource->plural, t.ns, t.name, *applied, write,
                              truthy(param(req, "force")), nodeAdmission(req));
  if (!outcome.ok()) return sendError(res, outcome.status(), t.name, t.resource->plural);
  if (!outcome->conflicts.empty())
    return sendJson(res, 409, applyConflictStatus(outcome->conflicts));
  return sendJson(res, outcome->created ? 201 : 200, outcome->object);
}

FieldWrite TestApiServer::Impl::fieldWrite(const httplib::Request& req, const ResourcePath& t) {
  // kube-apiserver: the fieldManager parameter, else the User-Agent up to its first '/'; at
  // most 128 printable ASCII characters (others are dropped).
  std::string manager = param(req, "fieldManager");
  if (manager.empty()) {
    const std::string agent = req.get_header_value("User-Agent");
    manager = agent.substr(0, agent.find('/'));
  }
  std::erase_if(manager, [](char c) { return c < 0x20 || c > 0x7e; });
  if (manager.size() > 128) manager.resize(128);
  return {std::move(manager), t.resource->apiVersion(), t.sub, "",
          t.resource->hasSubresource("status")};
}

json TestApiServer::Impl::patchOptionsInvalid(const std::string& cause) {
  return statusObject(422, "PatchOptions.meta.k8s.io \"\" is invalid: " + cause, "Invalid",
                      json{{"group", "meta.k8s.io"}, {"kind", "PatchOptions"}});
}

void TestApiServer::Impl::serveDelete(const httplib::Request& req, httplib::Response& res,
                                      const ResourcePath& t) {
  if (!t.sub.empty()) return sendCode(res, 405, "DELETE is not allowed on a subresource");
  std::optional<DeleteOptions> opts = parseDeleteOptions(req, res);
  if (!opts) return;
  const ResourceInfo& resource = *t.resource;
  if (t.name.empty()) return serveDeleteCollection(req, res, resource, t.ns, *opts);
  auto deleted = store_.remove(resource.plural, t.ns, t.name, *opts, nodeAdmission(req));
  if (!deleted.ok()) return sendError(res, deleted.status(), t.name, resource.plural);
  if (resource.plural == "pods" || !deleted->removed) return sendJson(res, 200, deleted->object);
  return sendJson(res, 200,
                  successStatus({{"name", t.name},
                                 {"kind", resource.plural},
                                 {"uid", deleted->object["metadata"].value("uid", "")}}));
}

std::optional<DeleteOptions> TestApiServer::Impl::parseDeleteOptions(const httplib::Request& req,
                                                                     httplib::Response& res) {
  DeleteOptions opts;
  if (!req.body.empty()) {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      sendCode(res, 400, "the DeleteOptions body is not a JSON object");
      return std::nullopt;
    }
    if (body.contains("gracePeriodSeconds") && body["gracePeriodSeconds"].is_number_integer()) {
      opts.grace_period_seconds = body["gracePeriodSeconds"].get<int64_t>();
    }
    if (body.contains("preconditions") && body["preconditions"].is_object()) {
      const json& p = body["preconditions"];
      if (p.contains("uid") && p["uid"].is_string()) opts.precondition_uid = p["uid"];
      if (p.contains("resourceVersion") && p["resourceVersion"].is_string()) {
        opts.precondition_resource_version = p["resourceVersion"];
      }
    }
  }
  if (req.has_param("gracePeriodSeconds")) {
    try {
      opts.grace_period_seconds = std::stoll(param(req, "gracePeriodSeconds"));
    } catch (const std::exception&) {
      sendCode(res, 400, "gracePeriodSeconds must be an integer");
      return std::nullopt;
    }
  }
  return opts;
}

void TestApiServer::Impl::notFound(httplib::Response& res) {
  sendJson(res, 404,
           statusObject(404, "the server could not find the requested resource", "NotFound",
                        json::object()));
}

std::optional<json> TestApiServer::Impl::parseBody(const httplib::Request& req,
                                                   httplib::Response& res) {
  const std::string ct = mediaType(req.get_header_value("Content-Type"));
  if (ct == kProtobufContentType) {
    auto decoded = decodeProtobufObject(req.body);
    if (!decoded.ok()) {
      sendCode(res, decoded.status().code() == base::StatusCode::kUnimplemented ? 415 : 400,
               decoded.status().message());
      return std::nullopt;
    }
    return *decoded;
  }
  if (!ct.empty() && ct != "application/json" && ct != "*/*") {
    sendCode(res, 415,
             "the body of the request was in an unknown format - accepted media "
             "types include: application/json");
    return std::nullopt;
  }
  if (refuseDeepBody(req, res)) return std::nullopt;
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    sendCode(res, 400, "the body of the request is not a JSON object");
    return std::nullopt;
  }
  return body;
}

bool TestApiServer::Impl::refuseDeepBody(const httplib::Request& req, httplib::Response& res) {
  if (!nestedDeeperThan(req.body, kMaxBodyNesting)) return false;
  sendCode(
      res, 400,
      "the body of the request nests deeper than " + std::to_string(kMaxBodyNesting) + " levels");
  return true;
}

void TestApiServer::Impl::serveList(const httplib::Request& req, httplib::Response& res,
                                    const ResourceInfo& resource, const std::string& ns) {
  ListOptions opts;
  opts.label_selector = param(req, "labelSelector");
  opts.field_selector = param(req, "fieldSelector");
  opts.continue_token = param(req, "continue");
  opts.resource_version = param(req, "resourceVersion");
  if (req.has_param("limit")) {
    try {
      opts.limit = std::stoll(param(req, "limit"));
    } catch (const std::exception&) {
      return sendCode(res, 400, "limit must be an integer");
    }
  }
  auto result = store_.list(resource.plural, ns, opts);
  if (!result.ok()) return sendError(res, result.status(), "", resource.plural);
  json meta = {{"resourceVersion", std::to_string(result->resource_version)}};
  if (!result->continue_token.empty()) meta["continue"] = result->continue_token;
  if (result->remaining_item_count) meta["remainingItemCount"] = *result->remaining_item_count;
  if (wantsTable(req)) {
    std::vector<const json*> objs;
    objs.reserve(result->items.size());
    for (const auto& item : result->items) objs.push_back(item.object.get());
    return sendJson(res, 200,
                    makeTable(resource, objs, clock_.wallNow(), includeObject(req), meta));
  }
  // The items are pre-serialized: a big list is a concatenation, not a re-encode.
  std::string body;
  size_t total = 128;
  for (const auto& item : result->items) total += item.text->size() + 1;
  body.reserve(total);
  body += R"({"kind":")" + resource.listKind() + R"(","apiVersion":")" + resource.apiVersion() +
          R"(","metadata":)" + meta.dump() + R"(,"items":[)";
  for (size_t k = 0; k < result->items.size(); ++k) {
    if (k) body += ',';
    body += *result->items[k].text;
  }
  body += "]}";
  res.status = 200;
  res.set_content(std::move(body), "application/json");
}

void TestApiServer::Impl::serveDeleteCollection(const httplib::Request& req, httplib::Response& res,
                                                const ResourceInfo& resource, const std::string& ns,
                                                const DeleteOptions& opts) {
  ListOptions lopts;
  lopts.label_selector = param(req, "labelSelector");
  lopts.field_selector = param(req, "fieldSelector");
  auto result = store_.list(resource.plural, ns, lopts);
  if (!result.ok()) return sendError(res, result.status(), "", resource.plural);
  json items = json::array();
  const AdmissionCheck admit = nodeAdmission(req);
  for (const auto& item : result->items) {
    const json& meta = (*item.object)["metadata"];
    auto deleted = store_.remove(resource.plural, meta.value("namespace", ""),
                                 meta.value("name", ""), opts, admit);
    if (deleted.ok()) items.push_back(deleted->object);
  }
  sendJson(res, 200,
           {{"kind", resource.listKind()},
            {"apiVersion", resource.apiVersion()},
            {"metadata", {{"resourceVersion", std::to_string(store_.resourceVersion())}}},
            {"items", items}});
}

}  // namespace nodeagent::testapiserver
