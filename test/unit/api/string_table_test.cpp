// StringTable: labels and annotations in one allocation, read like a const std::map.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "api/string_table.h"

using nodeagent::api::StringMap;
using nodeagent::api::StringTable;

TEST_CASE("string table: sorted items found by key", "[unit][api]") {
  const StringTable t{{"zone", "b"}, {"app", "web"}, {"tier", ""}, {"app", "ignored"}};
  REQUIRE(t.size() == 3);
  CHECK_FALSE(t.empty());
  std::vector<std::string> walked;
  for (const auto& [k, v] : t) walked.push_back(std::string(k) + "=" + std::string(v));
  CHECK(walked == std::vector<std::string>{"app=web", "tier=", "zone=b"});  // first "app" kept
  CHECK(t.find("tier")->second.empty());
  CHECK(t.find("tier") != t.end());
  CHECK(t.find("ti") == t.end());
  CHECK(t.find("") == t.end());
  CHECK(t.find("zzz") == t.end());
  CHECK(t.count("app") == 1);
  CHECK(t.contains("zone"));
  CHECK_FALSE(t.contains("Zone"));
  CHECK(t.at("zone") == "b");
  CHECK_THROWS_AS(t.at("none"), std::out_of_range);
  CHECK(t.get("app") == "web");
  CHECK(t.get("none", "dflt") == "dflt");
  CHECK(t.key(1) == "tier");
  CHECK(t.value(0) == "web");
  auto last = t.end();
  --last;
  CHECK(last->first == "zone");

  const StringTable empty;
  CHECK(empty.empty());
  CHECK(empty.begin() == empty.end());
  CHECK(empty.find("a") == empty.end());
  CHECK(empty == StringTable{});
  CHECK(empty == StringMap{});
}

TEST_CASE("string table: copies, maps and edits", "[unit][api]") {
  const StringMap map{{"a", "1"}, {"kubernetes.io/config.hash", std::string(40, 'x')}};
  StringTable t = map;
  CHECK(t == map);
  CHECK(t.toMap() == map);
  StringTable copy = t;
  CHECK(copy == t);
  StringTable moved = std::move(copy);
  CHECK(moved == t);

  t.set("b", "2");  // added in order
  t.set("a", "one");
  CHECK(t ==
        StringMap{{"a", "one"}, {"b", "2"}, {"kubernetes.io/config.hash", std::string(40, 'x')}});
  CHECK(moved == map);  // the copy is its own
  CHECK_FALSE(t == moved);
  t.set(t.key(1), t.value(0));  // views into the table itself
  CHECK(t.at("b") == "one");
  CHECK(t.erase("a") == 1);
  CHECK(t.erase("a") == 0);
  CHECK(t.size() == 2);
  CHECK(t.erase("b") == 1);
  CHECK(t.erase("kubernetes.io/config.hash") == 1);
  CHECK(t.empty());
  CHECK(t == StringTable{});
  t.set("", "");
  CHECK(t.size() == 1);
  CHECK(t.contains(""));

  // Keys order as std::map orders them, bytes above 0x7f included.
  const StringMap bytes{{"\xc3\xa9", "1"}, {"z", "2"}, {"A", "3"}, {"\x7f", "4"}, {"", "5"}};
  const StringTable from_map = bytes;
  const StringTable listed{{"z", "2"}, {"\xc3\xa9", "1"}, {"", "5"}, {"\x7f", "4"}, {"A", "3"}};
  CHECK(from_map == bytes);
  CHECK(listed == bytes);
  CHECK(listed.toMap() == bytes);
  CHECK(listed.at("\xc3\xa9") == "1");

  // Equal items, whatever order they were given in, make equal tables.
  CHECK(StringTable{{"x", "1"}, {"y", "2"}} == StringTable{{"y", "2"}, {"x", "1"}});
  CHECK_FALSE(StringTable{{"x", "1"}} == StringTable{{"x", "12"}});
  CHECK_FALSE(StringTable{{"x", "12"}} == StringTable{{"x1", "2"}});
  CHECK_FALSE(StringTable{{"x", "1"}} == StringMap{{"x", "1"}, {"y", "2"}});
}
