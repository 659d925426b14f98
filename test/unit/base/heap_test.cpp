// What the daemon's heap helpers report, under the allocator this test binary runs on (glibc's
// malloc: the tests do not link jemalloc).
#include "base/heap.h"

#include <cstring>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "test/support/skip.h"

using namespace nodeagent;

TEST_CASE("heapInUseBytes counts what is allocated and not yet freed", "[unit][base]") {
#if defined(__SANITIZE_ADDRESS__)
  testing::skipTest("ASan's allocator serves this build: glibc's statistics do not see it");
#endif
  CHECK(std::string(base::allocatorName()) == "glibc");
  const size_t before = base::heapInUseBytes();
  constexpr size_t kBlock = 16 << 20;
  auto block = std::make_unique<char[]>(kBlock);
  std::memset(block.get(), 1, kBlock);
  const size_t held = base::heapInUseBytes();
  CHECK(held >= before + kBlock);
  block.reset();
  CHECK(base::heapInUseBytes() + kBlock <= held);
}
