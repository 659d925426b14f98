#include <catch2/catch.hpp>

#include "base/duration.h"

using namespace nodeagent;
using namespace std::chrono_literals;

TEST_CASE("duration: parses Go's duration form", "[unit][base]") {
  struct Case {
    const char* text;
    base::Duration want;
  };
  auto c = GENERATE(values<Case>({
      {"0", 0s},
      {"20s", 20s},
      {"1m", 1min},
      {"500ms", 500ms},
      {"1h30m", 90min},
      {"1.5h", 90min},
      {"2h45m30.5s", 2h + 45min + 30500ms},
      {"300us", 300us},
      {"300\xC2\xB5s", 300us},
      {"300\xCE\xBCs", 300us},
      {"7ns", 7ns},
      {".5s", 500ms},
      {"1.s", 1s},
      {"+5s", 5s},
      {"-1m", -1min},
      {"0s", 0s},
      {"1.000000001s", 1000000001ns},
  }));
  auto got = base::parseDuration(c.text);
  INFO(c.text);
  REQUIRE(got.ok());
  CHECK(*got == c.want);
}

TEST_CASE("duration: rejects malformed and out-of-range text with the input quoted",
          "[unit][base]") {
  auto text =
      GENERATE("", "20", "s", "1x", "1.2.3s", "--1s", "1 s", "ms", "9999999999999h", "5m.s", "abc");
  auto got = base::parseDuration(text);
  INFO(text);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == base::StatusCode::kInvalidArgument);
  CHECK_THAT(got.status().message(), Catch::Contains("\"" + std::string(text) + "\""));
}

TEST_CASE("duration: formats like Go's Duration.String", "[unit][base]") {
  CHECK(base::formatDuration(0s) == "0s");
  CHECK(base::formatDuration(20s) == "20s");
  CHECK(base::formatDuration(90min) == "1h30m0s");
  CHECK(base::formatDuration(500ms) == "500ms");
  CHECK(base::formatDuration(1500us) == "1.5ms");
  CHECK(base::formatDuration(1500ns) == "1.5\xC2\xB5s");
  CHECK(base::formatDuration(7ns) == "7ns");
  CHECK(base::formatDuration(61500ms) == "1m1.5s");
  CHECK(base::formatDuration(-2s) == "-2s");
  // Round trip.
  for (base::Duration d :
       {base::Duration(1h + 2min + 3s), base::Duration(250ms), base::Duration(20s)}) {
    auto back = base::parseDuration(base::formatDuration(d));
    REQUIRE(back.ok());
    CHECK(*back == d);
  }
}
