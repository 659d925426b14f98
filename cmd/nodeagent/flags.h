// A small flag set for nodeagent's commands: kubelet-style `--name=value` or `--name value`
// flags of a few kinds, with the set of flags given explicitly (so a config file can fill in
// the rest), and pflag's one-letter shorthands (`-v=2`, `-v 2`, `-v2`, `-h`). A flag's default
// is its target's value when it is added; usage() shows it as pflag does. Errors name the flag.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::cmd {

class FlagSet {
 public:
  void addString(std::string name, std::string* target, std::string help);
  void addStringList(std::string name, std::vector<std::string>* target, std::string help);
  void addInt(std::string name, int64_t* target, std::string help);
  void addDouble(std::string name, double* target, std::string help);
  void addBool(std::string name, bool* target, std::string help);
  void addDuration(std::string name, base::Duration* target, std::string help);
  // `-<letter>` stands for `--name`.
  void addShorthand(char letter, std::string name);

  // Parses argv[1..]; positional arguments are collected in `positional` (an error when null).
  base::Status parse(int argc, char** argv, std::vector<std::string>* positional = nullptr);
  bool isSet(const std::string& name) const { return set_.count(name) > 0; }
  // Whether `name` is one of this set's flags, and whether it takes a value (all but bools).
  bool has(const std::string& name) const { return flags_.count(name) > 0; }
  bool takesValue(const std::string& name) const {
    auto it = flags_.find(name);
    return it != flags_.end() && !it->second.is_bool;
  }
  // Sets a flag from text (the config file uses this for keys the command line left alone).
  base::Status setValue(const std::string& name, const std::string& value);
  std::string usage() const;

 private:
  struct Flag {
    std::function<base::Status(const std::string&)> set;
    bool is_bool = false;
    std::string help;
    std::string default_text;  // "" when the default is the zero value (pflag omits those)
  };
  void add(std::string name, Flag flag);
  std::map<std::string, Flag> flags_;
  std::set<std::string> set_;
  std::map<char, std::string> shorthands_;
};

}  // namespace nodeagent::cmd
