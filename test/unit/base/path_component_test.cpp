#include <catch2/catch.hpp>

#include "base/path_component.h"
#include "base/printable.h"

using namespace nodeagent::base;

TEST_CASE("path component: names that would leave their directory are refused", "[unit][base]") {
  for (std::string_view ok : {"web", "kube-system", "0a1b2c3d-uid", "..x", "a.b", "x..", "é"}) {
    INFO(ok);
    CHECK(pathComponentProblem(ok).empty());
    CHECK(checkPathComponent("pod name", ok).ok());
  }
  CHECK(pathComponentProblem("") == "must not be empty");
  CHECK(pathComponentProblem(".") == "must not be '.'");
  CHECK(pathComponentProblem("..") == "must not be '..'");
  CHECK(pathComponentProblem("/tmp/x") == "must not contain '/'");
  CHECK(pathComponentProblem("../../../../tmp/x") == "must not contain '/'");
  CHECK(pathComponentProblem("a/") == "must not contain '/'");
  CHECK(pathComponentProblem(std::string_view("a\0b", 3)) == "must not contain a NUL byte");
  CHECK(pathComponentProblem(std::string(255, 'a')).empty());
  CHECK(pathComponentProblem(std::string(256, 'a')) == "must be no more than 255 bytes");

  auto s = checkPathComponent("container name", "../../../../tmp/x");
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() ==
        "container name \"../../../../tmp/x\" is not a valid path component: must not contain '/'");
  // The name is printed quoted: a newline in it cannot start a forged log line.
  CHECK(checkPathComponent("volume name", "a/\nb").message() ==
        "volume name \"a/\\nb\" is not a valid path component: must not contain '/'");
}

TEST_CASE("path component: childPath joins only a checked name", "[unit][base]") {
  auto ok = childPath("/var/lib/nodeagent/pods", "pod UID", "1234");
  REQUIRE(ok.ok());
  CHECK(*ok == std::filesystem::path("/var/lib/nodeagent/pods/1234"));
  CHECK_FALSE(childPath("/var/lib/nodeagent/pods", "pod UID", "../../../../tmp/u").ok());
  CHECK_FALSE(childPath("/var/lib/nodeagent/pods", "pod UID", "/tmp/u").ok());
  CHECK_FALSE(childPath("/var/lib/nodeagent/pods", "pod UID", "..").ok());
}

TEST_CASE("printable: goQuote renders control characters and invalid UTF-8 as escapes",
          "[unit][base]") {
  CHECK(goQuote("web.yaml") == "\"web.yaml\"");
  CHECK(goQuote("a\nlevel=error forged") == R"("a\nlevel=error forged")");
  CHECK(goQuote("\x1b[31mred") == R"("\x1b[31mred")");
  CHECK(goQuote("bad\xff\xfe.yaml") == R"("bad\xff\xfe.yaml")");
  CHECK(goQuote("héllo") == "\"héllo\"");
  CHECK(goQuote("\xc2\x9b") == R"("\u009b")");            // C1 CSI
  CHECK(goQuote("\xed\xa0\x80") == R"("\xed\xa0\x80")");  // a surrogate is not UTF-8
}

TEST_CASE("printable: validUtf8 replaces what is not UTF-8 and keeps the rest", "[unit][base]") {
  CHECK(validUtf8("plain") == "plain");
  CHECK(validUtf8("héllo") == "héllo");
  CHECK(validUtf8("a\xff"
                  "b") ==
        "a\xef\xbf\xbd"
        "b");
  CHECK(validUtf8("\xc3") == "\xef\xbf\xbd");                  // truncated sequence
  CHECK(validUtf8("\xc0\xaf") == "\xef\xbf\xbd\xef\xbf\xbd");  // overlong '/'
  CHECK(validUtf8("new\nline") == "new\nline");                // JSON escapes this itself
}

TEST_CASE("printable: Prometheus label values escape backslash, quote and newline",
          "[unit][base]") {
  CHECK(prometheusLabelValue("/etc/nodeagent/manifests/web.yaml") ==
        "/etc/nodeagent/manifests/web.yaml");
  CHECK(prometheusLabelValue("a\"b\\c\nd") == R"(a\"b\\c\nd)");
  CHECK(prometheusLabelValue("x\xff") == "x\xef\xbf\xbd");
}
