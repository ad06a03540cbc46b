#pragma once
// The /metrics content of one coordinator: every job's status document
// (CoordinatorJob::status_json(), the same that `ddplaunch status --json`
// prints) turned into Prometheus families, written by PrometheusText.
//
// Cardinality stays bounded: labels are job_id on job metrics and job_id,
// node, rank, host on rank metrics, plus phase / state / kind, each from a
// fixed list of values; never a step, a collective or a timestamp. Per
// monitored rank that is kRankSeriesPerRank series, plus one per resource
// figure its agent measured (status --json's ranks[].resources: sample age,
// CPU %, RSS, threads, 2 context-switch counts; per GPU the rank uses:
// utilisation, memory used and total, temperature, power, SM clock, Xid and
// ECC errors, labelled gpu=INDEX). A figure not measured is left out. A rank
// with no heartbeats (a plain script) has only its resource series, with
// empty node and host labels. Each warning given about a rank
// (health/trouble_warnings.h) adds one ddplaunch_rank_warning series,
// labelled with its kind (a fixed list of 6) and, for a GPU's, gpu=INDEX:
// none for a healthy rank, at most a few for a troubled one.
//
// Threading: pure.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/prometheus_text.h"

namespace ddp {

/// Series per monitored rank without resource figures: step, step time,
/// heartbeat age, open collectives, exited, and one per phase (7).
constexpr int kRankSeriesPerRank = 12;

/// The phase label's values, in order ("unknown" for anything else).
const std::vector<std::string>& metric_phases();

/// Declares every family (so they come out in a fixed order) and adds the
/// samples of one job's status document. Missing fields are left out.
void add_job_metrics(const nlohmann::json& status, PrometheusText& out);

/// The exposition of these jobs' status documents.
std::string jobs_metrics_text(const std::vector<nlohmann::json>& statuses);

}  // namespace ddp
