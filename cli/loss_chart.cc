#include "cli/loss_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <sstream>

namespace eft::cli {
namespace {

// U+2581 LOWER ONE EIGHTH BLOCK .. U+2588 FULL BLOCK.
constexpr const char* kBlocks[] = {"\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588"};

std::string Num(double v, const char* fmt = "%.4g") {
  char buf[48];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// 1, 2 or 5 times a power of ten, about range / 5: ticks people read at a glance.
double NiceStep(double range) {
  if (!(range > 0)) return 1;
  const double raw = range / 5;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  const double m = raw / power;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * power;
}

std::string Xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

void Split(const google::protobuf::RepeatedPtrField<v1::LossPoint>& points, std::vector<long long>* steps,
           std::vector<double>* values) {
  for (const auto& p : points) {
    steps->push_back(p.step());
    values->push_back(p.loss());
  }
}

}  // namespace

std::string Sparkline(const std::vector<long long>& steps, const std::vector<double>& values, int width) {
  if (values.empty() || width <= 0 || steps.size() != values.size()) return "";
  std::vector<double> cells;
  if (static_cast<int>(values.size()) <= width) {
    cells = values;
  } else {
    const double first = static_cast<double>(steps.front());
    const double span = std::max(1.0, static_cast<double>(steps.back()) - first);
    std::vector<double> sum(static_cast<size_t>(width), 0);
    std::vector<int> count(static_cast<size_t>(width), 0);
    for (size_t i = 0; i < values.size(); ++i) {
      int cell = static_cast<int>((static_cast<double>(steps[i]) - first) / span * width);
      cell = std::clamp(cell, 0, width - 1);
      sum[cell] += values[i];
      ++count[cell];
    }
    for (int c = 0; c < width; ++c) {
      if (count[c] > 0) {
        cells.push_back(sum[c] / count[c]);
      } else if (!cells.empty()) {
        cells.push_back(cells.back());
      }
    }
  }
  const auto [lo, hi] = std::minmax_element(cells.begin(), cells.end());
  const double range = *hi - *lo;
  std::string out;
  for (double v : cells) {
    const int level = range > 0 ? static_cast<int>(std::lround((v - *lo) / range * 7)) : 3;
    out += kBlocks[std::clamp(level, 0, 7)];
  }
  return out;
}

std::vector<EvalCurve> EvalCurves(const v1::LossHistory& h) {
  std::vector<EvalCurve> out;
  for (const v1::EvalLossCurve& c : h.eval_sets()) out.push_back({c.set(), &c.points()});
  if (out.empty() && !h.eval().empty()) out.push_back({"eval", &h.eval()});
  return out;
}

std::string LossSummary(const v1::LossHistory& h, int sparkline_width) {
  std::ostringstream out;
  bool first_line = true;
  auto curve = [&](const std::string& name, const google::protobuf::RepeatedPtrField<v1::LossPoint>& points,
                   const char* unit) {
    if (points.empty()) return;
    std::vector<long long> steps;
    std::vector<double> values;
    Split(points, &steps, &values);
    out << (first_line ? "Loss:        " : "             ") << name << " " << Num(values.front()) << " -> "
        << Num(values.back()) << " (steps " << steps.front() << ".." << steps.back() << ", " << points.size() << " "
        << unit << ")  " << Sparkline(steps, values, sparkline_width) << "\n";
    first_line = false;
  };
  curve("train", h.train(), h.train_size() == 1 ? "point" : "points");
  const std::vector<EvalCurve> evals = EvalCurves(h);
  for (const EvalCurve& e : evals) {
    // One set keeps the line it always had; several are named ("eval[known]").
    const std::string name = evals.size() == 1 ? "eval " : "eval[" + e.set + "]";
    curve(name, *e.points, e.points->size() == 1 ? "eval" : "evals");
  }
  return out.str();
}

double PlotFrame::X(double step) const {
  return left + (step - step_min) / std::max(1e-12, step_max - step_min) * width;
}

double PlotFrame::Y(double loss) const {
  return top + height - (loss - loss_min) / std::max(1e-12, loss_max - loss_min) * height;
}

PlotFrame FrameFor(const v1::LossHistory& h) {
  PlotFrame f;
  double smax = 1, lmin = std::numeric_limits<double>::infinity(), lmax = -lmin;
  std::vector<const google::protobuf::RepeatedPtrField<v1::LossPoint>*> curves = {&h.train()};
  for (const EvalCurve& e : EvalCurves(h)) curves.push_back(e.points);
  for (const auto* points : curves) {
    for (const auto& p : *points) {
      smax = std::max(smax, static_cast<double>(p.step()));
      lmin = std::min(lmin, p.loss());
      lmax = std::max(lmax, p.loss());
    }
  }
  if (!std::isfinite(lmin)) lmin = 0, lmax = 1;
  if (lmax - lmin < 1e-9) lmin -= 0.5, lmax += 0.5;
  const double sstep = NiceStep(smax);
  const double lstep = NiceStep(lmax - lmin);
  f.step_min = 0;
  f.step_max = std::ceil(smax / sstep) * sstep;
  f.loss_min = std::floor(lmin / lstep) * lstep;
  f.loss_max = std::ceil(lmax / lstep) * lstep;
  return f;
}

std::string LossSvg(const v1::Job& job) {
  const v1::LossHistory& h = job.loss_history();
  const PlotFrame f = FrameFor(h);
  const double right = f.left + f.width, bottom = f.top + f.height;
  std::ostringstream s;
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"800\" height=\"420\" viewBox=\"0 0 800 420\" "
       "font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"800\" height=\"420\" fill=\"white\"/>\n"
    << "<text x=\"420\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">job " << Xml(job.id())
    << (job.spec().name().empty() ? "" : " (" + Xml(job.spec().name()) + ")") << ": loss over steps</text>\n";
  // Grid and tick labels first, so the curves are drawn over them.
  s << "<g class=\"grid\" stroke=\"#e3e3e3\">\n";
  const double sstep = NiceStep(f.step_max), lstep = NiceStep(f.loss_max - f.loss_min);
  std::ostringstream labels;
  for (double v = f.step_min; v <= f.step_max + sstep / 2; v += sstep) {
    s << "<line x1=\"" << Num(f.X(v), "%.2f") << "\" y1=\"" << f.top << "\" x2=\"" << Num(f.X(v), "%.2f")
      << "\" y2=\"" << bottom << "\"/>\n";
    labels << "<text x=\"" << Num(f.X(v), "%.2f") << "\" y=\"" << bottom + 16 << "\" text-anchor=\"middle\">"
           << Num(v, "%.6g") << "</text>\n";
  }
  for (double v = f.loss_min; v <= f.loss_max + lstep / 2; v += lstep) {
    s << "<line x1=\"" << f.left << "\" y1=\"" << Num(f.Y(v), "%.2f") << "\" x2=\"" << right << "\" y2=\""
      << Num(f.Y(v), "%.2f") << "\"/>\n";
    labels << "<text x=\"" << f.left - 6 << "\" y=\"" << Num(f.Y(v) + 4, "%.2f") << "\" text-anchor=\"end\">"
           << Num(std::abs(v) < lstep * 1e-6 ? 0.0 : v, "%.6g") << "</text>\n";
  }
  s << "</g>\n<g class=\"labels\" fill=\"#333\">\n" << labels.str() << "</g>\n";
  s << "<g class=\"axes\" stroke=\"#333\">\n<line x1=\"" << f.left << "\" y1=\"" << bottom << "\" x2=\"" << right
    << "\" y2=\"" << bottom << "\"/>\n<line x1=\"" << f.left << "\" y1=\"" << f.top << "\" x2=\"" << f.left
    << "\" y2=\"" << bottom << "\"/>\n</g>\n";
  s << "<text x=\"" << f.left + f.width / 2 << "\" y=\"" << bottom + 36 << "\" text-anchor=\"middle\">step</text>\n"
    << "<text x=\"18\" y=\"" << f.top + f.height / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 18 "
    << f.top + f.height / 2 << ")\">loss</text>\n";

  auto polyline = [&](const std::string& cls, const char* color,
                      const google::protobuf::RepeatedPtrField<v1::LossPoint>& points) {
    if (points.empty()) return;
    s << "<polyline class=\"" << cls << "\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
    for (int i = 0; i < points.size(); ++i) {
      s << (i ? " " : "") << Num(f.X(static_cast<double>(points[i].step())), "%.3f") << ","
        << Num(f.Y(points[i].loss()), "%.3f");
    }
    s << "\"/>\n";
  };
  // Each eval set its colour (matplotlib's cycle after the train loss's blue); the first set's
  // curve is class "eval", the next ones "eval-1", "eval-2", ...
  static const char* const kEvalColors[] = {"#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"};
  const std::vector<EvalCurve> evals = EvalCurves(h);
  polyline("train", "#1f77b4", h.train());
  for (size_t i = 0; i < evals.size(); ++i) {
    const char* color = kEvalColors[i % std::size(kEvalColors)];
    polyline(i == 0 ? std::string("eval") : "eval-" + std::to_string(i), color, *evals[i].points);
    if (evals[i].points->empty()) continue;
    s << "<g class=\"eval-points\" fill=\"" << color << "\">\n";
    for (const auto& p : *evals[i].points) {
      s << "<circle cx=\"" << Num(f.X(static_cast<double>(p.step())), "%.3f") << "\" cy=\""
        << Num(f.Y(p.loss()), "%.3f") << "\" r=\"3\"/>\n";
    }
    s << "</g>\n";
  }
  // The legend, top right inside the plot: a line per curve.
  std::vector<std::pair<std::string, const char*>> legend = {{"train loss", "#1f77b4"}};
  for (size_t i = 0; i < evals.size(); ++i) {
    if (evals[i].points->empty()) continue;
    legend.emplace_back(evals.size() == 1 ? std::string("eval loss") : "eval loss: " + evals[i].set,
                        kEvalColors[i % std::size(kEvalColors)]);
  }
  s << "<g class=\"legend\">\n";
  for (size_t i = 0; i < legend.size(); ++i) {
    const double y = f.top + 14 + 18 * static_cast<double>(i);
    s << "<line x1=\"" << right - 170 << "\" y1=\"" << y << "\" x2=\"" << right - 150 << "\" y2=\"" << y
      << "\" stroke=\"" << legend[i].second << "\" stroke-width=\"2\"/>\n"
      << "<text x=\"" << right - 144 << "\" y=\"" << y + 4 << "\">" << Xml(legend[i].first) << "</text>\n";
  }
  s << "</g>\n";
  if (h.train().empty() && evals.empty()) {
    s << "<text x=\"" << f.left + f.width / 2 << "\" y=\"" << f.top + f.height / 2
      << "\" text-anchor=\"middle\" fill=\"#777\">no loss reported yet</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace eft::cli
