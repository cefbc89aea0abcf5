// The command line's option parser: a table of options per subcommand, each with a setter that parses
// and range-checks its value. Every refusal is a UsageError naming the option and what it allows; the
// command line turns it into exit status 2 (never a stack trace).
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kdagraph::cli {

// A bad command line: exit status 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

// Value parsers: throw UsageError naming `option`, the text and the allowed values.
int64_t parse_int(const std::string& option, const std::string& text, int64_t lo, int64_t hi);
double parse_real(const std::string& option, const std::string& text, double lo, double hi);
// `text` must be one of `choices`; returns its index.
size_t parse_choice(const std::string& option, const std::string& text, const std::vector<std::string>& choices);
// A comma-separated list of integers, each in [lo, hi]; at least one.
std::vector<int64_t> parse_int_list(const std::string& option, const std::string& text, int64_t lo, int64_t hi);
// A comma-separated list of choices; returns their indices, at least one, no repeats.
std::vector<size_t> parse_choice_list(const std::string& option, const std::string& text,
                                      const std::vector<std::string>& choices);

std::string join(const std::vector<std::string>& items, const char* separator);

class OptionTable {
 public:
  // `command` is what the help and the errors call it ("kdagraph run").
  explicit OptionTable(std::string command, std::string summary);

  // An option taking a value (`--name VALUE` or `--name=VALUE`); `set` parses it.
  void value(const std::string& name, const std::string& metavar, const std::string& help,
             std::function<void(const std::string& option, const std::string& value)> set);
  // A switch (`--name`).
  void flag(const std::string& name, const std::string& help, std::function<void()> set);

  // Parses argv[first..argc). Returns false when --help was asked for (the help is printed).
  bool parse(int argc, char** argv, int first) const;
  std::string help() const;

 private:
  struct Option {
    std::string name, metavar, help;
    std::function<void(const std::string&, const std::string&)> set_value;
    std::function<void()> set_flag;
  };
  const Option* find(const std::string& name) const;
  std::string command_, summary_;
  std::vector<Option> options_;
};

}  // namespace kdagraph::cli
