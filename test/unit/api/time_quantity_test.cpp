#include <chrono>
#include <string>

#include <catch2/catch.hpp>

#include "api/quantity.h"
#include "api/time.h"

namespace nodeagent::api {
namespace {

using namespace std::chrono;

Timestamp at(int y, unsigned mo, unsigned d, int h, int mi, int s, int64_t ns = 0) {
  return sys_days(year_month_day{year(y), month(mo), day(d)}) + hours(h) + minutes(mi) +
         seconds(s) + nanoseconds(ns);
}

TEST_CASE("parseTime: RFC 3339 with seconds, micro and nano fractions", "[unit][api]") {
  CHECK(*parseTime("2024-02-29T12:00:00Z") == at(2024, 2, 29, 12, 0, 0));
  CHECK(*parseTime("2024-01-02T03:04:05.123456Z") == at(2024, 1, 2, 3, 4, 5, 123456000));
  CHECK(*parseTime("2024-01-02T03:04:05.123456789Z") == at(2024, 1, 2, 3, 4, 5, 123456789));
  CHECK(*parseTime("2024-01-02T03:04:05.1Z") == at(2024, 1, 2, 3, 4, 5, 100000000));
  CHECK(*parseTime("2024-01-02T03:04:05+02:00") == at(2024, 1, 2, 1, 4, 5));
  CHECK(*parseTime("2024-01-02T00:30:00-01:30") == at(2024, 1, 2, 2, 0, 0));
  CHECK(*parseTime("1969-12-31T23:59:59.5Z") == at(1969, 12, 31, 23, 59, 59, 500000000));
}

TEST_CASE("parseTime: malformed and impossible times are rejected", "[unit][api]") {
  for (const char* bad :
       {"", "2024-02-30T12:00:00Z", "2023-02-29T12:00:00Z", "2024-13-01T00:00:00Z",
        "2024-00-01T00:00:00Z", "2024-01-01T24:00:00Z", "2024-01-01T23:60:00Z",
        "2024-01-01T23:59:60Z", "2024-01-01 00:00:00Z", "2024-01-01T00:00:00",
        "2024-01-01T00:00:00z", "2024-01-01T00:00:00.Z", "2024-01-01T00:00:00.1234567891Z",
        "2024-01-01T00:00:00+0200", "2024-01-01T00:00:00+24:00", "2024-01-01T00:00:00Zx",
        "2024-1-01T00:00:00Z", "2024-01-01", "x024-01-01T00:00:00Z"}) {
    INFO(bad);
    auto r = parseTime(bad);
    CHECK_FALSE(r.ok());
    CHECK(r.status().code() == base::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("formatTime and friends print like metav1", "[unit][api]") {
  Timestamp t = at(2024, 1, 2, 3, 4, 5, 123456789);
  CHECK(formatTime(t) == "2024-01-02T03:04:05Z");
  CHECK(formatMicroTime(t) == "2024-01-02T03:04:05.123456Z");
  CHECK(formatNanoTime(t) == "2024-01-02T03:04:05.123456789Z");
  CHECK(formatNanoTime(at(2024, 1, 2, 3, 4, 5, 120000000)) == "2024-01-02T03:04:05.12Z");
  CHECK(formatNanoTime(at(2024, 1, 2, 3, 4, 5)) == "2024-01-02T03:04:05Z");
  CHECK(formatMicroTime(at(2024, 1, 2, 3, 4, 5)) == "2024-01-02T03:04:05.000000Z");
  CHECK(formatTime(at(1969, 12, 31, 23, 59, 59, 500000000)) == "1969-12-31T23:59:59Z");
}

TEST_CASE("times round-trip through parse and format", "[unit][api]") {
  for (const char* s : {"2024-02-29T12:00:00Z", "1970-01-01T00:00:00Z", "2099-12-31T23:59:59Z"}) {
    CHECK(formatTime(*parseTime(s)) == s);
  }
  CHECK(formatMicroTime(*parseTime("2024-05-01T12:00:10.123456Z")) ==
        "2024-05-01T12:00:10.123456Z");
  CHECK(formatNanoTime(*parseTime("2024-05-01T12:00:10.000000001Z")) ==
        "2024-05-01T12:00:10.000000001Z");
  CHECK(formatTime(*parseTime("2024-01-02T03:04:05+02:00")) == "2024-01-02T01:04:05Z");
}

TEST_CASE("Quantity::parse: Kubernetes quantities parse exactly", "[unit][api]") {
  struct Case {
    const char* text;
    __int128 nanos;
  };
  const __int128 kG = 1000000000;
  const Case cases[] = {
      {"100m", kG / 10},
      {"128Mi", __int128{128} * 1024 * 1024 * kG},
      {"1G", kG * kG},
      {"1e3", 1000 * kG},
      {"1E3", 1000 * kG},
      {"1e-3", kG / 1000},
      {"0.5", kG / 2},
      {".5", kG / 2},
      {"5.", 5 * kG},
      {"1.5Gi", __int128{3} * 512 * 1024 * 1024 * kG},
      {"-1", -kG},
      {"+2k", 2000 * kG},
      {"5E", __int128{5000000000000000000} * kG},
      {"1Ei", (__int128{1} << 60) * kG},
      {"0", 0},
      {"0.000", 0},
      {"1n", 1},
      {"1u", 1000},
      {"250M", 250000000 * kG},
      {"2T", __int128{2000000000000} * kG},
      {"0.1n", 1},   // rounded up to a nano-unit
      {"-0.1n", 0},  // rounded up (toward +inf)
      {"1e-20", 1},
      {"00012", 12 * kG},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    auto q = Quantity::parse(c.text);
    REQUIRE(q.ok());
    CHECK(q->nanoValue() == c.nanos);
    CHECK(q->toString() == c.text);
  }
}

TEST_CASE("Quantity::parse: invalid quantities are errors", "[unit][api]") {
  for (const char* bad :
       {"1.2.3", "Mi",  "1Mb", "",    "-",    "+",   ".",    "1 Mi", " 1",   "1i",
        "1e",    "1e+", "1ki", "1KI", "1Mi ", "abc", "1..2", "--1",  "0x10", "1e3.5"}) {
    INFO(bad);
    auto q = Quantity::parse(bad);
    CHECK_FALSE(q.ok());
    CHECK(q.status().code() == base::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("Quantity::parse: values too large for nano-units are OutOfRange", "[unit][api]") {
  for (const char* huge : {"1e30", "1e999999999999", "999999999999999999999999999999999999999999",
                           "100000000000000000000000Ei"}) {
    INFO(huge);
    auto q = Quantity::parse(huge);
    CHECK_FALSE(q.ok());
    CHECK(q.status().code() == base::StatusCode::kOutOfRange);
  }
  CHECK(Quantity::parse("1e20").ok());
}

TEST_CASE("Quantity: value and milliValue round up", "[unit][api]") {
  CHECK(Quantity::parse("100m")->value() == 1);
  CHECK(Quantity::parse("100m")->milliValue() == 100);
  CHECK(Quantity::parse("1.0001")->milliValue() == 1001);
  CHECK(Quantity::parse("128Mi")->value() == 134217728);
  CHECK(Quantity::parse("-1.5")->value() == -1);
  CHECK(Quantity::parse("1e18")->value() == 1000000000000000000);
  CHECK(Quantity::parse("100Ei")->value() == INT64_MAX);  // clamped
}

TEST_CASE("Quantity: equal values compare equal whatever their spelling", "[unit][api]") {
  CHECK(*Quantity::parse("1") == *Quantity::parse("1000m"));
  CHECK(*Quantity::parse("1Ki") == *Quantity::parse("1024"));
  CHECK(*Quantity::parse("1k") < *Quantity::parse("1Ki"));
  CHECK(*Quantity::parse("1e3") == *Quantity::parse("1k"));
  CHECK(Quantity().isZero());
  CHECK(Quantity().toString() == "0");
}

TEST_CASE("Quantity: constructors print canonical forms", "[unit][api]") {
  CHECK(Quantity::fromValue(2).toString() == "2");
  CHECK(Quantity::fromValue(2).milliValue() == 2000);
  CHECK(Quantity::fromMilli(500).toString() == "500m");
  CHECK(Quantity::fromMilli(2000).toString() == "2");
  CHECK(Quantity::fromMilli(500) == *Quantity::parse("0.5"));
  CHECK(Quantity::fromBytes(128 * 1024 * 1024).toString() == "128Mi");
  CHECK(Quantity::fromBytes(1536).toString() == "1536");
  CHECK(Quantity::fromBytes(0).toString() == "0");
  CHECK(Quantity::fromBytes(int64_t{1} << 62).toString() == "4Ei");
  CHECK(Quantity::fromBytes(1024).value() == 1024);
}

}  // namespace
}  // namespace nodeagent::api
