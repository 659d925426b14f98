#include "agent/pod_network.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <system_error>

#include <nlohmann/json.hpp>

#include "agent/runtime/state_file.h"
#include "base/blocking.h"

#include <boost/asio/redirect_error.hpp>
#include "base/log.h"
#include "base/printable.h"
#include "base/strings.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("network")

namespace fs = std::filesystem;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// "a.b.c.d/n" or "x::/n" with the host bits zero; false with `why` otherwise.
bool parseCidr(std::string_view text, bool& v6, std::string& why) {
  const auto slash = text.find('/');
  if (slash == std::string_view::npos) {
    why = "no prefix length (/n)";
    return false;
  }
  const std::string address(text.substr(0, slash));
  unsigned char bytes[16] = {};
  v6 = address.find(':') != std::string::npos;
  if (::inet_pton(v6 ? AF_INET6 : AF_INET, address.c_str(), bytes) != 1) {
    why = "\"" + address + "\" is not an IP address";
    return false;
  }
  const auto length_text = text.substr(slash + 1);
  int length = -1;
  const auto [end, ec] =
      std::from_chars(length_text.data(), length_text.data() + length_text.size(), length);
  const int max = v6 ? 128 : 32;
  if (ec != std::errc() || end != length_text.data() + length_text.size() || length < 1 ||
      length > max) {
    why = "prefix length \"" + std::string(length_text) + "\" is not 1.." + std::to_string(max);
    return false;
  }
  for (int bit = length; bit < max; ++bit) {
    if ((bytes[bit / 8] & (0x80 >> (bit % 8))) != 0) {
      why = "host bits are set (the network is not " + address + ")";
      return false;
    }
  }
  return true;
}

}  // namespace

base::StatusOr<std::vector<std::string>> parsePodCidrs(std::string_view text) {
  auto cidrs = base::splitCommaList(text);
  bool have_v4 = false, have_v6 = false;
  for (const auto& entry : cidrs) {
    bool v6 = false;
    std::string why;
    if (!parseCidr(entry, v6, why)) {
      return base::invalidArgumentError("\"" + entry + "\" is not a CIDR: " + why);
    }
    if ((v6 ? have_v6 : have_v4)) {
      return base::invalidArgumentError("\"" + entry + "\": at most one IPv" + (v6 ? "6" : "4") +
                                        " CIDR");
    }
    (v6 ? have_v6 : have_v4) = true;
  }
  if (cidrs.empty()) return base::invalidArgumentError("no CIDR");
  return cidrs;
}

std::string cniConflist(const std::vector<std::string>& cidrs, const PodNetworkOptions& options) {
  nlohmann::json ranges = nlohmann::json::array();
  nlohmann::json routes = nlohmann::json::array();
  for (const auto& cidr : cidrs) {
    ranges.push_back(nlohmann::json::array({{{"subnet", cidr}}}));
    routes.push_back({{"dst", cidr.find(':') != std::string::npos ? "::/0" : "0.0.0.0/0"}});
  }
  nlohmann::json bridge = {{"type", "bridge"},
                           {"bridge", options.bridge},
                           {"isGateway", true},
                           {"ipMasq", options.masquerade},
                           {"hairpinMode", true},
                           {"ipam",
                            {{"type", "host-local"},
                             {"ranges", ranges},
                             {"routes", routes},
                             {"dataDir", options.ipam_dir.string()}}}};
  nlohmann::json portmap = {
      {"type", "portmap"}, {"capabilities", {{"portMappings", true}}}, {"snat", true}};
  nlohmann::json list = {{"cniVersion", "0.4.0"},
                         {"name", "nodeagent"},
                         {"plugins", nlohmann::json::array({bridge, portmap})}};
  return list.dump(2) + "\n";
}

base::StatusOr<bool> writeCniConfig(const std::vector<std::string>& cidrs,
                                    const PodNetworkOptions& options,
                                    std::vector<std::string>& warnings) {
  const fs::path& dir = options.cni_conf_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return base::unknownError("--cni-conf-dir " + dir.string() + ": " + ec.message());
  // containerd loads the first *.conf, *.conflist or *.json by name.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string ext = entry.path().extension().string();
    if ((ext == ".conf" || ext == ".conflist" || ext == ".json") && name < kCniConfigFileName) {
      warnings.push_back("CNI config " + entry.path().string() + " comes before " +
                         std::string(kCniConfigFileName) +
                         " by name: a runtime that loads the first config uses it instead");
    }
  }
  std::sort(warnings.begin(), warnings.end());
  const fs::path file = dir / kCniConfigFileName;
  const std::string content = cniConflist(cidrs, options);
  std::string have, error;
  if (runtime::readWholeFile(file.string(), have, error) && have == content) return false;
  fs::create_directories(options.ipam_dir, ec);
  if (ec)
    return base::unknownError("CNI IPAM directory " + options.ipam_dir.string() + ": " +
                              ec.message());
  if (!runtime::writeFileAtomic(file.string(), content, error)) {
    return base::unknownError("writing " + file.string() + ": " + error);
  }
  return true;
}

PodNetwork::PodNetwork(asio::any_io_executor executor, asio::any_io_executor blocking,
                       runtime::Runtime& runtime, PodNetworkOptions options)
    : strand_(asio::make_strand(executor)),
      retry_timer_(strand_),
      blocking_(std::move(blocking)),
      runtime_(runtime),
      options_(std::move(options)) {}

void PodNetwork::set(std::string cidrs, std::string source) {
  if (trim(cidrs).empty()) return;
  asio::post(strand_, [self = shared_from_this(), cidrs = std::move(cidrs),
                       source = std::move(source)]() mutable {
    self->wanted_ = Wanted{std::move(cidrs), std::move(source)};
    ++self->wanted_version_;
    self->retry_timer_.cancel();  // a retry waiting gives way to the new value at once
    if (self->running_) return;
    self->running_ = true;
    // The loop holds its own reference: the object lives until it ends.
    asio::co_spawn(
        self->strand_,
        [](std::shared_ptr<PodNetwork> keep) -> asio::awaitable<void> {
          co_await keep->run();
        }(self),
        asio::detached);
  });
}

std::string PodNetwork::podCidr() const {
  std::lock_guard lock(mu_);
  return current_;
}

uint64_t PodNetwork::settled() const {
  std::lock_guard lock(mu_);
  return settled_;
}

asio::awaitable<void> PodNetwork::run() {
  // On the strand: the latest value wins; one that failed is tried again after retry_delay
  // unless a newer one came meanwhile.
  for (;;) {
    const uint64_t version = wanted_version_;
    const Wanted want = wanted_;
    bool done = true;
    try {
      done = co_await update(want.cidrs, want.source);
    } catch (const std::exception& e) {
      log()->error("Pod CIDR update failed source={} err={}", base::goQuote(want.source), e.what());
      done = false;
    }
    {
      std::lock_guard lock(mu_);
      ++settled_;
    }
    if (version != wanted_version_) continue;
    if (done) break;
    retry_timer_.expires_after(options_.retry_delay);
    boost::system::error_code ec;
    co_await retry_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  running_ = false;
}

asio::awaitable<bool> PodNetwork::update(std::string cidrs, std::string source) {
  auto parsed = parsePodCidrs(cidrs);
  if (!parsed.ok()) {
    log()->error("Pod CIDR update failed source={} err={}", base::goQuote(source),
                 base::goQuote(parsed.status().message()));
    co_return true;  // nothing to try again
  }
  // The runtime gets (and the state keeps) the CIDRs without blanks or empty entries.
  std::string joined;
  for (const auto& cidr : *parsed) joined += (joined.empty() ? "" : ",") + cidr;
  const std::string before = podCidr();
  if (joined == before) co_return true;
  if (!options_.cni_conf_dir.empty()) {
    auto write = [options = options_,
                  list = *parsed]() -> base::StatusOr<std::pair<bool, std::vector<std::string>>> {
      std::vector<std::string> warnings;
      auto wrote = writeCniConfig(list, options, warnings);
      if (!wrote.ok()) return wrote.status();
      return std::make_pair(*wrote, std::move(warnings));
    };
    auto task = base::runBlocking(blocking_, std::move(write));
    auto written = co_await std::move(task);
    if (!written.ok()) {
      log()->error("Pod CIDR update failed source={} err={}", base::goQuote(source),
                   base::goQuote(written.status().message()));
      co_return false;
    }
    for (const auto& warning : written->second) log()->warn("{}", warning);
    if (written->first) {
      log()->info("Wrote CNI config file={} cidrs={}",
                  (options_.cni_conf_dir / kCniConfigFileName).string(), joined);
    }
  }
  auto tell = runtime_.updatePodCidr(joined);
  auto told = co_await std::move(tell);
  if (!told.ok()) {
    log()->error("Pod CIDR update failed source={} err={}", base::goQuote(source),
                 base::goQuote("failed to update pod CIDR: " + told.toString()));
    co_return false;
  }
  log()->info("Setting Pod CIDR: {} -> {} source={}", before, joined, base::goQuote(source));
  std::lock_guard lock(mu_);
  current_ = std::move(joined);
  co_return true;
}

}  // namespace nodeagent::agent
