// PodText: a pod's canonical JSON in pieces, the spec's piece shared between pods.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "api/pod_text.h"

using nodeagent::api::PodText;

namespace {

constexpr std::string_view kWhole = R"({"kind":"Pod","spec":{"a":1},"status":{}})";

PodText split(std::shared_ptr<const std::string> spec) {
  const size_t at = kWhole.find(R"({"a")");
  const size_t end = at + spec->size();
  return PodText(kWhole, at, end, std::move(spec));
}

}  // namespace

TEST_CASE("pod text: the pieces joined are the text", "[unit][api]") {
  auto spec = std::make_shared<const std::string>(R"({"a":1})");
  const PodText text = split(spec);
  CHECK(text.head() == R"({"kind":"Pod","spec":)");
  CHECK(text.spec() == R"({"a":1})");
  CHECK(text.tail() == R"(,"status":{}})");
  CHECK(text.size() == kWhole.size());
  CHECK(text.str() == kWhole);
  CHECK(text == kWhole);
  CHECK_FALSE(text == std::string(kWhole) + " ");
  CHECK_FALSE(text == R"({"kind":"Pod","spec":{"a":2},"status":{}})");
  std::string out = "[";
  text.appendTo(out);
  CHECK(out == "[" + std::string(kWhole));

  const PodText whole{std::string(kWhole)};
  CHECK(whole.head().empty());
  CHECK(whole.spec().empty());
  CHECK(whole.tail() == kWhole);
  CHECK(whole == text);  // equal texts, pieced differently
  CHECK(text == whole);
  CHECK(PodText() == "");
  CHECK(PodText().empty());

  // Texts holding the very same spec piece, and texts holding equal ones.
  const PodText same = split(spec);
  const PodText equal = split(std::make_shared<const std::string>(R"({"a":1})"));
  CHECK(text.sharesSpecWith(same));
  CHECK_FALSE(text.sharesSpecWith(equal));
  CHECK_FALSE(whole.sharesSpecWith(PodText(std::string(kWhole))));
  CHECK(text == same);
  CHECK(text == equal);

  // A spec piece that is not the text's range is refused.
  CHECK_THROWS(PodText(kWhole, 0, 7, std::make_shared<const std::string>(R"({"b":1})")));
  CHECK_THROWS(PodText(kWhole, 5, kWhole.size() + 1, spec));
  CHECK_THROWS(PodText(kWhole, 0, 0, std::make_shared<const std::string>()));  // no head
  CHECK(text.hasSpec());
  CHECK_FALSE(whole.hasSpec());
}

TEST_CASE("pod text: contains finds a needle in a piece or across pieces", "[unit][api]") {
  const PodText text = split(std::make_shared<const std::string>(R"({"a":1})"));
  CHECK(text.contains(R"("kind")"));
  CHECK(text.contains(R"("a":1)"));
  CHECK(text.contains(R"("status")"));
  CHECK(text.contains(R"("spec":{"a")"));     // head into spec
  CHECK(text.contains(R"(:1},"status)"));     // spec into tail
  CHECK(text.contains(R"(:{"a":1},"st)"));    // head through the spec into the tail
  CHECK(text.contains(std::string(kWhole)));  // all of it
  CHECK(text.contains("}"));
  CHECK(text.contains(""));
  CHECK_FALSE(text.contains(R"("b")"));
  CHECK_FALSE(text.contains(R"(:{"a":1}}")"));
  CHECK_FALSE(text.contains(std::string(kWhole) + "x"));
  CHECK_FALSE(PodText().contains("x"));
  // A text without a spec piece is one piece.
  const PodText whole{std::string(kWhole)};
  CHECK(whole.contains(R"("spec":{"a":1},"st)"));
  CHECK_FALSE(whole.contains(R"("spec":{"a":2})"));
}
