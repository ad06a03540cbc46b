#include "ddp/common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace ddp {

void init_logging(const std::string& program, const std::string& level) {
  // Unbuffered stderr sink: a launcher message must not wait behind a buffer
  // when a worker is failing.
  auto logger = spdlog::stderr_logger_mt(program);
  logger->set_pattern(fmt::format("[{} %H:%M:%S.%e] %^%l%$: %v", program));
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

}  // namespace ddp
