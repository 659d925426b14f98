#include <catch2/catch.hpp>

#include "base/status.h"

using namespace nodeagent::base;

namespace {
StatusOr<int> half(int v) {
  if (v % 2 != 0) return invalidArgumentError("odd value " + std::to_string(v));
  return v / 2;
}
StatusOr<int> quarter(int v) {
  ASSIGN_OR_RETURN(int h, half(v));
  ASSIGN_OR_RETURN(int q, half(h));
  return q;
}
Status checkEven(int v) {
  RETURN_IF_ERROR(half(v).status());
  return okStatus();
}
}  // namespace

TEST_CASE("status: codes, messages and context", "[unit][base]") {
  Status ok;
  CHECK(ok.ok());
  CHECK(ok.toString() == "OK");
  auto err = notFoundError("pod default/web").withContext("get");
  CHECK_FALSE(err.ok());
  CHECK(err.code() == StatusCode::kNotFound);
  CHECK(err.toString() == "NOT_FOUND: get: pod default/web");
  CHECK(ok.withContext("ignored").ok());
}

TEST_CASE("statusor: values, errors and the propagation macros", "[unit][base]") {
  CHECK(*quarter(8) == 2);
  auto bad = quarter(6);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "odd value 3");
  CHECK(checkEven(4).ok());
  CHECK(checkEven(5).code() == StatusCode::kInvalidArgument);
  CHECK(bad.valueOr(-1) == -1);
  StatusOr<std::string> s = std::string("x");
  CHECK(s->size() == 1);
}
