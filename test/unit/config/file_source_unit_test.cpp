// FileSource logic on a FakeClock: no inotify (watch = false), events injected by the test so
// each editor's save pattern is replayed deterministically against a real temp directory.
#include <sys/inotify.h>
#include <sys/stat.h>

#include <filesystem>
#include <mutex>

#include <catch2/catch.hpp>

#include "config/file_source.h"
#include "config/manifest_errors.h"
#include "test/support/fake_clock.h"
#include "test/support/log_capture.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::string podYaml(const std::string& name, const std::string& image = "busybox:1.36") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  containers:\n  - name: main\n    image: " + image +
         "\n    command: [\"sleep\", \"3600\"]\n";
}

struct Recorder {
  std::mutex mu;
  std::vector<api::PodUpdate> updates;
  config::PodUpdateSink sink() {
    return [this](api::PodUpdate u) {
      std::lock_guard lock(mu);
      updates.push_back(std::move(u));
    };
  }
  size_t count() {
    std::lock_guard lock(mu);
    return updates.size();
  }
  api::PodUpdate last() {
    std::lock_guard lock(mu);
    return updates.back();
  }
};

std::vector<std::string> names(const api::PodUpdate& u) {
  std::vector<std::string> out;
  for (const auto& p : u.pods) out.push_back(p->metadata.name);
  return out;
}

config::InotifyEvent ev(uint32_t mask, std::string name) {
  return config::InotifyEvent{0, mask, 0, std::move(name)};
}

struct Fixture {
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  testing::TempDir dir{"file-source-unit"};
  config::ManifestErrors errors;
  Recorder rec;
  std::unique_ptr<config::FileSource> source;

  size_t max_manifest_bytes = config::FileSourceOptions{}.max_manifest_bytes;

  void start(const fs::path& path, base::Duration settle = 300ms) {
    config::FileSourceOptions o;
    o.max_manifest_bytes = max_manifest_bytes;
    o.path = path.string();
    o.node_name = "node1";
    o.settle_window = settle;
    o.watch = false;
    o.errors = &errors;
    source = std::make_unique<config::FileSource>(ioc.get_executor(), clock, o, rec.sink());
    source->start();
    ioc.poll();
  }
  void inject(std::vector<config::InotifyEvent> events) {
    source->injectEventsForTest(std::move(events));
    ioc.poll();
  }
  void advance(base::Duration d) {
    clock.advance(d);
    ioc.poll();
  }
  ~Fixture() {
    if (source) source->stop();
    ioc.poll();
  }
};

}  // namespace

TEST_CASE("file source: editor, hidden and temp names are ignored", "[unit][config]") {
  for (const char* name : {".web.yaml", ".web.yaml.swp", "web.yaml~", "web.yaml.swp",
                           "web.yaml.swx", "web.yaml.tmp", "web.yaml.bak", "web.yaml.orig",
                           "web.yaml.dpkg-old", "web.yaml.dpkg-new", "4913", "..data", "."}) {
    INFO(name);
    CHECK(config::isIgnoredManifestName(name));
  }
  for (const char* name : {"web.yaml", "web.json", "web", "4914", "49130", "sed12ab", "bak",
                           "web.tmp.yaml", "orig.yaml"}) {
    INFO(name);
    CHECK_FALSE(config::isIgnoredManifestName(name));
  }
}

TEST_CASE("settle queue: a vanished file keeps its first deadline, a write restarts it",
          "[unit][config]") {
  testing::FakeClock clock;
  config::SettleQueue q(300ms);
  auto t0 = clock.now();
  q.mark("a", config::SettleQueue::Kind::kVanished, t0);
  q.mark("a", config::SettleQueue::Kind::kVanished, t0 + 200ms);
  CHECK(q.nextDeadline() == t0 + 300ms);
  q.mark("b", config::SettleQueue::Kind::kWriting, t0);
  q.mark("b", config::SettleQueue::Kind::kWriting, t0 + 250ms);
  CHECK(q.kindOf("b") == config::SettleQueue::Kind::kWriting);

  auto due = q.takeDue(t0 + 300ms);
  REQUIRE(due.size() == 1);
  CHECK(due[0].first == "a");
  CHECK(due[0].second == config::SettleQueue::Kind::kVanished);
  CHECK(q.nextDeadline() == t0 + 550ms);
  CHECK(q.takeDue(t0 + 549ms).empty());
  CHECK(q.clear("b"));
  CHECK_FALSE(q.clear("b"));
  CHECK(q.empty());
  CHECK_FALSE(q.nextDeadline().has_value());

  // A vanished file that is being written again waits for a quiet window from the write.
  q.mark("c", config::SettleQueue::Kind::kVanished, t0);
  q.mark("c", config::SettleQueue::Kind::kWriting, t0 + 100ms);
  CHECK(q.kindOf("c") == config::SettleQueue::Kind::kWriting);
  CHECK(q.nextDeadline() == t0 + 400ms);
}

TEST_CASE("file source: the first SET lists the directory in sorted order, skipping ignored names",
          "[unit][config]") {
  Fixture f;
  testing::writeFile(f.dir / "b.yaml", podYaml("bravo"));
  testing::writeFile(f.dir / "a.yaml", podYaml("alpha"));
  testing::writeFile(f.dir / "a.yaml~", podYaml("backup"));
  testing::writeFile(f.dir / ".hidden.yaml", podYaml("hidden"));
  testing::writeFile(f.dir / "4913", "");
  fs::create_directory(f.dir / "sub");
  testing::writeFile(f.dir / "sub" / "c.yaml", podYaml("charlie"));
  f.start(f.dir.path());
  REQUIRE(f.rec.count() == 1);
  auto u = f.rec.last();
  CHECK(u.op == api::PodOperation::kSet);
  CHECK(u.source == "file");
  CHECK(names(u) == std::vector<std::string>{"alpha-node1", "bravo-node1"});
  CHECK(f.errors.size() == 0);
}

TEST_CASE("file source: a missing path sends an empty SET and is retried with backoff",
          "[unit][config]") {
  Fixture f;
  auto path = f.dir / "manifests";
  f.start(path);
  REQUIRE(f.rec.count() == 1);
  CHECK(f.rec.last().pods.empty());

  f.advance(1s);  // first retry: still missing, nothing new to say
  CHECK(f.rec.count() == 1);
  fs::create_directory(path);
  testing::writeFile(path / "web.yaml", podYaml("web"));
  f.advance(1s);  // the backoff doubled: the second retry is 2s after the first
  CHECK(f.rec.count() == 1);
  f.advance(1s);
  REQUIRE(f.rec.count() == 2);
  CHECK(names(f.rec.last()) == std::vector<std::string>{"web-node1"});
}

TEST_CASE("file source: the retries of a missing path double from 1s and stop growing at 20s",
          "[unit][config]") {
  Fixture f;
  auto path = f.dir / "manifests";
  f.start(path);
  REQUIRE(f.rec.count() == 1);
  auto setups = [&] { return f.source->stats().watch_setups; };
  CHECK(setups() == 1);
  for (auto delay : {1s, 2s, 4s, 8s, 16s, 20s, 20s, 20s}) {
    INFO("retry after " << std::chrono::duration_cast<std::chrono::seconds>(delay).count() << "s");
    auto before = setups();
    f.advance(delay - 1ms);
    CHECK(setups() == before);
    f.advance(1ms);
    CHECK(setups() == before + 1);
  }
  CHECK(f.rec.count() == 1);  // still missing: the empty SET is not repeated
  fs::create_directory(path);
  testing::writeFile(path / "web.yaml", podYaml("web"));
  f.advance(20s);
  REQUIRE(f.rec.count() == 2);
  CHECK(names(f.rec.last()) == std::vector<std::string>{"web-node1"});
}

TEST_CASE("file source: a vim save with identical content produces no update at all",
          "[unit][config]") {
  Fixture f;
  auto web = f.dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  f.start(f.dir.path());
  REQUIRE(f.rec.count() == 1);
  auto decoded_before = f.source->stats().manifests_decoded;

  bool changed = GENERATE(false, true);
  std::string content = changed ? podYaml("web", "busybox:1.37") : podYaml("web");
  // vim: probe file 4913, rename the original to a backup, write the new file, delete the backup.
  testing::writeFile(f.dir / "4913", "");
  fs::remove(f.dir / "4913");
  fs::rename(web, f.dir / "web.yaml~");
  f.inject({ev(IN_CREATE, "4913"), ev(IN_CLOSE_WRITE, "4913"), ev(IN_DELETE, "4913"),
            ev(IN_MOVED_FROM, "web.yaml"), ev(IN_MOVED_TO, "web.yaml~")});
  CHECK(f.rec.count() == 1);  // the vanished file has the settle window to come back
  testing::writeFile(web, content);
  f.inject({ev(IN_CREATE, "web.yaml"), ev(IN_MODIFY, "web.yaml"), ev(IN_CLOSE_WRITE, "web.yaml")});
  fs::remove(f.dir / "web.yaml~");
  f.inject({ev(IN_DELETE, "web.yaml~")});
  f.advance(1s);
  f.advance(20s);  // and a relist later
  if (!changed) {
    CHECK(f.rec.count() == 1);
    CHECK(f.source->stats().manifests_decoded == decoded_before);
  } else {
    REQUIRE(f.rec.count() == 2);
    CHECK(f.rec.last().pods.size() == 1);
    CHECK(f.rec.last().pods[0]->metadata.uid != f.rec.updates[0].pods[0]->metadata.uid);
  }
}

TEST_CASE("file source: nano's in-place write updates once on close", "[unit][config]") {
  Fixture f;
  auto web = f.dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  f.start(f.dir.path());
  testing::writeFile(web, "apiVersion: v1\nkind: Po");  // truncated and half written
  f.inject({ev(IN_MODIFY, "web.yaml"), ev(IN_MODIFY, "web.yaml")});
  CHECK(f.rec.count() == 1);  // nothing is read before the close
  testing::writeFile(web, podYaml("web", "busybox:2"));
  f.inject({ev(IN_MODIFY, "web.yaml"), ev(IN_CLOSE_WRITE, "web.yaml")});
  REQUIRE(f.rec.count() == 2);
  CHECK(f.source->stats().manifests_decoded == 2);
  f.advance(1s);
  CHECK(f.rec.count() == 2);
}

TEST_CASE("file source: sed -i's temp file never becomes a pod", "[unit][config]") {
  Fixture f;
  auto web = f.dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  f.start(f.dir.path());
  // sed writes "sedAbC123" (sorts before web.yaml and defines the same pod), then renames it.
  testing::writeFile(f.dir / "sedAbC123", podYaml("web", "busybox:2"));
  f.inject(
      {ev(IN_CREATE, "sedAbC123"), ev(IN_MODIFY, "sedAbC123"), ev(IN_CLOSE_WRITE, "sedAbC123")});
  CHECK(f.rec.count() == 1);
  fs::rename(f.dir / "sedAbC123", web);
  f.inject({ev(IN_MOVED_FROM, "sedAbC123"), ev(IN_MOVED_TO, "web.yaml")});
  REQUIRE(f.rec.count() == 2);
  f.advance(1s);
  CHECK(f.rec.count() == 2);
  CHECK(f.errors.size() == 0);
  CHECK(f.source->stats().manifests_decoded == 2);
}

TEST_CASE("file source: a new file is read once it has been quiet for the settle window",
          "[unit][config]") {
  Fixture f;
  f.start(f.dir.path());
  REQUIRE(f.rec.count() == 1);
  testing::writeFile(f.dir / "new.yaml", podYaml("new"));
  f.inject({ev(IN_CREATE, "new.yaml"), ev(IN_MODIFY, "new.yaml"), ev(IN_CLOSE_WRITE, "new.yaml")});
  f.advance(299ms);
  CHECK(f.rec.count() == 1);
  f.advance(1ms);
  REQUIRE(f.rec.count() == 2);
  CHECK(names(f.rec.last()) == std::vector<std::string>{"new-node1"});

  // A file moved in is complete: read at once.
  auto tmp = f.dir / "other.yaml.tmp";
  testing::writeFile(tmp, podYaml("other"));
  fs::rename(tmp, f.dir / "other.yaml");
  f.inject({ev(IN_MOVED_FROM, "other.yaml.tmp"), ev(IN_MOVED_TO, "other.yaml")});
  REQUIRE(f.rec.count() == 3);
  CHECK(names(f.rec.last()) == std::vector<std::string>{"new-node1", "other-node1"});
}

TEST_CASE(
    "file source: a deleted manifest goes after the settle window, a quick re-create is "
    "a modification",
    "[unit][config]") {
  Fixture f;
  auto web = f.dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  testing::writeFile(f.dir / "db.yaml", podYaml("db"));
  f.start(f.dir.path());
  REQUIRE(f.rec.count() == 1);

  fs::remove(web);
  f.inject({ev(IN_DELETE, "web.yaml")});
  f.advance(200ms);
  CHECK(f.rec.count() == 1);
  testing::writeFile(web, podYaml("web"));
  f.inject({ev(IN_CREATE, "web.yaml"), ev(IN_CLOSE_WRITE, "web.yaml")});
  f.advance(1s);
  CHECK(f.rec.count() == 1);  // same content back within the window: nothing happened

  fs::remove(web);
  f.inject({ev(IN_DELETE, "web.yaml")});
  f.advance(299ms);
  CHECK(f.rec.count() == 1);
  f.advance(1ms);
  REQUIRE(f.rec.count() == 2);
  CHECK(names(f.rec.last()) == std::vector<std::string>{"db-node1"});
}

TEST_CASE("file source: a manifest that fails to parse keeps its last good pod and is reported",
          "[unit][config]") {
  Fixture f;
  auto web = f.dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  f.start(f.dir.path());
  REQUIRE(f.rec.count() == 1);
  auto good_uid = f.rec.last().pods.at(0)->metadata.uid;

  testing::writeFile(web, "apiVersion: v1\nkind: Pod\nmetadata: [\n");
  f.inject({ev(IN_CLOSE_WRITE, "web.yaml")});
  f.advance(21s);  // the relist keeps it too
  CHECK(f.rec.count() == 1);
  auto err = f.errors.get("file", web.string());
  REQUIRE(err.has_value());
  CHECK_FALSE(err->message.empty());

  testing::writeFile(web, podYaml("web", "busybox:2"));
  f.inject({ev(IN_CLOSE_WRITE, "web.yaml")});
  REQUIRE(f.rec.count() == 2);
  CHECK(f.rec.last().pods.at(0)->metadata.uid != good_uid);
  CHECK_FALSE(f.errors.get("file", web.string()).has_value());

  // Going bad and back to the same good content sends nothing.
  testing::writeFile(web, "garbage: [");
  f.inject({ev(IN_CLOSE_WRITE, "web.yaml")});
  testing::writeFile(web, podYaml("web", "busybox:2"));
  f.inject({ev(IN_CLOSE_WRITE, "web.yaml")});
  CHECK(f.rec.count() == 2);
  CHECK(f.errors.size() == 0);
}

TEST_CASE("file source: each new manifest error is announced once, naming the pod if it can",
          "[unit][config]") {
  Fixture f;
  std::vector<config::ManifestError> heard;
  f.errors.setListener([&heard](const config::ManifestError& e) { heard.push_back(e); });
  auto web = f.dir / "web.yaml";
  const std::string bad_name =
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n"
      "  - name: Bad_Name\n    image: busybox\n";
  testing::writeFile(web, bad_name);
  f.start(f.dir.path());
  REQUIRE(heard.size() == 1);
  CHECK(heard[0].location == web.string());
  CHECK_THAT(heard[0].invalid, Catch::Contains("spec.containers[0].name"));
  CHECK(heard[0].pod.name == "web-node1");
  CHECK(heard[0].pod.namespace_ == "default");
  CHECK_FALSE(heard[0].pod.uid.empty());

  f.advance(21s);  // relists of the unchanged bad file
  f.advance(21s);
  CHECK(heard.size() == 1);

  testing::writeFile(web, "apiVersion: v1\nkind: Pod\nmetadata: [\n");
  f.inject({ev(IN_CLOSE_WRITE, "web.yaml")});
  REQUIRE(heard.size() == 2);
  CHECK(heard[1].pod.name.empty());

  testing::writeFile(web, podYaml("web"));
  f.inject({ev(IN_CLOSE_WRITE, "web.yaml")});
  CHECK(f.errors.size() == 0);
  testing::writeFile(web, bad_name);
  f.inject({ev(IN_CLOSE_WRITE, "web.yaml")});
  CHECK(heard.size() == 3);
}

TEST_CASE(
    "file source: two files with the same pod: the last in sorted order wins, as in "
    "kubelet 1.18",
    "[unit][config]") {
  Fixture f;
  testing::writeFile(f.dir / "a.yaml", podYaml("web", "busybox:a"));
  testing::writeFile(f.dir / "b.yaml", podYaml("web", "busybox:b"));
  testing::writeFile(f.dir / "c.yaml", podYaml("other"));
  f.start(f.dir.path());
  REQUIRE(f.rec.count() == 1);
  auto first = f.rec.last();
  REQUIRE(names(first) == std::vector<std::string>{"web-node1", "other-node1"});
  CHECK(first.pods[0]->spec->containers.at(0).image == "busybox:b");
  auto b_uid = first.pods[0]->metadata.uid;
  auto dup = f.errors.get("file", (f.dir / "a.yaml").string());
  REQUIRE(dup.has_value());
  CHECK_THAT(dup->message, Catch::Contains((f.dir / "b.yaml").string()) &&
                               Catch::Contains("comes later in sorted order and wins"));

  // Editing the loser changes nothing in the set.
  testing::writeFile(f.dir / "a.yaml", podYaml("web", "busybox:a2"));
  f.inject({ev(IN_CLOSE_WRITE, "a.yaml")});
  CHECK(f.rec.count() == 1);

  // Removing the winner hands the name to the other file.
  fs::remove(f.dir / "b.yaml");
  f.inject({ev(IN_DELETE, "b.yaml")});
  f.advance(1s);
  REQUIRE(f.rec.count() == 2);
  auto second = f.rec.last();
  REQUIRE(names(second) == std::vector<std::string>{"web-node1", "other-node1"});
  CHECK(second.pods[0]->metadata.uid != b_uid);
  CHECK(second.pods[0]->spec->containers.at(0).image == "busybox:a2");
  CHECK(f.errors.size() == 0);
}

TEST_CASE("file source: a change re-reads only that file, an idle relist reads nothing",
          "[unit][config]") {
  Fixture f;
  for (int i = 0; i < 50; ++i) {
    testing::writeFile(f.dir / ("pod" + std::to_string(i) + ".yaml"),
                       podYaml("pod" + std::to_string(i)));
  }
  f.start(f.dir.path());
  REQUIRE(f.rec.count() == 1);
  CHECK(f.rec.last().pods.size() == 50);
  auto s0 = f.source->stats();
  CHECK(s0.manifests_decoded == 50);

  f.advance(20s);  // relist: stat only
  auto s1 = f.source->stats();
  CHECK(s1.files_read == s0.files_read);
  CHECK(f.rec.count() == 1);
  // Without a watch, every relist stats every file (none is trusted to have been reported).
  CHECK(s1.relists == s0.relists + 1);
  CHECK(s1.stat_sweeps == s0.stat_sweeps + 1);

  testing::writeFile(f.dir / "pod7.yaml", podYaml("pod7", "busybox:2"));
  f.inject({ev(IN_CLOSE_WRITE, "pod7.yaml")});
  auto s2 = f.source->stats();
  CHECK(s2.files_read == s1.files_read + 1);
  CHECK(s2.manifests_decoded == s1.manifests_decoded + 1);
  REQUIRE(f.rec.count() == 2);
  CHECK(f.rec.last().pods.size() == 50);
}

TEST_CASE("file source: single-file mode ignores its neighbours and survives a replace",
          "[unit][config]") {
  Fixture f;
  auto web = f.dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  testing::writeFile(f.dir / "other.yaml", podYaml("other"));
  f.start(web);
  REQUIRE(f.rec.count() == 1);
  CHECK(names(f.rec.last()) == std::vector<std::string>{"web-node1"});

  testing::writeFile(f.dir / "other.yaml", podYaml("other", "x:2"));
  f.inject({ev(IN_CLOSE_WRITE, "other.yaml")});
  CHECK(f.rec.count() == 1);

  auto tmp = f.dir / "web.yaml.new";
  testing::writeFile(tmp, podYaml("web", "busybox:2"));
  fs::rename(tmp, web);
  f.inject({ev(IN_MOVED_FROM, "web.yaml.new"), ev(IN_MOVED_TO, "web.yaml")});
  REQUIRE(f.rec.count() == 2);
  CHECK(names(f.rec.last()) == std::vector<std::string>{"web-node1"});
}

TEST_CASE("file source: no update is pushed after stop", "[unit][config]") {
  Fixture f;
  testing::writeFile(f.dir / "web.yaml", podYaml("web"));
  f.start(f.dir.path());
  REQUIRE(f.rec.count() == 1);
  f.source->stop();
  testing::writeFile(f.dir / "web.yaml", podYaml("web", "busybox:2"));
  f.advance(21s);
  CHECK(f.rec.count() == 1);
  CHECK(f.clock.pendingTimers() == 0);
}

TEST_CASE("file source: the periodic relist alone finds new, changed and deleted files",
          "[unit][config]") {
  // No events at all: what changed is found by the relist's listing and stats only.
  Fixture f;
  for (const char* name : {"b", "d", "f", "h"}) {
    testing::writeFile(f.dir / (std::string(name) + ".yaml"), podYaml(name));
  }
  f.start(f.dir.path(), 0ms);
  REQUIRE(f.rec.count() == 1);
  auto s0 = f.source->stats();

  // Before the first known name, between known ones and after the last: new files; a known one
  // deleted, another rewritten in place (same size, other content), the rest untouched.
  for (const char* name : {"a", "e", "z"}) {
    testing::writeFile(f.dir / (std::string(name) + ".yaml"), podYaml(name));
  }
  fs::remove(f.dir / "d.yaml");
  fs::remove(f.dir / "h.yaml");
  testing::writeFile(f.dir / "f.yaml", podYaml("f", "busybox:1.37"));
  f.advance(20s);
  REQUIRE(f.rec.count() == 2);
  CHECK(names(f.rec.last()) ==
        std::vector<std::string>{"a-node1", "b-node1", "e-node1", "f-node1", "z-node1"});
  for (const auto& pod : f.rec.last().pods) {
    if (pod->metadata.name == "f-node1") CHECK(pod->spec->containers[0].image == "busybox:1.37");
  }
  // Read again: the three new files and the changed one, nothing else.
  CHECK(f.source->stats().files_read == s0.files_read + 4);

  // A relist with nothing changed reads nothing and sends nothing.
  f.advance(20s);
  CHECK(f.rec.count() == 2);
  CHECK(f.source->stats().files_read == s0.files_read + 4);
}

TEST_CASE("file source: an inotify queue overflow relists and finds changes events missed",
          "[unit][config]") {
  Fixture f;
  testing::writeFile(f.dir / "web.yaml", podYaml("web"));
  f.start(f.dir.path());
  REQUIRE(f.rec.count() == 1);
  testing::writeFile(f.dir / "web.yaml", podYaml("web", "busybox:2"));
  testing::writeFile(f.dir / "db.yaml", podYaml("db"));
  f.inject({config::InotifyEvent{-1, IN_Q_OVERFLOW, 0, ""}});
  REQUIRE(f.rec.count() == 2);
  CHECK(names(f.rec.last()) == std::vector<std::string>{"db-node1", "web-node1"});
  CHECK(f.rec.last().pods[1]->metadata.uid != f.rec.updates[0].pods[0]->metadata.uid);
}

TEST_CASE(
    "file source: the relist every check_frequency (20s by default) finds what no event "
    "announced",
    "[unit][config]") {
  CHECK(config::FileSourceOptions{}.check_frequency == 20s);
  Fixture f;
  testing::writeFile(f.dir / "web.yaml", podYaml("web"));
  testing::writeFile(f.dir / "gone.yaml", podYaml("gone"));
  f.start(f.dir.path());
  REQUIRE(f.rec.count() == 1);
  auto web_uid = f.rec.last().pods.at(1)->metadata.uid;
  testing::writeFile(f.dir / "web.yaml", podYaml("web", "busybox:2"));
  testing::writeFile(f.dir / "db.yaml", podYaml("db"));
  fs::remove(f.dir / "gone.yaml");
  f.advance(20s - 1ms);
  CHECK(f.rec.count() == 1);
  f.advance(1ms);
  // Changed and new files are read at once; a vanished one still gets the settle window.
  REQUIRE(f.rec.count() == 2);
  CHECK(names(f.rec.last()) == std::vector<std::string>{"db-node1", "gone-node1", "web-node1"});
  CHECK(f.rec.last().pods.at(2)->metadata.uid != web_uid);
  f.advance(300ms);
  REQUIRE(f.rec.count() == 3);
  CHECK(names(f.rec.last()) == std::vector<std::string>{"db-node1", "web-node1"});
}

TEST_CASE(
    "file source: a single manifest file that does not parse at start is an incomplete "
    "answer until it does (kubelet's TestExtractFromBadDataFile)",
    "[unit][config]") {
  Fixture f;
  auto web = f.dir / "web.yaml";
  testing::writeFile(web, "apiVersion: v1\nkind: Pod\nmetadata: [\n");
  f.start(web);
  REQUIRE(f.rec.count() == 1);
  CHECK(f.rec.last().pods.empty());
  CHECK_FALSE(f.rec.last().complete);
  CHECK_THAT(f.rec.last().incomplete_reason, Catch::Contains(web.string()));

  f.advance(21s);  // the relist finds it still bad: nothing new to say
  CHECK(f.rec.count() == 1);

  testing::writeFile(web, podYaml("web"));
  f.inject({ev(IN_CLOSE_WRITE, "web.yaml")});
  REQUIRE(f.rec.count() == 2);
  CHECK(f.rec.last().complete);
  CHECK(names(f.rec.last()) == std::vector<std::string>{"web-node1"});

  // Once seen, a later bad edit keeps the pod and the answer stays complete.
  testing::writeFile(web, "garbage: [");
  f.inject({ev(IN_CLOSE_WRITE, "web.yaml")});
  CHECK(f.rec.count() == 2);
}

TEST_CASE(
    "file source: a directory with a manifest that never parsed is incomplete until that "
    "file is good or gone, or for one check period, and its good neighbours are sent at once",
    "[unit][config]") {
  Fixture f;
  testing::writeFile(f.dir / "a.yaml", podYaml("a"));
  testing::writeFile(f.dir / "b.yaml", "kind: Pod\nmetadata: [\n");
  f.start(f.dir.path());
  REQUIRE(f.rec.count() == 1);
  CHECK(names(f.rec.last()) == std::vector<std::string>{"a-node1"});
  CHECK_FALSE(f.rec.last().complete);
  CHECK_THAT(f.rec.last().incomplete_reason, Catch::Contains("b.yaml"));

  SECTION("the bad file goes: the same set, now complete") {
    fs::remove(f.dir / "b.yaml");
    f.inject({ev(IN_DELETE, "b.yaml")});
    f.advance(1s);  // past the settle window
    REQUIRE(f.rec.count() == 2);
    CHECK(f.rec.last().complete);
    CHECK(names(f.rec.last()) == std::vector<std::string>{"a-node1"});
  }
  SECTION(
      "the bad file stays broken: a check period later the answer is complete without it, "
      "and edits keep flowing") {
    f.advance(20s - 1ms);
    CHECK(f.rec.count() == 1);
    f.advance(1ms);  // the relist
    REQUIRE(f.rec.count() == 2);
    CHECK(f.rec.last().complete);
    CHECK(f.rec.last().incomplete_reason.empty());
    CHECK(names(f.rec.last()) == std::vector<std::string>{"a-node1"});

    const auto uid = f.rec.last().pods.at(0)->metadata.uid;
    testing::writeFile(f.dir / "a.yaml", podYaml("a", "busybox:2"));
    f.inject({ev(IN_CLOSE_WRITE, "a.yaml")});
    REQUIRE(f.rec.count() == 3);
    CHECK(f.rec.last().complete);
    REQUIRE(names(f.rec.last()) == std::vector<std::string>{"a-node1"});
    CHECK(f.rec.last().pods.at(0)->metadata.uid != uid);
  }
}

TEST_CASE(
    "file source: a single manifest file that stays broken keeps the source unseen past "
    "any check period",
    "[unit][config]") {
  Fixture f;
  auto web = f.dir / "web.yaml";
  testing::writeFile(web, "kind: Pod\nmetadata: [\n");
  f.start(web);
  f.advance(200s);
  REQUIRE(f.rec.count() == 1);
  CHECK_FALSE(f.rec.last().complete);
}

TEST_CASE(
    "file source: a path that is neither a directory nor a file is an incomplete empty "
    "answer",
    "[unit][config]") {
  Fixture f;
  auto fifo = f.dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  f.start(fifo);
  REQUIRE(f.rec.count() == 1);
  CHECK(f.rec.last().pods.empty());
  CHECK_FALSE(f.rec.last().complete);
  CHECK_THAT(f.rec.last().incomplete_reason, Catch::Contains("not a directory or a regular file"));
}

TEST_CASE("file source: a missing path is a complete empty answer (kubelet marks it seen)",
          "[unit][config]") {
  Fixture f;
  f.start(f.dir / "absent");
  REQUIRE(f.rec.count() == 1);
  CHECK(f.rec.last().pods.empty());
  CHECK(f.rec.last().complete);
}

TEST_CASE(
    "file source: an oversized manifest is warned about once per change, not re-read on "
    "every relist",
    "[unit][config]") {
  testing::LogCapture logs;
  Fixture f;
  f.max_manifest_bytes = 1000;
  auto big = f.dir / "big.yaml";
  testing::writeFile(big, podYaml("big") + "# " + std::string(2000, 'x') + "\n");
  testing::writeFile(f.dir / "web.yaml", podYaml("web"));
  f.start(f.dir.path());
  REQUIRE(f.rec.count() == 1);
  CHECK(names(f.rec.last()) == std::vector<std::string>{"web-node1"});
  auto err = f.errors.get("file", big.string());
  REQUIRE(err.has_value());
  CHECK(err->message.find("larger than 1000 bytes") != std::string::npos);
  const auto read_at_start = f.source->stats().files_read;

  for (int i = 0; i < 5; ++i) f.advance(20s);  // five relists
  CHECK(f.source->stats().files_read == read_at_start);
  CHECK(logs.lines("larger than 1000 bytes").size() == 1);
  CHECK(f.errors.get("file", big.string()).has_value());
  REQUIRE(f.rec.count() == 2);  // one check period later the answer is complete without it
  CHECK(f.rec.last().complete);

  // A change (still too big) is warned about once more; one that fits is read and used.
  testing::writeFile(big, podYaml("big") + "# " + std::string(3000, 'y') + "\n");
  f.advance(20s);
  f.advance(20s);
  CHECK(logs.lines("larger than 1000 bytes").size() == 2);
  testing::writeFile(big, podYaml("big"));
  f.advance(20s);
  REQUIRE(f.rec.count() == 3);
  CHECK(names(f.rec.last()) == std::vector<std::string>{"big-node1", "web-node1"});
  CHECK_FALSE(f.errors.get("file", big.string()).has_value());
}

TEST_CASE("file source: file names are logged quoted, so no name can forge a log line",
          "[unit][config]") {
  testing::LogCapture logs;
  Fixture f;
  const std::string name = "bad\nI0101 00:00:00 forged\xff.yaml";
  testing::writeFile(f.dir / name, "garbage: [");
  f.start(f.dir.path());
  auto lines = logs.lines("Could not process manifest file");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("bad\\nI0101 00:00:00 forged\\xff.yaml") != std::string::npos);
  CHECK(logs.lines("forged").size() == 1);  // the name never starts a line of its own
  REQUIRE(f.errors.get("file", (f.dir / name).string()).has_value());
}

TEST_CASE(
    "file source: a manifest renamed within the directory keeps its pod when it sets "
    "metadata.uid, and is a new pod when it does not (a documented departure from kubelet)",
    "[unit][config]") {
  Fixture f;
  testing::writeFile(
      f.dir / "fixed.yaml",
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fixed\n  uid: fixed-uid\n"
      "spec:\n  containers:\n  - name: main\n    image: x\n    command: [sleep, '1']\n");
  testing::writeFile(f.dir / "free.yaml", podYaml("free"));
  f.start(f.dir.path());
  REQUIRE(f.rec.count() == 1);
  REQUIRE(names(f.rec.last()) == std::vector<std::string>{"fixed-node1", "free-node1"});
  const auto fixed = f.rec.last().pods.at(0);
  const auto free_uid = f.rec.last().pods.at(1)->metadata.uid;

  fs::rename(f.dir / "fixed.yaml", f.dir / "renamed-fixed.yaml");
  f.inject({ev(IN_MOVED_FROM, "fixed.yaml"), ev(IN_MOVED_TO, "renamed-fixed.yaml")});
  f.advance(1s);
  auto podNamed = [&](const std::string& name) -> api::PodPtr {
    for (const auto& p : f.rec.last().pods) {
      if (p->metadata.name == name) return p;
    }
    return nullptr;
  };
  // Whatever the source says now (a SET in the new file order, or nothing), the pod is the
  // very same.
  REQUIRE(f.rec.last().pods.size() == 2);
  REQUIRE(podNamed("fixed-node1"));
  CHECK(podNamed("fixed-node1")->metadata.uid == "fixed-uid");
  CHECK(podNamed("fixed-node1")->content_hash == fixed->content_hash);
  const size_t before = f.rec.count();

  fs::rename(f.dir / "free.yaml", f.dir / "renamed-free.yaml");
  f.inject({ev(IN_MOVED_FROM, "free.yaml"), ev(IN_MOVED_TO, "renamed-free.yaml")});
  f.advance(1s);
  REQUIRE(f.rec.count() > before);
  REQUIRE(f.rec.last().pods.size() == 2);
  REQUIRE(podNamed("free-node1"));
  CHECK(podNamed("free-node1")->metadata.uid != free_uid);
  CHECK(podNamed("fixed-node1")->metadata.uid == "fixed-uid");
}

TEST_CASE("file source: inotify is trusted on local disk and memory filesystems only",
          "[unit][config]") {
  CHECK(config::watchSeesEveryChange(0xEF53));            // ext4
  CHECK(config::watchSeesEveryChange(0x58465342));        // xfs
  CHECK(config::watchSeesEveryChange(0x9123683E));        // btrfs
  CHECK(config::watchSeesEveryChange(0x01021994));        // tmpfs
  CHECK_FALSE(config::watchSeesEveryChange(0x6969));      // nfs
  CHECK_FALSE(config::watchSeesEveryChange(0xFF534D42));  // cifs
  CHECK_FALSE(config::watchSeesEveryChange(0x65735546));  // fuse
  CHECK_FALSE(config::watchSeesEveryChange(0x794C7630));  // overlayfs
  CHECK_FALSE(config::watchSeesEveryChange(0));
}
