#include "output/line_splitter.h"

namespace ddp {

void LineSplitter::feed(std::string_view data, const std::function<void(std::string_view)>& on_line) {
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(data);
      while (partial_.size() >= max_line_) {
        on_line(std::string_view(partial_).substr(0, max_line_));
        partial_.erase(0, max_line_);
      }
      return;
    }
    if (partial_.empty()) {
      on_line(data.substr(0, nl));  // common case: no copy
    } else {
      partial_.append(data.substr(0, nl));
      on_line(partial_);
      partial_.clear();
    }
    data.remove_prefix(nl + 1);
  }
}

void LineSplitter::flush(const std::function<void(std::string_view)>& on_line) {
  if (partial_.empty()) return;
  on_line(partial_);
  partial_.clear();
}

}  // namespace ddp
