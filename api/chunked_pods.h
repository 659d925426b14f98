// ChunkedPods: a sequence of pods kept in shared chunks, the pods of a PodUpdate.
//
// A source that resends its whole set after one pod changed (the file source, kubelet's SET)
// would copy every pod pointer, and the receiver would drop as many: at 100,000 pods that is
// 200,000 reference counts touched on scattered cache lines per change. Here a copy shares the
// chunks, and an edit copies only the chunk it touches (copy on write), so the set sent after one
// change shares all but one chunk with the set sent before it, and a receiver that compares the
// two (PodStorage's SET merge) skips every chunk they share by one pointer comparison.
//
// Reading is that of a vector (size, [], forward iteration); a chunk is never empty. Not
// thread-safe for writes; copies may be read and written on different threads, since a shared
// chunk is never written.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "api/pod.h"

namespace nodeagent::api {

class ChunkedPods {
 public:
  using Chunk = std::vector<PodPtr>;
  // Pods per chunk when a sequence is built or appended to; an insert splits a chunk that grew to
  // twice this.
  static constexpr size_t kChunkSize = 256;

  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = PodPtr;
    using difference_type = std::ptrdiff_t;
    using pointer = const PodPtr*;
    using reference = const PodPtr&;

    const_iterator() = default;
    reference operator*() const { return (**chunk_)[offset_]; }
    pointer operator->() const { return &**this; }
    const_iterator& operator++() {
      if (++offset_ == (*chunk_)->size()) {
        ++chunk_;
        offset_ = 0;
      }
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator before = *this;
      ++*this;
      return before;
    }
    bool operator==(const const_iterator& other) const {
      return chunk_ == other.chunk_ && offset_ == other.offset_;
    }

   private:
    friend class ChunkedPods;
    explicit const_iterator(const std::shared_ptr<Chunk>* chunk) : chunk_(chunk) {}
    const std::shared_ptr<Chunk>* chunk_ = nullptr;
    size_t offset_ = 0;
  };
  using iterator = const_iterator;
  using value_type = PodPtr;
  using size_type = size_t;

  ChunkedPods() = default;
  // A vector is a sequence of pods: PodUpdate{pods, op, source} keeps reading as it did.
  ChunkedPods(std::vector<PodPtr> pods);  // NOLINT(google-explicit-constructor)
  ChunkedPods(std::initializer_list<PodPtr> pods) : ChunkedPods(std::vector<PodPtr>(pods)) {}
  ChunkedPods(const ChunkedPods&) = default;
  ChunkedPods& operator=(const ChunkedPods&) = default;
  // A sequence moved from is empty, as a vector moved from.
  ChunkedPods(ChunkedPods&& other) noexcept;
  ChunkedPods& operator=(ChunkedPods&& other) noexcept;

  size_t size() const { return ends_.empty() ? 0 : ends_.back(); }
  bool empty() const { return ends_.empty(); }
  const PodPtr& operator[](size_t index) const;  // O(log chunks)
  const PodPtr& at(size_t index) const;          // throws std::out_of_range, as a vector's
  const PodPtr& front() const { return chunks_.front()->front(); }
  const PodPtr& back() const { return chunks_.back()->back(); }
  const_iterator begin() const { return const_iterator(chunks_.data()); }
  const_iterator end() const { return const_iterator(chunks_.data() + chunks_.size()); }
  std::vector<PodPtr> toVector() const { return {begin(), end()}; }

  // Edits, each copying at most the one chunk it changes when another sequence shares it. Unlike
  // a vector's, a reference into the sequence keeps showing the old pod after a copy-on-write.
  void push_back(PodPtr pod);
  void set(size_t index, PodPtr pod);
  void insert(size_t index, PodPtr pod);
  void erase(size_t index);
  void clear();

  // Calls `f(a[i], b[i])` for each position i at which the two hold different pods, in order;
  // stops early when `f` returns false (and returns false). The sequences must be equally long.
  // Where both start a chunk at the same position and it is the same chunk, it is skipped whole.
  template <typename F>
  static bool forEachDifference(const ChunkedPods& a, const ChunkedPods& b, F&& f);

  // How many chunks the two hold in common (tests and benchmarks).
  static size_t sharedChunks(const ChunkedPods& a, const ChunkedPods& b);
  size_t chunkCount() const { return chunks_.size(); }

 private:
  // The chunk holding `index` and the index within it.
  std::pair<size_t, size_t> locate(size_t index) const;
  // Chunk `k`, copied first when another sequence shares it.
  Chunk& mutableChunk(size_t k);
  // Recomputes ends_ from chunk `k` on.
  void reindexFrom(size_t k);

  std::vector<std::shared_ptr<Chunk>> chunks_;
  std::vector<size_t> ends_;  // ends_[k]: pods in chunks 0..k; back() is the size
};

template <typename F>
bool ChunkedPods::forEachDifference(const ChunkedPods& a, const ChunkedPods& b, F&& f) {
  size_t ak = 0, ai = 0, bk = 0, bi = 0;
  while (ak < a.chunks_.size() && bk < b.chunks_.size()) {
    const Chunk& ac = *a.chunks_[ak];
    const Chunk& bc = *b.chunks_[bk];
    if (ai == 0 && bi == 0 && &ac == &bc) {
      ++ak;
      ++bk;
      continue;
    }
    if (ac[ai] != bc[bi] && !f(ac[ai], bc[bi])) return false;
    if (++ai == ac.size()) {
      ++ak;
      ai = 0;
    }
    if (++bi == bc.size()) {
      ++bk;
      bi = 0;
    }
  }
  return true;
}

}  // namespace nodeagent::api
