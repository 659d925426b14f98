#include "base/heap.h"

#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <utility>

extern "C" {
// jemalloc's settings, read as it starts when the process links it (glibc's malloc ignores
// them): one arena (as M_ARENA_MAX for glibc; each thread keeps a small cache of its own), freed
// pages given back a second after they were last used, and none kept for lazy reuse
// (muzzy_decay_ms: pages freed with MADV_FREE count in RSS until the kernel needs them). Pages
// are given back by jemalloc's one background thread, which sleeps until a decay is due: without
// it, jemalloc purges only while the process allocates, so an agent that goes quiet after a burst
// (50,000 pods started, then only resyncs) kept the burst's freed pages resident (26 MiB there).
__attribute__((used, visibility("default"))) const char* malloc_conf =
    "narenas:1,dirty_decay_ms:1000,muzzy_decay_ms:0,background_thread:true,"
    "max_background_threads:1";
// jemalloc's control interface: set when jemalloc serves this process, null otherwise.
int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen)
    __attribute__((weak));
}

namespace nodeagent::base {
namespace {

bool jemalloc() { return mallctl != nullptr; }

}  // namespace

long residentBytes() {
  long pages = 0;
  long resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "re");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return resident * ::sysconf(_SC_PAGESIZE);
}

const char* allocatorName() { return jemalloc() ? "jemalloc" : "glibc"; }

size_t heapInUseBytes() {
  if (jemalloc()) {
    uint64_t epoch = 1;  // refreshes the statistics
    size_t len = sizeof(epoch);
    mallctl("epoch", &epoch, &len, &epoch, len);
    size_t allocated = 0;
    len = sizeof(allocated);
    if (mallctl("stats.allocated", &allocated, &len, nullptr, 0) != 0) return 0;
    return allocated;
  }
#if defined(__GLIBC__)
#if __GLIBC_PREREQ(2, 33)
  struct mallinfo2 mi = ::mallinfo2();
  return mi.uordblks + mi.hblkhd;
#endif
#endif
  return 0;  // unknown
}

HeapStats heapStats() {
  HeapStats out;
  if (!jemalloc()) return out;
  uint64_t epoch = 1;
  size_t len = sizeof(epoch);
  mallctl("epoch", &epoch, &len, &epoch, len);
  // (Arena 4096 is MALLCTL_ARENAS_ALL: the sum over all arenas.)
  for (auto [name, field] :
       {std::pair{"stats.allocated", &out.allocated}, std::pair{"stats.active", &out.active},
        std::pair{"stats.metadata", &out.metadata}, std::pair{"stats.resident", &out.resident},
        std::pair{"stats.arenas.4096.tcache_bytes", &out.thread_caches}}) {
    len = sizeof(size_t);
    if (mallctl(name, field, &len, nullptr, 0) != 0) *field = 0;
  }
  size_t dirty_pages = 0;
  len = sizeof(size_t);
  if (mallctl("stats.arenas.4096.pdirty", &dirty_pages, &len, nullptr, 0) == 0) {
    out.dirty = dirty_pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  }
  return out;
}

bool dumpHeapProfile(const char* path) {
  if (!jemalloc()) return false;
  return mallctl("prof.dump", nullptr, nullptr, &path, sizeof(path)) == 0;
}

void tuneMalloc() {
  if (jemalloc()) return;
  ::mallopt(M_ARENA_MAX, 1);
  ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);
}

void HeapTrimmer::start() {
  // jemalloc's background thread gives pages back, dirty_decay_ms after they were last used:
  // purging more often only makes the next allocations fault the same pages in again.
  if (!jemalloc()) arm();
}

void HeapTrimmer::arm() {
  static constexpr long kSlack = 1 << 20;
  static constexpr std::chrono::seconds kPeriod{3};
  timer_->asyncWaitFor(kPeriod, [this] {
    const long rss = residentBytes();
    if (rss > rss_after_trim_ + kSlack) {
      ::malloc_trim(0);
      rss_after_trim_ = residentBytes();
    } else if (rss < rss_after_trim_) {
      rss_after_trim_ = rss;
    }
    arm();
  });
}

}  // namespace nodeagent::base
