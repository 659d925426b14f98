#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "api/api_errors.h"

using namespace nodeagent::api;
using nodeagent::base::StatusCode;

TEST_CASE("api errors: Status bodies map to codes and predicates", "[unit][apiclient]") {
  struct Row {
    int http;
    std::string reason;
    StatusCode code;
    bool (*pred)(const nodeagent::base::Status&);
  };
  auto row =
      GENERATE(Row{404, "NotFound", StatusCode::kNotFound, &isNotFound},
               Row{409, "AlreadyExists", StatusCode::kAlreadyExists, &isAlreadyExists},
               Row{409, "Conflict", StatusCode::kAborted, &isConflict},
               Row{410, "Expired", StatusCode::kOutOfRange, &isGone},
               Row{410, "Gone", StatusCode::kOutOfRange, &isGone},
               Row{401, "Unauthorized", StatusCode::kUnauthenticated, &isUnauthorized},
               Row{403, "Forbidden", StatusCode::kPermissionDenied, &isForbidden},
               Row{429, "TooManyRequests", StatusCode::kResourceExhausted, &isTooManyRequests},
               Row{422, "Invalid", StatusCode::kInvalidArgument, &isInvalid},
               Row{500, "InternalError", StatusCode::kInternal, &isServerError},
               Row{503, "ServiceUnavailable", StatusCode::kUnavailable, &isServerError});
  nlohmann::json body = {{"kind", "Status"},     {"apiVersion", "v1"},
                         {"status", "Failure"},  {"message", "pods \"web\" trouble"},
                         {"reason", row.reason}, {"code", row.http}};
  auto st = apiErrorStatus("GET /api/v1/namespaces/default/pods/web", row.http, body.dump());
  CHECK(st.code() == row.code);
  CHECK(row.pred(st));
  CHECK(st.message().find("pods \"web\" trouble") != std::string::npos);
  auto e = apiErrorOf(st.withContext("status manager"));
  REQUIRE(e);
  CHECK(e->http_code == row.http);
  CHECK(e->reason == row.reason);
  CHECK(row.pred(st.withContext("outer")));
}

TEST_CASE("api errors: AlreadyExists is not a Conflict and vice versa", "[unit][apiclient]") {
  auto exists =
      apiErrorStatus("POST x", 409, R"({"kind":"Status","reason":"AlreadyExists","code":409})");
  auto conflict =
      apiErrorStatus("PUT x", 409, R"({"kind":"Status","reason":"Conflict","code":409})");
  CHECK(isAlreadyExists(exists));
  CHECK_FALSE(isConflict(exists));
  CHECK(isConflict(conflict));
  CHECK_FALSE(isAlreadyExists(conflict));
}

TEST_CASE("api errors: non-Status bodies still give the HTTP code, Retry-After is kept",
          "[unit][apiclient]") {
  auto st = apiErrorStatus("GET /x", 429, "slow down\n", std::chrono::seconds(7));
  CHECK(isTooManyRequests(st));
  CHECK(retryAfterOf(st) == std::chrono::seconds(7));
  CHECK(st.message().find("slow down") != std::string::npos);
  auto empty = apiErrorStatus("GET /x", 404, "");
  CHECK(isNotFound(empty));
  auto odd = apiErrorStatus("GET /x", 503, R"({"kind":5,"code":"x"})");
  CHECK(isServerError(odd));
  auto odd_status =
      apiErrorStatus("GET /x", 500, R"({"kind":"Status","code":"x","reason":7,"message":[]})");
  CHECK(isServerError(odd_status));
}

TEST_CASE("api errors: in-stream ERROR objects use their own code", "[unit][apiclient]") {
  auto obj = nlohmann::json::parse(
      R"J({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 900 (1200)","reason":"Expired","code":410})J");
  auto st = apiErrorStatusFromObject("WATCH /api/v1/pods", obj);
  CHECK(isGone(st));
  CHECK(st.message().find("too old resource version") != std::string::npos);
}

TEST_CASE("api errors: plain statuses carry no ApiError", "[unit][apiclient]") {
  CHECK_FALSE(apiErrorOf(nodeagent::base::notFoundError("file missing")));
  CHECK_FALSE(isNotFound(nodeagent::base::notFoundError("file missing")));
  CHECK_FALSE(apiErrorOf(nodeagent::base::okStatus()));
}
