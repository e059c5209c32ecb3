// A small JSON reader for the test manifests: objects, arrays, strings,
// numbers (kept as text so 64-bit integers survive), true, false, null.
#ifndef DSRT_TESTS_JSON_H
#define DSRT_TESTS_JSON_H

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dsrt_test {

class Json {
public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_string() const { return kind_ == Kind::String; }

  bool as_bool() const {
    require(Kind::Bool, "a boolean");
    return bool_;
  }
  double as_double() const {
    require(Kind::Number, "a number");
    return std::strtod(text_.c_str(), nullptr);
  }
  int64_t as_int() const {
    require(Kind::Number, "a number");
    return std::strtoll(text_.c_str(), nullptr, 10);
  }
  const std::string &as_string() const {
    require(Kind::String, "a string");
    return text_;
  }
  const std::vector<Json> &items() const {
    require(Kind::Array, "an array");
    return items_;
  }
  const std::vector<std::pair<std::string, Json>> &members() const {
    require(Kind::Object, "an object");
    return members_;
  }
  const Json *find(const std::string &key) const {
    require(Kind::Object, "an object");
    for (const auto &m : members_)
      if (m.first == key)
        return &m.second;
    return nullptr;
  }
  const Json &at(const std::string &key) const {
    const Json *v = find(key);
    if (!v)
      throw std::runtime_error("json: missing key '" + key + "'");
    return *v;
  }

  static Json parse(const std::string &text) {
    size_t pos = 0;
    Json v = parse_value(text, pos);
    skip(text, pos);
    if (pos != text.size())
      throw std::runtime_error("json: trailing characters at " + std::to_string(pos));
    return v;
  }

private:
  void require(Kind k, const char *what) const {
    if (kind_ != k)
      throw std::runtime_error(std::string("json: value is not ") + what);
  }
  static void skip(const std::string &t, size_t &p) {
    while (p < t.size() && (t[p] == ' ' || t[p] == '\n' || t[p] == '\r' || t[p] == '\t'))
      ++p;
  }
  static Json parse_value(const std::string &t, size_t &p) {
    skip(t, p);
    if (p >= t.size())
      throw std::runtime_error("json: unexpected end");
    Json v;
    char c = t[p];
    if (c == '{') {
      v.kind_ = Kind::Object;
      ++p;
      skip(t, p);
      if (p < t.size() && t[p] == '}') {
        ++p;
        return v;
      }
      while (true) {
        skip(t, p);
        Json key = parse_value(t, p);
        if (key.kind_ != Kind::String)
          throw std::runtime_error("json: object key is not a string");
        skip(t, p);
        expect(t, p, ':');
        Json value = parse_value(t, p);
        v.members_.emplace_back(key.text_, std::move(value));
        skip(t, p);
        if (p < t.size() && t[p] == ',') {
          ++p;
          continue;
        }
        expect(t, p, '}');
        return v;
      }
    }
    if (c == '[') {
      v.kind_ = Kind::Array;
      ++p;
      skip(t, p);
      if (p < t.size() && t[p] == ']') {
        ++p;
        return v;
      }
      while (true) {
        v.items_.push_back(parse_value(t, p));
        skip(t, p);
        if (p < t.size() && t[p] == ',') {
          ++p;
          continue;
        }
        expect(t, p, ']');
        return v;
      }
    }
    if (c == '"') {
      v.kind_ = Kind::String;
      ++p;
      while (p < t.size() && t[p] != '"') {
        if (t[p] == '\\') {
          ++p;
          if (p >= t.size())
            break;
          char e = t[p];
          v.text_ += e == 'n' ? '\n' : e == 't' ? '\t' : e;  // enough for manifests
        } else {
          v.text_ += t[p];
        }
        ++p;
      }
      expect(t, p, '"');
      return v;
    }
    if (t.compare(p, 4, "true") == 0) {
      v.kind_ = Kind::Bool;
      v.bool_ = true;
      p += 4;
      return v;
    }
    if (t.compare(p, 5, "false") == 0) {
      v.kind_ = Kind::Bool;
      p += 5;
      return v;
    }
    if (t.compare(p, 4, "null") == 0) {
      p += 4;
      return v;
    }
    size_t start = p;
    while (p < t.size() && (std::isdigit(static_cast<unsigned char>(t[p])) || t[p] == '-' ||
                            t[p] == '+' || t[p] == '.' || t[p] == 'e' || t[p] == 'E'))
      ++p;
    if (p == start)
      throw std::runtime_error("json: unexpected character '" + std::string(1, c) + "'");
    v.kind_ = Kind::Number;
    v.text_ = t.substr(start, p - start);
    return v;
  }
  static void expect(const std::string &t, size_t &p, char c) {
    if (p >= t.size() || t[p] != c)
      throw std::runtime_error(std::string("json: expected '") + c + "' at " + std::to_string(p));
    ++p;
  }

  Kind kind_ = Kind::Null;
  bool bool_ = false;
  std::string text_;
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;
};

}  // namespace dsrt_test

#endif  // DSRT_TESTS_JSON_H
