// `nodeagent validate [--hostname-override=NODE] FILE...`: decodes, defaults and validates each
// manifest exactly as the file source will, without running anything. Each valid manifest's
// defaulted pod is printed as one compact JSON line on stdout; each problem of an invalid one as
// a "FILE: field.path: message" line on stderr.
#pragma once

namespace nodeagent::cmd {

// `argv[0]` is the subcommand name. Returns the process exit code: 0 when every file is valid,
// 1 when any is not (or cannot be read), 2 for a usage error.
int runValidate(int argc, char** argv);

}  // namespace nodeagent::cmd
