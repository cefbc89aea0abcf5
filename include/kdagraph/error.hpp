// kdagraph: errors. Every public entry point validates on the host before it enqueues anything and
// throws kdagraph::Error naming the argument, its value and the allowed range (docs/errors.md).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace kdagraph {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error("kdagraph: " + message) {}
};

// Thrown for a caller's bad argument; `argument()` names it so callers and tests can tell which.
class InvalidArgument : public Error {
 public:
  InvalidArgument(std::string argument, const std::string& message)
      : Error(message), argument_(std::move(argument)) {}
  const std::string& argument() const noexcept { return argument_; }

 private:
  std::string argument_;
};

namespace detail {

[[noreturn]] void throw_out_of_range(const char* where, const char* argument, int64_t value,
                                     int64_t lo, int64_t hi);
[[noreturn]] void throw_invalid(const char* where, const char* argument, const std::string& what);

}  // namespace detail

// `where`: the entry point; `argument`: the argument's name. Accepts lo <= value <= hi.
inline void require_in_range(const char* where, const char* argument, int64_t value, int64_t lo,
                             int64_t hi) {
  if (value < lo || value > hi) detail::throw_out_of_range(where, argument, value, lo, hi);
}

inline void require(bool ok, const char* where, const char* argument, const std::string& what) {
  if (!ok) detail::throw_invalid(where, argument, what);
}
inline void require(bool ok, const char* where, const char* argument, const char* what) {
  if (!ok) detail::throw_invalid(where, argument, what);
}
// The message made by `what()` only when the check fails: checks on a round's path allocate nothing
// when they pass (an eager round allocates nothing).
template <class Message, std::enable_if_t<std::is_invocable_r_v<std::string, Message&>, int> = 0>
inline void require(bool ok, const char* where, const char* argument, Message&& what) {
  if (!ok) detail::throw_invalid(where, argument, what());
}

}  // namespace kdagraph

namespace kdagraph {

// What only the device can see (docs/errors.md): a kernel that meets a bad value clamps it to a safe one and
// records it here. The first error's code, row and value are kept; `count` counts them all.
enum class DeviceErrorCode : uint32_t {
  none = 0,
  slot_out_of_range = 1,    // a real row's slot (or state row) outside its range: the row is treated as padding
  slot_repeated = 2,        // a slot already used by an earlier row: the later row is treated as padding
  accept_out_of_range = 3,  // an accept length outside its range: clamped into it
  layer_base_invalid = 4,   // a layer table entry null or not 16-byte aligned: the row is treated as padding
  parent_out_of_range = 5,  // a token tree's parent[t] outside [-1, t) (docs/trees.md): read as t - 1 (the chain's)
  path_invalid = 6,         // an accepted path that is not a root-to-node chain of the tree: cut at its first bad node
  ring_out_of_range = 7,    // a replay ring cursor (ring_pending, ring_start) outside its range: clamped into it
};
const char* to_string(DeviceErrorCode c);

struct DeviceErrorWord {
  uint32_t code = 0;  // DeviceErrorCode of the first error
  int32_t row = -1;   // batch row (or slot, for accept_len) where it was met
  int32_t value = 0;  // the offending value
  uint32_t count = 0;
};

// A plain read of an error word in host-visible memory (host-mapped pinned memory on CUDA): it does not
// wait for any stream, so read it after the work you care about has completed to see its errors.
DeviceErrorWord read_device_errors(const DeviceErrorWord* word);
void clear_device_errors(DeviceErrorWord* word);

}  // namespace kdagraph
