#include "api/yaml.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <regex.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace nodeagent::api {
namespace {

using nlohmann::json;

json mustConvert(std::string_view text) {
  auto r = yamlToJson(text);
  INFO(text);
  INFO(r.status().toString());
  REQUIRE(r.ok());
  return *r;
}

std::string mustFail(std::string_view text) {
  auto r = yamlToJson(text);
  INFO(text.substr(0, 200));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == base::StatusCode::kInvalidArgument);
  return r.status().message();
}

const char* const kPodYaml = R"(apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: c
    image: busybox
    command: ["sleep", "10"]
    ports:
    - containerPort: 80
      protocol: TCP
    env:
    - name: A
      value: "1"
)";

TEST_CASE("yamlToJson: converts a pod manifest", "[unit][api]") {
  json j = mustConvert(kPodYaml);
  CHECK(j["kind"] == "Pod");
  CHECK(j["metadata"]["labels"]["app"] == "web");
  CHECK(j["spec"]["containers"][0]["command"] == json({"sleep", "10"}));
  CHECK(j["spec"]["containers"][0]["ports"][0]["containerPort"] == 80);
  CHECK(j["spec"]["containers"][0]["env"][0]["value"] == "1");
}

TEST_CASE("yamlToJson: JSON input is parsed as JSON", "[unit][api]") {
  json j = mustConvert("  \n {\"a\": [1, 2.5, \"x\", null, true], \"b\": {}}");
  CHECK(j == json::parse(R"({"a":[1,2.5,"x",null,true],"b":{}})"));
}

TEST_CASE("yamlToJson: a UTF-8 byte order mark is skipped", "[unit][api]") {
  CHECK(mustConvert("\xef\xbb\xbf"
                    "a: 1") == json{{"a", 1}});
  CHECK(mustConvert("\xef\xbb\xbf{\"a\": 1}") == json{{"a", 1}});
}

TEST_CASE("yamlToJson: no document gives null", "[unit][api]") {
  CHECK(mustConvert("").is_null());
  CHECK(mustConvert("   \n\n").is_null());
  CHECK(mustConvert("# only a comment\n").is_null());
  CHECK(mustConvert("---\n").is_null());
}

TEST_CASE("yamlToJson: plain scalars are typed like yaml.v2", "[unit][api]") {
  struct Case {
    const char* yaml;
    json want;
  };
  const Case cases[] = {
      {"true", true},
      {"True", true},
      {"TRUE", true},
      {"yes", true},
      {"on", true},
      {"y", true},
      {"false", false},
      {"No", false},
      {"off", false},
      {"n", false},
      {"null", nullptr},
      {"~", nullptr},
      {"Null", nullptr},
      {"10", 10},
      {"-10", -10},
      {"+7", 7},
      {"0x1F", 31},
      {"0o17", 15},
      {"017", 15},
      {"0b101", 5},
      {"-0x10", -16},
      {"1_000", 1000},
      {"0", 0},
      {"1.5", 1.5},
      {"1e3", 1000.0},
      {"-2.5E-1", -0.25},
      {".5", 0.5},
      {"1.", 1.0},
      {"09", 9.0},
      {"9223372036854775807", INT64_MAX},
      {"-9223372036854775808", INT64_MIN},
      {"18446744073709551615", UINT64_MAX},
      {"99999999999999999999999", 1e23},
      {"1e999", "1e999"},
      {"yess", "yess"},
      {"1.2.3", "1.2.3"},
      {"0x", "0x"},
      {"+", "+"},
      {"-a", "-a"},
      {".", "."},
      {"nullx", "nullx"},
      {"2024-01-01", "2024-01-01"},
      {"128Mi", "128Mi"},
      {"100m", "100m"},
      {"'true'", "true"},
      {"\"10\"", "10"},
      {"'null'", "null"},
      {"!!str 10", "10"},
      {"!!int 10", 10},
      {"!!float 10", 10.0},
      {"!!bool yes", true},
      {"|\n  10\n", "10\n"},
      {">-\n  yes\n", "yes"},
  };
  for (const auto& c : cases) {
    INFO(c.yaml);
    json j = mustConvert(std::string("v: ") + c.yaml);
    CHECK(j["v"] == c.want);
    CHECK(j["v"].type() == c.want.type());
  }
}

TEST_CASE("yamlToJson: empty values are null", "[unit][api]") {
  json j = mustConvert("a:\nb: ~\nc: ''\n");
  CHECK(j["a"].is_null());
  CHECK(j["b"].is_null());
  CHECK(j["c"] == "");
}

TEST_CASE("yamlToJson: infinity and NaN are errors", "[unit][api]") {
  for (const char* v : {".inf", "-.Inf", "+.INF", ".nan", ".NaN"}) {
    CHECK_THAT(mustFail(std::string("v: ") + v), Catch::Contains("cannot be represented in JSON"));
  }
  CHECK_THAT(mustFail("v: !!int abc"), Catch::Contains("as !!int"));
}

TEST_CASE("yamlToJson: non-string keys become strings like sigs.k8s.io/yaml", "[unit][api]") {
  json j = mustConvert("1: a\nyes: c2\n1.5: d\n~: e\n0x10: f\n");
  CHECK(j == json{{"1", "a"}, {"true", "c2"}, {"1.5", "d"}, {"null", "e"}, {"16", "f"}});
}

TEST_CASE("yamlToJson: keys are the resolved scalar written as a string", "[unit][api]") {
  // Keys that stay strings skip building a value; every other key goes through the resolver.
  auto keyText = [](const json& k) -> std::string {
    if (k.is_string()) return k.get<std::string>();
    if (k.is_number_float()) {
      char buf[64];
      auto res = std::to_chars(buf, buf + sizeof(buf), k.get<double>());
      return std::string(buf, res.ptr);
    }
    return k.dump();
  };
  const std::string alphabet = "019+-._xoObeEyYnN~aA";
  int checked = 0;
  for (char a : alphabet) {
    for (char b : alphabet) {
      for (const std::string& key : {std::string(1, a), std::string{a, b}, std::string{a, b, a}}) {
        auto r = yamlToJson(key + ": v\n");
        if (!r.ok() || !r->is_object() || r->size() != 1) continue;
        auto resolved = resolvePlainScalar(key);
        INFO("key " << key);
        REQUIRE(resolved.ok());
        CHECK(r->begin().key() == keyText(*resolved));
        ++checked;
      }
    }
  }
  CHECK(checked > 500);
  CHECK(mustConvert("'yes': a\n\"1\": b\n") == json{{"yes", "a"}, {"1", "b"}});
  CHECK_THAT(mustFail("'true': a\ntrue: b\n"), Catch::Contains("duplicate key \"true\""));
  CHECK_THAT(mustFail("name: a\n\"name\": b\n"), Catch::Contains("line 2 column 1: duplicate key"));
  // An anchored key takes the general path; its alias is the same key again.
  CHECK_THAT(mustFail("&k name: a\n*k : b\n"), Catch::Contains("duplicate key \"name\""));
}

TEST_CASE("yamlToJson: keys that collide after conversion are duplicates", "[unit][api]") {
  CHECK_THAT(mustFail("true: a\nyes: b\n"), Catch::Contains("duplicate key \"true\""));
}

TEST_CASE("yamlToJson: complex keys are rejected", "[unit][api]") {
  CHECK_THAT(mustFail("? [1, 2]\n: 3\n"), Catch::Contains("mapping keys must be scalars"));
}

TEST_CASE("yamlToJson: duplicate keys are rejected with their position", "[unit][api]") {
  std::string msg = mustFail("metadata:\n  name: a\n  name: b\n");
  CHECK_THAT(msg, Catch::Contains("line 3 column 3"));
  CHECK_THAT(msg, Catch::Contains("duplicate key \"name\""));
  CHECK_THAT(mustFail("a: {b: 1, b: 2}"), Catch::Contains("duplicate key"));  // flow mapping
}

TEST_CASE("yamlToJson: duplicate keys in JSON are rejected with their path", "[unit][api]") {
  std::string msg = mustFail(R"({"metadata": {"labels": {"a": "1", "a": "2"}}})");
  CHECK_THAT(msg, Catch::Contains("duplicate key \"a\" at metadata.labels.a"));
  CHECK_THAT(mustFail(R"({"a": [{"x":1}, {"x":1, "x":2}]})"), Catch::Contains("at a[1].x"));
}

TEST_CASE("yamlToJson: merge keys apply, explicit keys win", "[unit][api]") {
  json j = mustConvert(
      "base: &b {p: 1, q: 2}\nother: &o {q: 9, r: 3}\n"
      "m:\n  <<: [*b, *o]\n  p: 10\n");
  CHECK(j["m"] == json{{"p", 10}, {"q", 2}, {"r", 3}});
  CHECK_THAT(mustFail("m:\n  <<: 5\n"), Catch::Contains("merge key"));
}

TEST_CASE("yamlToJson: multi-document YAML is rejected", "[unit][api]") {
  CHECK_THAT(mustFail("a: 1\n---\nb: 2\n"),
             Catch::Contains("multi-document YAML is not supported: one pod per file"));
  // A stray separator around a single document is fine.
  CHECK(mustConvert("---\na: 1\n---\n") == json{{"a", 1}});
}

TEST_CASE("yamlToJson: syntax errors give line and column", "[unit][api]") {
  std::string msg = mustFail("a: 1\nb: [1, 2\n");
  CHECK_THAT(msg, Catch::Matches("line \\d+ column \\d+: .*"));
  CHECK_THAT(mustFail("{\"a\": 1,}"), Catch::StartsWith("line 1 column 9: syntax error"));
  CHECK_THAT(mustFail("{\"a\": 1} x"), Catch::Contains("line 1 column 10"));
}

TEST_CASE("yamlToJson: tabs in indentation are an error, not a crash", "[unit][api]") {
  auto r = yamlToJson("a:\n\tb: 1\n");
  CHECK_FALSE(r.ok());
  // A tab inside a value is just a character.
  CHECK(mustConvert("a: \"x\ty\"")["a"] == "x\ty");
}

TEST_CASE("yamlToJson: invalid UTF-8 is rejected with its position", "[unit][api]") {
  CHECK_THAT(mustFail("a: 1\nb: \xff\n"), Catch::Contains("line 2 column 4: invalid UTF-8"));
  mustFail("a: \xc0\xaf");          // overlong '/'
  mustFail("a: \xed\xa0\x80");      // surrogate
  mustFail("a: \xf4\x90\x80\x80");  // past U+10FFFF
  mustFail("a: \xe2\x82");          // truncated
  mustFail("{\"a\": \"\xff\"}");
  CHECK(mustConvert("a: \xe2\x82\xac \xf0\x9f\x98\x80")["a"] == "\xe2\x82\xac \xf0\x9f\x98\x80");
}

TEST_CASE("yamlToJson: control characters are rejected", "[unit][api]") {
  CHECK_THAT(mustFail(std::string("a: b\0c", 6)), Catch::Contains("control character 0x00"));
  mustFail("a: \x01");
  mustFail("{\"a\": \"\x1b\"}");
}

TEST_CASE("yamlToJson: bad bytes are found at every offset of a long ASCII line", "[unit][api]") {
  // The input check reads printable ASCII eight bytes at a time: every offset must still be seen.
  const std::string line = "key: " + std::string(40, 'v');
  for (size_t at = 5; at < line.size(); ++at) {
    INFO("offset " << at);
    std::string column = "line 1 column " + std::to_string(at + 1) + ": ";
    for (const char* bad : {"\x01", "\x1f", "\x7f\x80", "\xff", "\xc0\xaf", "\xe2\x82"}) {
      std::string text = line;
      text.replace(at, std::string_view(bad).size(), bad);
      // 0x7f is allowed: the error is at the 0x80 after it.
      std::string where =
          bad[0] == '\x7f' ? "line 1 column " + std::to_string(at + 2) + ": " : column;
      CHECK_THAT(mustFail(text), Catch::Contains(where));
    }
    std::string ok = line;
    ok.replace(at, 2, "\xc3\xa9");
    CHECK(mustConvert(ok)["key"] == ok.substr(5));
  }
}

TEST_CASE("yamlToJson: escapes that produce invalid UTF-8 are rejected", "[unit][api]") {
  mustFail("a: \"\\uD800\"");
}

TEST_CASE("yamlToJson: input over the size limit is rejected", "[unit][api]") {
  std::string big(kMaxConfigLength + 1, ' ');
  CHECK_THAT(mustFail(big), Catch::Contains("more than the limit"));
}

TEST_CASE("yamlToJson: huge numbers", "[unit][api]") {
  CHECK_THAT(mustFail(R"({"a": 1e999})"), Catch::Contains("overflow"));
  CHECK_THAT(mustFail(R"({"a": -1e999})"), Catch::Contains("overflow"));
  // JSON integers past 64 bits become doubles, as in nlohmann and Go's interface{} decoding.
  CHECK(mustConvert(R"({"a": 99999999999999999999999})")["a"].is_number_float());
  CHECK(mustConvert(R"({"a": 18446744073709551615})")["a"] == UINT64_MAX);
  std::string long_digits = "a: " + std::string(100000, '9');
  CHECK(mustConvert(long_digits)["a"].is_string());  // like yaml.v2: not an int, not a float
}

TEST_CASE("yamlToJson: deep nesting is rejected quickly", "[unit][api]") {
  auto start = std::chrono::steady_clock::now();
  SECTION("YAML flow sequences") {
    mustFail(std::string(100000, '['));
    mustFail(std::string(100000, '[') + std::string(100000, ']'));
  }
  SECTION("YAML flow mappings") { mustFail(std::string(50000, '{') + std::string(50000, '}')); }
  SECTION("JSON arrays and objects") {
    std::string deep;
    for (int i = 0; i < 100000; ++i) deep += "{\"a\":";
    CHECK_THAT(mustFail(deep), Catch::Contains("nesting deeper than 100"));
    mustFail("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}");
  }
  SECTION("YAML block nesting") {
    std::string deep;
    for (int i = 0; i < 300; ++i) deep += std::string(i, ' ') + "a:\n";
    CHECK_THAT(mustFail(deep), Catch::Contains("nesting deeper than 100"));
  }
  SECTION("exactly the limit is fine") {
    std::string ok = std::string(99, '[') + std::string(99, ']');
    CHECK(mustConvert("{\"a\":" + ok + "}").is_object());
    CHECK(mustConvert("a: " + ok).is_object());
    mustFail("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}");
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
}

TEST_CASE("yamlToJson: alias bombs are stopped by the node budget", "[unit][api]") {
  std::string bomb =
      "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n";
  for (char c = 'b'; c <= 'i'; ++c) {
    char prev = static_cast<char>(c - 1);
    bomb += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 9; ++i) bomb += std::string(i ? "," : "") + "*" + prev;
    bomb += "]\n";
  }
  auto start = std::chrono::steady_clock::now();
  CHECK_THAT(mustFail(bomb), Catch::Contains("too large after alias expansion"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
}

TEST_CASE("yamlToJson: aliases of a big string are stopped by the byte budget", "[unit][api]") {
  std::string yaml = "a: &a " + std::string(1 << 20, 'x') + "\nb: [";
  for (int i = 0; i < 100; ++i) yaml += std::string(i ? "," : "") + "*a";
  yaml += "]\n";
  CHECK_THAT(mustFail(yaml), Catch::Contains("bytes"));
}

TEST_CASE("yamlToJson: recursive aliases are rejected", "[unit][api]") {
  mustFail("a: &a [*a]\n");
  mustFail("a: &a {b: *a}\n");
}

TEST_CASE("yamlToJson: aliases expand to copies", "[unit][api]") {
  json j = mustConvert("a: &x {k: v}\nb: *x\n");
  CHECK(j["b"] == json{{"k", "v"}});
}

TEST_CASE("yamlToJson: binary garbage never crashes or hangs", "[unit][api]") {
  std::mt19937_64 rng(12345);
  auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < 300; ++round) {
    std::string junk(1 + rng() % 512, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    CHECK_FALSE(yamlToJson(junk).ok());  // random bytes are never valid UTF-8 without controls
  }
  // Printable junk drawn from YAML's syntax characters.
  const std::string alphabet = "[]{}:,-?&*!|>'\"#%@` \n\tab01.~<=";
  for (int round = 0; round < 3000; ++round) {
    std::string junk(rng() % 256, ' ');
    for (auto& ch : junk) ch = alphabet[rng() % alphabet.size()];
    (void)yamlToJson(junk);
  }
  // Mutations of a real manifest.
  std::string base = kPodYaml;
  for (int round = 0; round < 3000; ++round) {
    std::string m = base;
    for (int k = 0; k < 4; ++k) m[rng() % m.size()] = alphabet[rng() % alphabet.size()];
    (void)yamlToJson(m);
    (void)yamlToJson(m.substr(0, rng() % m.size()));
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

// A POSIX extended regular expression matched against whole strings (std::regex trips GCC 12's
// -Wmaybe-uninitialized in sanitizer builds).
class Pattern {
 public:
  explicit Pattern(const std::string& re) {
    if (regcomp(&re_, ("^(" + re + ")$").c_str(), REG_EXTENDED) != 0) std::abort();
  }
  ~Pattern() { regfree(&re_); }
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;

  // Whether all of `s` matches; `group1` and `group2` get the text of the pattern's groups.
  bool match(const std::string& s, std::string* group1 = nullptr,
             std::string* group2 = nullptr) const {
    regmatch_t m[4];
    if (regexec(&re_, s.c_str(), 4, m, 0) != 0) return false;
    auto text = [&](int i) {
      if (m[i].rm_so < 0) return std::string();
      return s.substr(static_cast<size_t>(m[i].rm_so),
                      static_cast<size_t>(m[i].rm_eo - m[i].rm_so));
    };
    if (group1 != nullptr) *group1 = text(2);
    if (group2 != nullptr) *group2 = text(3);
    return true;
  }

 private:
  regex_t re_{};
};

// yaml.v2's resolve() for plain scalars, written from its rules with regular expressions and
// strtoull/strtod, as an independent reference for resolvePlainScalar's hand-written scanner.
// An empty json with `error` set means infinity or NaN.
struct Reference {
  json value;
  bool error = false;
};

Reference referenceResolve(const std::string& s) {
  static const std::map<std::string, json> kFixed = [] {
    std::map<std::string, json> m;
    for (const char* w : {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"})
      m[w] = true;
    for (const char* w :
         {"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"})
      m[w] = false;
    for (const char* w : {"", "~", "null", "Null", "NULL"}) m[w] = nullptr;
    return m;
  }();
  static const Pattern kSpecialFloat(R"([-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))");
  static const Pattern kInt(
      R"(([-+]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*))");
  static const Pattern kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (auto it = kFixed.find(s); it != kFixed.end()) return {it->second};
  if (kSpecialFloat.match(s)) return {json(), true};
  const char c = s[0];
  if (c == '.') {
    if (kFloat.match(s) && std::isfinite(std::strtod(s.c_str(), nullptr))) {
      return {json(std::strtod(s.c_str(), nullptr))};
    }
    return {json(s)};
  }
  if (c != '+' && c != '-' && (c < '0' || c > '9')) return {json(s)};
  std::string plain;
  for (char ch : s) {
    if (ch != '_') plain += ch;
  }
  std::string sign;
  std::string digits;
  if (kInt.match(plain, &sign, &digits)) {
    int base = 10;
    if (digits.size() > 1 && digits[0] == '0') {
      char p = static_cast<char>(digits[1] | 0x20);
      base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 8;
      digits = digits.substr(p == 'x' || p == 'o' || p == 'b' ? 2 : 1);
    }
    errno = 0;
    unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
    if (errno == 0) {
      if (sign == "-") {
        if (v <= 9223372036854775808ULL) return {json(static_cast<int64_t>(0 - v))};
      } else if (v <= static_cast<unsigned long long>(INT64_MAX)) {
        return {json(static_cast<int64_t>(v))};
      } else if (sign.empty()) {
        return {json(static_cast<uint64_t>(v))};
      }
    }
  }
  if (kFloat.match(plain) && std::isfinite(std::strtod(plain.c_str(), nullptr))) {
    return {json(std::strtod(plain.c_str(), nullptr))};
  }
  return {json(s)};
}

void checkResolvesLikeReference(const std::string& s) {
  INFO("scalar \"" << s << "\"");
  Reference want = referenceResolve(s);
  auto got = resolvePlainScalar(s);
  REQUIRE(got.ok() == !want.error);
  if (want.error) {
    CHECK_THAT(got.status().message(), Catch::Contains("cannot be represented in JSON"));
    return;
  }
  REQUIRE(got->type() == want.value.type());
  REQUIRE(*got == want.value);
}

TEST_CASE("resolvePlainScalar: every short scalar over a numeric alphabet matches yaml.v2's rules",
          "[unit][api]") {
  const std::string alphabet = "0179+-._xXoObBeEfFyYnN~aA";
  std::vector<std::string> level = {""};
  for (int len = 0; len <= 3; ++len) {
    std::vector<std::string> next;
    for (const auto& s : level) {
      checkResolvesLikeReference(s);
      if (len < 3) {
        for (char c : alphabet) next.push_back(s + c);
      }
    }
    level = std::move(next);
  }
}

TEST_CASE("resolvePlainScalar: keywords, long numbers and random scalars match yaml.v2's rules",
          "[unit][api]") {
  std::vector<std::string> cases = {"true",
                                    "True",
                                    "TRUE",
                                    "tRue",
                                    "yes",
                                    "YeS",
                                    "on",
                                    "oN",
                                    "off",
                                    "OfF",
                                    "false",
                                    "FALSE",
                                    "fAlse",
                                    "null",
                                    "NULL",
                                    "nUll",
                                    "~~",
                                    ".inf",
                                    "-.inf",
                                    "+.Inf",
                                    "-.INF",
                                    ".NaN",
                                    "+.nan",
                                    ".nAn",
                                    "-.nan",
                                    "..inf",
                                    "8080",
                                    "10",
                                    "5",
                                    "0",
                                    "00",
                                    "017",
                                    "018",
                                    "123456789012345678",
                                    "999999999999999999",
                                    "1234567890123456789",
                                    "9223372036854775807",
                                    "9223372036854775808",
                                    "-9223372036854775808",
                                    "-9223372036854775809",
                                    "18446744073709551615",
                                    "18446744073709551616",
                                    "+18446744073709551615",
                                    "0x7fffffffffffffff",
                                    "0xffffffffffffffff",
                                    "0x10000000000000000",
                                    "-0x8000000000000000",
                                    "1_000_000",
                                    "_1",
                                    "1_",
                                    "0_7",
                                    "0x_1f",
                                    "1__0",
                                    "1e3",
                                    "1E+3",
                                    "1e-3",
                                    "1.5e",
                                    "1.e5",
                                    "0.5",
                                    "-.5",
                                    "+.5",
                                    ".5e1",
                                    "1.2.3",
                                    "2024-01-01",
                                    "1:30",
                                    "100m",
                                    "128Mi",
                                    "1e999",
                                    "-1e999",
                                    "1e-999",
                                    "0b",
                                    "0o",
                                    "0x",
                                    "0b102",
                                    "0o8",
                                    "0xg",
                                    "-",
                                    "+",
                                    ".",
                                    "-_",
                                    "web",
                                    "registry.example.com:5000/x:1",
                                    "/usr/bin/web-server",
                                    "--port=8080",
                                    std::string(40, '9'),
                                    "0" + std::string(30, '7')};
  for (const auto& s : cases) checkResolvesLikeReference(s);
  std::mt19937_64 rng(7);
  const std::string alphabet = "0123456789+-._xoObeEyn";
  for (int i = 0; i < 5000; ++i) {
    std::string s(4 + rng() % 20, ' ');
    for (auto& ch : s) ch = alphabet[rng() % alphabet.size()];
    checkResolvesLikeReference(s);
  }
}

TEST_CASE("parseJson: accepts any JSON value and rejects trailing content", "[unit][api]") {
  CHECK(*parseJson("[1,2]") == json({1, 2}));
  CHECK(*parseJson(" \"s\" ") == "s");
  CHECK_FALSE(parseJson("[1] [2]").ok());
  CHECK_FALSE(parseJson("").ok());
  CHECK_FALSE(parseJson("{\"a\":1,\"a\":1}").ok());
  CHECK_FALSE(parseJson("a: 1").ok());  // YAML is not JSON
}

}  // namespace
}  // namespace nodeagent::api
