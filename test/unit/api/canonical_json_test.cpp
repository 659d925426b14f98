#include "api/canonical_json.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace nodeagent::api {
namespace {

using nlohmann::json;

TEST_CASE("canonicalJson: sorts keys at every level and drops white space", "[unit][api]") {
  json a = json::parse(R"({ "b": 1, "a": {"z": [3, 2, {"y": true, "x": null}], "c": "s"} })");
  CHECK(canonicalJson(a) == R"({"a":{"c":"s","z":[3,2,{"x":null,"y":true}]},"b":1})");
}

TEST_CASE("canonicalJson: key order of the input does not change the bytes", "[unit][api]") {
  json a = json::parse(R"({"metadata":{"name":"x","namespace":"y"},"kind":"Pod"})");
  json b = json::parse(R"({"kind":"Pod","metadata":{"namespace":"y","name":"x"}})");
  CHECK(canonicalJson(a) == canonicalJson(b));
  CHECK(canonicalHash(a) == canonicalHash(b));
}

TEST_CASE("canonicalJson: keys sort by byte value", "[unit][api]") {
  json a = json::parse(R"({"b":1,"B":2,"a":3,"_":4,"aa":5})");
  CHECK(canonicalJson(a) == R"({"B":2,"_":4,"a":3,"aa":5,"b":1})");
}

TEST_CASE("canonicalJson: numbers and strings print stably", "[unit][api]") {
  json a = json::parse(R"([1, -2, 1.5, 1e3, "\u00e9\n\"", 18446744073709551615])");
  CHECK(canonicalJson(a) == "[1,-2,1.5,1000.0,\"\xc3\xa9\\n\\\"\",18446744073709551615]");
}

TEST_CASE("canonicalJson: invalid UTF-8 is replaced, never thrown", "[unit][api]") {
  json a = std::string("ab\xff\xfe");
  std::string out;
  REQUIRE_NOTHROW(out = canonicalJson(a));
  CHECK(out == "\"ab\xef\xbf\xbd\xef\xbf\xbd\"");
}

TEST_CASE("canonicalHash: is the hash of the canonical bytes", "[unit][api]") {
  json a = json::parse(R"({"b":[1,2],"a":"x"})");
  CHECK(canonicalHash(a) == hash128(R"({"a":"x","b":[1,2]})"));
  CHECK(canonicalHash(a) != canonicalHash(json::parse(R"({"b":[2,1],"a":"x"})")));
}

}  // namespace
}  // namespace nodeagent::api
