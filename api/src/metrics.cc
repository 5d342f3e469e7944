#include "api/metrics.h"

#include <fmt/format.h>

#include <tuple>

namespace deskbox::api {

namespace {
const std::vector<double> kCreateBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

std::string LabelValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void Histogram::Observe(double v) {
  for (size_t i = 0; i < bounds_.size(); ++i)
    if (v <= bounds_[i]) ++counts_[i];
  ++count_;
  sum_ += v;
}

void Histogram::Render(std::string& out, const std::string& name, const std::string& labels) const {
  std::string sep = labels.empty() ? "" : ",";
  for (size_t i = 0; i < bounds_.size(); ++i)
    out += fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, bounds_[i], counts_[i]);
  out += fmt::format("{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep, count_);
  std::string l = labels.empty() ? "" : "{" + labels + "}";
  out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, l, sum_, name, l, count_);
}

Metrics::Metrics() {
  for (const char* p : {"warm", "prestarted", "cold"}) create_.emplace(p, Histogram(kCreateBuckets));
}

void Metrics::CountRequest(const std::string& method, const std::string& route, unsigned status) {
  ++requests_[std::make_tuple(method, route, status)];
}

void Metrics::ObserveCreate(double seconds, const std::string& path) {
  auto it = create_.find(path);
  if (it == create_.end()) it = create_.emplace(path, Histogram(kCreateBuckets)).first;
  it->second.Observe(seconds);
}

std::string Metrics::Render(const std::map<std::string, Gauge>& gauges) const {
  std::string out;
  for (const auto& [name, g] : gauges) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, g.help, name);
    for (const auto& [labels, v] : g.samples)
      out += labels.empty() ? fmt::format("{} {}\n", name, v) : fmt::format("{}{{{}}} {}\n", name, labels, v);
  }
  out += "# HELP deskbox_create_seconds Time to answer POST /v1/sandboxes, by how the sandbox was made.\n"
         "# TYPE deskbox_create_seconds histogram\n";
  for (const auto& [path, h] : create_) h.Render(out, "deskbox_create_seconds", fmt::format("path=\"{}\"", path));
  out += "# HELP deskbox_http_requests_total HTTP requests answered, by route and status.\n"
         "# TYPE deskbox_http_requests_total counter\n";
  for (const auto& [k, n] : requests_) {
    const auto& [method, route, status] = k;
    out += fmt::format("deskbox_http_requests_total{{method=\"{}\",route=\"{}\",status=\"{}\"}} {}\n", method,
                       LabelValue(route), status, n);
  }
  out += "# HELP deskbox_sandbox_timeouts_total Sandboxes whose timeout expired, by what was done.\n"
         "# TYPE deskbox_sandbox_timeouts_total counter\n";
  for (const char* a : {"pause", "stop"}) {
    auto it = timeouts_.find(a);
    out += fmt::format("deskbox_sandbox_timeouts_total{{action=\"{}\"}} {}\n", a, it == timeouts_.end() ? 0 : it->second);
  }
  return out;
}

}  // namespace deskbox::api
