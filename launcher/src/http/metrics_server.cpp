#include "http/metrics_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "http/http_auth.h"
#include "http/job_metrics.h"
#include "http/status_page.h"
#include "net/host_port.h"

namespace ddp {
namespace {

constexpr const char* kPrometheusType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kJsonType = "application/json";
constexpr const char* kTextType = "text/plain; charset=utf-8";

void common_headers(httplib::Response& res) {
  res.set_header("Cache-Control", "no-store");
  res.set_header("X-Content-Type-Options", "nosniff");
  // The page's address may carry ?token=: never send it on.
  res.set_header("Referrer-Policy", "no-referrer");
}

std::string token_of(const httplib::Request& req) {
  return presented_token(req.get_header_value("Authorization"), req.get_param_value("token"));
}

// 401. The log names the path and the peer, never the token or the query.
void refuse(const httplib::Request& req, httplib::Response& res, Access why, bool json) {
  const bool wrong = why == Access::kWrongToken;
  if (wrong) {
    spdlog::warn("metrics port: refused {} from {}: wrong token", req.path, req.remote_addr);
  } else {
    spdlog::debug("metrics port: refused {} from {}: no token", req.path, req.remote_addr);
  }
  const std::string message =
      wrong ? "wrong token for this job"
            : "this job needs its token: send the header 'Authorization: Bearer TOKEN', or add ?token=TOKEN";
  res.status = 401;
  res.set_header("WWW-Authenticate", "Bearer realm=\"ddplaunch\"");
  if (json) {
    res.set_content(nlohmann::json{{"error", message}}.dump() + "\n", kJsonType);
  } else {
    res.set_content(message + "\n", kTextType);
  }
}

void answer_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", kJsonType);
}

// The jobs a request may see, and why the others were refused.
struct Shown {
  std::vector<ServedJob> jobs;
  Access refused = Access::kOpen;  // kMissingToken / kWrongToken when one was refused
};

Shown shown_jobs(const std::vector<ServedJob>& all, bool token_required, const std::string& token) {
  Shown shown;
  for (const ServedJob& job : all) {
    const Access a = check_access(token_required, token, job.token_matches);
    if (allowed(a)) {
      shown.jobs.push_back(job);
    } else {
      shown.refused = a;
    }
  }
  return shown;
}

std::string visible_host(const std::string& host) {
  if (host == "0.0.0.0" || host.empty()) return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

}  // namespace

MetricsServer::MetricsServer(const MetricsServerConfig& config, JobSource jobs)
    : config_(config), jobs_(std::move(jobs)) {
  const std::string where = format_host_port(config_.host, config_.port);
  if (config_.tls.enabled()) {
    auto tls = std::make_unique<httplib::SSLServer>(config_.tls.cert.c_str(), config_.tls.key.c_str(),
                                                    config_.tls.ca.empty() ? nullptr : config_.tls.ca.c_str());
    if (!tls->is_valid()) {
      throw std::runtime_error(fmt::format("{}: cannot serve TLS with certificate {}, key {}{}", config_.option,
                                           config_.tls.cert, config_.tls.key,
                                           config_.tls.ca.empty() ? "" : " and CA " + config_.tls.ca));
    }
    server_ = std::move(tls);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  server_->new_task_queue = [] { return new httplib::ThreadPool(kHandlerThreads); };
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would
  // let two servers share a port that is in use; a busy port is an error.
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // Bounds how long the destructor waits for a browser's idle keep-alive connection.
  server_->set_keep_alive_timeout(2);
  server_->set_read_timeout(5, 0);
  server_->set_write_timeout(5, 0);
  server_->set_payload_max_length(64 * 1024);
  route();

  errno = 0;
  if (config_.port == 0) {
    port_ = server_->bind_to_any_port(config_.host);
  } else {
    port_ = server_->bind_to_port(config_.host, config_.port) ? config_.port : -1;
  }
  if (port_ <= 0) {
    const int err = errno;
    throw std::runtime_error(fmt::format("{}: cannot listen on {}: {}", config_.option, where,
                                         err != 0 ? std::strerror(err) : "address in use or not local"));
  }
  acceptor_ = std::thread([this] {
    server_->listen_after_bind();
    accepting_ended_ = true;
  });
  // Until it accepts, stop() would not reach it (httplib checks is_running()).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!server_->is_running() && !accepting_ended_ && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!server_->is_running()) {
    server_->stop();
    if (accepting_ended_) acceptor_.join();
    else acceptor_.detach();  // never seen in practice; do not hang the caller
    throw std::runtime_error(fmt::format("{}: the HTTP server on {} did not start", config_.option, where));
  }
}

MetricsServer::~MetricsServer() {
  server_->stop();
  if (acceptor_.joinable()) acceptor_.join();  // also joins the handler pool
}

std::string MetricsServer::url() const {
  return fmt::format("{}://{}/", config_.tls.enabled() ? "https" : "http",
                     format_host_port(visible_host(config_.host), port_));
}

void MetricsServer::route() {
  server_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    common_headers(res);
    // The page is static: no data in it, so no token needed to load it.
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                   "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    res.set_content(status_page_html(), "text/html; charset=utf-8");
  });

  server_->Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    common_headers(res);
    const std::vector<ServedJob> all = jobs_();
    const Shown shown = shown_jobs(all, config_.token_required, token_of(req));
    if (shown.jobs.empty() && !all.empty()) return refuse(req, res, shown.refused, false);
    std::vector<nlohmann::json> statuses;
    statuses.reserve(shown.jobs.size());
    for (const ServedJob& job : shown.jobs) {
      nlohmann::json s = nlohmann::json::parse(job.status_json(), nullptr, false);
      if (!s.is_discarded()) statuses.push_back(std::move(s));
    }
    res.set_content(jobs_metrics_text(statuses), kPrometheusType);
  });

  server_->Get("/status.json", [this](const httplib::Request& req, httplib::Response& res) {
    common_headers(res);
    const std::vector<ServedJob> all = jobs_();
    const std::string token = token_of(req);
    const ServedJob* chosen = nullptr;
    if (req.has_param("job")) {
      const std::string id = req.get_param_value("job");
      for (const ServedJob& job : all) {
        if (job.id == id) chosen = &job;
      }
      if (chosen == nullptr) return answer_json(res, 404, {{"error", fmt::format("no job '{}' here", id)}});
      const Access a = check_access(config_.token_required, token, chosen->token_matches);
      if (!allowed(a)) return refuse(req, res, a, true);
      res.set_content(status_document(chosen->status_json()), kJsonType);
      return;
    }
    const Shown shown = shown_jobs(all, config_.token_required, token);
    if (shown.jobs.empty()) {
      if (!all.empty()) return refuse(req, res, shown.refused, true);
      return answer_json(res, 404, {{"error", "no job here yet"}});
    }
    if (shown.jobs.size() > 1) {
      nlohmann::json ids = nlohmann::json::array();
      for (const ServedJob& job : shown.jobs) ids.push_back(job.id);
      return answer_json(res, 300, {{"error", "this coordinator serves several jobs: choose one with ?job=ID"},
                                    {"jobs", std::move(ids)}});
    }
    res.set_content(status_document(shown.jobs.front().status_json()), kJsonType);
  });

  server_->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler's own answer (401, 404 with JSON)
    common_headers(res);
    res.set_content(res.status == 404 ? "not found: this port serves /, /status.json and /metrics\n"
                                      : fmt::format("HTTP {}\n", res.status),
                    kTextType);
  });
  server_->set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    spdlog::error("metrics port: {} failed: {}", req.path, what);
    res.status = 500;
    res.set_content("internal error\n", kTextType);
  });
}

}  // namespace ddp
