#include "cmd/nodeagent/flags.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "base/duration.h"

namespace nodeagent::cmd {
namespace {

std::string defaultList(const std::vector<std::string>& values) {
  if (values.empty()) return {};
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + values[i];
  return out + "]";
}

std::string formatDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

}  // namespace

void FlagSet::add(std::string name, Flag flag) { flags_[std::move(name)] = std::move(flag); }

void FlagSet::addString(std::string name, std::string* target, std::string help) {
  add(std::move(name),
      {[target](const std::string& v) {
         *target = v;
         return base::okStatus();
       },
       false, std::move(help), target->empty() ? std::string() : "\"" + *target + "\""});
}

void FlagSet::addStringList(std::string name, std::vector<std::string>* target, std::string help) {
  add(std::move(name), {[target](const std::string& v) {
                          target->push_back(v);
                          return base::okStatus();
                        },
                        false, std::move(help), defaultList(*target)});
}

void FlagSet::addInt(std::string name, int64_t* target, std::string help) {
  add(name,
      {[target, name](const std::string& v) {
         char* end = nullptr;
         errno = 0;
         long long x = std::strtoll(v.c_str(), &end, 10);
         if (v.empty() || *end != '\0' || errno != 0) {
           return base::invalidArgumentError("--" + name + ": \"" + v + "\" is not an integer");
         }
         *target = x;
         return base::okStatus();
       },
       false, std::move(help), *target == 0 ? std::string() : std::to_string(*target)});
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
             false, std::move(help), *target == 0 ? std::string() : formatDouble(*target)});
}

void FlagSet::addBool(std::string name, bool* target, std::string help) {
  add(name,
      {[target, name](const std::string& v) {
         if (v == "true" || v == "1") {
           *target = true;
         } else if (v == "false" || v == "0") {
           *target = false;
         } else {
           return base::invalidArgumentError("--" + name + ": \"" + v + "\" is not true or false");
         }
         return base::okStatus();
       },
       true, std::move(help), *target ? "true" : ""});
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
             false, std::move(help),
             *target == base::Duration::zero() ? std::string() : base::formatDuration(*target)});
}

base::Status FlagSet::setValue(const std::string& name, const std::string& value) {
  auto it = flags_.find(name);
  if (it == flags_.end()) return base::invalidArgumentError("unknown flag --" + name);
  return it->second.set(value);
}

base::Status FlagSet::parse(int argc, char** argv, std::vector<std::string>* positional) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    // pflag's shorthands, as kubelet accepts them: `-v=2`, `-v 2`, `-v2`, `-h`.
    if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-') {
      auto sh = shorthands_.find(arg[1]);
      if (sh == shorthands_.end()) {
        return base::invalidArgumentError("unknown shorthand flag '" + arg.substr(1, 1) + "' in " +
                                          arg);
      }
      const std::string rest = arg.substr(2);
      arg =
          "--" + sh->second + (rest.empty() ? "" : "=" + (rest[0] == '=' ? rest.substr(1) : rest));
    }
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
    std::string shorthand;
    for (const auto& [letter, long_name] : shorthands_) {
      if (long_name == name) shorthand = std::string("-") + letter + ", ";
    }
    const std::string head = shorthand + "--" + name + (flag.is_bool ? "" : "=VALUE");
    out += "  " + head + std::string(head.size() < 36 ? 36 - head.size() : 1, ' ') + flag.help;
    if (!flag.default_text.empty()) out += " (default " + flag.default_text + ")";
    out += "\n";
  }
  return out;
}

void FlagSet::addShorthand(char letter, std::string name) { shorthands_[letter] = std::move(name); }

}  // namespace nodeagent::cmd
