// runtime::fingerprint: equal statuses agree, and a change of any one field changes it.
#include <catch2/catch.hpp>

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/runtime/runtime.h"

using namespace nodeagent;
using namespace std::chrono_literals;

namespace {

runtime::PodStatus sample() {
  runtime::PodStatus s;
  s.uid = "uid-1";
  s.name = "web";
  s.namespace_ = "default";
  s.ips = {"10.0.0.5"};
  s.sandbox_statuses.push_back(
      {"sb-1", runtime::SandboxState::kReady, 0, base::SystemTime(std::chrono::seconds(100))});
  runtime::ContainerStatus c;
  c.id = {"fake", "c-1"};
  c.name = "main";
  c.state = runtime::ContainerState::kRunning;
  c.created_at = base::SystemTime(std::chrono::seconds(101));
  c.started_at = base::SystemTime(std::chrono::seconds(102));
  c.reason = "";
  c.image = "debian:12";
  c.image_id = "sha256:abc";
  c.hash = {1, 2};
  c.restart_count = 0;
  c.pid = 42;
  c.log_path = "/var/log/pods/x/main/0.log";
  s.container_statuses.push_back(c);
  return s;
}

}  // namespace

TEST_CASE("runtime fingerprint: equal statuses agree and each field counts", "[unit][runtime]") {
  const auto base = sample();
  CHECK(runtime::fingerprint(base) == runtime::fingerprint(sample()));

  using Edit = std::function<void(runtime::PodStatus&)>;
  auto c = [](runtime::PodStatus& s) -> runtime::ContainerStatus& {
    return s.container_statuses.at(0);
  };
  const std::vector<std::pair<std::string, Edit>> edits = {
      {"uid", [](auto& s) { s.uid = "uid-2"; }},
      {"name", [](auto& s) { s.name = "web2"; }},
      {"namespace", [](auto& s) { s.namespace_ = "kube-system"; }},
      {"ips", [](auto& s) { s.ips.push_back("fd00::5"); }},
      {"ip", [](auto& s) { s.ips[0] = "10.0.0.6"; }},
      {"sandbox id", [](auto& s) { s.sandbox_statuses[0].id = "sb-2"; }},
      {"sandbox state",
       [](auto& s) { s.sandbox_statuses[0].state = runtime::SandboxState::kNotReady; }},
      {"sandbox attempt", [](auto& s) { s.sandbox_statuses[0].attempt = 1; }},
      {"sandbox created", [](auto& s) { s.sandbox_statuses[0].created_at += 1s; }},
      {"sandbox count", [](auto& s) { s.sandbox_statuses.push_back(s.sandbox_statuses[0]); }},
      {"container count", [&](auto& s) { s.container_statuses.push_back(c(s)); }},
      {"container id type", [&](auto& s) { c(s).id.type = "process"; }},
      {"container id", [&](auto& s) { c(s).id.id = "c-2"; }},
      {"container name", [&](auto& s) { c(s).name = "side"; }},
      {"state", [&](auto& s) { c(s).state = runtime::ContainerState::kExited; }},
      {"created", [&](auto& s) { c(s).created_at += 1ns; }},
      {"started", [&](auto& s) { c(s).started_at += 1ns; }},
      {"finished", [&](auto& s) { c(s).finished_at += 1ns; }},
      {"exit code", [&](auto& s) { c(s).exit_code = 1; }},
      {"signal", [&](auto& s) { c(s).signal = 9; }},
      {"reason", [&](auto& s) { c(s).reason = "Error"; }},
      {"message", [&](auto& s) { c(s).message = "boom"; }},
      {"image", [&](auto& s) { c(s).image = "debian:13"; }},
      {"image id", [&](auto& s) { c(s).image_id = "sha256:abd"; }},
      {"hash", [&](auto& s) { c(s).hash.low = 3; }},
      {"restart count", [&](auto& s) { c(s).restart_count = 1; }},
      {"pid", [&](auto& s) { c(s).pid = 43; }},
      {"log path", [&](auto& s) { c(s).log_path = "/var/log/pods/x/main/1.log"; }},
      // Neighbouring strings cannot trade characters.
      {"name and namespace shifted",
       [](auto& s) {
         s.name = "webd";
         s.namespace_ = "efault";
       }},
  };
  std::set<uint64_t> seen{runtime::fingerprint(base)};
  for (const auto& [what, edit] : edits) {
    INFO(what);
    auto s = sample();
    edit(s);
    const auto fp = runtime::fingerprint(s);
    CHECK(fp != runtime::fingerprint(base));
    seen.insert(fp);
  }
  CHECK(seen.size() == edits.size() + 1);
}
