#include "agent/runtime/state_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

namespace nodeagent::runtime {
namespace {

constexpr int kFormatVersion = 1;

void put(std::string& out, std::string_view key, std::string_view value) {
  out.append(key.data(), key.size());
  out += '=';
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out += '\n';
}

void putInt(std::string& out, std::string_view key, long long v) {
  put(out, key, std::to_string(v));
}

std::string unescape(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == '\\' && i + 1 < v.size()) {
      ++i;
      out += v[i] == 'n' ? '\n' : v[i];
    } else {
      out += v[i];
    }
  }
  return out;
}

// Calls fn(key, value) for each line; false on a line without '='.
template <typename Fn>
bool forEachLine(std::string_view text, std::string& error, Fn&& fn) {
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty()) continue;
    auto eq = line.find('=');
    if (eq == std::string_view::npos) {
      error = "line " + std::to_string(line_no) + ": expected key=value";
      return false;
    }
    if (!fn(line.substr(0, eq), unescape(line.substr(eq + 1)))) return false;
  }
  return true;
}

bool parseInt(std::string_view key, const std::string& v, long long& out, std::string& error) {
  if (v.empty()) {
    error = std::string(key) + ": empty number";
    return false;
  }
  char* end = nullptr;
  errno = 0;
  out = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0') {
    error = std::string(key) + ": not a number: " + v;
    return false;
  }
  return true;
}

bool parseUint(std::string_view key, const std::string& v, unsigned long long& out,
               std::string& error) {
  if (v.empty() || v[0] == '-') {
    error = std::string(key) + ": not an unsigned number: " + v;
    return false;
  }
  char* end = nullptr;
  errno = 0;
  out = std::strtoull(v.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0') {
    error = std::string(key) + ": not an unsigned number: " + v;
    return false;
  }
  return true;
}

bool checkVersion(const std::string& v, bool& seen, std::string& error) {
  long long n = 0;
  if (!parseInt("version", v, n, error)) return false;
  if (n != kFormatVersion) {
    error = "version: unsupported format version " + v;
    return false;
  }
  seen = true;
  return true;
}

// The record type and field type of a pointer to a data member.
template <typename>
struct MemberTraits;
template <typename R, typename M>
struct MemberTraits<M R::*> {
  using Record = R;
  using Type = M;
};
template <auto Member>
using RecordOf = typename MemberTraits<decltype(Member)>::Record;
template <auto Member>
using FieldType = typename MemberTraits<decltype(Member)>::Type;
// The number a field holds: T, or the T of an optional<T>.
template <typename T>
struct NumberOf {
  using Type = T;
};
template <typename T>
struct NumberOf<std::optional<T>> {
  using Type = T;
};
template <auto Member>
using FieldNumber = typename NumberOf<FieldType<Member>>::Type;

// Decoders of one key's value into a field of a record, by the field's kind; false with `error`
// naming the key on a malformed value.
template <typename Record>
using FieldDecoder = bool (*)(Record&, std::string_view key, std::string& value,
                              std::string& error);

template <auto Member>
bool textField(RecordOf<Member>& r, std::string_view, std::string& value, std::string&) {
  r.*Member = std::move(value);
  return true;
}

// A repeated key: each line appends to a list.
template <auto Member>
bool textListField(RecordOf<Member>& r, std::string_view, std::string& value, std::string&) {
  (r.*Member).push_back(std::move(value));
  return true;
}

// A number (a flag too: 0 is false).
template <auto Member>
bool intField(RecordOf<Member>& r, std::string_view key, std::string& value, std::string& error) {
  long long n = 0;
  if (!parseInt(key, value, n, error)) return false;
  r.*Member = static_cast<FieldNumber<Member>>(n);
  return true;
}

template <auto Member>
bool uintField(RecordOf<Member>& r, std::string_view key, std::string& value, std::string& error) {
  unsigned long long u = 0;
  if (!parseUint(key, value, u, error)) return false;
  r.*Member = static_cast<FieldNumber<Member>>(u);
  return true;
}

template <auto Member>
bool uintListField(RecordOf<Member>& r, std::string_view key, std::string& value,
                   std::string& error) {
  unsigned long long u = 0;
  if (!parseUint(key, value, u, error)) return false;
  (r.*Member).push_back(static_cast<typename FieldType<Member>::value_type>(u));
  return true;
}

template <typename Record>
struct Field {
  std::string_view key;
  FieldDecoder<Record> decode;
};

// Decodes the lines of `text` into `r` by `fields` (unknown keys are ignored): the format version
// must be present and supported, and so must each key of `required`. False with `error` naming
// the field.
template <typename Record, size_t N>
bool decodeFields(std::string_view text, const std::array<Field<Record>, N>& fields,
                  std::initializer_list<std::string_view> required, Record& r, std::string& error) {
  bool version_seen = false;
  std::vector<std::string_view> seen;
  bool ok = forEachLine(text, error, [&](std::string_view key, std::string value) {
    if (key == "version") return checkVersion(value, version_seen, error);
    auto field = std::find_if(fields.begin(), fields.end(),
                              [key](const Field<Record>& f) { return f.key == key; });
    if (field == fields.end()) return true;
    if (!field->decode(r, key, value, error)) return false;
    seen.push_back(field->key);
    return true;
  });
  if (!ok) return false;
  if (!version_seen) {
    error = "version: missing";
    return false;
  }
  for (std::string_view key : required) {
    if (std::find(seen.begin(), seen.end(), key) == seen.end()) {
      error = std::string(key) + ": missing";
      return false;
    }
  }
  return true;
}

bool cgroupUnifiedField(ShimConfig& c, std::string_view, std::string& value, std::string&) {
  c.cgroup.unified_dir = std::move(value);
  return true;
}

// cgroup_v1=<controller>:<dir>.
bool cgroupV1Field(ShimConfig& c, std::string_view key, std::string& value, std::string& error) {
  const auto colon = value.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == value.size()) {
    error = std::string(key) + ": expected <controller>:<directory>: " + value;
    return false;
  }
  c.cgroup.v1[value.substr(0, colon)] = value.substr(colon + 1);
  return true;
}

// `path` ends with "/<id>" and climbs nowhere: no "." or ".." component. `absolute`: it starts
// with '/' as well.
bool endsWithContainer(std::string_view path, std::string_view id, bool absolute) {
  if (absolute && !path.starts_with('/')) return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view component = path.substr(start, end - start);
    if (component == "." || component == "..") return false;
    start = end + 1;
  }
  return path.size() > id.size() && path.ends_with(id) && path[path.size() - id.size() - 1] == '/';
}

// The agent names a container's cgroup `<cgroup_parent>/<container-id>`: a cgroup name or
// directory that is anything else (a hierarchy's root, "/", a pod's cgroup, another container's)
// is never this container's, and kills and removals through it would hit what is not the
// container's. Such a config is unusable, like any malformed one.
bool checkContainerCgroup(const ShimConfig& c, std::string& error) {
  if (c.cgroup_name.empty() && c.cgroup.empty()) return true;
  const std::string& id = c.container_id;
  if (id == "." || id == ".." || id.find('/') != std::string::npos) {
    error = "container_id: not usable as a cgroup name: " + id;
    return false;
  }
  const std::string expected = " (a container's cgroup ends with /" + id + ")";
  if (!c.cgroup_name.empty() && !endsWithContainer(c.cgroup_name, id, true)) {
    error = "cgroup: not the container's cgroup: " + c.cgroup_name + expected;
    return false;
  }
  if (!c.cgroup.unified_dir.empty() && !endsWithContainer(c.cgroup.unified_dir, id, true)) {
    error = "cgroup_unified: not the container's cgroup: " + c.cgroup.unified_dir + expected;
    return false;
  }
  for (const auto& [controller, dir] : c.cgroup.v1) {
    if (!endsWithContainer(dir, id, true)) {
      error = "cgroup_v1: not the container's cgroup: " + controller + ":" + dir + expected;
      return false;
    }
  }
  return true;
}

constexpr std::array<Field<ShimConfig>, 33> kConfigFields{{
    {"container_id", textField<&ShimConfig::container_id>},
    {"pod_uid", textField<&ShimConfig::pod_uid>},
    {"pod_name", textField<&ShimConfig::pod_name>},
    {"pod_namespace", textField<&ShimConfig::pod_namespace>},
    {"container_name", textField<&ShimConfig::container_name>},
    {"attempt", intField<&ShimConfig::attempt>},
    {"hash", textField<&ShimConfig::hash>},
    {"image", textField<&ShimConfig::image>},
    {"created_at", intField<&ShimConfig::created_at>},
    {"arg", textListField<&ShimConfig::argv>},
    {"env", textListField<&ShimConfig::env>},
    {"working_dir", textField<&ShimConfig::working_dir>},
    {"uid", uintField<&ShimConfig::uid>},
    {"gid", uintField<&ShimConfig::gid>},
    {"no_new_privs", intField<&ShimConfig::no_new_privs>},
    {"set_groups", intField<&ShimConfig::set_groups>},
    {"group", uintListField<&ShimConfig::groups>},
    {"capabilities", uintField<&ShimConfig::capabilities>},
    {"ambient_capabilities", uintField<&ShimConfig::ambient_capabilities>},
    {"log_path", textField<&ShimConfig::log_path>},
    {"log_max_size", intField<&ShimConfig::log_max_size>},
    {"log_max_files", intField<&ShimConfig::log_max_files>},
    {"pre_stop", textListField<&ShimConfig::pre_stop>},
    {"grace_period_seconds", intField<&ShimConfig::grace_period_seconds>},
    {"termination_message_path", textField<&ShimConfig::termination_message_path>},
    {"termination_message_fallback", intField<&ShimConfig::termination_message_fallback>},
    {"cgroup", textField<&ShimConfig::cgroup_name>},
    {"cgroup_unified", cgroupUnifiedField},
    {"cgroup_v1", cgroupV1Field},
    {"oom_score_adj", intField<&ShimConfig::oom_score_adj>},
    {"open_files", uintField<&ShimConfig::open_files>},
    {"stdin", intField<&ShimConfig::stdin>},
    {"stdin_once", intField<&ShimConfig::stdin_once>},
}};

bool statusField(ShimState& s, std::string_view, std::string& value, std::string& error) {
  if (value == "created") {
    s.status = ShimStatus::kCreated;
  } else if (value == "running") {
    s.status = ShimStatus::kRunning;
  } else if (value == "exited") {
    s.status = ShimStatus::kExited;
  } else {
    error = "status: unknown value " + value;
    return false;
  }
  return true;
}

constexpr std::array<Field<ShimState>, 12> kStateFields{{
    {"status", statusField},
    {"shim_pid", intField<&ShimState::shim_pid>},
    {"shim_start_ticks", uintField<&ShimState::shim_start_ticks>},
    {"boot_id", textField<&ShimState::boot_id>},
    {"pid", intField<&ShimState::pid>},
    {"pid_start_ticks", uintField<&ShimState::pid_start_ticks>},
    {"started_at", intField<&ShimState::started_at>},
    {"finished_at", intField<&ShimState::finished_at>},
    {"exit_code", intField<&ShimState::exit_code>},
    {"signal", intField<&ShimState::signal>},
    {"reason", textField<&ShimState::reason>},
    {"message", textField<&ShimState::message>},
}};

}  // namespace

std::string encodeShimConfig(const ShimConfig& c) {
  std::string out;
  putInt(out, "version", kFormatVersion);
  put(out, "container_id", c.container_id);
  put(out, "pod_uid", c.pod_uid);
  put(out, "pod_name", c.pod_name);
  put(out, "pod_namespace", c.pod_namespace);
  put(out, "container_name", c.container_name);
  putInt(out, "attempt", c.attempt);
  put(out, "hash", c.hash);
  put(out, "image", c.image);
  putInt(out, "created_at", c.created_at);
  for (const auto& a : c.argv) put(out, "arg", a);
  for (const auto& e : c.env) put(out, "env", e);
  put(out, "working_dir", c.working_dir);
  if (c.uid) putInt(out, "uid", *c.uid);
  if (c.gid) putInt(out, "gid", *c.gid);
  putInt(out, "no_new_privs", c.no_new_privs ? 1 : 0);
  if (c.set_groups) {
    putInt(out, "set_groups", 1);
    for (uint32_t g : c.groups) putInt(out, "group", g);
  }
  if (c.capabilities) put(out, "capabilities", std::to_string(*c.capabilities));
  if (c.ambient_capabilities != 0) {
    put(out, "ambient_capabilities", std::to_string(c.ambient_capabilities));
  }
  put(out, "log_path", c.log_path);
  putInt(out, "log_max_size", c.log_max_size);
  putInt(out, "log_max_files", c.log_max_files);
  for (const auto& a : c.pre_stop) put(out, "pre_stop", a);
  putInt(out, "grace_period_seconds", c.grace_period_seconds);
  if (!c.termination_message_path.empty()) {
    put(out, "termination_message_path", c.termination_message_path);
    putInt(out, "termination_message_fallback", c.termination_message_fallback ? 1 : 0);
  }
  if (!c.cgroup_name.empty()) put(out, "cgroup", c.cgroup_name);
  if (!c.cgroup.unified_dir.empty()) put(out, "cgroup_unified", c.cgroup.unified_dir);
  for (const auto& [controller, dir] : c.cgroup.v1) put(out, "cgroup_v1", controller + ":" + dir);
  if (c.oom_score_adj) putInt(out, "oom_score_adj", *c.oom_score_adj);
  if (c.open_files) put(out, "open_files", std::to_string(*c.open_files));
  if (c.stdin) putInt(out, "stdin", 1);
  if (c.stdin_once) putInt(out, "stdin_once", 1);
  return out;
}

bool decodeShimConfig(std::string_view text, ShimConfig& c, std::string& error) {
  c = ShimConfig{};
  if (!decodeFields(text, kConfigFields, {}, c, error)) return false;
  if (c.container_id.empty()) {
    error = "container_id: missing";
    return false;
  }
  if (c.argv.empty()) {
    error = "arg: missing (the container has no command)";
    return false;
  }
  return checkContainerCgroup(c, error);
}

std::string encodeShimState(const ShimState& s) {
  std::string out;
  putInt(out, "version", kFormatVersion);
  put(out, "status",
      s.status == ShimStatus::kCreated   ? "created"
      : s.status == ShimStatus::kRunning ? "running"
                                         : "exited");
  putInt(out, "shim_pid", s.shim_pid);
  put(out, "shim_start_ticks", std::to_string(s.shim_start_ticks));
  put(out, "boot_id", s.boot_id);
  putInt(out, "pid", s.pid);
  put(out, "pid_start_ticks", std::to_string(s.pid_start_ticks));
  putInt(out, "started_at", s.started_at);
  putInt(out, "finished_at", s.finished_at);
  putInt(out, "exit_code", s.exit_code);
  putInt(out, "signal", s.signal);
  put(out, "reason", s.reason);
  put(out, "message", s.message);
  return out;
}

bool decodeShimState(std::string_view text, ShimState& s, std::string& error) {
  s = ShimState{};
  return decodeFields(text, kStateFields, {"status"}, s, error);
}

bool writeFileAtomic(const std::string& path, std::string_view content, std::string& error,
                     Durability durability) {
  const bool durable = durability == Durability::kDurable;
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) {
    error = "open " + tmp + ": " + std::strerror(errno);
    return false;
  }
  auto fail = [&](const std::string& what) {
    error = what + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return false;
  };
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("write " + tmp);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  // The data reaches the disk before the name does: after a crash the file holds the old content
  // or the new one, never an empty or partial one.
  if (durable && ::fsync(fd) != 0) return fail("fsync " + tmp);
  const int rc = ::close(fd);
  fd = -1;
  if (rc != 0) return fail("close " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename " + tmp + " to " + path);
  if (!durable) return true;
  // And the rename itself survives a crash.
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0 || ::fsync(dir_fd) != 0) {
    error = "fsync directory " + dir + ": " + std::strerror(errno);
    if (dir_fd >= 0) ::close(dir_fd);
    return false;
  }
  ::close(dir_fd);
  return true;
}

bool readWholeFile(const std::string& path, std::string& out, std::string& error) {
  out.clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = "open " + path + ": " + std::strerror(errno);
    return false;
  }
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = "read " + path + ": " + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

std::optional<ProcStat> parseProcStat(std::string_view text) {
  // The command name (field 2) may contain spaces and parentheses: fields start after the last ')'.
  auto close = text.rfind(')');
  if (close == std::string_view::npos || close + 2 >= text.size()) return std::nullopt;
  ProcStat st;
  st.state = text[close + 2];
  // After ')' come fields 3.. separated by single spaces: ppid is field 4, session 6, utime 14,
  // stime 15, starttime 22, vsize 23, rss 24. Fields up to starttime are required.
  size_t pos = close + 2;
  for (int field = 3; field < 24; ++field) {
    pos = text.find(' ', pos);
    if (pos == std::string_view::npos) {
      if (field < 22) return std::nullopt;
      break;
    }
    ++pos;
    unsigned long long value = 0;
    const char* begin = text.data() + pos;
    const char* end = text.data() + text.size();
    const char* p = begin;
    bool negative = p < end && *p == '-';
    if (negative) ++p;
    for (; p < end && *p >= '0' && *p <= '9'; ++p) {
      value = value * 10 + static_cast<unsigned>(*p - '0');
    }
    const int at = field + 1;  // the field `pos` now starts
    if (at == 4) st.ppid = negative ? 0 : static_cast<int>(value);
    if (at == 6) st.session = negative ? 0 : static_cast<int>(value);
    if (at == 14) st.utime_ticks = value;
    if (at == 15) st.stime_ticks = value;
    if (at == 22) {
      if (p == begin) return std::nullopt;
      st.start_ticks = value;
    }
    if (at == 23) st.vsize_bytes = value;
    if (at == 24) st.rss_pages = negative ? 0 : value;
  }
  return st;
}

std::optional<ProcStat> readProcStat(int pid) {
  if (pid <= 0) return std::nullopt;
  std::string text, error;
  if (!readWholeFile("/proc/" + std::to_string(pid) + "/stat", text, error)) return std::nullopt;
  return parseProcStat(text);
}

bool processAlive(int pid, uint64_t start_ticks) {
  auto st = readProcStat(pid);
  return st && st->state != 'Z' && st->state != 'X' && st->start_ticks == start_ticks;
}

bool containerProcessAlive(const ShimState& state) {
  return state.pid > 0 && state.boot_id == currentBootId() &&
         processAlive(state.pid, state.pid_start_ticks);
}

std::string currentBootId() {
  std::string text, error;
  if (!readWholeFile("/proc/sys/kernel/random/boot_id", text, error)) return "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

int exitCodeForSignal(int signal) { return 128 + signal; }

std::string exitReason(int exit_code) { return exit_code == 0 ? "Completed" : "Error"; }

}  // namespace nodeagent::runtime
