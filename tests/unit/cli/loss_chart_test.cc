// The loss curves as eftctl shows them (cli/loss_chart.h): the sparkline's characters, the describe
// lines, and the SVG read back by an independent XML parser (python3's xml.etree) with every point
// where the data puts it.
#include "cli/loss_chart.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace eft::cli {
namespace {

// Sparkline characters are 3 bytes of UTF-8 each.
std::vector<std::string> Chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i + 3 <= s.size(); i += 3) out.push_back(s.substr(i, 3));
  return out;
}

v1::Job JobWithHistory(int train_points, int eval_points) {
  v1::Job j;
  j.set_id("3");
  j.mutable_spec()->set_name("a <b> & \"c\"");
  for (int i = 0; i < train_points; ++i) {
    auto* p = j.mutable_loss_history()->add_train();
    p->set_step(1 + i * 4);
    p->set_loss(3.0 * std::exp(-i / 30.0) + 0.1);
    p->set_samples(4);
  }
  for (int i = 0; i < eval_points; ++i) {
    auto* p = j.mutable_loss_history()->add_eval();
    p->set_step(i * 100);
    p->set_loss(12.3 / (1 + i));
    p->set_samples(1);
  }
  return j;
}

TEST(Sparkline, OneCharacterPerPointOrPerShareOfTheSteps) {
  EXPECT_EQ(Sparkline({}, {}, 10), "");
  EXPECT_EQ(Sparkline({1, 2, 3, 4, 5, 6, 7, 8}, {8, 7, 6, 5, 4, 3, 2, 1}, 40),
            "\u2588\u2587\u2586\u2585\u2584\u2583\u2582\u2581");
  EXPECT_EQ(Sparkline({1, 2, 3}, {2, 2, 2}, 40), "\u2584\u2584\u2584") << "a flat curve sits in the middle";
  std::vector<long long> steps;
  std::vector<double> values;
  for (int i = 1; i <= 1000; ++i) steps.push_back(i), values.push_back(1000.0 - i);
  const std::vector<std::string> chars = Chars(Sparkline(steps, values, 40));
  ASSERT_EQ(chars.size(), 40u);
  EXPECT_EQ(chars.front(), "\u2588");
  EXPECT_EQ(chars.back(), "\u2581");
  // Steps bunched at the start and the end: the empty shares between repeat their left neighbour.
  const std::vector<std::string> gap = Chars(Sparkline({1, 2, 100}, {5, 5, 1}, 2));
  ASSERT_EQ(gap.size(), 2u);
  EXPECT_EQ(gap[0], "\u2588");
  EXPECT_EQ(gap[1], "\u2581");
}

TEST(LossSummary, TrainAndEvalLines) {
  EXPECT_EQ(LossSummary(v1::LossHistory()), "");
  const std::string text = LossSummary(JobWithHistory(50, 3).loss_history(), 10);
  EXPECT_EQ(text.substr(0, text.find('\n')).substr(0, 58),
            "Loss:        train 3.1 -> 0.6858 (steps 1..197, 50 points)");
  EXPECT_NE(text.find("\n             eval  12.3 -> 4.1 (steps 0..200, 3 evals)  \u2588\u2583\u2581\n"),
            std::string::npos)
      << text;
}

// Named eval sets (spec.data.eval): a line and a curve each, named, in their own colours.
TEST(LossSummary, NamedEvalSetsEachHaveALineAndACurve) {
  v1::Job job = JobWithHistory(10, 0);
  v1::LossHistory* h = job.mutable_loss_history();
  for (const auto& [name, first] : {std::pair{"new", 3.0}, std::pair{"known", 1.0}}) {
    v1::EvalLossCurve* c = h->add_eval_sets();
    c->set_set(name);
    for (int i = 0; i < 3; ++i) {
      v1::LossPoint* p = c->add_points();
      p->set_step(i * 10);
      p->set_loss(first - 0.25 * i);
    }
  }
  *h->mutable_eval() = h->eval_sets(0).points();
  const std::string text = LossSummary(*h, 10);
  EXPECT_NE(text.find("\n             eval[new] 3 -> 2.5 (steps 0..20, 3 evals)"), std::string::npos) << text;
  EXPECT_NE(text.find("\n             eval[known] 1 -> 0.5 (steps 0..20, 3 evals)"), std::string::npos) << text;
  const std::string svg = LossSvg(job);
  EXPECT_NE(svg.find("class=\"eval\" fill=\"none\" stroke=\"#ff7f0e\""), std::string::npos) << svg;
  EXPECT_NE(svg.find("class=\"eval-1\" fill=\"none\" stroke=\"#2ca02c\""), std::string::npos) << svg;
  EXPECT_NE(svg.find(">eval loss: new</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">eval loss: known</text>"), std::string::npos) << svg;
  EXPECT_LE(FrameFor(*h).loss_min, 0.5) << "the frame holds every curve";
}

// The SVG parsed by python3's xml.etree: the polylines' and circles' coordinates as JSON.
nlohmann::json ParseSvg(const std::string& svg) {
  const std::string dir = std::filesystem::temp_directory_path() / ("eft-svg-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/loss.svg") << svg;
  std::ofstream(dir + "/read.py") << R"(import json, sys, xml.etree.ElementTree as ET
ns = {'s': 'http://www.w3.org/2000/svg'}
root = ET.parse(sys.argv[1]).getroot()
out = {'title': ''.join(root.find('s:text', ns).itertext())}
for line in root.iter('{http://www.w3.org/2000/svg}polyline'):
    out[line.get('class')] = [[float(v) for v in p.split(',')] for p in line.get('points').split()]
out['circles'] = [[float(c.get('cx')), float(c.get('cy'))] for c in root.iter('{http://www.w3.org/2000/svg}circle')]
print(json.dumps(out))
)";
  std::string text;
  if (FILE* p = ::popen(("python3 " + dir + "/read.py " + dir + "/loss.svg 2>&1").c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) text.append(buf, n);
    ::pclose(p);
  }
  std::filesystem::remove_all(dir);
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(doc.is_discarded()) << text;
  return doc;
}

// Each point's (x, y) is a linear, increasing function of its step and a linear, decreasing one of
// its loss, the same for both curves; the extremes lie inside the plot area.
void ExpectLinear(const std::vector<std::pair<double, double>>& data, const std::vector<std::pair<double, double>>& xy,
                  const PlotFrame& f) {
  ASSERT_EQ(data.size(), xy.size());
  for (size_t i = 0; i < data.size(); ++i) {
    EXPECT_NEAR(xy[i].first, f.left + (data[i].first - f.step_min) / (f.step_max - f.step_min) * f.width, 0.01);
    EXPECT_NEAR(xy[i].second, f.top + f.height - (data[i].second - f.loss_min) / (f.loss_max - f.loss_min) * f.height,
                0.01);
    EXPECT_GE(xy[i].first, f.left);
    EXPECT_LE(xy[i].first, f.left + f.width);
    EXPECT_GE(xy[i].second, f.top);
    EXPECT_LE(xy[i].second, f.top + f.height);
  }
}

TEST(LossSvg, EveryPointWhereItsStepAndLossPutIt) {
  const v1::Job job = JobWithHistory(120, 5);
  const PlotFrame f = FrameFor(job.loss_history());
  EXPECT_EQ(f.step_min, 0);
  EXPECT_GE(f.step_max, 477);
  EXPECT_LE(f.loss_min, 0.1 + 3.0 * std::exp(-119 / 30.0));
  EXPECT_GE(f.loss_max, 12.3);
  const nlohmann::json doc = ParseSvg(LossSvg(job));
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc["title"], "job 3 (a <b> & \"c\"): loss over steps") << "the name is escaped, not markup";
  auto pairs = [](const nlohmann::json& list) {
    std::vector<std::pair<double, double>> out;
    for (const auto& p : list) out.emplace_back(p[0].get<double>(), p[1].get<double>());
    return out;
  };
  std::vector<std::pair<double, double>> train, eval;
  for (const auto& p : job.loss_history().train()) train.emplace_back(p.step(), p.loss());
  for (const auto& p : job.loss_history().eval()) eval.emplace_back(p.step(), p.loss());
  ExpectLinear(train, pairs(doc["train"]), f);
  ExpectLinear(eval, pairs(doc["eval"]), f);
  ExpectLinear(eval, pairs(doc["circles"]), f);
  // The highest loss is the highest point of the picture.
  EXPECT_NEAR(pairs(doc["eval"])[0].second, f.Y(12.3), 0.01);
}

TEST(LossSvg, AJobWithoutHistoryStillGivesAPicture) {
  const nlohmann::json doc = ParseSvg(LossSvg(JobWithHistory(0, 0)));
  ASSERT_TRUE(doc.is_object());
  EXPECT_FALSE(doc.contains("train"));
  EXPECT_TRUE(doc["circles"].empty());
}

}  // namespace
}  // namespace eft::cli
