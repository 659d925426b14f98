// ListInterner and BoxInterner: one copy of each distinct list or part among those alive, and
// never a write that reaches another holder.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/list_interner.h"

using namespace nodeagent;

namespace {

using Strings = api::SharedList<std::string>;

api::Hash128 keyOf(const Strings& list) {
  std::string bytes;
  for (const auto& s : list) bytes += s + '\0';
  return api::hash128(bytes);
}

Strings intern(api::ListInterner<std::string>& interner, const Strings& list) {
  return interner.intern(list, keyOf(list));
}

}  // namespace

TEST_CASE("list interner: equal lists share the first one's items while it is held",
          "[unit][api]") {
  api::ListInterner<std::string> interner;
  Strings first = intern(interner, Strings{"a", "b"});
  Strings second = intern(interner, Strings{"a", "b"});
  CHECK(second.sharesWith(first));
  Strings other = intern(interner, Strings{"a", "c"});
  CHECK_FALSE(other.sharesWith(first));
  CHECK(interner.intern(Strings{}, api::Hash128{}).empty());

  // Once no list holds them, an equal list is interned with its own items.
  first = Strings{};
  second = Strings{};
  Strings third = intern(interner, Strings{"a", "b"});
  CHECK(third.items() == std::vector<std::string>{"a", "b"});
  CHECK(intern(interner, Strings{"a", "b"}).sharesWith(third));
}

TEST_CASE("list interner: a write through a shared list copies it and reaches no other list",
          "[unit][api]") {
  api::ListInterner<std::string> interner;
  Strings first = intern(interner, Strings{"a", "b"});
  Strings second = first;
  second[0] = "changed";
  CHECK_FALSE(second.sharesWith(first));
  CHECK(first.items() == std::vector<std::string>{"a", "b"});

  // The last holder of interned items copies them too: the table may hand them out again.
  Strings only = intern(interner, Strings{"x"});
  std::weak_ptr<std::vector<std::string>> interned = only.sharedItems();
  only.push_back("y");
  CHECK(interned.expired());  // not written in place
  CHECK(only.items() == std::vector<std::string>{"x", "y"});
}

TEST_CASE("list interner: items another list holds are interned as a copy", "[unit][api]") {
  api::ListInterner<std::string> interner;
  Strings mine{"a", "b"};
  Strings theirs = mine;  // holds the same items, and may write them in place
  REQUIRE(theirs.sharesWith(mine));
  Strings interned = intern(interner, mine);
  CHECK_FALSE(interned.sharesWith(theirs));
  mine = Strings{};
  theirs[0] = "changed";  // the only holder now: written in place
  CHECK(interned.items() == std::vector<std::string>{"a", "b"});
  CHECK(intern(interner, Strings{"a", "b"}).sharesWith(interned));
}

TEST_CASE("box interner: equal parts share one copy, and a write copies it first", "[unit][api]") {
  using Box = api::SharedBox<std::string>;
  api::BoxInterner<std::string> interner;
  const auto key = [](const std::string& s) { return api::hash128(s); };
  const Box first = interner.intern(Box{"a"}, key("a"));
  const Box second = interner.intern(Box{"a"}, key("a"));
  CHECK(second.sharesWith(first));
  CHECK_FALSE(interner.intern(Box{"b"}, key("b")).sharesWith(first));
  CHECK_FALSE(interner.intern(Box{}, key("")).has_value());

  // A write through a shared part copies it, even through its last holder.
  Box edited = second;
  *edited = "changed";
  CHECK(*first == "a");
  Box only = interner.intern(Box{"x"}, key("x"));
  std::weak_ptr<std::string> interned = only.sharedValue();
  *only += "y";
  CHECK(interned.expired());
  CHECK(*std::as_const(only) == "xy");

  // A part another box holds, which that box may write in place, is interned as a copy.
  Box mine{"m"};
  Box theirs = mine;
  const Box kept = interner.intern(mine, key("m"));
  CHECK_FALSE(kept.sharesWith(theirs));
  mine = Box{};
  *theirs = "changed";
  CHECK(*kept == "m");
}
