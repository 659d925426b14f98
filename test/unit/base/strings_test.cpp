// base/strings.h: ASCII case folding and comma-separated lists.
#include "base/strings.h"

#include <catch2/catch.hpp>

using nodeagent::base::splitCommaList;
using Strings = std::vector<std::string>;

TEST_CASE("strings: a comma-separated list without blanks around its entries or empty ones",
          "[unit][base]") {
  CHECK(splitCommaList("a, b,,c ") == Strings{"a", "b", "c"});
  CHECK(splitCommaList("\t10.0.0.0/24 ,\tfd00::/64\t") == Strings{"10.0.0.0/24", "fd00::/64"});
  CHECK(splitCommaList("one") == Strings{"one"});
  CHECK(splitCommaList("a b, c") == Strings{"a b", "c"});
  CHECK(splitCommaList("").empty());
  CHECK(splitCommaList(" , ,").empty());
}

TEST_CASE("strings: ASCII case folding", "[unit][base]") {
  CHECK(nodeagent::base::iequals("Content-Length", "content-LENGTH"));
  CHECK_FALSE(nodeagent::base::iequals("abc", "abd"));
  CHECK_FALSE(nodeagent::base::iequals("abc", "abcd"));
  CHECK(nodeagent::base::asciiLower("HTTP/1.1 Ok") == "http/1.1 ok");
}
