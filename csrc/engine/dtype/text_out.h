// TextOut: appends the characters an std::ostream would print for the same values (default
// flags; doubles at the precision set for them), without a stream's locale and formatting
// state: a graph's key is this text, and a training step builds one per step (resnet18's
// SGD step: 3.5k nodes of views, shapes and strides). The printers (Node::print,
// ShapeTracker::print, print_shape, Scalar::print) write to either.
#pragma once
#include <charconv>
#include <cstdio>
#include <string>
#include <type_traits>

namespace tiny {

class TextOut {
 public:
  TextOut& operator<<(const char* s) { text_ += s; return *this; }
  TextOut& operator<<(const std::string& s) { text_ += s; return *this; }
  TextOut& operator<<(char c) { text_ += c; return *this; }
  template <class Int, std::enable_if_t<std::is_integral_v<Int> && !std::is_same_v<Int, bool> &&
                                            !std::is_same_v<Int, char>, int> = 0>
  TextOut& operator<<(Int v) {
    char buf[24];
    text_.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
    return *this;
  }
  // as a stream prints it at precision `digits` (%g)
  TextOut& put(double v, int digits) {
    char buf[40];
    int n = std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    text_.append(buf, size_t(n));
    return *this;
  }
  const std::string& str() const { return text_; }
  std::string take() { return std::move(text_); }

 private:
  std::string text_;
};

}  // namespace tiny
