#include "api/metrics.h"

#include <gtest/gtest.h>

namespace deskbox::api {
namespace {

TEST(MetricsTest, RendersCountersHistogramAndGauges) {
  Metrics m;
  m.CountRequest("GET", "/v1/sandboxes/{id}", 200);
  m.CountRequest("GET", "/v1/sandboxes/{id}", 200);
  m.CountRequest("POST", "/v1/sandboxes", 429);
  m.ObserveCreate(0.02, "warm");
  m.ObserveCreate(7.5, "cold");
  std::map<std::string, Metrics::Gauge> g;
  g["deskbox_sandboxes"] = {"by state", {{"state=\"running\"", 2}}};
  std::string out = m.Render(g);
  EXPECT_NE(out.find("deskbox_http_requests_total{method=\"GET\",route=\"/v1/sandboxes/{id}\",status=\"200\"} 2"),
            std::string::npos);
  EXPECT_NE(out.find("status=\"429\"} 1"), std::string::npos);
  EXPECT_NE(out.find("deskbox_create_seconds_bucket{path=\"warm\",le=\"0.025\"} 1"), std::string::npos);
  EXPECT_NE(out.find("deskbox_create_seconds_bucket{path=\"warm\",le=\"0.01\"} 0"), std::string::npos);
  EXPECT_NE(out.find("deskbox_create_seconds_bucket{path=\"cold\",le=\"+Inf\"} 1"), std::string::npos);
  EXPECT_NE(out.find("deskbox_create_seconds_count{path=\"cold\"} 1"), std::string::npos);
  EXPECT_NE(out.find("deskbox_sandboxes{state=\"running\"} 2"), std::string::npos);
  EXPECT_NE(out.find("# TYPE deskbox_create_seconds histogram"), std::string::npos);
}

TEST(MetricsTest, EscapesLabelValues) { EXPECT_EQ(LabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd"); }

}  // namespace
}  // namespace deskbox::api
