#include "api/chunked_pods.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <utility>

#include "base/status.h"

namespace nodeagent::api {

ChunkedPods::ChunkedPods(std::vector<PodPtr> pods) {
  if (pods.empty()) return;
  if (pods.size() <= kChunkSize) {
    chunks_.push_back(std::make_shared<Chunk>(std::move(pods)));
  } else {
    chunks_.reserve((pods.size() + kChunkSize - 1) / kChunkSize);
    for (size_t i = 0; i < pods.size(); i += kChunkSize) {
      const size_t end = std::min(pods.size(), i + kChunkSize);
      chunks_.push_back(std::make_shared<Chunk>(std::make_move_iterator(pods.begin() + i),
                                                std::make_move_iterator(pods.begin() + end)));
    }
  }
  reindexFrom(0);
}

ChunkedPods::ChunkedPods(ChunkedPods&& other) noexcept
    : chunks_(std::exchange(other.chunks_, {})), ends_(std::exchange(other.ends_, {})) {}

ChunkedPods& ChunkedPods::operator=(ChunkedPods&& other) noexcept {
  if (this != &other) {
    chunks_ = std::exchange(other.chunks_, {});
    ends_ = std::exchange(other.ends_, {});
  }
  return *this;
}

std::pair<size_t, size_t> ChunkedPods::locate(size_t index) const {
  NA_CHECK(index < size(), "ChunkedPods index out of range");
  const size_t k =
      static_cast<size_t>(std::upper_bound(ends_.begin(), ends_.end(), index) - ends_.begin());
  return {k, k == 0 ? index : index - ends_[k - 1]};
}

const PodPtr& ChunkedPods::operator[](size_t index) const {
  const auto [k, i] = locate(index);
  return (*chunks_[k])[i];
}

const PodPtr& ChunkedPods::at(size_t index) const {
  if (index >= size()) {
    throw std::out_of_range("ChunkedPods::at: index " + std::to_string(index) + " of " +
                            std::to_string(size()));
  }
  return (*this)[index];
}

ChunkedPods::Chunk& ChunkedPods::mutableChunk(size_t k) {
  // use_count 1: no other sequence holds it, and none can get it but through this one. The
  // count is read relaxed; the fence orders this sequence's writes after the last reads of a
  // copy that another thread dropped (its release decrement), as Rust's Arc::make_mut does.
  if (chunks_[k].use_count() > 1) {
    auto copy = std::make_shared<Chunk>();
    copy->reserve(chunks_[k]->size() + 1);  // the edit may be an insert
    copy->assign(chunks_[k]->begin(), chunks_[k]->end());
    chunks_[k] = std::move(copy);
  } else {
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  return *chunks_[k];
}

void ChunkedPods::reindexFrom(size_t k) {
  ends_.resize(chunks_.size());
  size_t total = k == 0 ? 0 : ends_[k - 1];
  for (size_t j = k; j < chunks_.size(); ++j) {
    total += chunks_[j]->size();
    ends_[j] = total;
  }
}

void ChunkedPods::push_back(PodPtr pod) {
  if (chunks_.empty() || chunks_.back()->size() >= kChunkSize) {
    chunks_.push_back(std::make_shared<Chunk>());
    chunks_.back()->reserve(kChunkSize);
    ends_.push_back(size());
  }
  mutableChunk(chunks_.size() - 1).push_back(std::move(pod));
  ++ends_.back();
}

void ChunkedPods::set(size_t index, PodPtr pod) {
  const auto [k, i] = locate(index);
  if ((*chunks_[k])[i] == pod) return;
  mutableChunk(k)[i] = std::move(pod);
}

void ChunkedPods::insert(size_t index, PodPtr pod) {
  NA_CHECK(index <= size(), "ChunkedPods insert position out of range");
  if (index == size()) {
    push_back(std::move(pod));
    return;
  }
  const auto [k, i] = locate(index);
  Chunk& chunk = mutableChunk(k);
  chunk.insert(chunk.begin() + static_cast<std::ptrdiff_t>(i), std::move(pod));
  if (chunk.size() >= 2 * kChunkSize) {
    const auto half = static_cast<std::ptrdiff_t>(chunk.size() / 2);
    auto upper = std::make_shared<Chunk>(std::make_move_iterator(chunk.begin() + half),
                                         std::make_move_iterator(chunk.end()));
    chunk.erase(chunk.begin() + half, chunk.end());
    chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(k) + 1, std::move(upper));
  }
  reindexFrom(k);
}

void ChunkedPods::erase(size_t index) {
  const auto [k, i] = locate(index);
  if (chunks_[k]->size() == 1) {
    chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(k));
  } else {
    Chunk& chunk = mutableChunk(k);
    chunk.erase(chunk.begin() + static_cast<std::ptrdiff_t>(i));
  }
  reindexFrom(k);
}

void ChunkedPods::clear() {
  chunks_.clear();
  ends_.clear();
}

size_t ChunkedPods::sharedChunks(const ChunkedPods& a, const ChunkedPods& b) {
  size_t shared = 0;
  for (const auto& chunk : a.chunks_) {
    if (std::find(b.chunks_.begin(), b.chunks_.end(), chunk) != b.chunks_.end()) ++shared;
  }
  return shared;
}

}  // namespace nodeagent::api
