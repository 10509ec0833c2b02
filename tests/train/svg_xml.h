// A strict little XML reader for the SVG tests (train/test_svg.cpp, cli/test_trace_svg.cpp): it accepts
// a prolog, elements with quoted attributes, text, comments and the five named entities plus numeric
// ones, and refuses anything else (unbalanced or mismatched tags, a raw '<' or a bare '&' in text or
// attributes, duplicate attributes, content after the root). Enough to hold remat's SVG to
// well-formedness and to read its geometry back.
#pragma once
#include <cctype>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace svg_xml {

struct Node {
  std::string name;
  std::map<std::string, std::string> attrs;  // values unescaped
  std::string text;                          // direct text content, unescaped
  std::vector<std::unique_ptr<Node>> children;
  const Node* parent = nullptr;

  std::string attr(const std::string& k) const {
    auto it = attrs.find(k);
    return it == attrs.end() ? std::string() : it->second;
  }
  double num(const std::string& k) const { return std::stod(attr(k)); }
  bool has_class(const std::string& c) const {
    std::istringstream s(attr("class"));
    for (std::string w; s >> w;)
      if (w == c) return true;
    return false;
  }
  // Every descendant (self included) for which `pred` holds, in document order.
  void find(const std::function<bool(const Node&)>& pred, std::vector<const Node*>& out) const {
    if (pred(*this)) out.push_back(this);
    for (const auto& c : children) c->find(pred, out);
  }
  std::vector<const Node*> all(const std::string& name) const {
    std::vector<const Node*> out;
    find([&](const Node& n) { return n.name == name; }, out);
    return out;
  }
  std::vector<const Node*> with_class(const std::string& c) const {
    std::vector<const Node*> out;
    find([&](const Node& n) { return n.has_class(c); }, out);
    return out;
  }
  const Node* child(const std::string& name) const {
    for (const auto& c : children)
      if (c->name == name) return c.get();
    return nullptr;
  }
  // The text of this node and all its descendants, whitespace at both ends trimmed.
  std::string all_text() const {
    std::string s = raw_text();
    const size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  }
  std::string raw_text() const {
    std::string s = text;
    for (const auto& c : children) s += c->raw_text();
    return s;
  }
};

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  // The root element; throws std::runtime_error saying where the document is not well formed.
  std::unique_ptr<Node> parse() {
    skip_ws();
    if (starts("<?xml")) {
      const size_t e = s_.find("?>", i_);
      if (e == std::string::npos) fail("unterminated prolog");
      i_ = e + 2;
    }
    skip_misc();
    auto root = element(nullptr);
    skip_misc();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("XML: " + what + " at offset " + std::to_string(i_) + ": '" +
                             s_.substr(i_ > 20 ? i_ - 20 : 0, 60) + "'");
  }
  bool starts(const char* p) const { return s_.compare(i_, std::char_traits<char>::length(p), p) == 0; }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void skip_misc() {
    for (;;) {
      skip_ws();
      if (!starts("<!--")) return;
      const size_t e = s_.find("-->", i_);
      if (e == std::string::npos) fail("unterminated comment");
      i_ = e + 3;
    }
  }
  std::string name() {
    const size_t b = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' || s_[i_] == '_' ||
                              s_[i_] == ':' || s_[i_] == '.'))
      ++i_;
    if (b == i_ || std::isdigit(static_cast<unsigned char>(s_[b])) || s_[b] == '-') fail("expected a name");
    return s_.substr(b, i_ - b);
  }
  // Unescapes s_[b, e): '<' is refused, '&' must start an entity.
  std::string unescape(size_t b, size_t e) {
    std::string out;
    for (size_t k = b; k < e; ++k) {
      const char c = s_[k];
      if (c == '<') { i_ = k; fail("raw '<'"); }
      if (c != '&') { out += c; continue; }
      const size_t semi = s_.find(';', k);
      if (semi == std::string::npos || semi > e || semi - k > 10) { i_ = k; fail("bare '&'"); }
      const std::string ent = s_.substr(k + 1, semi - k - 1);
      if (ent == "lt") out += '<';
      else if (ent == "gt") out += '>';
      else if (ent == "amp") out += '&';
      else if (ent == "quot") out += '"';
      else if (ent == "apos") out += '\'';
      else if (ent.size() > 1 && ent[0] == '#') {
        const bool hex = ent[1] == 'x';
        char* end = nullptr;
        const long v = std::strtol(ent.c_str() + (hex ? 2 : 1), &end, hex ? 16 : 10);
        if (*end != '\0' || v <= 0) { i_ = k; fail("bad character reference"); }
        if (v < 0x80) out += char(v);
        else out += '?';  // not needed by these tests
      } else {
        i_ = k;
        fail("unknown entity &" + ent + ";");
      }
      k = semi;
    }
    return out;
  }
  std::unique_ptr<Node> element(const Node* parent) {
    if (!starts("<")) fail("expected '<'");
    ++i_;
    auto n = std::make_unique<Node>();
    n->parent = parent;
    n->name = name();
    for (;;) {
      const size_t before = i_;
      skip_ws();
      if (starts("/>")) { i_ += 2; return n; }
      if (starts(">")) { ++i_; break; }
      if (i_ == before) fail("expected whitespace before an attribute");
      const std::string k = name();
      skip_ws();
      if (!starts("=")) fail("expected '=' after attribute " + k);
      ++i_;
      skip_ws();
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) fail("unquoted attribute " + k);
      const char q = s_[i_++];
      const size_t e = s_.find(q, i_);
      if (e == std::string::npos) fail("unterminated attribute " + k);
      if (n->attrs.count(k)) fail("duplicate attribute " + k);
      n->attrs[k] = unescape(i_, e);
      i_ = e + 1;
    }
    for (;;) {  // content
      const size_t lt = s_.find('<', i_);
      if (lt == std::string::npos) fail("unclosed <" + n->name + ">");
      n->text += unescape(i_, lt);
      i_ = lt;
      if (starts("</")) {
        i_ += 2;
        const std::string close = name();
        if (close != n->name) fail("</" + close + "> closes <" + n->name + ">");
        skip_ws();
        if (!starts(">")) fail("expected '>'");
        ++i_;
        return n;
      }
      if (starts("<!--")) {
        const size_t e = s_.find("-->", i_);
        if (e == std::string::npos) fail("unterminated comment");
        i_ = e + 3;
        continue;
      }
      if (starts("<!") || starts("<?")) fail("unsupported markup");
      n->children.push_back(element(n.get()));
    }
  }

  const std::string& s_;
  size_t i_ = 0;
};

inline std::unique_ptr<Node> parse(const std::string& s) { return Parser(s).parse(); }

// The numbers of an SVG path's data ("M 1 2 L 3 4 H 5 V 6 Z" -> commands and their arguments).
struct PathCmd {
  char cmd;
  std::vector<double> args;
};
inline std::vector<PathCmd> path_commands(const std::string& d) {
  std::vector<PathCmd> out;
  std::istringstream s(d);
  std::string tok;
  while (s >> tok) {
    if (std::isalpha(static_cast<unsigned char>(tok[0]))) out.push_back({tok[0], {}});
    else if (!out.empty()) out.back().args.push_back(std::stod(tok));
    else throw std::runtime_error("path data starts with a number: " + d);
  }
  return out;
}

// A linear map from an axis' ticks (class xtick / ytick: data-value, and the pixel position of their
// tick line) fitted through the first and last ticks.
struct AxisMap {
  double v0 = 0, v1 = 1, p0 = 0, p1 = 1;
  double pixel(double v) const { return p0 + (v - v0) / (v1 - v0) * (p1 - p0); }
  double value(double p) const { return v0 + (p - p0) / (p1 - p0) * (v1 - v0); }
};
inline AxisMap axis_map(const Node& root, bool x) {
  const auto ticks = root.with_class(x ? "xtick" : "ytick");
  if (ticks.size() < 2) throw std::runtime_error("fewer than two ticks");
  auto pos = [&](const Node* t) {
    const auto lines = t->all("line");
    return lines.back()->num(x ? "x1" : "y1");  // the tick mark (last line of the group)
  };
  return {ticks.front()->num("data-value"), ticks.back()->num("data-value"), pos(ticks.front()), pos(ticks.back())};
}

}  // namespace svg_xml
