#include "api/canonical_json.h"

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

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

// canonicalJson was first defined as nlohmann's dump(-1, ' ', false, replace); hashes and static
// pod UIDs depend on those bytes, so the writer must produce them exactly.
std::string referenceDump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

TEST_CASE("canonicalJson: every single-byte string prints as nlohmann's dump does", "[unit][api]") {
  for (int c = 0; c < 256; ++c) {
    std::string s = "a";
    s += static_cast<char>(c);
    s += "z";
    json j = s;
    INFO("byte " << c);
    CHECK(canonicalJson(j) == referenceDump(j));
    CHECK(canonicalJson(json(std::string(1, static_cast<char>(c)))) ==
          referenceDump(json(std::string(1, static_cast<char>(c)))));
  }
}

TEST_CASE("canonicalJson: every byte at every offset of a long string prints as nlohmann's dump",
          "[unit][api]") {
  // Strings are scanned eight bytes at a time: a byte needing care must be seen anywhere.
  for (size_t at = 0; at < 24; ++at) {
    for (int c = 0; c < 256; ++c) {
      std::string s(24, 'x');
      s[at] = static_cast<char>(c);
      json j = s;
      INFO("byte " << c << " at " << at);
      REQUIRE(canonicalJson(j) == referenceDump(j));
      json keyed = {{"a", 1}, {s, 2}};
      REQUIRE(canonicalJson(keyed) == referenceDump(keyed));
    }
  }
}

TEST_CASE("canonicalJson: escapes, UTF-8 and numbers print as nlohmann's dump does",
          "[unit][api]") {
  const std::vector<json> values = {
      json(""),
      json("plain"),
      json("\"quoted\" and \\back\\slashed\\"),
      json("\b\f\n\r\t\x01\x1f\x7f"),
      json("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
      json("\xc3\xa9\n\x01"),
      json("bad \xc0\xaf overlong"),
      json("lone \xed\xa0\x80 surrogate"),
      json("cut \xe2\x82"),
      json(0),
      json(-1),
      json(std::numeric_limits<int64_t>::min()),
      json(std::numeric_limits<int64_t>::max()),
      json(std::numeric_limits<uint64_t>::max()),
      json(0.0),
      json(-0.0),
      json(0.1),
      json(1e300),
      json(5e-324),
      json(1000.0),
      json(-2.5e-7),
      json(true),
      json(false),
      json(nullptr),
      json::object(),
      json::array(),
      json::parse(R"({"":{"":[]},"\n":[{}],"k\"ey":[1,[2,[3]],{"a":{"b":null}}]})")};
  for (const json& j : values) {
    INFO(referenceDump(j));
    CHECK(canonicalJson(j) == referenceDump(j));
  }
}

// Random trees (fixed seed) of every value type, keys and strings drawn from awkward bytes.
json randomValue(std::mt19937_64& rng, int depth) {
  auto pick = [&](uint64_t n) { return static_cast<size_t>(rng() % n); };
  auto randomString = [&] {
    static const char* const kPieces[] = {
        "a", "Z",        "_",    "\"", "\\", "\n",           "\x01", "\x7f",
        " ", "\xc3\xa9", "\xff", "0",  "/",  "\xe2\x82\xac", "\t"};
    std::string s;
    size_t n = pick(6);
    for (size_t i = 0; i < n; ++i) s += kPieces[pick(std::size(kPieces))];
    return s;
  };
  switch (pick(depth > 3 ? 7 : 9)) {
    case 0:
      return json(nullptr);
    case 1:
      return json(pick(2) == 0);
    case 2:
      return json(static_cast<int64_t>(rng()));
    case 3:
      return json(static_cast<uint64_t>(rng()));
    case 4:
      return json(static_cast<double>(static_cast<int64_t>(rng())) / 1e6);
    case 5:
    case 6:
      return json(randomString());
    case 7: {
      json o = json::object();
      size_t n = pick(5);
      for (size_t i = 0; i < n; ++i) o[randomString()] = randomValue(rng, depth + 1);
      return o;
    }
    default: {
      json a = json::array();
      size_t n = pick(5);
      for (size_t i = 0; i < n; ++i) a.push_back(randomValue(rng, depth + 1));
      return a;
    }
  }
}

TEST_CASE("canonicalJson: random values print as nlohmann's dump does", "[unit][api]") {
  std::mt19937_64 rng(20261129);
  for (int i = 0; i < 2000; ++i) {
    json j = randomValue(rng, 0);
    std::string expected = referenceDump(j);
    INFO(expected);
    REQUIRE(canonicalJson(j) == expected);
  }
}

TEST_CASE("appendCanonicalJson: marks give the canonical JSON of inner nodes", "[unit][api]") {
  json j = json::parse(R"({"spec":{"containers":[{"name":"b","x":[1]},{"name":"a"}],
      "z":"\u00e9"},"a":[[]],"s":"str"})");
  std::vector<CanonicalMark> marks = {{&j["spec"]["containers"][1]},
                                      {&j["spec"]},
                                      {&j["spec"]["containers"][0]},
                                      {&j["a"][0]},
                                      {&j["s"]}};
  std::string out = "prefix";
  appendCanonicalJson(j, out, marks);
  CHECK(out == "prefix" + canonicalJson(j));
  CHECK(marks[0].in(out) == canonicalJson(j["spec"]["containers"][1]));
  CHECK(marks[1].in(out) == canonicalJson(j["spec"]));
  CHECK(marks[2].in(out) == canonicalJson(j["spec"]["containers"][0]));
  CHECK(marks[3].in(out) == "[]");
  // Only objects and arrays are marked.
  CHECK(marks[4].begin == 0);
  CHECK(marks[4].end == 0);
}

}  // namespace
}  // namespace nodeagent::api
