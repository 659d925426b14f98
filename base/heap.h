// The daemon's memory allocator, for a long-running process whose memory comes in bursts (a
// thousand pods started at once, a large /pods body): its settings, the trimmer that gives freed
// pages back, and what it holds. The daemon and the benches that stand in for it use them.
//
// The daemon links jemalloc where it is installed (CMakeLists.txt, NODEAGENT_JEMALLOC), set up by
// heap.cpp: one arena, freed pages purged after a second by its background thread. Otherwise
// glibc's malloc serves, tuned by tuneMalloc().
#pragma once

#include <cstddef>

#include "base/asio.h"
#include "base/clock.h"

namespace nodeagent::base {

// "jemalloc" or "glibc": the allocator this process runs on.
const char* allocatorName();

// The process's resident size in bytes, from /proc/self/statm (0 when unknown).
long residentBytes();

// Bytes the allocator has handed out and not taken back: what the process's objects hold. RSS
// minus this is the allocator's slack (freed memory it keeps) plus code and stacks.
size_t heapInUseBytes();

// jemalloc's own account, in bytes (all zero under glibc): what the process's objects hold
// (`allocated`), the pages holding them (`active`: allocated plus the free space of partly used
// pages), the allocator's metadata, and the pages it keeps resident (`resident`: active,
// metadata, and freed pages not yet given back).
struct HeapStats {
  size_t allocated = 0;
  size_t active = 0;
  size_t metadata = 0;
  size_t resident = 0;
  size_t thread_caches = 0;  // freed blocks the threads' caches keep (part of `allocated`)
  size_t dirty = 0;          // freed pages not yet given back (part of `resident`)
};
HeapStats heapStats();

// Writes jemalloc's heap profile to `path` (for jeprof) when the process runs with
// MALLOC_CONF=prof:true; false otherwise. For benchmarks that look for what holds memory.
bool dumpHeapProfile(const char* path);

// glibc's malloc: one arena instead of one per thread that ever allocated (each kept its own
// high-water mark), large blocks always mmap'ed so they go back when freed (the default
// threshold grows after the first large free and then keeps them on the heap). Nothing under
// jemalloc, which takes its settings before main. Call first thing in main.
void tuneMalloc();

// glibc's malloc keeps freed pages between live blocks resident (its heap only shrinks from the
// top). Every few seconds, when the resident size grew by more than 1 MiB since the last trim,
// malloc_trim gives the free pages back. The check reads /proc/self/statm (mallinfo2 walks every
// free chunk: too costly to poll when idle). Under jemalloc it does nothing: jemalloc gives pages
// back itself (its background thread), dirty_decay_ms after their last use.
class HeapTrimmer {
 public:
  HeapTrimmer(asio::any_io_executor ex, Clock& clock) : timer_(clock.makeTimer(ex)) {}
  void start();
  void stop() { timer_->cancel(); }

 private:
  void arm();
  TimerPtr timer_;
  long rss_after_trim_ = 0;
};

}  // namespace nodeagent::base
