#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/selectors.h"

using nlohmann::json;
using nodeagent::testapiserver::FieldSelector;
using nodeagent::testapiserver::fieldValue;
using nodeagent::testapiserver::LabelSelector;

namespace {

bool labelMatch(const std::string& selector, const json& labels) {
  auto sel = LabelSelector::parse(selector);
  REQUIRE(sel.ok());
  return sel->matches(labels);
}

}  // namespace

TEST_CASE("label selector: every operator matches as kube-apiserver does", "[unit][apiserver]") {
  const json labels = {{"app", "web"}, {"tier", "front"}, {"n", "5"}};
  struct Row {
    const char* selector;
    bool match;
  };
  auto row = GENERATE(
      Row{"", true}, Row{"app=web", true}, Row{"app==web", true}, Row{"app=db", false},
      Row{"app!=db", true}, Row{"app!=web", false}, Row{"missing!=x", true},
      Row{"app in (db, web)", true}, Row{"app in (db)", false}, Row{"app notin (db)", true},
      Row{"app notin (web,db)", false}, Row{"missing notin (x)", true}, Row{"app", true},
      Row{"missing", false}, Row{"!missing", true}, Row{"!app", false},
      Row{"app=web,tier=front", true}, Row{"app=web,tier=back", false},
      Row{"app in (web),!missing,tier", true}, Row{"n>3", true}, Row{"n<3", false});
  INFO(row.selector);
  CHECK(labelMatch(row.selector, labels) == row.match);
}

TEST_CASE("label selector: absent labels match only negative requirements", "[unit][apiserver]") {
  CHECK(labelMatch("!app", json()));
  CHECK(labelMatch("app!=x", json()));
  CHECK_FALSE(labelMatch("app=x", json()));
  CHECK_FALSE(labelMatch("app", json()));
}

TEST_CASE("label selector: malformed text is an error naming the requirement",
          "[unit][apiserver]") {
  for (const char* bad : {"app in (a", "app in a)", "a b c", "app=bad value!", "=x", "n>abc"}) {
    INFO(bad);
    auto sel = LabelSelector::parse(bad);
    CHECK_FALSE(sel.ok());
  }
  auto sel = LabelSelector::parse("app=web,x y");
  REQUIRE_FALSE(sel.ok());
  CHECK(sel.status().message().find("x y") != std::string::npos);
}

TEST_CASE("field selector: =, == and != on dotted paths, comma-joined", "[unit][apiserver]") {
  const json pod = {{"metadata", {{"name", "web"}, {"namespace", "default"}}},
                    {"spec", {{"nodeName", "node1"}, {"hostNetwork", true}}},
                    {"status", {{"phase", "Running"}}}};
  auto match = [&](const std::string& text) {
    auto sel = FieldSelector::parse(text);
    REQUIRE(sel.ok());
    return sel->matches([&](std::string_view f) { return fieldValue(pod, f); });
  };
  CHECK(match("spec.nodeName=node1"));
  CHECK(match("spec.nodeName==node1"));
  CHECK_FALSE(match("spec.nodeName!=node1"));
  CHECK(match("metadata.name=web,metadata.namespace=default"));
  CHECK_FALSE(match("metadata.name=web,status.phase=Pending"));
  CHECK(match("status.phase!=Pending"));
  CHECK(match("spec.hostNetwork=true"));
  // An absent field is "", so `spec.schedulerName=` selects objects without one.
  CHECK(match("spec.schedulerName="));
  CHECK_FALSE(match("spec.schedulerName=default-scheduler"));
}

TEST_CASE("field selector: escaped commas and equals signs stay in the value",
          "[unit][apiserver]") {
  auto sel = FieldSelector::parse(R"(metadata.name=a\,b\=c,status.phase=x)");
  REQUIRE(sel.ok());
  REQUIRE(sel->terms().size() == 2);
  CHECK(sel->terms()[0].value == "a,b=c");
  CHECK_FALSE(FieldSelector::parse("metadata.name").ok());
  CHECK_FALSE(FieldSelector::parse("=x").ok());
}
