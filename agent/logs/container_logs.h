// kubelet's container log reading (kuberuntime/logs ReadLogs) for the kubelet API's
// /containerLogs: the query's options, which container's log a request means, and reading a
// container's CRI log files (rotated ones first) into a sink, following new records across
// rotation until the container stops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "api/pod.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::logs {

// kubelet's v1.PodLogOptions as /containerLogs carries them.
struct LogOptions {
  bool follow = false;
  bool previous = false;
  bool timestamps = false;
  std::optional<int64_t> tail_lines;   // the last N lines (0: none)
  std::optional<int64_t> limit_bytes;  // stop after this many bytes of output
  // Records at or after this time (from sinceTime, or now - sinceSeconds).
  std::optional<base::SystemTime> since_time;
};

// Parses /containerLogs' query string (follow, previous, timestamps, tailLines, limitBytes,
// sinceSeconds, sinceTime, and the old `tail` spelling of tailLines; URL-encoded as clients send
// them) the way kubelet's parameter codec decodes PodLogOptions, then applies the apiserver's
// ValidatePodLogOptions. Flags are true when present unless "0" or "false" (any case), as in
// kubelet's query conversion. A value that does not decode (tailLines=abc, a bad sinceTime or
// escape) is InvalidArgument naming the parameter (kubelet: 400 "Unable to decode query."); a
// decoded value the validation rejects is OutOfRange with the apiserver's field error, e.g.
// "tailLines: Invalid value: -1: must be greater than or equal to 0" (kubelet: 422).
base::StatusOr<LogOptions> parseLogOptions(std::string_view query, base::SystemTime now);

// kubelet's validateContainerLogStatus: the container ID (as the status holds it, e.g.
// "process://<id>") whose log a request for `container` of the pod named `pod_name` means, from
// the pod's API status (containers, then init containers). `previous` asks for the last
// terminated instance; otherwise a running one, else the terminated one. FailedPrecondition with
// kubelet's message when there is none ("container %q in pod %q is waiting to start: <reason>",
// "previous terminated container %q in pod %q not found", "container %q in pod %q is
// terminated", "container %q in pod %q is not available", ...).
base::StatusOr<std::string> validateContainerLogStatus(std::string_view pod_name,
                                                       const api::PodStatus& status,
                                                       std::string_view container, bool previous);

// The HTTP status kubelet answers /containerLogs with for an error of this module:
// OutOfRange (options rejected by validation) 422; InvalidArgument, FailedPrecondition and
// NotFound (kubelet answers every failure of GetContainerLogs 400) 400; anything else 500.
int containerLogsHttpStatus(const base::Status& status);

// Writes a piece of output to the client; false when the client went away (reading stops).
using LogSink = std::function<asio::awaitable<bool>(std::string_view data)>;
// Whether the container still runs (a follow keeps waiting for records while it does).
using StillRunning = std::function<asio::awaitable<bool>()>;

// kubelet's stateCheckPeriod: how often a follow that saw no file event asks still_running.
inline constexpr base::Duration kStateCheckPeriod = std::chrono::seconds(5);
// Largest piece of output handed to the sink in one call.
inline constexpr size_t kMaxSinkChunk = 64 * 1024;

// kubelet's ReadLogs for the log whose live file is `log_path`
// (`<pod-log-dir>/<ns>_<pod>_<uid>/<container>/<n>.log`): every file of that log in order (the
// rotated `<n>.log.<timestamp>` files oldest first, then the live file), each CRI record's text,
// prefixed with its timestamp (RFC3339Nano with all 9 fraction digits, kubelet's
// RFC3339NanoFixed) and a space when options.timestamps; a partial (P) record's text without a
// newline, so the pieces of a long line join up; records before since_time skipped; only the
// last tail_lines lines (counted across the files from the end); stopping after limit_bytes
// bytes. With follow, waits for new records (inotify; the live file being rotated is followed to
// its successor) until `still_running` (asked before each wait, on file events and every
// state_check_period) says the container stopped and everything written was read. File reads run
// on `file_pool`; the sink is called on the caller's executor (a strand: the follow's timer and
// inotify descriptor live there) with pieces of at most kMaxSinkChunk bytes. OK when the sink stops
// reading; NotFound naming the file when the log does not exist; Internal naming the file for a
// read or watch error.
asio::awaitable<base::Status> readLogs(std::filesystem::path log_path, LogOptions options,
                                       LogSink sink, StillRunning still_running,
                                       asio::any_io_executor file_pool, base::Clock& clock,
                                       base::Duration state_check_period = kStateCheckPeriod);

}  // namespace nodeagent::logs
