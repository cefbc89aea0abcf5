#include "tools/cli_args.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kdagraph::cli {

namespace {

std::string range_text(int64_t lo, int64_t hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(separator, begin);
    out.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) return out;
    begin = end + 1;
  }
}

// Words of `text` in lines of at most `width` columns, continuation lines indented by `indent`.
std::string wrapped(const std::string& text, size_t indent, size_t width) {
  std::string out;
  size_t column = indent;
  for (const std::string& word : split(text, ' ')) {
    if (column > indent && column + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
    } else if (column > indent) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
  }
  return out;
}

}  // namespace

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

int64_t parse_int(const std::string& option, const std::string& text, int64_t lo, int64_t hi) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(option + ": '" + text + "' is not an integer (allowed: " + range_text(lo, hi) + ")");
  if (v < lo || v > hi)
    throw UsageError(option + ": " + text + " is outside the allowed range " + range_text(lo, hi));
  return v;
}

double parse_real(const std::string& option, const std::string& text, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  char allowed[96];
  std::snprintf(allowed, sizeof allowed, "[%g, %g]", lo, hi);
  if (text.empty() || *end != '\0' || !std::isfinite(v))
    throw UsageError(option + ": '" + text + "' is not a number (allowed: " + allowed + ")");
  if (v < lo || v > hi) throw UsageError(option + ": " + text + " is outside the allowed range " + allowed);
  return v;
}

size_t parse_choice(const std::string& option, const std::string& text, const std::vector<std::string>& choices) {
  for (size_t i = 0; i < choices.size(); ++i)
    if (choices[i] == text) return i;
  throw UsageError(option + ": '" + text + "' is not one of: " + join(choices, ", "));
}

std::vector<int64_t> parse_int_list(const std::string& option, const std::string& text, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  for (const std::string& item : split(text, ',')) out.push_back(parse_int(option, item, lo, hi));
  return out;
}

std::vector<size_t> parse_choice_list(const std::string& option, const std::string& text,
                                      const std::vector<std::string>& choices) {
  std::vector<size_t> out;
  for (const std::string& item : split(text, ',')) {
    const size_t c = parse_choice(option, item, choices);
    for (size_t seen : out)
      if (seen == c) throw UsageError(option + ": '" + item + "' is listed twice");
    out.push_back(c);
  }
  return out;
}

OptionTable::OptionTable(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void OptionTable::value(const std::string& name, const std::string& metavar, const std::string& help,
                        std::function<void(const std::string&, const std::string&)> set) {
  options_.push_back(Option{"--" + name, metavar, help, std::move(set), nullptr});
}

void OptionTable::flag(const std::string& name, const std::string& help, std::function<void()> set) {
  options_.push_back(Option{"--" + name, "", help, nullptr, std::move(set)});
}

const OptionTable::Option* OptionTable::find(const std::string& name) const {
  for (const Option& o : options_)
    if (o.name == name) return &o;
  return nullptr;
}

bool OptionTable::parse(int argc, char** argv, int first) const {
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (arg.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + arg + "' (options start with --)");
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const Option* o = find(name);
    if (!o) {
      std::vector<std::string> names;
      for (const Option& known : options_) names.push_back(known.name);
      throw UsageError("unknown option " + name + " (allowed: " + join(names, " ") + " --help)");
    }
    if (o->set_flag) {
      if (eq != std::string::npos) throw UsageError(name + " takes no value (got '" + arg.substr(eq + 1) + "')");
      o->set_flag();
      continue;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else {
      if (i + 1 >= argc) throw UsageError(name + " needs a value: " + name + " " + o->metavar);
      value = argv[++i];
    }
    o->set_value(name, value);
  }
  return true;
}

std::string OptionTable::help() const {
  std::string out = "usage: " + command_ + " [options]\n\n" + summary_ + "\n\noptions:\n";
  for (const Option& o : options_) {
    std::string left = "  " + o.name + (o.metavar.empty() ? "" : " " + o.metavar);
    if (left.size() < 30) left.resize(30, ' ');
    else left += "\n" + std::string(30, ' ');
    out += left + wrapped(o.help, 30, 100) + "\n";
  }
  out += "  --help                      this text\n";
  return out;
}

}  // namespace kdagraph::cli
