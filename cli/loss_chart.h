// A job's loss curves as a person looks at them: a one-line terminal sparkline for `eftctl job
// describe`, and an SVG picture for `eftctl job plot` (written here, no plotting library). Pure
// functions of the job's LossHistory (the controller keeps it, docs/architecture.md, "Loss history").
#pragma once

#include <string>
#include <vector>

#include "eft/v1/job.pb.h"

namespace eft::cli {

// `values` over `steps` (ascending) as `width` block characters (U+2581..U+2588), lowest loss at
// the bottom; each character is the mean of the points whose steps fall in its share of the step
// range (an empty share repeats its left neighbour). Fewer points than `width`: one character per
// point. "" for no points.
std::string Sparkline(const std::vector<long long>& steps, const std::vector<double>& values, int width);

// The eval curves of a history: every named eval set's (LossHistory.eval_sets, spec.data.eval's
// order), or the one `eval` curve a controller from before named sets sends, named "eval".
struct EvalCurve {
  std::string set;
  const google::protobuf::RepeatedPtrField<v1::LossPoint>* points;
};
std::vector<EvalCurve> EvalCurves(const v1::LossHistory& history);

// The "Loss:" lines of `job describe`: per curve (several eval sets each named, "eval[known]"), first -> last value, the steps covered and a
// sparkline; "" when the job has no history yet.
std::string LossSummary(const v1::LossHistory& history, int sparkline_width = 40);

// Where the SVG's plot area is and what it spans: a step maps to x linearly from
// [step_min, step_max] onto [left, left + width], a loss to y from [loss_min, loss_max] onto
// [top + height, top] (SVG's y grows downwards).
struct PlotFrame {
  double left = 70, top = 40, width = 700, height = 330;
  double step_min = 0, step_max = 1, loss_min = 0, loss_max = 1;
  double X(double step) const;
  double Y(double loss) const;
};

// The frame `LossSvg` uses for `history`: the steps and losses of every curve, padded to round
// tick values.
PlotFrame FrameFor(const v1::LossHistory& history);

// A standalone SVG (800 x 420) with axes, ticks, a title and a legend: the train loss as a
// polyline (class "train"), each eval set's loss as a polyline with a circle per point, in its own
// colour (class "eval" for the first set, "eval-1", "eval-2", ... for the next ones).
std::string LossSvg(const v1::Job& job);

}  // namespace eft::cli
