#include "tools/cohort/metrics_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "cohort/base/error.h"

namespace cohort::cli {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double number_or_nan(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : kNaN;
}

// Axis range [lo, hi] widened to round numbers, with the tick step.
struct Scale {
  double lo = 0, hi = 1, tick = 0.2;
};

Scale nice_scale(double lo, double hi, int ticks) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  return {std::floor(lo / step) * step, std::ceil(hi / step) * step, step};
}

std::string tick_label(double v, double step) {
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  return fmt::format("{:.{}f}", v, decimals);
}

class Svg {
 public:
  Svg() {
    out_ += fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
        "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
        "<rect width=\"{0}\" height=\"{1}\" fill=\"#ffffff\"/>\n",
        chart::kWidth, chart::kHeight);
  }
  void line(double x0, double y0, double x1, double y1, const char* color, double width) {
    out_ += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"{}\"/>\n",
        x0, y0, x1, y1, color, width);
  }
  void polyline(const std::vector<std::pair<double, double>>& pts, const char* color,
                double width) {
    if (pts.size() < 2) return;
    std::string p;
    for (auto [x, y] : pts) p += fmt::format("{:.1f},{:.1f} ", x, y);
    out_ += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" "
        "stroke-linejoin=\"round\"/>\n",
        p, color, width);
  }
  void dot(double x, double y, const char* color) {
    out_ += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"/>\n", x, y, color);
  }
  void text(double x, double y, const std::string& s, const char* anchor = "start",
            const char* extra = "") {
    std::string escaped;
    for (char c : s) {
      if (c == '<')
        escaped += "&lt;";
      else if (c == '>')
        escaped += "&gt;";
      else if (c == '&')
        escaped += "&amp;";
      else
        escaped += c;
    }
    out_ += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\"{}>{}</text>\n", x, y,
                        anchor, extra, escaped);
  }
  std::string finish() { return out_ + "</svg>\n"; }

 private:
  std::string out_;
};

// One panel: y axis on the left, x axis at the bottom, grid and tick labels.
struct Panel {
  double top, bottom;
  Scale x, y;
  double px(double v) const {
    return chart::kLeft + (v - x.lo) / (x.hi - x.lo) * (chart::kRight - chart::kLeft);
  }
  double py(double v) const { return bottom - (v - y.lo) / (y.hi - y.lo) * (bottom - top); }

  void draw_frame(Svg& svg, const std::string& y_label) const {
    for (double v = y.lo; v <= y.hi + y.tick * 1e-6; v += y.tick) {
      svg.line(chart::kLeft, py(v), chart::kRight, py(v), "#e0e0e0", 1);
      svg.text(chart::kLeft - 6, py(v) + 4, tick_label(v, y.tick), "end");
    }
    for (double v = x.lo; v <= x.hi + x.tick * 1e-6; v += x.tick) {
      svg.line(px(v), bottom, px(v), bottom + 5, chart::kAxisColor, 1);
      svg.text(px(v), bottom + 18, tick_label(v, x.tick), "middle");
    }
    svg.line(chart::kLeft, top, chart::kLeft, bottom, chart::kAxisColor, 2);
    svg.line(chart::kLeft, bottom, chart::kRight, bottom, chart::kAxisColor, 2);
    svg.text(18, (top + bottom) / 2, y_label, "middle",
             fmt::format(" transform=\"rotate(-90 18 {:.1f})\"", (top + bottom) / 2).c_str());
  }
};

}  // namespace

MetricsSeries read_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError(fmt::format("cohort plot: cannot read metrics file {}", path));
  std::map<int64_t, double> steps;
  std::map<int64_t, EpochPoint> epochs;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      throw InvalidArgument(fmt::format(
          "cohort plot: {} line {} is not a JSON object (expected `cohort train --metrics` "
          "records): '{}'",
          path, n, line.substr(0, 80)));
    }
    const std::string type = j.value("type", std::string());
    // Files of earlier versions have epoch records only, without "type".
    if (type == "epoch" || (type.empty() && j.contains("train_loss"))) {
      EpochPoint e;
      e.epoch = j.value("epoch", int64_t{0});
      e.step = j.value("step", int64_t{0});
      e.train_loss = number_or_nan(j, "train_loss");
      e.test_loss = number_or_nan(j, "test_loss");
      e.test_accuracy = number_or_nan(j, "test_accuracy");
      epochs[e.epoch] = e;
    } else if (type == "step") {
      steps[j.value("step", int64_t{0})] = number_or_nan(j, "loss");
    }
  }
  MetricsSeries s;
  for (auto [step, loss] : steps) s.steps.push_back({step, loss});
  for (auto& [epoch, e] : epochs) s.epochs.push_back(e);
  if (s.steps.empty() && s.epochs.empty()) {
    throw InvalidArgument(fmt::format(
        "cohort plot: {} has no step or epoch records (write one with `cohort train --metrics {}`)",
        path, path));
  }
  return s;
}

std::string render_chart(const MetricsSeries& s, const std::string& title) {
  int64_t max_step = 1;
  double max_loss = 0;
  auto take_loss = [&](double v) {
    if (std::isfinite(v)) max_loss = std::max(max_loss, v);
  };
  for (const StepPoint& p : s.steps) {
    max_step = std::max(max_step, p.step);
    take_loss(p.loss);
  }
  for (const EpochPoint& e : s.epochs) {
    max_step = std::max(max_step, e.step);
    take_loss(e.train_loss);
    take_loss(e.test_loss);
  }
  const Scale x = nice_scale(0, static_cast<double>(max_step), 8);
  Panel loss{chart::kLossTop, chart::kLossBottom, x, nice_scale(0, max_loss, 5)};
  Panel acc{chart::kAccTop, chart::kAccBottom, x, Scale{0, 1, 0.2}};

  Svg svg;
  svg.text(chart::kWidth / 2.0, 28, title, "middle", " font-size=\"16\"");
  loss.draw_frame(svg, "loss");
  acc.draw_frame(svg, "test accuracy");
  svg.text((chart::kLeft + chart::kRight) / 2.0, chart::kAccBottom + 40, "step", "middle");

  std::vector<std::pair<double, double>> pts;
  for (const StepPoint& p : s.steps) {
    if (std::isfinite(p.loss)) pts.emplace_back(loss.px(p.step), loss.py(p.loss));
  }
  svg.polyline(pts, chart::kStepLossColor, 1);
  // Epoch series: a line through the epochs' ends, a dot at each.
  auto epoch_series = [&](const Panel& panel, double EpochPoint::*field, const char* color) {
    std::vector<std::pair<double, double>> e;
    for (const EpochPoint& p : s.epochs) {
      if (std::isfinite(p.*field)) e.emplace_back(panel.px(p.step), panel.py(p.*field));
    }
    svg.polyline(e, color, 2.5);
    for (auto [px, py] : e) svg.dot(px, py, color);
    return !e.empty();
  };
  epoch_series(loss, &EpochPoint::train_loss, chart::kTrainLossColor);
  epoch_series(loss, &EpochPoint::test_loss, chart::kTestLossColor);
  if (!epoch_series(acc, &EpochPoint::test_accuracy, chart::kAccuracyColor)) {
    svg.text((chart::kLeft + chart::kRight) / 2.0, (chart::kAccTop + chart::kAccBottom) / 2.0,
             "no test accuracy in this file (a model without classes, or no epoch ended)",
             "middle");
  }
  // Legend, top right of the loss panel.
  const struct {
    const char* color;
    const char* label;
  } legend[] = {{chart::kStepLossColor, "train loss (step)"},
                {chart::kTrainLossColor, "train loss (epoch)"},
                {chart::kTestLossColor, "test loss (epoch)"},
                {chart::kAccuracyColor, "test accuracy (epoch)"}};
  double ly = chart::kLossTop + 14;
  for (const auto& l : legend) {
    svg.line(chart::kRight - 170, ly - 4, chart::kRight - 145, ly - 4, l.color, 3);
    svg.text(chart::kRight - 140, ly, l.label);
    ly += 16;
  }
  return svg.finish();
}

}  // namespace cohort::cli
