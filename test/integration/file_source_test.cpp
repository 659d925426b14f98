// FileSource against the real kernel: inotify on temp directories, real editors' save patterns
// (replayed with the same system calls, and with real sed and vim where installed), symlinks
// and ConfigMap-style swaps. The relist period is an hour so only the watch can pass these.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>

#include "config/file_source.h"
#include "config/manifest_errors.h"
#include "test/support/skip.h"
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
  // Holds the io_context's only thread until the returned promise is set: inotify events queue
  // up in the kernel meanwhile.
  std::shared_ptr<std::promise<void>> holdLoop() {
    auto release = std::make_shared<std::promise<void>>();
    auto held = std::make_shared<std::promise<void>>();
    asio::post(ioc, [release, held] {
      held->set_value();
      release->get_future().wait();
    });
    held->get_future().wait();
    return release;
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

// After a save of web.yaml and settle(): changed content is one SET with the pod under a new
// UID; the same content sends nothing (the only later SET is the sentinel's, with web.yaml's pod
// unchanged beside it). Updates: the initial one, [the change], the sentinel's.
void checkSaved(Harness& h, const std::string& uid, bool changed) {
  if (changed) {
    REQUIRE(h.count() == 3);
    REQUIRE(h.at(1).pods.size() == 1);
    CHECK(h.at(1).pods[0]->metadata.uid != uid);
  } else {
    REQUIRE(h.count() == 2);
    REQUIRE(h.at(1).pods.size() == 2);  // the sentinel's update: web never left
    CHECK(h.at(1).pods[0]->metadata.uid == uid);
  }
}

}  // namespace

TEST_CASE(
    "file source (inotify): the first SET, then new, changed and deleted files within a "
    "second",
    "[integration][config]") {
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

TEST_CASE(
    "file source (inotify): saving with vim's pattern gives exactly the ops the content "
    "implies",
    "[integration][config]") {
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
  checkSaved(h, uid, changed);
  CHECK(h.errors.size() == 0);
}

TEST_CASE(
    "file source (inotify): nano's truncate-and-write in place updates once, or not at all "
    "for the same content",
    "[integration][config]") {
  testing::TempDir dir("fs-nano");
  auto web = dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  auto uid = h.uidOf("web-node1");
  bool changed = GENERATE(false, true);
  std::string content = changed ? podYaml("web", "busybox:2") : podYaml("web");
  int fd = ::open(web.c_str(), O_WRONLY | O_TRUNC);
  REQUIRE(fd >= 0);
  auto half = content.size() / 2;
  REQUIRE(::write(fd, content.data(), half) == static_cast<ssize_t>(half));
  REQUIRE(::write(fd, content.data() + half, content.size() - half) ==
          static_cast<ssize_t>(content.size() - half));
  ::close(fd);
  settle(h, dir.path(), changed ? 2 : 1);
  checkSaved(h, uid, changed);
  CHECK(h.errors.size() == 0);
}

TEST_CASE(
    "file source (inotify): sed -i (temp file renamed over) updates once, or not at all "
    "for the same content, and its temp file is never a pod",
    "[integration][config]") {
  testing::TempDir dir("fs-sed");
  auto web = dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  auto uid = h.uidOf("web-node1");

  bool real_sed = GENERATE(false, true);
  bool changed = GENERATE(false, true);
  INFO((real_sed ? "sed" : "sed's pattern") << ", content " << (changed ? "changed" : "same"));
  const std::string image = changed ? "busybox:1.37" : "busybox:1.36";
  if (real_sed) {
    std::string cmd = "sed -i 's/busybox:1.36/" + image + "/' '" + web.string() + "'";
    REQUIRE(std::system(cmd.c_str()) == 0);
  } else {
    auto tmp = dir / "sedX1b2c3";  // sorts before web.yaml, same pod name
    testing::writeFile(tmp, podYaml("web", image));
    fs::rename(tmp, web);
  }
  settle(h, dir.path(), changed ? 2 : 1);
  checkSaved(h, uid, changed);
  CHECK(h.names() == std::vector<std::string>{"web-node1", "zz-sentinel-node1"});
  CHECK(h.errors.size() == 0);
}

TEST_CASE(
    "file source (inotify): saving with real vim, with and without backup and writebackup, "
    "keeps or updates the pod exactly as the content implies",
    "[integration][config]") {
  if (std::system("command -v vim >/dev/null 2>&1") != 0)
    testing::skipTest("vim is not installed (Debian package vim)");
  // backupskip is emptied because its default skips /tmp, where the test directories are.
  struct Variant {
    const char* options;
    const char* pattern;
  };
  auto v = GENERATE(values<Variant>({
      // The default on Debian: rename the original to web.yaml~, write a new file, delete the
      // backup (k/k #40331, #83708).
      {"nobackup writebackup backupcopy=no", "rename away, new file, backup deleted"},
      // Rename away and keep the backup: web.yaml~ stays and must not become a pod.
      {"backup backupcopy=no", "rename away, new file, backup kept"},
      // Copy the original to the backup, then overwrite the original in place.
      {"nobackup writebackup backupcopy=yes", "copy backup, write in place, backup deleted"},
      {"backup backupcopy=yes", "copy backup, write in place, backup kept"},
      // No backup at all: truncate and write in place.
      {"nobackup nowritebackup", "write in place"},
  }));
  bool changed = GENERATE(false, true);
  INFO("vim " << v.options << " (" << v.pattern << "), content " << (changed ? "changed" : "same"));
  testing::TempDir dir("fs-realvim");
  auto web = dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  auto uid = h.uidOf("web-node1");
  std::string edit = changed ? "-c '%s/busybox:1.36/busybox:1.37/'" : "";
  std::string cmd = "cd '" + dir.path().string() +
                    "' && HOME=/nonexistent vim -u NONE -N -i NONE -es -c 'set " + v.options +
                    " backupskip=' " + edit + " -c 'wq' web.yaml </dev/null >/dev/null 2>&1";
  CHECK(std::system(cmd.c_str()) == 0);
  CHECK(testing::readFile(web) == (changed ? podYaml("web", "busybox:1.37") : podYaml("web")));
  settle(h, dir.path(), changed ? 2 : 1);
  checkSaved(h, uid, changed);
  CHECK(h.names() == std::vector<std::string>{"web-node1", "zz-sentinel-node1"});
  CHECK(h.errors.size() == 0);
}

TEST_CASE(
    "file source (inotify): cp + mv replaces the manifest with one update, or none for the "
    "same content",
    "[integration][config]") {
  testing::TempDir dir("fs-cpmv");
  testing::TempDir elsewhere("fs-cpmv-src");
  auto web = dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  auto uid = h.uidOf("web-node1");
  bool changed = GENERATE(false, true);
  REQUIRE(std::system(("cp '" + web.string() + "' '" + elsewhere.path().string() + "/'").c_str()) ==
          0);
  if (changed) testing::writeFile(elsewhere / "web.yaml", podYaml("web", "busybox:2"));
  std::string cmd = "mv '" + (elsewhere / "web.yaml").string() + "' '" + web.string() + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  settle(h, dir.path(), changed ? 2 : 1);
  checkSaved(h, uid, changed);
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

TEST_CASE(
    "file source (inotify): a missing directory sends an empty SET and its pods appear "
    "when it does",
    "[integration][config]") {
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
  REQUIRE(
      testing::eventually([&] { return h.names() == std::vector<std::string>{"web-node1"}; }, 3s));

  // The directory goes away: its pods go; it comes back: they come back.
  fs::rename(path, root / "gone");
  REQUIRE(testing::eventually([&] { return h.last().pods.empty(); }, 3s));
  fs::rename(root / "gone", path);
  REQUIRE(
      testing::eventually([&] { return h.names() == std::vector<std::string>{"web-node1"}; }, 3s));
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
  // the old dir removed. The relist is an hour away: the watch must see it within a second.
  fs::path current = dir / "..2024_01_01_00_00_00.000000001";
  for (int i = 2; i <= 4; ++i) {
    INFO("swap " << i);
    auto next =
        dir / ("..2024_01_01_00_00_0" + std::to_string(i) + ".00000000" + std::to_string(i));
    fs::create_directory(next);
    testing::writeFile(next / "web.yaml", podYaml("web", "busybox:" + std::to_string(i)));
    fs::create_directory_symlink(next.filename(), dir / "..data_tmp");
    fs::rename(dir / "..data_tmp", dir / "..data");
    fs::remove_all(current);
    current = next;
    REQUIRE(testing::eventually(
        [&] { return h.uidOf("web-node1") != uid && !h.uidOf("web-node1").empty(); }, 1s));
    CHECK(h.last().pods.size() == 1);
    uid = h.uidOf("web-node1");
  }
  auto n = h.count();
  CHECK(consistently([&] { return h.count() == n; }, 700ms));
  CHECK(h.errors.size() == 0);
}

TEST_CASE(
    "file source (inotify): an inotify queue overflow relists and finds what the lost "
    "events announced",
    "[integration][config]") {
  int max_queued = 16384;
  {
    std::ifstream in("/proc/sys/fs/inotify/max_queued_events");
    in >> max_queued;
  }
  REQUIRE(max_queued > 0);
  testing::TempDir dir("fs-overflow");
  auto web = dir / "web.yaml";
  testing::writeFile(web, podYaml("web"));
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  auto uid = h.uidOf("web-node1");
  auto relists = h.source->stats().relists;

  {
    auto release = h.holdLoop();
    // Fill the kernel's queue with events of an ignored name (alternating, so none coalesce).
    auto flood = (dir / ".flood").string();
    bool flooded = true;
    for (int i = 0; i < max_queued / 2 + 16 && flooded; ++i) {
      flooded = ::symlink("x", flood.c_str()) == 0 && ::unlink(flood.c_str()) == 0;
    }
    CHECK(flooded);
    // These events are lost: only a relist can find the changes.
    testing::writeFile(web, podYaml("web", "busybox:2"));
    testing::writeFile(dir / "db.yaml", podYaml("db"));
    release->set_value();
  }
  REQUIRE(testing::eventually([&] { return h.names().size() == 2; }, 3s));
  CHECK(h.names() == std::vector<std::string>{"db-node1", "web-node1"});
  CHECK(h.uidOf("web-node1") != uid);
  CHECK(h.source->stats().relists > relists);
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

TEST_CASE(
    "file source (inotify): two files with the same pod: the last in sorted order wins, as "
    "in kubelet (a backup left in the directory takes over)",
    "[integration][config]") {
  testing::TempDir dir("fs-dup");
  testing::writeFile(dir / "kube-apiserver.yaml", podYaml("api", "busybox:new"));
  testing::writeFile(dir / "kube-apiserver.yaml.old", podYaml("api", "busybox:old"));
  Harness h(dir.path());
  REQUIRE(h.waitCount(1));
  REQUIRE(h.names() == std::vector<std::string>{"api-node1"});
  auto uid = h.uidOf("api-node1");
  auto loser = (dir / "kube-apiserver.yaml").string();
  REQUIRE(h.errors.get("file", loser).has_value());
  CHECK_THAT(h.errors.get("file", loser)->message, Catch::Contains("kube-apiserver.yaml.old"));

  fs::remove(dir / "kube-apiserver.yaml.old");
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
  // vim's save: the file renamed away to web.yaml~, a new one written, the backup deleted.
  for (int i = 5; i <= 6; ++i) {
    fs::rename(web, dir / "web.yaml~");
    testing::writeFile(web, podYaml("web", "busybox:" + std::to_string(i)));
    fs::remove(dir / "web.yaml~");
    REQUIRE(testing::eventually([&] { return h.uidOf("web-node1") != uid; }, 2s));
    uid = h.uidOf("web-node1");
  }
  auto n = h.count();
  testing::writeFile(dir / "other.yaml", podYaml("other"));
  CHECK(consistently([&] { return h.count() == n; }, 700ms));
  CHECK(h.names() == std::vector<std::string>{"web-node1"});
  fs::remove(web);
  REQUIRE(testing::eventually([&] { return h.last().pods.empty(); }, 2s));
  renameIn(web, podYaml("web"));
  REQUIRE(
      testing::eventually([&] { return h.names() == std::vector<std::string>{"web-node1"}; }, 3s));
}

namespace {

// A manifest mapped shared and writable. Writes through it change the file and its mtime, and
// inotify reports none of them (inotify(7)): only a stat can notice. The mapping holds the file
// open, so the IN_CLOSE_WRITE of its descriptor comes only when it is unmapped: keep it alive
// for as long as the change must stay unannounced.
class SharedMapping {
 public:
  explicit SharedMapping(const fs::path& path) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    size_ = static_cast<size_t>(st.st_size);
    map_ = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(map_ != MAP_FAILED);
  }
  ~SharedMapping() { ::munmap(map_, size_); }
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  // Replaces `from` by `to` (same length).
  void replace(const std::string& from, const std::string& to) {
    REQUIRE(from.size() == to.size());
    char* bytes = static_cast<char*>(map_);
    const auto pos = std::string_view(bytes, size_).find(from);
    REQUIRE(pos != std::string_view::npos);
    std::copy(to.begin(), to.end(), bytes + pos);
    ::msync(map_, size_, MS_SYNC);
  }

 private:
  void* map_ = MAP_FAILED;
  size_t size_ = 0;
};

// Skips (loudly) when $TMPDIR is on a filesystem whose watch the file source does not trust.
void requireTrustedTempFs() {
  struct statfs fs {};
  const auto tmp = fs::temp_directory_path();
  if (::statfs(tmp.c_str(), &fs) != 0 || !config::watchSeesEveryChange(fs.f_type)) {
    testing::skipTest("$TMPDIR (" + tmp.string() +
                      ") is not on a local filesystem the file source trusts its watch on");
  }
}

}  // namespace

TEST_CASE(
    "file source (inotify): with a working watch on a local filesystem the periodic relist "
    "stats no file until the full check period",
    "[integration][config]") {
  requireTrustedTempFs();
  testing::TempDir dir("fs-trust");
  testing::writeFile(dir / "web.yaml", podYaml("web"));
  Harness h(dir.path(), [](config::FileSourceOptions& o) {
    o.check_frequency = 50ms;
    o.full_check_period = 1h;
  });
  REQUIRE(h.waitCount(1));
  const auto uid = h.uidOf("web-node1");
  const auto before = h.source->stats();

  SharedMapping mapping(dir / "web.yaml");
  mapping.replace("busybox:1.36", "busybox:1.37");
  const auto relists = h.source->stats().relists;
  REQUIRE(testing::eventually([&] { return h.source->stats().relists >= relists + 5; }, 10s));
  // Between sweeps the watch is trusted: a change it does not report is not seen yet.
  CHECK(h.source->stats().stat_sweeps == before.stat_sweeps);
  CHECK(h.uidOf("web-node1") == uid);

  // What the watch reports is picked up at once, sweep or not.
  renameIn(dir / "db.yaml", podYaml("db"));
  REQUIRE(testing::eventually([&] { return h.names().size() == 2; }, 3s));
  fs::remove(dir / "db.yaml");
  REQUIRE(testing::eventually([&] { return h.names().size() == 1; }, 3s));
  CHECK(h.source->stats().stat_sweeps == before.stat_sweeps);
}

TEST_CASE(
    "file source (inotify): the full check period's stat sweep catches a change the watch "
    "does not report",
    "[integration][config]") {
  requireTrustedTempFs();
  // 0: every relist is a sweep.
  const auto period = GENERATE(std::chrono::milliseconds(0), std::chrono::milliseconds(300));
  testing::TempDir dir("fs-sweep");
  testing::writeFile(dir / "web.yaml", podYaml("web"));
  Harness h(dir.path(), [period](config::FileSourceOptions& o) {
    o.check_frequency = 50ms;
    o.full_check_period = period;
  });
  REQUIRE(h.waitCount(1));
  const auto uid = h.uidOf("web-node1");
  const auto before = h.source->stats();

  SharedMapping mapping(dir / "web.yaml");
  mapping.replace("busybox:1.36", "busybox:1.37");
  REQUIRE(testing::eventually([&] { return h.uidOf("web-node1") != uid; }, 10s));
  CHECK(h.source->stats().stat_sweeps > before.stat_sweeps);
  auto pods = h.last().pods;
  REQUIRE(pods.size() == 1);
  CHECK(pods[0]->spec->containers.at(0).image == "busybox:1.37");
}

TEST_CASE(
    "file source (inotify): a first list of many files, read on several threads, gives what "
    "one thread would",
    "[integration][config]") {
  testing::TempDir dir("fs-many");
  // Enough files for the parallel read, with each kind the sequential path handles beside them.
  const int n = 300;
  for (int i = 0; i < n; ++i) {
    testing::writeFile(dir / ("p" + std::to_string(i) + ".yaml"), podYaml("p" + std::to_string(i)));
  }
  testing::writeFile(dir / "bad-syntax.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [\n");
  testing::writeFile(dir / "bad-field.yaml", podYaml("Bad_Name"));
  testing::writeFile(dir / "huge.yaml", podYaml("huge") + "# " + std::string(4096, 'x') + "\n");
  testing::writeFile(dir / "dup.yaml", podYaml("p7"));  // same pod name as p7.yaml
  testing::TempDir other("fs-many-target");
  testing::writeFile(other / "linked.yaml", podYaml("linked"));
  fs::create_symlink(other / "linked.yaml", dir / "link.yaml");
  Harness h(dir.path(), [](config::FileSourceOptions& o) { o.max_manifest_bytes = 2048; });
  REQUIRE(h.waitCount(1, 10s));

  auto names = h.names();
  std::sort(names.begin(), names.end());
  std::vector<std::string> want;
  for (int i = 0; i < n; ++i) want.push_back("p" + std::to_string(i) + "-node1");
  want.push_back("linked-node1");
  std::sort(want.begin(), want.end());
  CHECK(names == want);
  // Every pod decoded with its file's path and the node's defaults.
  for (const auto& pod : h.last().pods) {
    CHECK(pod->spec->node_name == "node1");
    CHECK(pod->metadata.annotations.count("kubernetes.io/config.seen") == 1);
  }
  // dup.yaml sorts before p7.yaml: the last one in sorted order wins (kubelet's rule), dup.yaml
  // is the reported duplicate.
  auto error = [&](const std::string& file) { return h.errors.get("file", (dir / file).string()); };
  REQUIRE(error("bad-syntax.yaml"));
  REQUIRE(error("bad-field.yaml"));
  CHECK(error("bad-field.yaml")->message.find("metadata.name") != std::string::npos);
  REQUIRE(error("huge.yaml"));
  REQUIRE(error("dup.yaml"));
  CHECK_FALSE(error("p7.yaml"));
  CHECK(h.errors.size() == 4);
  // Each file read and decoded once: huge.yaml neither (too large).
  const auto stats = h.source->stats();
  CHECK(stats.files_read == n + 4);
  CHECK(stats.manifests_decoded == n + 4);
}
