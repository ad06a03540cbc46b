#pragma once
// The live page the metrics port serves at "/": one static HTML document,
// embedded in the binary (no build toolchain, nothing fetched from
// elsewhere), whose script polls /status.json every 1.5 s and draws the job,
// a table of ranks (state, step, phase, heartbeat age, step time with a
// sparkline of the last step times seen by this browser, and the rank's
// resources when its heartbeats carry them), the open collectives, recent
// warnings and the last failure or hang report when the document has them.
// A job that needs its token: open the page as /?token=TOKEN (the script
// sends it as a Bearer header); ?job=ID chooses a job under `serve`.
//
// Threading: returns a constant.

#include <string>

namespace ddp {

const std::string& status_page_html();

}  // namespace ddp
