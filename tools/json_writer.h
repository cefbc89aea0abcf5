// A small JSON writer for the command line's --json output: objects, arrays, strings, numbers, bools.
// Numbers that are not finite are written as null (JSON has no NaN).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kdagraph::cli {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  // Inside an object: the next value's key.
  JsonWriter& key(const std::string& k);

  JsonWriter& value(const std::string& v);
  JsonWriter& value(const char* v) { return value(std::string(v)); }
  JsonWriter& value(double v);
  JsonWriter& value(int64_t v);
  JsonWriter& value(int32_t v) { return value(int64_t(v)); }
  JsonWriter& value(bool v);
  JsonWriter& null();

  template <class T>
  JsonWriter& field(const std::string& k, const T& v) {
    return key(k).value(v);
  }

  // The document; complete once every object and array is closed.
  const std::string& str() const { return out_; }

 private:
  void before_value();
  void indent();
  std::string out_;
  // One entry per open container: whether it has an element yet.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

}  // namespace kdagraph::cli
