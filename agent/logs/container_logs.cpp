#include "agent/logs/container_logs.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "agent/logs/log_file_reader.h"
#include "api/rest_client.h"
#include "api/time.h"
#include "base/blocking.h"
#include "base/readable_wait.h"
#include "base/strings.h"

namespace nodeagent::logs {
namespace {

// Go's %q for the names in kubelet's messages.
std::string goQuote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// url.Values as kubelet's decoder sees them: the first value of each known key, decoded.
using QueryValues = std::map<std::string, std::string, std::less<>>;

base::StatusOr<QueryValues> splitQuery(std::string_view query) {
  auto pairs = api::parseQuery(query);
  if (!pairs.ok())
    return base::invalidArgumentError("Unable to decode query: " + pairs.status().message());
  QueryValues values;
  for (auto& [key, value] : *pairs)
    values.emplace(std::move(key), std::move(value));  // the first value wins
  return values;
}

const std::string* find(const QueryValues& values, std::string_view key) {
  auto it = values.find(key);
  return it == values.end() ? nullptr : &it->second;
}

// runtime.Convert_Slice_string_To_bool: present means true unless "0" or "false" in any case.
bool flag(const QueryValues& values, std::string_view key) {
  const std::string* v = find(values, key);
  if (v == nullptr || *v == "0") return false;
  return !base::iequals(*v, "false");
}

// strconv.ParseInt(v, 10, 64).
base::Status integer(const QueryValues& values, std::string_view key, std::optional<int64_t>& out) {
  const std::string* v = find(values, key);
  if (v == nullptr) return base::okStatus();
  std::string_view text = *v;
  if (text.size() > 1 && text[0] == '+') text.remove_prefix(1);
  int64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return base::invalidArgumentError(
        "Unable to decode query: " + std::string(key) + ": strconv.ParseInt: parsing " +
        goQuote(*v) + ": " +
        (ec == std::errc::result_out_of_range ? "value out of range" : "invalid syntax"));
  }
  out = n;
  return base::okStatus();
}

struct DecodedOptions {
  LogOptions options;
  std::optional<int64_t> since_seconds;
  bool since_time_given = false;
};

base::StatusOr<DecodedOptions> decodeOptions(std::string_view query) {
  auto values = splitQuery(query);
  if (!values.ok()) return values.status();
  // kubelet keeps the old "tail" spelling: tail=N is tailLines=N, tail=all is no limit.
  if (const std::string* tail = find(*values, "tail"); tail != nullptr && !tail->empty()) {
    if (*tail == "all") {
      values->erase("tailLines");
    } else {
      (*values)["tailLines"] = *tail;
    }
  }
  DecodedOptions d;
  d.options.follow = flag(*values, "follow");
  d.options.previous = flag(*values, "previous");
  d.options.timestamps = flag(*values, "timestamps");
  RETURN_IF_ERROR(integer(*values, "tailLines", d.options.tail_lines));
  RETURN_IF_ERROR(integer(*values, "limitBytes", d.options.limit_bytes));
  RETURN_IF_ERROR(integer(*values, "sinceSeconds", d.since_seconds));
  if (const std::string* since = find(*values, "sinceTime"); since != nullptr) {
    d.since_time_given = true;
    // metav1.Time: "" and "null" are the zero time, which filters nothing.
    if (!since->empty() && *since != "null") {
      auto t = api::parseTime(*since);
      if (!t.ok())
        return base::invalidArgumentError("Unable to decode query: sinceTime: " +
                                          t.status().message());
      d.options.since_time = std::chrono::time_point_cast<base::SystemTime::duration>(*t);
    }
  }
  return d;
}

// The apiserver's ValidatePodLogOptions, with its field error texts.
std::vector<std::string> validate(const DecodedOptions& d) {
  std::vector<std::string> errors;
  const LogOptions& o = d.options;
  if (o.tail_lines && *o.tail_lines < 0) {
    errors.push_back("tailLines: Invalid value: " + std::to_string(*o.tail_lines) +
                     ": must be greater than or equal to 0");
  }
  if (o.limit_bytes && *o.limit_bytes < 1) {
    errors.push_back("limitBytes: Invalid value: " + std::to_string(*o.limit_bytes) +
                     ": must be greater than 0");
  }
  if (d.since_seconds && d.since_time_given) {
    errors.push_back("Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified");
  } else if (d.since_seconds && *d.since_seconds < 1) {
    errors.push_back("sinceSeconds: Invalid value: " + std::to_string(*d.since_seconds) +
                     ": must be greater than 0");
  }
  return errors;
}

// Wakes a follow when the log's directory changes (a write to the live file, a rotation's
// rename and create): an inotify descriptor on the follower's executor, so a waiting follower
// costs a descriptor and no thread; a timer of the injected clock bounds each wait.
class LogWatch {
 public:
  static base::StatusOr<std::unique_ptr<LogWatch>> create(const std::filesystem::path& dir,
                                                          asio::any_io_executor ex,
                                                          base::Clock& clock) {
    int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) {
      return base::internalError("failed to watch log directory \"" + dir.string() +
                                 "\": inotify_init1: " + std::strerror(errno));
    }
    constexpr uint32_t kMask = IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE |
                               IN_CLOSE_WRITE | IN_ATTRIB;
    if (::inotify_add_watch(fd, dir.c_str(), kMask) < 0) {
      int err = errno;
      ::close(fd);
      return base::internalError("failed to watch log directory \"" + dir.string() +
                                 "\": " + std::strerror(err));
    }
    return std::unique_ptr<LogWatch>(new LogWatch(fd, ex, clock));
  }

  // True after a change, false when `period` passed without one.
  asio::awaitable<base::StatusOr<bool>> wait(base::Duration period) {
    auto timed_out = std::make_shared<bool>(false);
    timer_->asyncWaitFor(period, [this, timed_out] {
      *timed_out = true;
      boost::system::error_code ignored;
      sd_.cancel(ignored);
    });
    auto readable = base::waitReadable(sd_);
    boost::system::error_code ec = co_await std::move(readable);
    timer_->cancel();
    if (!ec) {
      drain();
      co_return true;
    }
    if (*timed_out) co_return false;
    co_return base::internalError("failed to wait for log changes: " + ec.message());
  }

 private:
  LogWatch(int fd, asio::any_io_executor ex, base::Clock& clock)
      : sd_(ex, fd), timer_(clock.makeTimer(ex)) {}

  // The events only say "look again"; which file changed does not matter.
  void drain() {
    alignas(inotify_event) char buf[4096];
    while (::read(sd_.native_handle(), buf, sizeof buf) > 0) {
    }
  }

  asio::posix::stream_descriptor sd_;
  base::TimerPtr timer_;
};

// Hands `out` to the sink in pieces of at most kMaxSinkChunk; false when the sink stops.
asio::awaitable<bool> deliver(const LogSink& sink, std::string_view out) {
  while (!out.empty()) {
    size_t n = std::min(out.size(), kMaxSinkChunk);
    auto write = sink(out.substr(0, n));
    bool more = co_await std::move(write);
    if (!more) co_return false;
    out.remove_prefix(n);
  }
  co_return true;
}

// kubelet's waitLogs: whether the container still runs, waiting for a change of its log while
// it does (asking again every `period` without one).
asio::awaitable<base::StatusOr<bool>> waitForLogs(LogWatch& watch,
                                                  const StillRunning& still_running,
                                                  base::Duration period) {
  while (true) {
    auto check = still_running();
    bool running = co_await std::move(check);
    if (!running) co_return false;
    auto wait = watch.wait(period);
    base::StatusOr<bool> changed = co_await std::move(wait);
    if (!changed.ok()) co_return changed.status();
    if (*changed) co_return true;
  }
}

}  // namespace

base::StatusOr<LogOptions> parseLogOptions(std::string_view query, base::SystemTime now) {
  auto decoded = decodeOptions(query);
  if (!decoded.ok()) return decoded.status();
  auto errors = validate(*decoded);
  if (!errors.empty()) {
    // field.ErrorList.ToAggregate: one error as it is, several as "[a, b]".
    std::string message = errors.size() == 1 ? errors[0] : "[";
    for (size_t i = 0; errors.size() > 1 && i < errors.size(); ++i) {
      message += (i == 0 ? "" : ", ") + errors[i];
    }
    if (errors.size() > 1) message += "]";
    return base::outOfRangeError(std::move(message));
  }
  LogOptions options = std::move(decoded->options);
  if (decoded->since_seconds) {
    // kubelet's NewLogOptions: since = now - sinceSeconds. A span reaching before the epoch
    // filters nothing.
    const auto since_epoch =
        std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch());
    if (*decoded->since_seconds < since_epoch.count()) {
      options.since_time = now - std::chrono::seconds(*decoded->since_seconds);
    }
  }
  return options;
}

base::StatusOr<std::string> validateContainerLogStatus(std::string_view pod_name,
                                                       const api::PodStatus& status,
                                                       std::string_view container, bool previous) {
  const api::ContainerStatus* cs = nullptr;
  for (const auto* list : {&status.container_statuses, &status.init_container_statuses}) {
    for (const auto& s : *list) {
      if (cs == nullptr && s.name == container) cs = &s;
    }
  }
  const std::string names = goQuote(container) + " in pod " + goQuote(pod_name);
  auto fail = [](std::string message) { return base::failedPreconditionError(std::move(message)); };
  if (cs == nullptr) return fail("container " + names + " is not available");
  const auto& last = cs->last_state.terminated;
  const bool last_has_id = last && !last->container_id.empty();
  if (previous) {
    if (!last_has_id) return fail("previous terminated container " + names + " not found");
    return last->container_id;
  }
  if (cs->state.running) return cs->container_id;
  if (cs->state.terminated) {
    // The next instance did not start: its terminated state has no ID; the last one's log.
    if (!cs->state.terminated->container_id.empty()) return cs->state.terminated->container_id;
    if (last_has_id) return last->container_id;
    return fail("container " + names + " is terminated");
  }
  if (last) {
    if (!last_has_id) return fail("container " + names + " is terminated");
    return last->container_id;
  }
  if (cs->state.waiting) {
    const std::string& reason = cs->state.waiting->reason;
    if (reason == "ErrImagePull") {
      return fail("container " + names + " is waiting to start: image can't be pulled");
    }
    if (reason == "ImagePullBackOff") {
      return fail("container " + names + " is waiting to start: trying and failing to pull image");
    }
    return fail("container " + names + " is waiting to start: " + reason);
  }
  return fail("container " + names + " is waiting to start - no logs yet");
}

int containerLogsHttpStatus(const base::Status& status) {
  switch (status.code()) {
    case base::StatusCode::kOk:
      return 200;
    case base::StatusCode::kOutOfRange:
      return 422;
    case base::StatusCode::kInvalidArgument:
    case base::StatusCode::kFailedPrecondition:
    case base::StatusCode::kNotFound:
      return 400;
    default:
      return 500;
  }
}

asio::awaitable<base::Status> readLogs(std::filesystem::path log_path, LogOptions options,
                                       LogSink sink, StillRunning still_running,
                                       asio::any_io_executor file_pool, base::Clock& clock,
                                       base::Duration state_check_period) {
  const std::filesystem::path dir = log_path.parent_path();
  // Shared with the pool: a read still running there outlives a cancelled coroutine.
  auto reader = std::make_shared<LogFileReader>(std::move(log_path), std::move(options));
  auto open = base::runBlocking(file_pool, [reader] { return reader->open(); });
  base::Status opened = co_await std::move(open);
  if (!opened.ok()) co_return opened;
  std::unique_ptr<LogWatch> watch;
  bool running = static_cast<bool>(still_running);
  while (true) {
    auto read = base::runBlocking(file_pool, [reader] { return reader->read(); });
    LogFileReader::Chunk chunk = co_await std::move(read);
    if (!chunk.status.ok()) co_return chunk.status;
    auto delivered = deliver(sink, chunk.out);
    bool more = co_await std::move(delivered);
    if (!more || chunk.progress == LogFileReader::Progress::kDone) co_return base::okStatus();
    if (chunk.progress == LogFileReader::Progress::kMore) continue;
    // The end of what was written: a follow waits unless the container stopped before this
    // last pass (kubelet's `!found`).
    if (!running) co_return base::okStatus();
    if (watch == nullptr) {
      auto ex = co_await asio::this_coro::executor;
      auto created = LogWatch::create(dir, ex, clock);
      if (!created.ok()) co_return created.status();
      watch = std::move(*created);
      continue;  // a record written before the watch existed raised no event: look again
    }
    auto wait = waitForLogs(*watch, still_running, state_check_period);
    base::StatusOr<bool> found = co_await std::move(wait);
    if (!found.ok()) co_return found.status();
    running = *found;
  }
}

}  // namespace nodeagent::logs
