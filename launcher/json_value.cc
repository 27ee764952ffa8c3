#include "json_value.h"

#include <cctype>
#include <cstdint>

namespace kolo::launcher {
namespace {

// Deep enough for any configuration file; shallow enough that a hostile
// text cannot exhaust the stack of this recursive reader.
constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  Result<JsonValue> Document() {
    JsonValue value;
    KOLO_RETURN_IF_ERROR(Value(&value, 0));
    SkipSpace();
    if (pos_ != text_.size()) return Error("text after the end of the value");
    return value;
  }

 private:
  Status Error(const std::string& what) const {
    return Status::InvalidArgument("not JSON: " + what + " at character " +
                                   std::to_string(pos_ + 1));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  Status Value(JsonValue* out, int depth) {
    SkipSpace();
    if (pos_ >= text_.size()) return Error("a value expected");
    const char c = text_[pos_];
    if ((c == '{' || c == '[') && depth >= kMaxDepth) {
      return Error("more than 64 levels of nesting");
    }
    if (c == '{') return Object(out, depth);
    if (c == '[') return Array(out, depth);
    if (c == '"') {
      out->kind = JsonValue::Kind::kString;
      return String(&out->text);
    }
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return Number(out);
    for (const auto& [word, kind] :
         {std::pair<const char*, JsonValue::Kind>{"true", JsonValue::Kind::kBool},
          {"false", JsonValue::Kind::kBool},
          {"null", JsonValue::Kind::kNull}}) {
      if (text_.compare(pos_, std::string(word).size(), word) == 0) {
        out->kind = kind;
        out->text = word;
        pos_ += std::string(word).size();
        return Status::OK();
      }
    }
    return Error("a value expected");
  }

  Status Object(JsonValue* out, int depth) {
    out->kind = JsonValue::Kind::kObject;
    ++pos_;  // '{'
    if (Consume('}')) return Status::OK();
    do {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("a member name expected");
      std::pair<std::string, JsonValue> member;
      KOLO_RETURN_IF_ERROR(String(&member.first));
      if (!Consume(':')) return Error("':' expected");
      KOLO_RETURN_IF_ERROR(Value(&member.second, depth + 1));
      out->members.push_back(std::move(member));
    } while (Consume(','));
    if (!Consume('}')) return Error("',' or '}' expected");
    return Status::OK();
  }

  Status Array(JsonValue* out, int depth) {
    out->kind = JsonValue::Kind::kArray;
    ++pos_;  // '['
    if (Consume(']')) return Status::OK();
    do {
      out->items.emplace_back();
      KOLO_RETURN_IF_ERROR(Value(&out->items.back(), depth + 1));
    } while (Consume(','));
    if (!Consume(']')) return Error("',' or ']' expected");
    return Status::OK();
  }

  // RFC 8259's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  Status Number(JsonValue* out) {
    const size_t begin = pos_;
    auto digits = [this] {
      const size_t from = pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      return pos_ > from;
    };
    if (text_[pos_] == '-') ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
    } else if (!digits()) {
      return Error("a digit expected");
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (!digits()) return Error("a digit expected");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digits()) return Error("a digit expected");
    }
    out->kind = JsonValue::Kind::kNumber;
    out->text = text_.substr(begin, pos_ - begin);
    return Status::OK();
  }

  // Four hex digits of a \u escape.
  Result<uint32_t> Hex4() {
    if (pos_ + 4 > text_.size()) return Error("four hex digits expected");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return Error("four hex digits expected");
      }
    }
    return v;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // A \u escape, with the second half of a surrogate pair when one follows;
  // a lone surrogate becomes U+FFFD, as most readers make it.
  Status UnicodeEscape(std::string* out) {
    KOLO_ASSIGN_OR_RETURN(uint32_t cp, Hex4());
    if (cp >= 0xD800 && cp < 0xDC00 && text_.compare(pos_, 2, "\\u") == 0) {
      const size_t after_high = pos_;
      pos_ += 2;
      KOLO_ASSIGN_OR_RETURN(uint32_t low, Hex4());
      if (low >= 0xDC00 && low < 0xE000) {
        AppendUtf8(0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00), out);
        return Status::OK();
      }
      pos_ = after_high;  // not a pair: the second escape is read on its own
    }
    AppendUtf8(cp >= 0xD800 && cp < 0xE000 ? 0xFFFD : cp, out);
    return Status::OK();
  }

  Status String(std::string* out) {
    ++pos_;  // '"'
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return Status::OK();
      if (static_cast<unsigned char>(c) < 0x20) return Error("a control character in a string");
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (pos_ >= text_.size()) break;
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          *out += e;
          break;
        case 'b':
          *out += '\b';
          break;
        case 'f':
          *out += '\f';
          break;
        case 'n':
          *out += '\n';
          break;
        case 'r':
          *out += '\r';
          break;
        case 't':
          *out += '\t';
          break;
        case 'u':
          KOLO_RETURN_IF_ERROR(UnicodeEscape(out));
          break;
        default:
          --pos_;
          return Error("an unknown escape in a string");
      }
    }
    return Error("an unterminated string");
  }

  const std::string& text_;
  size_t pos_ = 0;
};

}  // namespace

const JsonValue* JsonValue::Member(const std::string& key) const {
  const JsonValue* found = nullptr;
  for (const auto& [name, value] : members) {
    if (name == key) found = &value;
  }
  return found;
}

Result<JsonValue> ParseJson(const std::string& text) { return Parser(text).Document(); }

}  // namespace kolo::launcher
