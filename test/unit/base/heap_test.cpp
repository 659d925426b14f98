// What the daemon's heap helpers report, under the allocator this test binary runs on (glibc's
// malloc: the tests do not link jemalloc).
#include "base/heap.h"

#include <cstring>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

using namespace nodeagent;

TEST_CASE("heapInUseBytes counts what is allocated and not yet freed", "[unit][base]") {
  CHECK(std::string(base::allocatorName()) == "glibc");
  base::tuneMalloc();
  const size_t before = base::heapInUseBytes();
  constexpr size_t kBlock = 16 << 20;
  auto block = std::make_unique<char[]>(kBlock);
  std::memset(block.get(), 1, kBlock);
  const size_t held = base::heapInUseBytes();
  CHECK(held >= before + kBlock);
  block.reset();
  CHECK(base::heapInUseBytes() + kBlock <= held);
}
