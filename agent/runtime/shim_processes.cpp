#include "agent/runtime/shim_processes.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "agent/runtime/state_file.h"

namespace nodeagent::runtime {
namespace fs = std::filesystem;

std::string shimDirFromCmdline(std::string_view cmdline) {
  std::vector<std::string_view> args;
  while (!cmdline.empty() && args.size() < 4) {
    const auto nul = cmdline.find('\0');
    args.push_back(cmdline.substr(0, nul));
    cmdline = nul == std::string_view::npos ? std::string_view() : cmdline.substr(nul + 1);
  }
  // Exactly `<shim> run <dir>`: an `exec` shim, or anything with more arguments, is not one.
  if (args.size() != 3 || args[1] != "run" || args[2].empty()) return "";
  return std::string(args[2]);
}

std::string containerIdUnder(const fs::path& containers_dir, const fs::path& dir) {
  fs::path d = dir;
  if (!d.has_filename()) d = d.parent_path();  // a trailing '/'
  const std::string id = d.filename().string();
  if (id.empty() || id == "." || id == "..") return "";
  return d.parent_path() == containers_dir ? id : "";
}

namespace {

// Real and effective uid (from /proc/<pid>/status) are both this process's effective uid.
bool ownedByAgentUser(const fs::path& proc_dir) {
  std::string status, error;
  if (!readWholeFile((proc_dir / "status").string(), status, error)) return false;
  const auto at = status.find("\nUid:");
  if (at == std::string::npos) return false;
  unsigned long real = 0, effective = 0;
  if (std::sscanf(status.c_str() + at + 5, "%lu %lu", &real, &effective) != 2) return false;
  return real == ::geteuid() && effective == ::geteuid();
}

// The process runs nodeagent-shim (also once that file was replaced: "... (deleted)").
bool isShimExecutable(const fs::path& proc_dir) {
  std::error_code ec;
  const std::string exe = fs::read_symlink(proc_dir / "exe", ec).filename().string();
  return !ec && exe.rfind("nodeagent-shim", 0) == 0;
}

}  // namespace

std::map<std::string, LiveShim> findLiveShims(const fs::path& containers_dir) {
  std::error_code ec;
  // Shims name their directory as the agent that started them spelled it: compare both the plain
  // and the symlink-resolved form.
  const fs::path plain = fs::absolute(containers_dir, ec).lexically_normal();
  const fs::path resolved = fs::weakly_canonical(plain, ec);
  struct Proc {
    int pid;
    ProcStat stat;
  };
  std::vector<Proc> procs;
  std::map<std::string, LiveShim> shims;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    char* end = nullptr;
    const long pid = std::strtol(name.c_str(), &end, 10);
    if (pid <= 0 || end == nullptr || *end != '\0') continue;
    auto stat = readProcStat(static_cast<int>(pid));
    if (!stat || stat->state == 'Z' || stat->state == 'X') continue;
    procs.push_back({static_cast<int>(pid), *stat});
    // A shim is the nodeagent-shim binary run by the agent's user: another user's process (or a
    // setuid program started by one) with a shim's command line is not one; it could otherwise
    // have its "container" adopted or killed.
    if (!ownedByAgentUser(entry.path()) || !isShimExecutable(entry.path())) continue;
    std::string cmdline, error;
    if (!readWholeFile(entry.path().string() + "/cmdline", cmdline, error)) continue;
    std::string dir_text = shimDirFromCmdline(cmdline);
    if (dir_text.empty()) continue;
    fs::path dir(dir_text);
    if (dir.is_relative()) {
      std::error_code cwd_ec;
      const fs::path cwd = fs::read_symlink(entry.path() / "cwd", cwd_ec);
      if (cwd_ec) continue;
      dir = cwd / dir;
    }
    dir = dir.lexically_normal();
    std::string id = containerIdUnder(plain, dir);
    if (id.empty()) {
      std::error_code resolve_ec;
      const fs::path parent = fs::weakly_canonical(dir.parent_path(), resolve_ec);
      if (!resolve_ec && parent == resolved)
        id = containerIdUnder(resolved, parent / dir.filename());
    }
    if (id.empty()) continue;
    shims[id] = LiveShim{static_cast<int>(pid), stat->start_ticks, 0, 0};
  }
  // The container: the shim's child that leads its own session (the shim forks only it).
  std::map<int, const Proc*> session_leaders_by_parent;
  for (const auto& p : procs) {
    if (p.stat.session == p.pid) session_leaders_by_parent.emplace(p.stat.ppid, &p);
  }
  for (auto& [id, shim] : shims) {
    if (auto it = session_leaders_by_parent.find(shim.pid); it != session_leaders_by_parent.end()) {
      shim.container_pid = it->second->pid;
      shim.container_start_ticks = it->second->stat.start_ticks;
    }
  }
  return shims;
}

int64_t processStartNanos(uint64_t start_ticks) {
  std::string text, error;
  if (!readWholeFile("/proc/stat", text, error)) return 0;
  const auto at = text.find("\nbtime ");
  if (at == std::string::npos) return 0;
  const long long boot_seconds = std::strtoll(text.c_str() + at + 7, nullptr, 10);
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (boot_seconds <= 0 || hz <= 0) return 0;
  const auto ticks = static_cast<int64_t>(start_ticks);
  return boot_seconds * 1'000'000'000 + ticks / hz * 1'000'000'000 +
         ticks % hz * 1'000'000'000 / hz;
}

}  // namespace nodeagent::runtime
