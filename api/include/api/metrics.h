#pragma once
// Prometheus text exposition (format 0.0.4) of deskboxd's counters: requests by route and
// status, create latency, and whatever gauges the caller adds at render time. One thread.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace deskbox::api {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}
  void Observe(double v);
  // Appends the _bucket, _sum and _count lines of `name` (with optional extra labels).
  void Render(std::string& out, const std::string& name, const std::string& labels) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // cumulative at render time, per bucket here
  uint64_t count_ = 0;
  double sum_ = 0;
};

class Metrics {
 public:
  Metrics();
  void CountRequest(const std::string& method, const std::string& route, unsigned status);
  void ObserveCreate(double seconds, const std::string& path);
  void CountTimeout(const std::string& action) { ++timeouts_[action]; }

  // Gauges are supplied by the caller: name -> (help, [(labels, value)]).
  struct Gauge {
    std::string help;
    std::vector<std::pair<std::string, double>> samples;  // labels text like `state="running"`
  };
  std::string Render(const std::map<std::string, Gauge>& gauges) const;

 private:
  std::map<std::tuple<std::string, std::string, unsigned>, uint64_t> requests_;
  std::map<std::string, Histogram> create_;  // by create path
  std::map<std::string, uint64_t> timeouts_;
};

// Escapes a label value for the text format.
std::string LabelValue(const std::string& v);

}  // namespace deskbox::api
