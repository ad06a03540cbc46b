// A /metrics scraper on libcurl (see metrics_scrape.h).
#include "metrics_scrape.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace ddp::bench {
namespace {

size_t append_body(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

void count_series(const std::string& text, Scrape& s) {
  static const std::string kRankLabel = "rank=\"";
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    if (end > begin && text[begin] != '#') {
      ++s.series;
      const size_t label = text.find(kRankLabel, begin);
      if (label < end && (text[label - 1] == '{' || text[label - 1] == ',')) ++s.rank_series;
    }
    begin = end + 1;
  }
}

}  // namespace

MetricsScraper::MetricsScraper(const std::string& url, const std::string& token)
    : url_(url + (url.empty() || url.back() != '/' ? "/" : "") + "metrics") {
  CURL* curl = curl_easy_init();
  if (curl == nullptr) throw std::runtime_error("libcurl: cannot make a handle");
  curl_ = curl;
  const std::string authorization = "Authorization: Bearer " + token;
  headers_ = curl_slist_append(nullptr, authorization.c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url_.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, static_cast<curl_slist*>(headers_));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body_);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 120L);
}

MetricsScraper::~MetricsScraper() {
  curl_slist_free_all(static_cast<curl_slist*>(headers_));
  curl_easy_cleanup(static_cast<CURL*>(curl_));
}

Scrape MetricsScraper::fetch() {
  CURL* curl = static_cast<CURL*>(curl_);
  body_.clear();
  Scrape s;
  const CURLcode rc = curl_easy_perform(curl);
  curl_off_t total_us = 0, first_byte_us = 0;
  curl_easy_getinfo(curl, CURLINFO_TOTAL_TIME_T, &total_us);
  curl_easy_getinfo(curl, CURLINFO_STARTTRANSFER_TIME_T, &first_byte_us);
  // The connect time of a fresh connection is not the coordinator's; a
  // kept-alive one has none.
  curl_off_t connect_us = 0;
  curl_easy_getinfo(curl, CURLINFO_CONNECT_TIME_T, &connect_us);
  s.seconds = static_cast<double>(total_us - connect_us) / 1e6;
  s.first_byte_seconds = static_cast<double>(std::max<curl_off_t>(first_byte_us - connect_us, 0)) / 1e6;
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  if (rc != CURLE_OK) {
    s.error = fmt::format("GET {}: {}", url_, curl_easy_strerror(rc));
  } else if (status != 200) {
    s.error = fmt::format("GET {}: HTTP {}: {}", url_, status, body_.substr(0, 200));
  }
  s.bytes = static_cast<int64_t>(body_.size());
  count_series(body_, s);
  return s;
}

}  // namespace ddp::bench
