#include "viz/svg_canvas.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "viz/svg.h"

namespace remat {

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters other than tab / newline are not allowed in XML 1.0: drop them.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') break;
        out += c;
    }
  }
  return out;
}

}  // namespace remat

namespace remat::svg {

namespace {

const char* const kFont = "DejaVu Sans, Helvetica, Arial, sans-serif";

// Advance widths of ' ' to '~' in DejaVu Sans and DejaVu Sans Bold (hmtx, 2048 units per em).
constexpr int kRegular[95] = {
    651,  821,  942,  1716, 1303, 1946, 1597, 563,  799,  799,  1024, 1716, 651,  739,  651,  690,  1303, 1303, 1303,
    1303, 1303, 1303, 1303, 1303, 1303, 1303, 690,  690,  1716, 1716, 1716, 1087, 2048, 1401, 1405, 1430, 1577, 1294,
    1178, 1587, 1540, 604,  604,  1343, 1141, 1767, 1532, 1612, 1235, 1612, 1423, 1300, 1251, 1499, 1401, 2025, 1403,
    1251, 1403, 799,  690,  799,  1716, 1024, 1024, 1255, 1300, 1126, 1300, 1260, 721,  1300, 1298, 569,  569,  1186,
    569,  1995, 1298, 1253, 1300, 1300, 842,  1067, 803,  1298, 1212, 1675, 1212, 1212, 1075, 1303, 690,  1303, 1716};
constexpr int kBold[95] = {
    713,  934,  1067, 1716, 1425, 2052, 1786, 627,  936,  936,  1071, 1716, 778,  850,  778,  748,  1425, 1425, 1425,
    1425, 1425, 1425, 1425, 1425, 1425, 1425, 819,  819,  1716, 1716, 1716, 1188, 2048, 1585, 1561, 1503, 1700, 1399,
    1399, 1681, 1714, 762,  762,  1587, 1305, 2038, 1714, 1741, 1501, 1741, 1577, 1475, 1397, 1663, 1585, 2259, 1579,
    1483, 1485, 936,  748,  936,  1716, 1024, 1024, 1382, 1466, 1214, 1466, 1389, 891,  1466, 1458, 702,  702,  1362,
    702,  2134, 1458, 1407, 1466, 1466, 1010, 1219, 979,  1458, 1335, 1892, 1321, 1335, 1192, 1458, 748,  1458, 1716};

bool is_bold(const std::string& extra) { return extra.find("font-weight=\"bold\"") != std::string::npos; }

const char* const kEllipsis = "\u2026";

// `s` without its last character (a whole UTF-8 sequence).
void pop_char(std::string& s) {
  while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80) s.pop_back();
  if (!s.empty()) s.pop_back();
}

int tick_decimals(const std::vector<double>& t) {
  if (t.size() < 2) return 0;
  return std::max(0, int(std::ceil(-std::log10(t[1] - t[0]) - 1e-9)));
}

}  // namespace

std::string num(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

double text_width(const std::string& s, double size, bool bold) {
  const int* w = bold ? kBold : kRegular;
  double units = 0;
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7F) units += w[c - 0x20];
    else if ((c & 0xC0) == 0xC0) units += 2048;  // the lead byte of a non-ASCII character: 1 em
  }
  return units / 2048.0 * size;
}

Box text_box(double x, double y, const std::string& s, double size, const std::string& anchor, bool bold) {
  const double w = text_width(s, size, bold);
  const double left = anchor == "start" ? x : anchor == "end" ? x - w : x - w / 2;
  return {left, y - 0.8 * size, left + w, y + 0.25 * size};
}

std::string text(double x, double y, const std::string& s, double size, const std::string& anchor,
                 const std::string& extra) {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + num(size) + "\" text-anchor=\"" + anchor +
         "\"" + (extra.empty() ? "" : " " + extra) + ">" + xml_escape(s) + "</text>\n";
}

std::string halo_text(double x, double y, const std::string& s, double size, const std::string& anchor,
                      const std::string& extra) {
  return text(x, y, s, size, anchor,
              "stroke=\"white\" stroke-width=\"3\" stroke-linejoin=\"round\" paint-order=\"stroke\"" +
                  (extra.empty() ? "" : " " + extra));
}

std::string text_lines(double x, double y, const std::vector<std::string>& lines, double size, const std::string& anchor,
                       const std::string& extra) {
  if (lines.size() == 1) return text(x, y, lines[0], size, anchor, extra);
  std::string s = "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + num(size) + "\" text-anchor=\"" +
                  anchor + "\"" + (extra.empty() ? "" : " " + extra) + ">";
  for (size_t i = 0; i < lines.size(); ++i)
    s += "<tspan x=\"" + num(x) + "\" y=\"" + num(y + 1.2 * size * double(i)) + "\">" + xml_escape(lines[i]) + "</tspan>";
  return s + "</text>\n";
}

Box lines_box(double x, double y, const std::vector<std::string>& lines, double size, const std::string& anchor,
              bool bold) {
  Box b = text_box(x, y, lines.empty() ? "" : lines[0], size, anchor, bold);
  for (size_t i = 1; i < lines.size(); ++i) {
    const Box l = text_box(x, y + 1.2 * size * double(i), lines[i], size, anchor, bold);
    b = {std::min(b.x0, l.x0), b.y0, std::max(b.x1, l.x1), l.y1};
  }
  return b;
}

std::vector<std::string> wrap(const std::string& s, double size, double max_width, int max_lines, bool bold) {
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < s.size()) {
    if (int(lines.size()) == max_lines - 1 || text_width(s.substr(at), size, bold) <= max_width) {
      lines.push_back(s.substr(at));
      break;
    }
    // The longest run of words that fits, its trailing space kept on this line.
    size_t end = std::string::npos;
    for (size_t sp = s.find(' ', at); sp != std::string::npos; sp = s.find(' ', sp + 1)) {
      if (text_width(s.substr(at, sp - at), size, bold) > max_width) break;
      end = sp + 1;
    }
    if (end == std::string::npos) {  // one word wider than a line: it ends the text, cut below
      lines.push_back(s.substr(at));
      break;
    }
    lines.push_back(s.substr(at, end - at));
    at = end;
  }
  if (lines.empty()) lines.push_back("");
  std::string& last = lines.back();
  if (text_width(last, size, bold) > max_width) {
    while (!last.empty() && text_width(last + kEllipsis, size, bold) > max_width) pop_char(last);
    last += kEllipsis;
  }
  return lines;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + (lo == 0 ? 1 : std::abs(lo) * 0.1);
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
  const double first = std::floor(lo / step + 1e-9) * step, last = std::ceil(hi / step - 1e-9) * step;
  std::vector<double> t;
  for (int i = 0; first + i * step <= last + step * 1e-6; ++i) t.push_back(first + i * step);
  return t;
}

namespace {
// Ticks in `scale` units of the value, labelled with `suffix`; "0" for zero when `bare_zero`.
Axis scaled_axis(double lo, double hi, int target, double scale, const std::string& suffix, int min_decimals,
                 bool bare_zero) {
  const std::vector<double> t = nice_ticks(lo / scale, hi / scale, target);
  const int d = std::max(min_decimals, tick_decimals(t));
  Axis a;
  for (double v : t) {
    a.ticks.push_back(v * scale);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", d, v);
    a.labels.push_back(bare_zero && std::abs(v) < 1e-12 ? "0" : buf + suffix);
  }
  return a;
}
}  // namespace

Axis bytes_axis(double lo, double hi, int target) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && hi >= std::pow(1024.0, u + 1)) ++u;
  return scaled_axis(lo, hi, target, std::pow(1024.0, u), std::string(" ") + units[u], 0, true);
}

Axis ratio_axis(double lo, double hi, int target) { return scaled_axis(lo, hi, target, 1.0, "x", 2, false); }

Axis seconds_axis(double lo, double hi, int target) {
  return hi < 1.0 ? scaled_axis(lo, hi, target, 1e-3, " ms", 0, true) : scaled_axis(lo, hi, target, 1.0, " s", 0, true);
}

std::string svg_open(const std::string& title) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
         num(kWidth) + "\" height=\"" + num(kHeight) + "\" viewBox=\"0 0 " + num(kWidth) + " " + num(kHeight) +
         "\" font-family=\"" + kFont + "\">\n<title>" + xml_escape(title) + "</title>\n<rect width=\"" +
         num(kWidth) + "\" height=\"" + num(kHeight) + "\" fill=\"white\"/>\n";
}

std::string title_text(const std::string& title, double* bottom) {
  // 16 px on one or two lines; a title longer than that at 14 px, on as many lines as it takes.
  const double margin = 20, width = kWidth - 2 * margin;
  double size = 16;
  std::vector<std::string> lines = wrap(title, size, width, 1000, true);
  if (lines.size() > 2) {
    size = 14;
    lines = wrap(title, size, width, 1000, true);
  }
  const double y = 12 + 0.8 * size;
  *bottom = lines_box(kWidth / 2, y, lines, size, "middle", true).y1;
  return text_lines(kWidth / 2, y, lines, size, "middle", "class=\"title\" font-weight=\"bold\" fill=\"#222\"");
}

std::string plot_frame(const Plot& p, double vx0, double vx1, double vy0, double vy1) {
  return "<rect class=\"plot\" x=\"" + num(p.x0) + "\" y=\"" + num(p.y0) + "\" width=\"" + num(p.x1 - p.x0) +
         "\" height=\"" + num(p.y1 - p.y0) + "\" fill=\"none\" stroke=\"#444\" stroke-width=\"1\" data-x0=\"" +
         num(vx0, 6) + "\" data-x1=\"" + num(vx1, 6) + "\" data-y0=\"" + num(vy0, 6) + "\" data-y1=\"" +
         num(vy1, 6) + "\"/>\n";
}

std::string xtick(const Plot& p, double x, double value, const std::string& label, bool grid) {
  std::string s = "<g class=\"xtick\" data-value=\"" + num(value, 6) + "\">";
  if (grid)
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(p.y0) + "\" x2=\"" + num(x) + "\" y2=\"" + num(p.y1) +
         "\" stroke=\"#e4e4e4\"/>";
  s += "<line x1=\"" + num(x) + "\" y1=\"" + num(p.y1) + "\" x2=\"" + num(x) + "\" y2=\"" + num(p.y1 + 5) +
       "\" stroke=\"#444\"/>";
  return s + text(x, p.y1 + 19, label, 12, "middle", "fill=\"#333\"") + "</g>\n";
}

std::string ytick(const Plot& p, double y, double value, const std::string& label) {
  std::string s = "<g class=\"ytick\" data-value=\"" + num(value, 6) + "\">";
  s += "<line x1=\"" + num(p.x0) + "\" y1=\"" + num(y) + "\" x2=\"" + num(p.x1) + "\" y2=\"" + num(y) +
       "\" stroke=\"#e4e4e4\"/>";
  s += "<line x1=\"" + num(p.x0 - 5) + "\" y1=\"" + num(y) + "\" x2=\"" + num(p.x0) + "\" y2=\"" + num(y) +
       "\" stroke=\"#444\"/>";
  return s + text(p.x0 - 8, y + 4, label, 12, "end", "fill=\"#333\"") + "</g>\n";
}

std::string axis_titles(const Plot& p, const std::string& x, const std::string& y, double x_offset) {
  return text((p.x0 + p.x1) / 2, p.y1 + x_offset, x, 13, "middle", "class=\"axis-title\" fill=\"#222\"") +
         "<text class=\"axis-title\" x=\"0\" y=\"0\" font-size=\"13\" text-anchor=\"middle\" fill=\"#222\" "
         "transform=\"translate(" + num(22) + " " + num((p.y0 + p.y1) / 2) + ") rotate(-90)\">" + xml_escape(y) +
         "</text>\n";
}

double legend_height(const std::vector<LegendRow>& rows) { return double(rows.size()) * 18 + 10; }

std::string legend(double x, double y, const std::vector<LegendRow>& rows, double width, Box* box) {
  const double row_h = 18, h = legend_height(rows);
  std::string s = "<g class=\"legend\"><rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(width) +
                  "\" height=\"" + num(h) + "\" fill=\"white\" fill-opacity=\"0.92\" stroke=\"#bbb\" rx=\"3\"/>\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const double cy = y + 5 + row_h * (double(i) + 0.5);
    std::string sw = rows[i].swatch;
    for (auto [key, val] : {std::pair<std::string, double>{"{X}", x + 16}, {"{X0}", x + 7}, {"{X1}", x + 25}, {"{Y}", cy}}) {
      for (size_t at; (at = sw.find(key)) != std::string::npos;) sw.replace(at, key.size(), num(val));
    }
    s += sw + text(x + 30, cy + 4, rows[i].label, 12, "start", "fill=\"#222\"");
  }
  *box = {x, y, x + width, y + h};
  return s + "</g>\n";
}

double legend_width(const std::vector<LegendRow>& rows) {
  double w = 0;
  for (const LegendRow& r : rows) w = std::max(w, text_width(r.label, 12));
  return w + 40;
}

std::string LabelPlacer::place(double x, double y, double r, const std::string& label, double size,
                               const std::string& extra, int rings, double max_width) {
  const bool bold = is_bold(extra);
  const std::vector<std::string> lines = wrap(label, size, std::min(max_width, area.x1 - area.x0), 2, bold);
  const double extra_h = 1.2 * size * double(lines.size() - 1);  // below the first baseline
  struct Cand { double x, y; const char* anchor; bool away; };
  std::vector<Cand> cands;
  // Rings at 1, 2.2, 3.6, ... marker radii (plus a gap) out; the first beside the marker.
  for (int k = 0; k < std::max(1, rings); ++k) {
    const double d = (r + 4) * (1.0 + 1.3 * k), e = d * 0.75;
    const bool away = k > 0;
    cands.push_back({x + d, y + 0.35 * size - extra_h / 2, "start", away});
    cands.push_back({x - d, y + 0.35 * size - extra_h / 2, "end", away});
    cands.push_back({x, y - d - extra_h, "middle", away});
    cands.push_back({x, y + d + 0.8 * size, "middle", away});
    cands.push_back({x + e, y - e - extra_h, "start", away});
    cands.push_back({x + e, y + e + 0.8 * size, "start", away});
    cands.push_back({x - e, y - e - extra_h, "end", away});
    cands.push_back({x - e, y + e + 0.8 * size, "end", away});
  }
  for (const Cand& c : cands) {
    const Box b = lines_box(c.x, c.y, lines, size, c.anchor, bold);
    const Box padded{b.x0 - 1, b.y0 - 1, b.x1 + 1, b.y1 + 1};
    if (!padded.inside(area)) continue;
    if (std::any_of(taken.begin(), taken.end(), [&](const Box& t) { return t.overlaps(padded); })) continue;
    taken.push_back(padded);
    std::string out;
    if (c.away) {  // a leader line from the marker's edge to the label's nearest edge
      const double lx = std::clamp(x, b.x0, b.x1), ly = std::clamp(y, b.y0, b.y1);
      const double dx = lx - x, dy = ly - y, len = std::hypot(dx, dy);
      if (len > r + 1)
        out += "<line class=\"leader\" x1=\"" + num(x + dx / len * r) + "\" y1=\"" + num(y + dy / len * r) +
               "\" x2=\"" + num(lx) + "\" y2=\"" + num(ly) + "\" stroke=\"#888\" stroke-width=\"0.8\"/>\n";
    }
    return out + text_lines(c.x, c.y, lines, size, c.anchor,
                            "stroke=\"white\" stroke-width=\"3\" stroke-linejoin=\"round\" paint-order=\"stroke\"" +
                                (extra.empty() ? "" : " " + extra));
  }
  return "";
}

}  // namespace remat::svg
