// The container shims of a root dir as the kernel shows them (/proc), independent of their state
// files: ProcessRuntime::recover() uses them to adopt a live shim whose state file is unusable, and
// to kill deliberately one it cannot identify, rather than start a second copy next to it.
//
// A shim is recognised by its command line, `<shim> run <root-dir>/containers/<container-id>`
// (ProcessRuntime spawns it with an absolute path; a relative one is resolved against the shim's
// working directory). Shims of another root dir never match. Its container is its child that leads
// a session of its own.
//
// Blocking file IO (one pass over /proc): call from recovery, never from a strand.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

namespace nodeagent::runtime {

struct LiveShim {
  int pid = 0;
  uint64_t start_ticks = 0;
  int container_pid = 0;  // 0 when it has none (not started yet, or it already ended)
  uint64_t container_start_ticks = 0;
};

// The state directory a shim's /proc/<pid>/cmdline (NUL-separated arguments) names when it is a
// `run` shim's, "" otherwise.
std::string shimDirFromCmdline(std::string_view cmdline);

// The container ID of `dir` (a shim's state directory, absolute and normalised) when it lies
// directly under `containers_dir` (absolute and normalised too), "" otherwise.
std::string containerIdUnder(const std::filesystem::path& containers_dir,
                             const std::filesystem::path& dir);

// Live (non-zombie) shims of `containers_dir` (<root-dir>/containers), by container ID: processes
// of this user whose command line is exactly `<shim> run <dir>` for a directory in it.
std::map<std::string, LiveShim> findLiveShims(const std::filesystem::path& containers_dir);

// Unix nanoseconds at which a process started `start_ticks` clock ticks after boot (whole-second
// precision: the boot time is); 0 when the boot time is unreadable.
int64_t processStartNanos(uint64_t start_ticks);

}  // namespace nodeagent::runtime
