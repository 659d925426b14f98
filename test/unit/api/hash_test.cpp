#include "api/hash.h"

#include <string>

#include <catch2/catch.hpp>

namespace nodeagent::api {
namespace {

std::string allBytes() {
  std::string s;
  for (int i = 0; i < 256; ++i) s.push_back(static_cast<char>(i));
  return s;
}

// Golden values of MurmurHash3_x64_128, seed 0 (high = h1, low = h2 of the reference code). These
// must never change: static pod UIDs are derived from them.
TEST_CASE("hash128: matches MurmurHash3_x64_128 golden values", "[unit][api]") {
  CHECK(hash128("").toHex() == "00000000000000000000000000000000");
  CHECK(hash128("a").toHex() == "85555565f6597889e6b53a48510e895a");
  CHECK(hash128("hello").toHex() == "cbd8a7b341bd9b025b1e906a48ae1d19");
  CHECK(hash128("The quick brown fox jumps over the lazy dog").toHex() ==
        "e34bbc7bbc071b6c7a433ca9c49a9347");
  CHECK(hash128(allBytes()).toHex() == "1c99c313dc6f12b970d6077fab34cc1e");
  CHECK(hash128(R"({"apiVersion":"v1","kind":"Pod"})").toHex() ==
        "fabd7af2611d3e749806801b89753486");
  // Exactly one block, and one block plus one tail byte.
  CHECK(hash128("0123456789abcdef").toHex() == "4be06d94cf4ad1a787c35b5c63a708da");
  CHECK(hash128("0123456789abcdefg").toHex() == "8e32612daa45f9de0800f4c206c372ee");
}

TEST_CASE("hash128: high and low words are h1 and h2", "[unit][api]") {
  Hash128 h = hash128("The quick brown fox jumps over the lazy dog");
  CHECK(h.high == 0xe34bbc7bbc071b6cULL);
  CHECK(h.low == 0x7a433ca9c49a9347ULL);
}

TEST_CASE("hash128: toHex pads with leading zeros", "[unit][api]") {
  CHECK(Hash128{1, 2}.toHex() == "00000000000000010000000000000002");
  CHECK(Hash128{0xffffffffffffffffULL, 0}.toHex() == "ffffffffffffffff0000000000000000");
}

TEST_CASE("hash128: embedded NUL bytes are hashed", "[unit][api]") {
  CHECK(hash128(std::string("a\0b", 3)) != hash128("ab"));
  CHECK(hash128(std::string("\0", 1)) != hash128(""));
}

TEST_CASE("hash128: ordering and equality compare both words", "[unit][api]") {
  CHECK(Hash128{1, 2} == Hash128{1, 2});
  CHECK(Hash128{1, 2} < Hash128{2, 0});
  CHECK(Hash128{1, 2} < Hash128{1, 3});
}

}  // namespace
}  // namespace nodeagent::api
