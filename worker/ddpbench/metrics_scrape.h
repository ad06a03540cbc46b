#pragma once
// Fetching a coordinator's /metrics as a Prometheus scraper does (a bearer
// token, one kept-alive connection), for `ddpbench heartbeats`: how long a
// scrape takes, how big the text is and how many series it holds.
//
// Ownership: owns one libcurl easy handle. curl_global_init must have run
// before the first MetricsScraper (it is not thread-safe).
// Threading: one thread per scraper.

#include <cstdint>
#include <string>

namespace ddp::bench {

struct Scrape {
  double seconds = 0;             // request sent to the last byte received
  double first_byte_seconds = 0;  // request sent to the first byte: the coordinator writing the text
  int64_t bytes = 0;
  int64_t series = 0;             // sample lines (neither a comment nor empty)
  int64_t rank_series = 0;        // of those, the ones labelled with a rank
  std::string error;              // empty: HTTP 200 with a body
};

class MetricsScraper {
 public:
  /// url: the metrics port's base ("http://HOST:PORT/"); token: the job's.
  MetricsScraper(const std::string& url, const std::string& token);
  ~MetricsScraper();
  MetricsScraper(const MetricsScraper&) = delete;
  MetricsScraper& operator=(const MetricsScraper&) = delete;

  /// One GET of /metrics.
  Scrape fetch();

 private:
  void* curl_ = nullptr;           // CURL*
  void* headers_ = nullptr;        // curl_slist*
  std::string url_;
  std::string body_;
};

}  // namespace ddp::bench
