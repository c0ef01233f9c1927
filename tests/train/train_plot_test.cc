// `cohort plot`: the curves of a real training run, rendered to PNG with
// rsvg-convert and looked at as a person would: two panels with their axes,
// each series' colour where it should be, and a loss curve that goes down.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/train/png_image.h"
#include "tests/train/process_util.h"
#include "tests/train/train_test_util.h"
#include "tools/cohort/metrics_chart.h"

namespace cohort::test {
namespace {

namespace chart = cohort::cli::chart;

// Pixels of colour c in the box [x0, x1) x [y0, y1), the legend left out.
struct Hits {
  int count = 0;
  double sum_y = 0;
  double mean_y() const { return count > 0 ? sum_y / count : -1; }
};

Hits find_color(const PngImage& img, Rgb c, int x0, int x1, int y0, int y1) {
  Hits h;
  for (int y = y0; y < y1; ++y) {
    for (int x = x0; x < x1; ++x) {
      const bool legend = x > chart::kRight - 180 && y < chart::kLossTop + 75;
      if (!legend && near(img.at(x, y), c)) {
        ++h.count;
        h.sum_y += y;
      }
    }
  }
  return h;
}

// Share of dark pixels along a vertical (or horizontal) segment, +-1 pixel.
double dark_share(const PngImage& img, int x0, int y0, int x1, int y1) {
  int dark = 0, n = 0;
  for (int y = y0; y <= y1; ++y) {
    for (int x = x0; x <= x1; ++x, ++n) {
      bool hit = false;
      for (int d = -1; d <= 1 && !hit; ++d) {
        const int xx = x0 == x1 ? x + d : x, yy = y0 == y1 ? y + d : y;
        hit = near(img.at(xx, yy), Rgb{0, 0, 0}, 90);
      }
      dark += hit ? 1 : 0;
    }
  }
  return n > 0 ? static_cast<double>(dark) / n : 0;
}

TEST(TrainPlot, CurvesOfARunRenderWithAxesAndFallingLoss) {
  const std::string dir = make_temp_dir("plot");
  const std::string metrics = dir + "/metrics.jsonl";
  Finished train =
      run_command({kCohort, "train", "--dataset", "synthetic", "--synthetic-train-size", "1024",
                   "--synthetic-test-size", "256", "--epochs", "3", "--threads", "1", "--seed", "3",
                   "--metrics", metrics});
  ASSERT_EQ(train.exit_code, 0) << train.output;
  Finished plot = run_command({kCohort, "plot", metrics, "-o", dir + "/curves.svg"});
  ASSERT_EQ(plot.exit_code, 0) << plot.output;
  EXPECT_NE(plot.output.find("48 steps, 3 epochs"), std::string::npos) << plot.output;
  const std::string svg = read_file(dir + "/curves.svg");
  for (const char* label : {">loss<", ">test accuracy<", ">step<"})
    EXPECT_NE(svg.find(label), std::string::npos) << "axis label " << label << " missing";

  Finished png =
      run_command({"/usr/bin/rsvg-convert", dir + "/curves.svg", "-o", dir + "/curves.png"});
  ASSERT_EQ(png.exit_code, 0) << "rsvg-convert (Debian package librsvg2-bin, installed by "
                                 "scripts/install_deps.sh --tests) failed: "
                              << png.output;
  const PngImage img = PngImage::read(dir + "/curves.png");
  ASSERT_EQ(img.width(), chart::kWidth);
  ASSERT_EQ(img.height(), chart::kHeight);

  // Both panels' axes: dark lines along the whole y and x extents.
  for (auto [top, bottom] : {std::pair{chart::kLossTop, chart::kLossBottom},
                             std::pair{chart::kAccTop, chart::kAccBottom}}) {
    EXPECT_GT(dark_share(img, chart::kLeft, top, chart::kLeft, bottom), 0.95) << "y axis " << top;
    EXPECT_GT(dark_share(img, chart::kLeft, bottom, chart::kRight, bottom), 0.95)
        << "x axis " << bottom;
  }
  // Every series is drawn in its panel.
  const Rgb step_loss = parse_color(chart::kStepLossColor);
  const int w = chart::kRight - chart::kLeft;
  Hits all = find_color(img, step_loss, chart::kLeft + 2, chart::kRight, chart::kLossTop,
                        chart::kLossBottom - 1);
  EXPECT_GT(all.count, 200) << "the per-step loss curve is missing";
  for (const char* c : {chart::kTrainLossColor, chart::kTestLossColor}) {
    EXPECT_GT(find_color(img, parse_color(c), chart::kLeft + 2, chart::kRight, chart::kLossTop,
                         chart::kLossBottom - 1)
                  .count,
              100)
        << "epoch series " << c << " missing from the loss panel";
  }
  const Rgb acc = parse_color(chart::kAccuracyColor);
  Hits acc_hits =
      find_color(img, acc, chart::kLeft + 2, chart::kRight, chart::kAccTop, chart::kAccBottom - 1);
  EXPECT_GT(acc_hits.count, 100) << "the accuracy curve is missing";
  EXPECT_EQ(find_color(img, acc, 0, chart::kWidth, chart::kLossTop, chart::kLossBottom).count, 0)
      << "accuracy drawn in the loss panel";

  // The loss falls: the curve sits lower at the right than at the left.
  Hits left = find_color(img, step_loss, chart::kLeft + 2, chart::kLeft + w / 6, chart::kLossTop,
                         chart::kLossBottom - 1);
  Hits right = find_color(img, step_loss, chart::kRight - w / 5, chart::kRight, chart::kLossTop,
                          chart::kLossBottom - 1);
  ASSERT_GT(left.count, 0);
  ASSERT_GT(right.count, 0);
  EXPECT_LT(left.mean_y() + 50, right.mean_y()) << "y grows downwards: the loss should fall";
}

TEST(TrainPlot, MalformedLineIsNamed) {
  const std::string dir = make_temp_dir("plotbad");
  const std::string path = dir + "/m.jsonl";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("{\"type\":\"step\",\"epoch\":1,\"step\":1,\"loss\":2.3}\nnot json\n", f);
    std::fclose(f);
  }
  Finished f = run_command({kCohort, "plot", path, "-o", dir + "/c.svg"});
  EXPECT_EQ(f.exit_code, 1) << f.output;
  EXPECT_NE(f.output.find(path + " line 2 is not a JSON object"), std::string::npos) << f.output;
  Finished missing = run_command({kCohort, "plot", dir + "/none.jsonl"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("cannot read metrics file " + dir + "/none.jsonl"),
            std::string::npos)
      << missing.output;
}

}  // namespace
}  // namespace cohort::test
