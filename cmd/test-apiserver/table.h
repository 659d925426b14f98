// meta.k8s.io/v1 Table rendering, so `kubectl get` shows the columns it shows against a real
// cluster: pods NAME READY STATUS RESTARTS AGE (+ IP NODE NOMINATED NODE READINESS GATES with
// -o wide), nodes NAME STATUS ROLES AGE VERSION (+ INTERNAL-IP EXTERNAL-IP OS-IMAGE
// KERNEL-VERSION CONTAINER-RUNTIME), namespaces NAME STATUS AGE, leases NAME HOLDER AGE,
// configmaps NAME DATA AGE, secrets NAME TYPE DATA AGE, serviceaccounts NAME SECRETS AGE, events
// LAST SEEN TYPE REASON OBJECT MESSAGE (+ SUBOBJECT SOURCE FIRST SEEN COUNT NAME), and NAME AGE
// for the rest. Cell logic follows kube-apiserver's printers (pkg/printers/internalversion), which
// it runs wide: every column's cell is sent and kubectl drops priority-1 ones without -o wide.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "cmd/test-apiserver/resources.h"

namespace nodeagent::testapiserver {

enum class IncludeObject { kNone, kMetadata, kObject };

nlohmann::json tableColumnDefinitions(const ResourceInfo& res);
// The cells of one object's row.
nlohmann::json tableCells(const ResourceInfo& res, const nlohmann::json& object,
                          base::SystemTime now);
nlohmann::json tableRow(const ResourceInfo& res, const nlohmann::json& object, base::SystemTime now,
                        IncludeObject include);
// A Table of `objects`; `list_metadata` becomes the Table's metadata (resourceVersion,
// continue). Column definitions are left empty when `with_columns` is false (watch events after
// the first).
nlohmann::json makeTable(const ResourceInfo& res, const std::vector<const nlohmann::json*>& objects,
                         base::SystemTime now, IncludeObject include, nlohmann::json list_metadata,
                         bool with_columns = true);

// kubectl's STATUS column of a pod ("Running", "Pending", "Terminating", "CrashLoopBackOff",
// "Init:0/1", "Completed"...).
std::string podStatusReason(const nlohmann::json& pod);

}  // namespace nodeagent::testapiserver
