// The node's pod CIDR, for a runtime that gives pods network namespaces of their own (CRI):
// kubelet's updatePodCIDR, which hands the runtime the CIDRs from --pod-cidr at start and from the
// Node's spec.podCIDRs once the apiserver has assigned them (CRI UpdateRuntimeConfig; containerd
// then makes its CNI config from its conf_template, when it has one and no config yet).
//
// With --cni-conf-dir, nodeagent also writes a CNI config of its own there before it tells the
// runtime, so a node needs no network add-on and no template: <dir>/10-nodeagent.conflist with a
// bridge (--cni-bridge, default cbr0, the pods' gateway), host-local addresses from the pod CIDRs
// (their state under <root-dir>/cni/ipam), masquerading of pod traffic leaving the pod CIDRs
// (--cni-masquerade) and portmap for hostPort. containerd must read that directory (its CRI
// plugin's cni conf_dir) and load the plugins from containernetworking-plugins (bin_dir, Debian's
// /usr/lib/cni). The file is replaced only when its content changes; no other file there is
// touched (containerd uses the first config by name: a warning says when another one sorts first).
//
// Threading: set() from any thread; the work (a file write, a runtime call) runs one update at a
// time on the object's strand and the blocking pool. Create with std::make_shared; the runtime and
// the pool must outlive it.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/steady_timer.hpp>

#include "agent/runtime/runtime.h"
#include "base/asio.h"
#include "base/status.h"

namespace nodeagent::agent {

inline constexpr std::string_view kCniConfigFileName = "10-nodeagent.conflist";

struct PodNetworkOptions {
  // Where the agent writes its CNI config; empty: it writes none (the runtime's own config or
  // template serves).
  std::filesystem::path cni_conf_dir;
  std::string bridge = "cbr0";
  bool masquerade = true;
  // host-local's dataDir: the addresses handed out, one file each.
  std::filesystem::path ipam_dir;
  // A write or runtime call that failed is tried again after this (kubelet retries with its
  // node status period), unless newer CIDRs came meanwhile.
  std::chrono::milliseconds retry_delay = std::chrono::seconds(10);
};

// Comma-separated CIDRs as --pod-cidr and spec.podCIDRs give them ("10.244.1.0/24", or one IPv4
// and one IPv6 CIDR for a dual-stack node). InvalidArgument names the bad entry.
base::StatusOr<std::vector<std::string>> parsePodCidrs(std::string_view text);

// The CNI config list nodeagent writes for `cidrs` (parsePodCidrs' result).
std::string cniConflist(const std::vector<std::string>& cidrs, const PodNetworkOptions& options);

// Writes cniConflist into options.cni_conf_dir (made when missing) when the file there differs.
// Returns whether it wrote; `warnings` gets the configs that sort before it.
base::StatusOr<bool> writeCniConfig(const std::vector<std::string>& cidrs,
                                    const PodNetworkOptions& options,
                                    std::vector<std::string>& warnings);

class PodNetwork : public std::enable_shared_from_this<PodNetwork> {
 public:
  PodNetwork(asio::any_io_executor executor, asio::any_io_executor blocking,
             runtime::Runtime& runtime, PodNetworkOptions options);

  // kubelet's updatePodCIDR: `cidrs` (comma-separated) from `source` ("--pod-cidr", "Node
  // <name> spec.podCIDRs"). When they differ from the current ones: the CNI config is written (with
  // --cni-conf-dir), then the runtime is told; the current CIDRs change only when both worked, and
  // a failure is tried again after options.retry_delay. The latest call wins: one made while an
  // update runs is carried out after it. Empty `cidrs` do nothing. Any thread.
  void set(std::string cidrs, std::string source);

  // The CIDRs the runtime was last told, comma-joined ("" before). Any thread.
  std::string podCidr() const;
  // Updates carried out, retries included (for tests). Any thread.
  uint64_t settled() const;

 private:
  struct Wanted {
    std::string cidrs;
    std::string source;
  };
  // On the strand: carries out wanted_ until it is done and nothing newer came.
  asio::awaitable<void> run();
  // True when done (or nothing to retry: bad CIDRs), false after a failure.
  asio::awaitable<bool> update(std::string cidrs, std::string source);

  asio::strand<asio::any_io_executor> strand_;
  asio::steady_timer retry_timer_;
  asio::any_io_executor blocking_;
  runtime::Runtime& runtime_;
  const PodNetworkOptions options_;
  // On the strand.
  Wanted wanted_;
  uint64_t wanted_version_ = 0;
  bool running_ = false;
  mutable std::mutex mu_;
  std::string current_;
  uint64_t settled_ = 0;
};

}  // namespace nodeagent::agent
