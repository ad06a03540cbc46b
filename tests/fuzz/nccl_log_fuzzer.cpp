// libFuzzer target for the NCCL log parser: arbitrary bytes are split into
// lines and fed through parse_nccl_line, classify_warning and NcclLogParser,
// then summarized. Must never crash, hang or trip a sanitizer.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "nccl/nccl_log_line.h"
#include "nccl/nccl_log_parser.h"
#include "nccl/nccl_warning.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddp::nccl;
  std::string_view all(reinterpret_cast<const char*>(data), size);
  NcclLogParser parser;
  size_t start = 0;
  while (start <= all.size()) {
    size_t nl = all.find('\n', start);
    std::string_view line = all.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    NcclLogLine l = parse_nccl_line(line);
    if (l.kind == NcclLineKind::kWarn) (void)classify_warning(l.message);
    if (l.kind == NcclLineKind::kTransport) {
      (void)transport_family(l.transport);
      (void)transport_uses_gdr(l.transport);
    }
    parser.feed_line(line, (line.size() & 1) ? "a" : "b");
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  NcclDiagnosis d = parser.summarize();
  (void)d.empty();
  return 0;
}
