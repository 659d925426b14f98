#include <catch2/catch.hpp>

#include "config/http_source.h"

using namespace nodeagent;

TEST_CASE("manifest url headers: Key:Value, kubelet's comma list, repeats and continuations",
          "[unit][config]") {
  auto got = config::parseManifestUrlHeaders({"Metadata-Flavor:Google", "a:hello,b:again,c:world",
                                              "b:beautiful", " X-Token : abc ", "Accept:a,b",
                                              "Weird:x:y"});
  REQUIRE(got.ok());
  config::HttpHeaders want{{"Metadata-Flavor", "Google"},
                           {"a", "hello"},
                           {"b", "again"},
                           {"c", "world"},
                           {"b", "beautiful"},
                           {"X-Token", "abc"},
                           {"Accept", "a"},
                           {"Accept", "b"},
                           {"Weird", "x:y"}};
  CHECK(*got == want);
  auto empty = config::parseManifestUrlHeaders({"", ",,"});
  REQUIRE(empty.ok());
  CHECK(empty->empty());
}

TEST_CASE("manifest url headers: malformed values are rejected with the value named",
          "[unit][config]") {
  auto value = GENERATE(std::string("novalue"), std::string(":v"), std::string("bad key:v"),
                        std::string("k:v\r\nInjected: 1"), std::string("a(b):c"));
  auto got = config::parseManifestUrlHeaders({value});
  INFO(value);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == base::StatusCode::kInvalidArgument);
  CHECK_THAT(got.status().message(), Catch::Contains("--manifest-url-header"));
}

TEST_CASE("manifest url: http and https with ports, paths, queries and IPv6", "[unit][config]") {
  auto a = config::parseHttpUrl("http://127.0.0.1:8080/pods.yaml?x=1#frag");
  REQUIRE(a.ok());
  CHECK(a->origin() == "http://127.0.0.1:8080");
  CHECK(a->path == "/pods.yaml?x=1");
  auto b = config::parseHttpUrl("HTTPS://example.test");
  REQUIRE(b.ok());
  CHECK(b->origin() == "https://example.test:443");
  CHECK(b->path == "/");
  auto c = config::parseHttpUrl("http://[::1]:9000?q");
  REQUIRE(c.ok());
  CHECK(c->host == "::1");
  CHECK(c->origin() == "http://[::1]:9000");
  CHECK(c->path == "/?q");
  for (const char* bad : {"ftp://x/", "127.0.0.1/pods", "http://", "http://h:0/", "http://h:99999/",
                          "http://u:p@h/", "http://[::1/", "http://h:80x/", "http://h/a b"}) {
    INFO(bad);
    auto r = config::parseHttpUrl(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains(bad));
  }
}
