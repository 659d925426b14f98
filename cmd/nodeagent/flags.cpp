#include "cmd/nodeagent/flags.h"

#include <cerrno>
#include <cstdlib>

#include "base/duration.h"

namespace nodeagent::cmd {

void FlagSet::add(std::string name, Flag flag) { flags_[std::move(name)] = std::move(flag); }

void FlagSet::addString(std::string name, std::string* target, std::string help) {
  add(std::move(name), {[target](const std::string& v) {
                          *target = v;
                          return base::okStatus();
                        },
                        false, std::move(help)});
}

void FlagSet::addStringList(std::string name, std::vector<std::string>* target, std::string help) {
  add(std::move(name), {[target](const std::string& v) {
                          target->push_back(v);
                          return base::okStatus();
                        },
                        false, std::move(help)});
}

void FlagSet::addInt(std::string name, int64_t* target, std::string help) {
  add(name, {[target, name](const std::string& v) {
               char* end = nullptr;
               errno = 0;
               long long x = std::strtoll(v.c_str(), &end, 10);
               if (v.empty() || *end != '\0' || errno != 0) {
                 return base::invalidArgumentError("--" + name + ": \"" + v +
                                                   "\" is not an integer");
               }
               *target = x;
               return base::okStatus();
             },
             false, std::move(help)});
}

void FlagSet::addDouble(std::string name, double* target, std::string help) {
  add(name, {[target, name](const std::string& v) {
               char* end = nullptr;
               double x = std::strtod(v.c_str(), &end);
               if (v.empty() || *end != '\0') {
                 return base::invalidArgumentError("--" + name + ": \"" + v + "\" is not a number");
               }
               *target = x;
               return base::okStatus();
             },
             false, std::move(help)});
}

void FlagSet::addBool(std::string name, bool* target, std::string help) {
  add(name, {[target, name](const std::string& v) {
               if (v == "true" || v == "1") {
                 *target = true;
               } else if (v == "false" || v == "0") {
                 *target = false;
               } else {
                 return base::invalidArgumentError("--" + name + ": \"" + v +
                                                   "\" is not true or false");
               }
               return base::okStatus();
             },
             true, std::move(help)});
}

void FlagSet::addDuration(std::string name, base::Duration* target, std::string help) {
  add(name, {[target, name](const std::string& v) {
               auto d = base::parseDuration(v);
               if (!d.ok()) return d.status().withContext("--" + name);
               if (*d < base::Duration::zero()) {
                 return base::invalidArgumentError("--" + name + ": must not be negative");
               }
               *target = *d;
               return base::okStatus();
             },
             false, std::move(help)});
}

base::Status FlagSet::setValue(const std::string& name, const std::string& value) {
  auto it = flags_.find(name);
  if (it == flags_.end()) return base::invalidArgumentError("unknown flag --" + name);
  return it->second.set(value);
}

base::Status FlagSet::parse(int argc, char** argv, std::vector<std::string>* positional) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      if (positional != nullptr) {
        positional->push_back(arg);
        continue;
      }
      return base::invalidArgumentError("unexpected argument \"" + arg + "\"");
    }
    auto eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    auto it = flags_.find(name);
    if (it == flags_.end()) return base::invalidArgumentError("unknown flag --" + name);
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (it->second.is_bool) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return base::invalidArgumentError("flag --" + name + " needs a value");
    }
    RETURN_IF_ERROR(it->second.set(value));
    set_.insert(name);
  }
  return base::okStatus();
}

std::string FlagSet::usage() const {
  std::string out;
  for (const auto& [name, flag] : flags_) {
    out += "  --" + name + (flag.is_bool ? "" : "=VALUE");
    out += std::string(name.size() < 28 ? 28 - name.size() : 1, ' ') + flag.help + "\n";
  }
  return out;
}

}  // namespace nodeagent::cmd
