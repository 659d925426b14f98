// FileSource against the real kernel: inotify on temp directories, real editors' save patterns
// (replayed with the same system calls, and with real sed and vim where installed), symlinks
// and ConfigMap-style swaps. The relist period is an hour so only the watch can pass these.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>

#include "config/file_source.h"
#include "config/manifest_errors.h"
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

// Writes through a temp name and renames it in: how tests add a file the watch must see at once.
void renameIn(const fs::path& path, const std::string& content) {
  auto tmp = path.parent_path() / (path.filename().string() + ".tmp");
  testing::writeFile(tmp, content);
  fs::rename(tmp, path);
}

// True if `pred` holds for the whole of `d` (a bounded check that nothing more happens).
bool consistently(const std::function<bool()>& pred, std::chrono::milliseconds d) {
  return !testing::eventually([&] { return !pred(); }, d);
}

class Harness {
 public:
  explicit Harness(fs::path path, std::function<void(config::FileSourceOptions&)> tweak = {}) {
    config::FileSourceOptions o;
    o.path = path.string();
    o.node_name = "node1";
    o.check_frequency = 1h;  // the watch alone must do the work
    o.settle_window = 300ms;
    o.errors = &errors;
    if (tweak) tweak(o);
    source = std::make_unique<config::FileSource>(ioc.get_executor(), base::realClock(), o,
                                                  [this](api::PodUpdate u) {
                                                    std::lock_guard lock(mu);
                                                    updates.push_back(std::move(u));
                                                  });
    runner = std::thread([this] { ioc.run(); });
    source->start();
  }
  ~Harness() {
    source->stop();
    guard.reset();
    runner.join();
    source.reset();  // before the io_context its timers and fd belong to
  }
  size_t count() {
    std::lock_guard lock(mu);
    return updates.size();
  }
  api::PodUpdate last() {
    std::lock_guard lock(mu);
    return updates.empty() ? api::PodUpdate{} : updates.back();
  }
  api::PodUpdate at(size_t i) {
    std::lock_guard lock(mu);
    return updates.at(i);
  }
  bool waitCount(size_t n, std::chrono::milliseconds d = 3s) {
    return testing::eventually([&] { return count() >= n; }, d);
  }
  // The UID of the pod named `pod_name` in the last update ("" if absent).
  std::string uidOf(const std::string& pod_name) {
    auto u = last();
    for (const auto& p : u.pods) {
      if (p->metadata.name == pod_name) return p->metadata.uid;
    }
    return "";
  }
  std::vector<std::string> names() {
    std::vector<std::string> out;
    for (const auto& p : last().pods) out.push_back(p->metadata.name);
    return out;
  }

  config::ManifestErrors errors;
  std::unique_ptr<config::FileSource> source;

 private:
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  std::thread runner;
  std::mutex mu;
  std::vector<api::PodUpdate> updates;
};

// After an edit, a sentinel renamed in proves every earlier event was handled; then nothing
// else may arrive for longer than the settle window.
void settle(Harness& h, const fs::path& dir, size_t expected_before_sentinel) {
  REQUIRE(h.waitCount(expected_before_sentinel, 3s));
  renameIn(dir / "zz-sentinel.yaml", podYaml("zz-sentinel"));
  REQUIRE(testing::eventually([&] {
    auto n = h.names();
    return std::find(n.begin(), n.end(), "zz-sentinel-node1") != n.end();
  }));
  auto n = h.count();
  CHECK(consistently([&] { return h.count() == n; }, 700ms));
}

}  // namespace

TEST_CASE("file source (inotify): the first SET, then new, changed and deleted files within a "
          "second", "[integration][config]") {
  testing::TempDir dir("fs-int");
  testing::writeFile(dir / "web.yaml", podYaml("web"));
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  CHECK(h.names() == std::vector<std::string>{"web-node1"});

  testing::writeFile(dir / "db.yaml", podYaml("db"));  // created in place: read once settled
  REQUIRE(testing::eventually([&] { return h.names().size() == 2; }, 2s));

  auto uid = h.uidOf("web-node1");
  renameIn(dir / "web.yaml", podYaml("web", "busybox:2"));
  REQUIRE(testing::eventually([&] { return h.uidOf("web-node1") != uid; }, 2s));

  fs::remove(dir / "db.yaml");
  REQUIRE(testing::eventually([&] { return h.names().size() == 1; }, 2s));
  CHECK(h.names() == std::vector<std::string>{"web-node1"});
}

TEST_CASE("file source (inotify): saving with vim's pattern gives exactly the ops the content "
          "implies", "[integration][config]") {
  testing::TempDir dir("fs-vim");
  auto web = dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  auto uid = h.uidOf("web-node1");

  bool changed = GENERATE(false, true);
  // vim: write-probe "4913", rename the original to "web.yaml~", write the new file, delete the
  // backup.
  testing::writeFile(dir / "4913", "");
  fs::remove(dir / "4913");
  fs::rename(web, dir / "web.yaml~");
  testing::writeFile(web, changed ? podYaml("web", "busybox:2") : podYaml("web"));
  fs::remove(dir / "web.yaml~");

  settle(h, dir.path(), changed ? 2 : 1);
  // Updates: the initial one, [the change], the sentinel's.
  if (changed) {
    REQUIRE(h.count() == 3);
    CHECK(h.at(1).pods.size() == 1);
    CHECK(h.at(1).pods[0]->metadata.uid != uid);
  } else {
    REQUIRE(h.count() == 2);
    REQUIRE(h.at(1).pods.size() == 2);  // the sentinel's update: web never left
    CHECK(h.at(1).pods[0]->metadata.uid == uid);
  }
  CHECK(h.errors.size() == 0);
}

TEST_CASE("file source (inotify): nano's truncate-and-write in place updates once",
          "[integration][config]") {
  testing::TempDir dir("fs-nano");
  auto web = dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  auto uid = h.uidOf("web-node1");
  std::string content = podYaml("web", "busybox:2");
  int fd = ::open(web.c_str(), O_WRONLY | O_TRUNC);
  REQUIRE(fd >= 0);
  auto half = content.size() / 2;
  REQUIRE(::write(fd, content.data(), half) == static_cast<ssize_t>(half));
  REQUIRE(::write(fd, content.data() + half, content.size() - half) ==
          static_cast<ssize_t>(content.size() - half));
  ::close(fd);
  settle(h, dir.path(), 2);
  REQUIRE(h.count() == 3);
  CHECK(h.at(1).pods.size() == 1);
  CHECK(h.at(1).pods[0]->metadata.uid != uid);
  CHECK(h.errors.size() == 0);
}

TEST_CASE("file source (inotify): sed -i (temp file renamed over) updates once and its temp file "
          "is never a pod", "[integration][config]") {
  testing::TempDir dir("fs-sed");
  auto web = dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  auto uid = h.uidOf("web-node1");

  bool real_sed = GENERATE(false, true);
  if (real_sed) {
    std::string cmd = "sed -i 's/busybox:1.36/busybox:1.37/' '" + web.string() + "'";
    REQUIRE(std::system(cmd.c_str()) == 0);
  } else {
    auto tmp = dir / "sedX1b2c3";  // sorts before web.yaml, same pod name
    testing::writeFile(tmp, podYaml("web", "busybox:1.37"));
    fs::rename(tmp, web);
  }
  settle(h, dir.path(), 2);
  REQUIRE(h.count() == 3);
  CHECK(h.at(1).pods.size() == 1);
  CHECK(h.at(1).pods[0]->metadata.uid != uid);
  CHECK(h.errors.size() == 0);
}

TEST_CASE("file source (inotify): saving with real vim keeps or updates the pod exactly as the "
          "content implies", "[integration][config]") {
  if (!fs::exists("/usr/bin/vim")) {
    WARN("vim is not installed: skipped");
    return;
  }
  testing::TempDir dir("fs-realvim");
  auto web = dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  auto uid = h.uidOf("web-node1");
  bool changed = GENERATE(false, true);
  // vim's default write-backup made by renaming (backupskip would skip it under /tmp): the
  // pattern users hit (k/k #40331, #83708).
  std::string edit = changed ? "-c '%s/busybox:1.36/busybox:1.37/'" : "";
  std::string cmd = "cd '" + dir.path().string() +
                    "' && HOME=/nonexistent vim -u NONE -N -i NONE -es "
                    "-c 'set nobackup writebackup backupcopy=no backupskip=' " + edit +
                    " -c 'wq' web.yaml </dev/null >/dev/null 2>&1";
  CHECK(std::system(cmd.c_str()) == 0);
  settle(h, dir.path(), changed ? 2 : 1);
  if (changed) {
    REQUIRE(h.count() == 3);
    CHECK(h.at(1).pods.size() == 1);
    CHECK(h.at(1).pods[0]->metadata.uid != uid);
  } else {
    REQUIRE(h.count() == 2);
    CHECK(h.at(1).pods.size() == 2);
    CHECK(h.at(1).pods[0]->metadata.uid == uid);
  }
  CHECK(h.errors.size() == 0);
}

TEST_CASE("file source (inotify): cp + mv replaces the manifest with one update",
          "[integration][config]") {
  testing::TempDir dir("fs-cpmv");
  testing::TempDir elsewhere("fs-cpmv-src");
  auto web = dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  auto uid = h.uidOf("web-node1");
  fs::copy_file(web, elsewhere / "web.yaml");
  testing::writeFile(elsewhere / "web.yaml", podYaml("web", "busybox:2"));
  std::string cmd = "mv '" + (elsewhere / "web.yaml").string() + "' '" + web.string() + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  settle(h, dir.path(), 2);
  REQUIRE(h.count() == 3);
  CHECK(h.at(1).pods[0]->metadata.uid != uid);
}

TEST_CASE("file source (inotify): a half-written manifest keeps the last good pod and is reported",
          "[integration][config]") {
  testing::TempDir dir("fs-partial");
  auto web = dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  auto uid = h.uidOf("web-node1");
  std::string content = podYaml("web", "busybox:2");
  testing::writeFile(web, content.substr(0, content.size() / 3) + "\n  - [");
  REQUIRE(testing::eventually([&] { return h.errors.get("file", web.string()).has_value(); }, 2s));
  CHECK(h.count() == 1);
  CHECK(h.uidOf("web-node1") == uid);

  testing::writeFile(web, content);
  REQUIRE(testing::eventually([&] { return h.uidOf("web-node1") != uid; }, 2s));
  CHECK_FALSE(h.errors.get("file", web.string()).has_value());
  CHECK(h.count() == 2);

  fs::remove(web);  // deleting a file removes its pod
  REQUIRE(testing::eventually([&] { return h.last().pods.empty(); }, 2s));
}

TEST_CASE("file source (inotify): a missing directory sends an empty SET and its pods appear "
          "when it does", "[integration][config]") {
  testing::TempDir root("fs-missing");
  auto path = root / "a" / "manifests";
  // A retry period of an hour: only the watch on the nearest parent can notice the directory.
  Harness h(path, [](config::FileSourceOptions& o) { o.watch_retry_initial = 1h; });
  REQUIRE(h.waitCount(1));
  CHECK(h.last().pods.empty());
  fs::create_directories(root / "staging");
  renameIn(root / "staging" / "web.yaml", podYaml("web"));
  fs::create_directory(root / "a");
  fs::rename(root / "staging", path);
  REQUIRE(testing::eventually([&] { return h.names() == std::vector<std::string>{"web-node1"}; },
                              3s));

  // The directory goes away: its pods go; it comes back: they come back.
  fs::rename(path, root / "gone");
  REQUIRE(testing::eventually([&] { return h.last().pods.empty(); }, 3s));
  fs::rename(root / "gone", path);
  REQUIRE(testing::eventually([&] { return h.names() == std::vector<std::string>{"web-node1"}; },
                              3s));
}

TEST_CASE("file source (inotify): a ConfigMap-style symlink swap is picked up by the watch",
          "[integration][config]") {
  testing::TempDir dir("fs-configmap");
  fs::create_directory(dir / "..2024_01_01_00_00_00.000000001");
  testing::writeFile(dir / "..2024_01_01_00_00_00.000000001" / "web.yaml", podYaml("web"));
  fs::create_directory_symlink("..2024_01_01_00_00_00.000000001", dir / "..data");
  fs::create_symlink("..data/web.yaml", dir / "web.yaml");
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  REQUIRE(h.names() == std::vector<std::string>{"web-node1"});
  auto uid = h.uidOf("web-node1");

  // kubelet's AtomicWriter: a new timestamped dir, ..data_tmp -> it, renamed over ..data, then
  // the old dir removed.
  auto next = dir / "..2024_01_01_00_00_01.000000002";
  fs::create_directory(next);
  testing::writeFile(next / "web.yaml", podYaml("web", "busybox:2"));
  fs::create_directory_symlink(next.filename(), dir / "..data_tmp");
  fs::rename(dir / "..data_tmp", dir / "..data");
  fs::remove_all(dir / "..2024_01_01_00_00_00.000000001");
  REQUIRE(testing::eventually(
      [&] { return h.uidOf("web-node1") != uid && !h.uidOf("web-node1").empty(); }, 2s));
  auto uid2 = h.uidOf("web-node1");
  CHECK(consistently([&] { return h.uidOf("web-node1") == uid2; }, 700ms));
  CHECK(h.errors.size() == 0);
}

TEST_CASE("file source (inotify): a symlinked manifest follows edits of its target",
          "[integration][config]") {
  testing::TempDir dir("fs-symlink");
  testing::TempDir target_dir("fs-symlink-target");
  testing::writeFile(target_dir / "web.yaml", podYaml("web"));
  fs::create_symlink(target_dir / "web.yaml", dir / "web.yaml");
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  REQUIRE(h.names() == std::vector<std::string>{"web-node1"});
  auto uid = h.uidOf("web-node1");

  testing::writeFile(target_dir / "web.yaml", podYaml("web", "busybox:2"));  // in place
  REQUIRE(testing::eventually([&] { return h.uidOf("web-node1") != uid; }, 2s));
  auto uid2 = h.uidOf("web-node1");
  renameIn(target_dir / "web.yaml", podYaml("web", "busybox:3"));  // replaced
  REQUIRE(testing::eventually([&] { return h.uidOf("web-node1") != uid2; }, 2s));

  // Retargeting the link itself (ln -sfn through a temp name).
  testing::writeFile(target_dir / "web-v4.yaml", podYaml("web", "busybox:4"));
  auto uid3 = h.uidOf("web-node1");
  fs::create_symlink(target_dir / "web-v4.yaml", dir / "web.yaml.tmp");
  fs::rename(dir / "web.yaml.tmp", dir / "web.yaml");
  REQUIRE(testing::eventually([&] { return h.uidOf("web-node1") != uid3; }, 2s));
}

TEST_CASE("file source (inotify): two files with the same pod: the first in sorted order wins",
          "[integration][config]") {
  testing::TempDir dir("fs-dup");
  testing::writeFile(dir / "kube-apiserver.yaml", podYaml("api", "busybox:new"));
  testing::writeFile(dir / "kube-apiserver.yaml.old", podYaml("api", "busybox:old"));
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  REQUIRE(h.names() == std::vector<std::string>{"api-node1"});
  auto uid = h.uidOf("api-node1");
  auto loser = (dir / "kube-apiserver.yaml.old").string();
  REQUIRE(h.errors.get("file", loser).has_value());
  CHECK_THAT(h.errors.get("file", loser)->message, Catch::Contains("kube-apiserver.yaml"));

  fs::remove(dir / "kube-apiserver.yaml");
  REQUIRE(testing::eventually([&] { return h.uidOf("api-node1") != uid && h.count() >= 2; }, 2s));
  CHECK(h.names() == std::vector<std::string>{"api-node1"});
  CHECK(h.errors.size() == 0);
}

TEST_CASE("file source (inotify): single-file mode survives an editor replacing the file",
          "[integration][config]") {
  testing::TempDir dir("fs-single");
  auto web = dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  Harness h(web);
  REQUIRE(h.waitCount(1));
  auto uid = h.uidOf("web-node1");
  for (int i = 2; i <= 4; ++i) {  // several replacements in a row: the watch is on the parent
    renameIn(web, podYaml("web", "busybox:" + std::to_string(i)));
    REQUIRE(testing::eventually([&] { return h.uidOf("web-node1") != uid; }, 2s));
    uid = h.uidOf("web-node1");
  }
  auto n = h.count();
  testing::writeFile(dir / "other.yaml", podYaml("other"));
  CHECK(consistently([&] { return h.count() == n; }, 700ms));
  fs::remove(web);
  REQUIRE(testing::eventually([&] { return h.last().pods.empty(); }, 2s));
  renameIn(web, podYaml("web"));
  REQUIRE(testing::eventually([&] { return h.names() == std::vector<std::string>{"web-node1"}; },
                              3s));
}
