// ChunkedPods: a sequence of pods in shared chunks, checked against a plain vector.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "api/chunked_pods.h"

using namespace nodeagent;
using api::ChunkedPods;

namespace {

std::vector<api::PodPtr> distinctPods(size_t n) {
  std::vector<api::PodPtr> pods;
  for (size_t i = 0; i < n; ++i) pods.push_back(std::make_shared<const api::Pod>());
  return pods;
}

// Everything a reader sees: size, [], iteration, front/back, toVector.
void checkSame(const ChunkedPods& seq, const std::vector<api::PodPtr>& model) {
  REQUIRE(seq.size() == model.size());
  REQUIRE(seq.empty() == model.empty());
  REQUIRE(seq.toVector() == model);
  size_t i = 0;
  for (const api::PodPtr& p : seq) {
    REQUIRE(p == model[i]);
    REQUIRE(seq[i] == model[i]);
    ++i;
  }
  REQUIRE(i == model.size());
  if (!model.empty()) {
    REQUIRE(seq.front() == model.front());
    REQUIRE(seq.back() == model.back());
  }
}

using Difference = std::pair<api::PodPtr, api::PodPtr>;

std::vector<Difference> naiveDifferences(const ChunkedPods& a, const ChunkedPods& b) {
  std::vector<Difference> out;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) out.emplace_back(a[i], b[i]);
  }
  return out;
}

std::vector<Difference> differences(const ChunkedPods& a, const ChunkedPods& b) {
  std::vector<Difference> out;
  ChunkedPods::forEachDifference(a, b, [&](const api::PodPtr& x, const api::PodPtr& y) {
    out.emplace_back(x, y);
    return true;
  });
  return out;
}

}  // namespace

TEST_CASE("chunked pods: built from a vector, read as the vector", "[unit][api]") {
  for (size_t n :
       {size_t{0}, size_t{1}, ChunkedPods::kChunkSize, ChunkedPods::kChunkSize + 1, size_t{1000}}) {
    const auto pods = distinctPods(n);
    ChunkedPods seq(pods);
    checkSame(seq, pods);
    CHECK(seq.chunkCount() == (n + ChunkedPods::kChunkSize - 1) / ChunkedPods::kChunkSize);
  }
  const auto three = distinctPods(3);
  checkSame(ChunkedPods{three[0], three[1], three[2]}, three);
}

TEST_CASE(
    "chunked pods: a copy edited in one place shares every other chunk, and the original "
    "does not change",
    "[unit][api]") {
  const auto pods = distinctPods(1000);
  ChunkedPods sent(pods);
  ChunkedPods next = sent;
  CHECK(ChunkedPods::sharedChunks(sent, next) == sent.chunkCount());

  const auto replacement = std::make_shared<const api::Pod>();
  next.set(500, replacement);
  checkSame(sent, pods);  // untouched
  auto model = pods;
  model[500] = replacement;
  checkSame(next, model);
  CHECK(ChunkedPods::sharedChunks(sent, next) == sent.chunkCount() - 1);

  // Only the changed position is reported, and the shared chunks are skipped.
  size_t calls = 0;
  ChunkedPods::forEachDifference(sent, next, [&](const api::PodPtr& a, const api::PodPtr& b) {
    ++calls;
    CHECK(a == pods[500]);
    CHECK(b == replacement);
    return true;
  });
  CHECK(calls == 1);

  // Setting the pod a position already holds copies nothing.
  ChunkedPods same = sent;
  same.set(10, pods[10]);
  CHECK(ChunkedPods::sharedChunks(sent, same) == sent.chunkCount());
}

TEST_CASE(
    "chunked pods: an insert and a removal in one copy shift the chunks between them, and "
    "the difference walk still reports every position that differs",
    "[unit][api]") {
  // A renamed manifest: its pod leaves one position and comes back at another, so the set keeps
  // its length while the chunks between the two positions are shifted by one, and the chunks
  // before and after are still shared.
  const auto pods = distinctPods(2000);
  const ChunkedPods before(pods);
  for (const auto& [insert_at, erase_at] :
       std::vector<std::pair<size_t, size_t>>{{10, 700}, {1500, 20}, {300, 301}, {0, 1999}}) {
    INFO("insert at " << insert_at << ", erase at " << erase_at);
    ChunkedPods after = before;
    after.insert(insert_at, std::make_shared<const api::Pod>());
    after.erase(erase_at < insert_at ? erase_at : erase_at + 1);
    REQUIRE(after.size() == before.size());
    CHECK(ChunkedPods::sharedChunks(before, after) > 0);
    const auto walked = differences(before, after);
    CHECK(walked == naiveDifferences(before, after));
    CHECK_FALSE(walked.empty());
  }
}

TEST_CASE("chunked pods: a sequence moved from is empty and usable", "[unit][api]") {
  const auto pods = distinctPods(300);
  ChunkedPods a(pods);
  ChunkedPods b(std::move(a));
  checkSame(b, pods);
  checkSame(a, {});  // NOLINT(bugprone-use-after-move): moved from, then reused on purpose
  a.push_back(pods[0]);
  checkSame(a, {pods[0]});
  ChunkedPods c;
  c = std::move(b);
  checkSame(c, pods);
  checkSame(b, {});  // NOLINT(bugprone-use-after-move)
  b.insert(0, pods[1]);
  checkSame(b, {pods[1]});
}

TEST_CASE("chunked pods: the difference walk stops when told to", "[unit][api]") {
  const auto pods = distinctPods(600);
  ChunkedPods a(pods);
  ChunkedPods b = a;
  for (size_t i : {size_t{3}, size_t{300}, size_t{599}})
    b.set(i, std::make_shared<const api::Pod>());
  size_t calls = 0;
  CHECK_FALSE(ChunkedPods::forEachDifference(
      a, b, [&](const api::PodPtr&, const api::PodPtr&) { return ++calls < 2; }));
  CHECK(calls == 2);
  CHECK(ChunkedPods::forEachDifference(
      a, b, [](const api::PodPtr&, const api::PodPtr&) { return true; }));
}

TEST_CASE("chunked pods: random edits of a sequence and its copies agree with vectors",
          "[unit][api]") {
  std::mt19937 rng(20261206);
  std::vector<api::PodPtr> model = distinctPods(700);
  ChunkedPods seq(model);
  // Earlier copies must keep what they held, whatever is done to the sequence later.
  std::vector<std::pair<ChunkedPods, std::vector<api::PodPtr>>> snapshots;
  for (int step = 0; step < 4000; ++step) {
    const auto fresh = std::make_shared<const api::Pod>();
    switch (rng() % 5) {
      case 0: {  // insert anywhere (many in one place, so that chunks split)
        const size_t at =
            model.empty() || rng() % 3 == 0 ? model.size() / 2 : rng() % (model.size() + 1);
        seq.insert(at, fresh);
        model.insert(model.begin() + static_cast<std::ptrdiff_t>(at), fresh);
        break;
      }
      case 1:
        if (!model.empty()) {
          const size_t at = rng() % model.size();
          seq.erase(at);
          model.erase(model.begin() + static_cast<std::ptrdiff_t>(at));
        }
        break;
      case 2:
        if (!model.empty()) {
          const size_t at = rng() % model.size();
          seq.set(at, fresh);
          model[at] = fresh;
        }
        break;
      case 3:
        seq.push_back(fresh);
        model.push_back(fresh);
        break;
      default:
        if (snapshots.size() < 40) snapshots.emplace_back(seq, model);
        break;
    }
    if (step % 97 == 0) checkSame(seq, model);
  }
  checkSame(seq, model);
  for (const auto& [copy, copy_model] : snapshots) checkSame(copy, copy_model);

  // The difference walk of two equally long sequences with misaligned chunks agrees with a
  // position-by-position comparison.
  ChunkedPods other(model);  // chunked afresh, so its chunks start elsewhere
  for (size_t i = 0; i < model.size(); i += 37) other.set(i, std::make_shared<const api::Pod>());
  CHECK(differences(seq, other) == naiveDifferences(seq, other));
  CHECK(differences(seq, seq).empty());

  seq.clear();
  checkSame(seq, {});
}
