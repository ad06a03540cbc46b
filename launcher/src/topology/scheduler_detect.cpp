#include "topology/scheduler_detect.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <utility>

#include "cli/stream_selection.h"  // parse_int
#include "cli/usage_error.h"
#include "net/host_port.h"
#include "topology/slurm_nodelist.h"

namespace ddp {
namespace {


// ---------------------------------------------------------------- environment

// Shells and manifests export empty variables ("MASTER_ADDR="); an empty value
// says nothing, so it counts as unset everywhere below.
std::optional<std::string> env_value(const GetEnv& getenv, const char* name) {
  auto value = getenv(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

// Several schedulers spell one fact two ways (SLURM_JOB_NUM_NODES and the older
// SLURM_NNODES); the first one set wins and its name goes into the notes.
std::optional<std::pair<std::string, std::string>> first_set(const GetEnv& getenv,
                                                             std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (auto value = env_value(getenv, name)) return std::make_pair(std::string(name), *value);
  }
  return std::nullopt;
}

// Every count and rank here must be a plain non-negative number; anything else
// is a broken job script, better refused by name than misread as 0.
int to_int(const std::string& text, const std::string& what) {
  int value = 0;
  if (!parse_int(text, value)) throw UsageError(fmt::format("{}='{}' is not a non-negative integer", what, text));
  return value;
}

// A numeric variable, checked at once so the error names it; unset is unset.
std::optional<int> env_int(const GetEnv& getenv, const char* name) {
  const auto text = env_value(getenv, name);
  return text ? std::optional<int>(to_int(*text, name)) : std::nullopt;
}

}  // namespace

NodeCount parse_node_count(const std::string& text, const std::string& what) {
  const auto colon = text.find(':');
  NodeCount n;
  bool numbers = false;
  if (colon == std::string::npos) {
    numbers = parse_int(text, n.max);
    n.min = n.max;
  } else {
    numbers = parse_int(text.substr(0, colon), n.min) && parse_int(text.substr(colon + 1), n.max);
  }
  if (!numbers || n.min < 1 || n.max < n.min) {
    throw UsageError(fmt::format("{}='{}': expected N or MIN:MAX with 1 <= MIN <= MAX", what, text));
  }
  return n;
}

namespace {

// A variable that must be there once its scheduler is recognised: its absence
// is a manifest mistake, so the message says how to fix it.
std::string required(const GetEnv& getenv, const char* name, const std::string& why) {
  auto value = env_value(getenv, name);
  if (!value) throw UsageError(fmt::format("{} is not set: {}", name, why));
  return *value;
}

// ------------------------------------------------------------------ endpoints

// Port 0 ("pick one") makes no sense for an address other nodes must dial.
int to_port(const std::string& text, const std::string& what) {
  const int port = to_int(text, what);
  if (port < 1 || port > 65535) throw UsageError(fmt::format("{}='{}' is not a TCP port (1-65535)", what, text));
  return port;
}

// HOST, HOST:PORT, [IPv6] and [IPv6]:PORT as torchrun writes them; a bare IPv6
// address (more than one colon, no brackets) is a host without a port. With
// any_port, port 0 is accepted here and refused later unless the job turns
// out to be a single node (torchrun's `--rdzv-endpoint=localhost:0`).
HostPort parse_endpoint(const std::string& text, const std::string& what, bool any_port = false) {
  std::string why;
  auto endpoint = parse_host_port(text, why, any_port);
  if (!endpoint) throw UsageError(fmt::format("{}='{}': {}", what, text, why));
  return *endpoint;
}

// Host and port always travel together, so a caller never sees a host
// without the port it would dial.
void set_endpoint(DetectedTopology& t, const HostPort& e, int default_port) {
  t.rdzv_host = e.host;
  t.rdzv_port = e.port.value_or(default_port);
}

// MASTER_ADDR[:MASTER_PORT] as torchrun's static rendezvous reads them; the
// port is optional, the address is what makes the pair count.
std::optional<HostPort> master_endpoint(const GetEnv& getenv, const char* addr_name, const char* port_name) {
  const auto addr = env_value(getenv, addr_name);
  if (!addr) return std::nullopt;
  const auto port = env_value(getenv, port_name);
  return HostPort{*addr, port ? std::optional<int>(to_port(*port, port_name)) : std::nullopt};
}


// ------------------------------------------------------------------- sources

// Source a. The plain variables of torch.distributed.launch-style scripts
// (MASTER_ADDR with NODE_RANK or GROUP_RANK): a node rank and an address.
std::optional<DetectedTopology> from_torchrun_env(const GetEnv& getenv, int default_port) {
  const auto rank = first_set(getenv, {"NODE_RANK", "GROUP_RANK"});
  const auto master = master_endpoint(getenv, "MASTER_ADDR", "MASTER_PORT");
  if (!rank || !master) return std::nullopt;
  DetectedTopology t;
  t.source = "torchrun env";
  t.node_rank = to_int(rank->second, rank->first);
  t.notes.push_back(fmt::format("node rank {} from {}", *t.node_rank, rank->first));
  if (const auto n = env_int(getenv, "GROUP_WORLD_SIZE")) {
    t.nnodes = n;
    t.notes.push_back(fmt::format("nnodes {} from GROUP_WORLD_SIZE", *n));
  }
  set_endpoint(t, *master, default_port);
  t.notes.push_back(
      fmt::format("rendezvous endpoint {} from MASTER_ADDR[:MASTER_PORT]", format_host_port(*t.rdzv_host, *t.rdzv_port)));
  return t;
}

// srun started with --ntasks-per-node>1 runs several agents per node that all
// read the same SLURM_NODEID; they would claim one node rank twice.
void refuse_several_tasks_per_node(const GetEnv& getenv, int nnodes) {
  const auto tasks = env_int(getenv, "SLURM_STEP_NUM_TASKS");
  if (tasks && *tasks > nnodes) {
    throw UsageError(
        fmt::format("SLURM_STEP_NUM_TASKS={} on {} node(s): srun started more than one ddplaunch per node; "
                    "use srun --ntasks-per-node=1 (ddplaunch starts the workers itself)",
                    *tasks, nnodes));
  }
}

// Source b. Inside an srun step the step's own node set is what runs ddplaunch;
// in the batch script itself only the job's variables exist.
std::optional<DetectedTopology> from_slurm(const GetEnv& getenv, int default_port) {
  const auto job = first_set(getenv, {"SLURM_JOB_ID", "SLURM_JOBID"});
  if (!job) return std::nullopt;
  DetectedTopology t;
  t.source = "slurm";
  t.job_id = job->second;
  const bool in_step = env_value(getenv, "SLURM_STEP_NUM_NODES") || env_value(getenv, "SLURM_STEP_NODELIST");
  const auto count = in_step ? first_set(getenv, {"SLURM_STEP_NUM_NODES"})
                             : first_set(getenv, {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"});
  const auto list = in_step ? first_set(getenv, {"SLURM_STEP_NODELIST"})
                            : first_set(getenv, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (count) t.nnodes = to_int(count->second, count->first);
  if (list) {
    std::vector<std::string> hosts;
    try {
      hosts = expand_slurm_nodelist(list->second);
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("{}: {}", list->first, e.what()));  // which variable holds it
    }
    if (t.nnodes && static_cast<std::size_t>(*t.nnodes) != hosts.size()) {
      throw UsageError(fmt::format("{}={} but {} '{}' names {} host(s)", count->first, *t.nnodes, list->first,
                                   list->second, hosts.size()));
    }
    t.nnodes = static_cast<int>(hosts.size());
    set_endpoint(t, {hosts.front(), std::nullopt}, default_port);
    t.notes.push_back(fmt::format("{} {} -> rendezvous host {}", list->first, list->second, hosts.front()));
  }
  if (const auto id = env_int(getenv, "SLURM_NODEID")) {
    t.node_rank = id;
    t.notes.push_back(fmt::format("node rank {} from SLURM_NODEID", *id));
  } else if (t.nnodes == 1) {
    t.node_rank = 0;
  }
  if (in_step && t.nnodes) refuse_several_tasks_per_node(getenv, *t.nnodes);
  if (!in_step && t.nnodes.value_or(1) > 1) {
    t.notes.push_back(
        "not inside an srun step: only this node runs ddplaunch; start it with "
        "`srun --ntasks-per-node=1 ddplaunch ...` to run one per node");
  }
  return t;
}

// Source c. mpirun with one process per node (--map-by ppr:1:node): the MPI
// world is the set of nodes. Open MPI says nothing about addresses.
std::optional<DetectedTopology> from_openmpi(const GetEnv& getenv, int /*default_port*/) {
  const auto size = env_int(getenv, "OMPI_COMM_WORLD_SIZE");
  const auto rank = env_int(getenv, "OMPI_COMM_WORLD_RANK");
  if (!size || !rank) return std::nullopt;
  DetectedTopology t;
  t.source = "openmpi";
  t.nnodes = size;
  t.node_rank = rank;
  t.notes.push_back(
      fmt::format("nnodes {} from OMPI_COMM_WORLD_SIZE, node rank {} from OMPI_COMM_WORLD_RANK", *size, *rank));
  t.notes.push_back(
      "Open MPI sets ranks but no address: the rendezvous endpoint comes from "
      "MASTER_ADDR[:MASTER_PORT] (mpirun -x MASTER_ADDR) or --rdzv-endpoint");
  if (const auto local = env_int(getenv, "OMPI_COMM_WORLD_LOCAL_SIZE"); local && *local > 1) {
    t.notes.push_back(
        fmt::format("OMPI_COMM_WORLD_LOCAL_SIZE={}: that many ddplaunch share this host, each counted "
                    "as a node; start one per node (mpirun --map-by ppr:1:node)",
                    *local));
  }
  return t;
}

// Kubernetes manifests carry the node count in an env var of their choosing;
// PET_NNODES first (what torchrun would read), then ours.
void kubernetes_nnodes(const GetEnv& getenv, DetectedTopology& t) {
  if (const auto n = first_set(getenv, {"PET_NNODES", "DDPLAUNCH_NNODES"})) {
    const NodeCount count = parse_node_count(n->second, n->first);
    t.nnodes = count.max;
    if (count.min != count.max) t.min_nnodes = count.min;
    t.notes.push_back(fmt::format("nnodes {} from {}", *t.nnodes, n->first));
  }
}

// JobSet numbers pods within each Job only; the global node rank needs the
// number of pods per Job, given outright or implied by nnodes / replicas.
std::optional<int> jobset_pods_per_job(const GetEnv& getenv, const DetectedTopology& t) {
  if (auto given = env_int(getenv, "DDPLAUNCH_K8S_PODS_PER_JOB")) return given;
  const auto replicas = env_int(getenv, "REPLICATED_JOB_REPLICAS");
  if (!t.nnodes || !replicas || *replicas == 0) return std::nullopt;
  if (*t.nnodes % *replicas != 0) {
    throw UsageError(fmt::format("nnodes {} is not a multiple of REPLICATED_JOB_REPLICAS={}", *t.nnodes, *replicas));
  }
  return *t.nnodes / *replicas;
}

// Source d. JobSet: pod hostnames are <jobset>-<replicated job>-<job index>-<pod
// index> under the JobSet's subdomain, so pod 0 of Job 0 is known by name.
std::optional<DetectedTopology> from_kubernetes_jobset(const GetEnv& getenv, int default_port) {
  const auto name = env_value(getenv, "JOBSET_NAME");
  const auto index = env_int(getenv, "JOB_COMPLETION_INDEX");
  if (!name || !index) return std::nullopt;
  const std::string rjob = required(getenv, "REPLICATED_JOB_NAME",
                                    "expose the pod label jobset.sigs.k8s.io/replicatedjob-name with the downward API");
  const int job_index =
      to_int(required(getenv, "JOB_INDEX", "expose the pod label jobset.sigs.k8s.io/job-index with the downward API"),
             "JOB_INDEX");
  DetectedTopology t;
  t.source = "kubernetes jobset";
  t.job_id = *name;
  kubernetes_nnodes(getenv, t);
  const auto per_job = jobset_pods_per_job(getenv, t);
  const auto replicas = env_int(getenv, "REPLICATED_JOB_REPLICAS");
  if (!t.nnodes && per_job && replicas) t.nnodes = *per_job * *replicas;
  if (per_job && *index >= *per_job) {
    throw UsageError(fmt::format("JOB_COMPLETION_INDEX={} but a Job has {} pod(s)", *index, *per_job));
  }
  if (per_job) {
    t.node_rank = job_index * *per_job + *index;
    t.notes.push_back(fmt::format("node rank {} = JOB_INDEX {} * {} pod(s) per Job + JOB_COMPLETION_INDEX {}",
                                  *t.node_rank, job_index, *per_job, *index));
  } else if (job_index == 0) {
    t.node_rank = *index;
    t.notes.push_back(fmt::format("node rank {} from JOB_COMPLETION_INDEX (JOB_INDEX 0)", *index));
  } else {
    t.notes.push_back(
        "pods per Job unknown (set DDPLAUNCH_K8S_PODS_PER_JOB or REPLICATED_JOB_REPLICAS): "
        "the coordinator assigns the node rank at join");
  }
  const std::string subdomain = env_value(getenv, "DDPLAUNCH_K8S_SUBDOMAIN").value_or(*name);
  const std::string host = fmt::format("{}-{}-0-0.{}", *name, rjob, subdomain);
  set_endpoint(t, {host, std::nullopt}, default_port);
  t.notes.push_back(fmt::format("JobSet {} replicated job {} -> rendezvous host {}", *name, rjob, host));
  return t;
}

// Source e. Indexed Job: the pod hostname is <job name>-<completion index>;
// pod 0 is reachable through the headless Service named as the subdomain.
std::optional<DetectedTopology> from_kubernetes_indexed_job(const GetEnv& getenv, int default_port) {
  const auto index_text = env_value(getenv, "JOB_COMPLETION_INDEX");
  if (!index_text) return std::nullopt;
  DetectedTopology t;
  t.source = "kubernetes";
  t.node_rank = to_int(*index_text, "JOB_COMPLETION_INDEX");
  t.notes.push_back(fmt::format("node rank {} from JOB_COMPLETION_INDEX", *t.node_rank));
  kubernetes_nnodes(getenv, t);
  const std::string hostname = env_value(getenv, "HOSTNAME").value_or("");
  const std::string suffix = "-" + *index_text;
  const bool named =
      hostname.size() > suffix.size() && hostname.compare(hostname.size() - suffix.size(), suffix.size(), suffix) == 0;
  if (!named) {
    t.notes.push_back(hostname.empty()
                          ? "HOSTNAME unset: cannot name pod 0"
                          : fmt::format("HOSTNAME {} is not <job>-{}: cannot name pod 0", hostname, *index_text));
    return t;
  }
  const std::string job = hostname.substr(0, hostname.size() - suffix.size());
  const std::string subdomain = env_value(getenv, "DDPLAUNCH_K8S_SUBDOMAIN").value_or(job);
  t.job_id = job;
  set_endpoint(t, {fmt::format("{}-0.{}", job, subdomain), std::nullopt}, default_port);
  t.notes.push_back(fmt::format("HOSTNAME {} -> rendezvous host {}", hostname, *t.rdzv_host));
  return t;
}

// Rule 2: the first scheduler source that applies, in precedence order.
std::optional<DetectedTopology> from_scheduler(const GetEnv& getenv, int default_port) {
  using Detector = std::optional<DetectedTopology> (*)(const GetEnv&, int);
  const Detector detectors[] = {from_torchrun_env, from_slurm, from_openmpi, from_kubernetes_jobset,
                                from_kubernetes_indexed_job};
  for (const Detector detect : detectors) {
    if (auto t = detect(getenv, default_port)) return t;
  }
  return std::nullopt;
}

// ----------------------------------------------- the command line and PET_*

// One field the user asked for, and where it came from ("--nnodes" or
// "PET_NNODES"), for the notes.
template <typename T>
struct Asked {
  std::optional<T> value;
  std::string origin;
};

// What the user asked for: each command-line flag, else torchrun's PET_*
// default for it (torchrun reads PET_<OPTION> when --<option> is absent).
struct Request {
  Asked<int> nnodes;             // the most nodes
  std::optional<int> min_nnodes;  // the fewest, for an elastic MIN:MAX
  Asked<int> node_rank;
  Asked<HostPort> endpoint;
  Asked<std::string> job_id;
};

// CLI parsing checks syntax; negative numbers can still arrive from callers.
void check_flags(const TopologyFlags& f) {
  if (f.nnodes && *f.nnodes < 1) throw UsageError(fmt::format("--nnodes={} must be at least 1", *f.nnodes));
  if (f.min_nnodes && (*f.min_nnodes < 1 || !f.nnodes || *f.min_nnodes > *f.nnodes)) {
    throw UsageError("--nnodes=MIN:MAX needs 1 <= MIN <= MAX");
  }
  if (f.node_rank && *f.node_rank < 0) throw UsageError(fmt::format("--node-rank={} must be >= 0", *f.node_rank));
}

// The rendezvous endpoint as torchrun would take it: --rdzv-endpoint, else
// PET_RDZV_ENDPOINT, else its static-rendezvous default PET_MASTER_ADDR[:PORT].
Asked<HostPort> asked_endpoint(const TopologyFlags& f, const GetEnv& getenv) {
  if (f.rdzv_endpoint) return {parse_endpoint(*f.rdzv_endpoint, "--rdzv-endpoint", true), "--rdzv-endpoint"};
  if (const auto pet = env_value(getenv, "PET_RDZV_ENDPOINT")) {
    return {parse_endpoint(*pet, "PET_RDZV_ENDPOINT", true), "PET_RDZV_ENDPOINT"};
  }
  if (auto master = master_endpoint(getenv, "PET_MASTER_ADDR", "PET_MASTER_PORT")) {
    return {std::move(master), "PET_MASTER_ADDR[:PET_MASTER_PORT]"};
  }
  return {};
}

// Reads every field once, up front, so a malformed PET_* value is an error
// even when a scheduler would have supplied that field.
Request read_request(const TopologyFlags& f, const GetEnv& getenv) {
  check_flags(f);
  Request r;
  if (f.nnodes) {
    r.nnodes = {f.nnodes, "--nnodes"};
    r.min_nnodes = f.min_nnodes;
  } else if (const auto pet = env_value(getenv, "PET_NNODES")) {
    const NodeCount count = parse_node_count(*pet, "PET_NNODES");
    r.nnodes = {count.max, "PET_NNODES"};
    if (count.min != count.max) r.min_nnodes = count.min;
  }
  if (f.node_rank) {
    r.node_rank = {f.node_rank, "--node-rank"};
  } else if (const auto pet = env_int(getenv, "PET_NODE_RANK")) {
    r.node_rank = {pet, "PET_NODE_RANK"};
  }
  r.endpoint = asked_endpoint(f, getenv);
  if (f.rdzv_id) {
    r.job_id = {f.rdzv_id, "--rdzv-id"};
  } else if (auto pet = env_value(getenv, "PET_RDZV_ID")) {
    r.job_id = {std::move(pet), "PET_RDZV_ID"};
  }
  return r;
}

// Rule 1: what was asked is enough to run without any scheduler.
bool describes_job(const Request& r) {
  return r.nnodes.value == 1 || (r.nnodes.value > 1 && r.node_rank.value && r.endpoint.value);
}

// An endpoint on this machine's loopback with no node count: torchrun runs it
// as one node (its default --nnodes=1), e.g. `--rdzv-endpoint=localhost:0` to
// keep jobs sharing a machine apart.
bool loopback_endpoint_alone(const Request& r) {
  return r.endpoint.value && is_loopback_host(r.endpoint.value->host) && !r.nnodes.value && !r.node_rank.value;
}

// Rule 5: more than one node was asked for, even if only partly described.
bool asks_multi_node(const Request& r) {
  return r.nnodes.value > 1 || r.node_rank.value || (r.endpoint.value && !loopback_endpoint_alone(r));
}

// "flags" when the command line gave the shape, "torchrun env" when any of it
// came from PET_* variables.
std::string request_source(const Request& r) {
  const bool pet = r.nnodes.origin.rfind("PET_", 0) == 0 || r.node_rank.origin.rfind("PET_", 0) == 0 ||
                   r.endpoint.origin.rfind("PET_", 0) == 0;
  return pet ? "torchrun env" : "flags";
}

// One integer field of rule 3: the asked value replaces the source's; a note
// names its origin wherever that changed something, so "source: slurm" never
// hides an override (on the plain command line the flags speak for themselves).
void apply_asked(std::optional<int>& field, const Asked<int>& asked, const char* what, DetectedTopology& t) {
  if (!asked.value) return;
  if (t.source != "flags" && field != asked.value) {
    t.notes.push_back(fmt::format("{} {} from {}", what, *asked.value, asked.origin));
  }
  field = asked.value;
}

// Rule 3: everything asked replaces what the source found, field by field.
void apply_request(DetectedTopology& t, const Request& r, int default_port) {
  apply_asked(t.nnodes, r.nnodes, "nnodes", t);
  if (r.nnodes.value) t.min_nnodes = r.min_nnodes;
  apply_asked(t.node_rank, r.node_rank, "node rank", t);
  if (r.endpoint.value) {
    set_endpoint(t, *r.endpoint.value, default_port);
    if (t.source != "flags") {
      t.notes.push_back(
          fmt::format("rendezvous endpoint {} from {}", format_host_port(*t.rdzv_host, *t.rdzv_port), r.endpoint.origin));
    }
  }
  if (r.job_id.value) t.job_id = r.job_id.value;
}

// Rule 4: an exported MASTER_ADDR is the user's choice of coordinator host and
// beats one a scheduler implies (the plain torchrun source read it itself).
void prefer_master_env(DetectedTopology& t, const GetEnv& getenv, int default_port) {
  const auto master = master_endpoint(getenv, "MASTER_ADDR", "MASTER_PORT");
  if (!master) return;
  const std::optional<std::string> derived = t.rdzv_host;
  set_endpoint(t, *master, default_port);
  const std::string shown = format_host_port(*t.rdzv_host, *t.rdzv_port);
  t.notes.push_back(derived && *derived != master->host
                        ? fmt::format("rendezvous endpoint {} from MASTER_ADDR[:MASTER_PORT], not {}", shown, *derived)
                        : fmt::format("rendezvous endpoint {} from MASTER_ADDR[:MASTER_PORT]", shown));
}

// Rules 1 and 5: what was asked is the whole source; a node count of 1 needs
// nothing else and implies node rank 0.
DetectedTopology from_request(const Request& r, const GetEnv& getenv, int default_port) {
  DetectedTopology t;
  t.source = request_source(r);
  if (r.nnodes.value == 1) {
    t.notes.push_back(fmt::format("{}=1: single-node job, scheduler variables ignored", r.nnodes.origin));
  } else if (!r.endpoint.value) {
    prefer_master_env(t, getenv, default_port);
  }
  apply_request(t, r, default_port);
  if (t.nnodes == 1 && !t.node_rank) t.node_rank = 0;
  return t;
}

// Nothing asked for more than one node: the one-machine job that ddplaunch ran
// before multi-node support, still with the user's --rdzv-id if given.
DetectedTopology single_node(const Request& r) {
  DetectedTopology t;
  t.source = "single node";
  t.nnodes = 1;
  t.node_rank = 0;
  t.job_id = r.job_id.value;
  if (loopback_endpoint_alone(r)) {
    const HostPort& e = *r.endpoint.value;
    t.notes.push_back(fmt::format("{} {} on loopback without a node count: one node, as torchrun's default "
                                  "--nnodes=1",
                                  r.endpoint.origin, e.port ? format_host_port(e.host, *e.port) : e.host));
  }
  return t;
}

// ------------------------------------------------------------------- results

// Mixed sources (a flag over a scheduler) can disagree; the job cannot start
// with a node outside the count.
void validate(const DetectedTopology& t) {
  if (t.nnodes && *t.nnodes < 1) throw UsageError(fmt::format("{}: the node count must be at least 1", t.source));
  if (t.nnodes && t.node_rank && *t.node_rank >= *t.nnodes) {
    throw UsageError(fmt::format("{}: node rank {} is not below the node count {}", t.source, *t.node_rank, *t.nnodes));
  }
}

// Port 0 lets a single node's coordinator pick a free port; other nodes
// could not learn which one it picked.
void refuse_any_port_beyond_one_node(const DetectedTopology& t, const Request& r) {
  const auto& endpoint = r.endpoint.value;
  if (!endpoint || endpoint->port != 0 || t.nnodes == 1) return;
  throw UsageError(fmt::format("{}='{}': port 0 (any free port) works only for a single-node job (--nnodes=1): "
                               "the other nodes could not learn which port was picked",
                               r.endpoint.origin, format_host_port(endpoint->host, 0)));
}

// A multi-node job cannot start without a node count and node 0's address;
// each entry says how to supply it, so the error can be fixed from the message.
// (A missing node rank is fine: the coordinator assigns one at join.)
void list_missing(DetectedTopology& t) {
  if (!t.nnodes) {
    const bool k8s = t.source.rfind("kubernetes", 0) == 0;
    t.missing.push_back(k8s ? "the node count: pass --nnodes=N or set PET_NNODES or DDPLAUNCH_NNODES"
                            : "the node count: pass --nnodes=N");
  }
  if (t.nnodes != 1 && !t.rdzv_host) {
    t.missing.push_back(
        "the rendezvous endpoint (node 0's host): pass --rdzv-endpoint=HOST[:PORT] or set MASTER_ADDR[:MASTER_PORT]");
  }
}

}  // namespace

DetectedTopology detect_topology(const TopologyFlags& flags, const GetEnv& getenv, int default_rdzv_port) {
  const Request request = read_request(flags, getenv);
  DetectedTopology t;
  if (describes_job(request)) {
    t = from_request(request, getenv, default_rdzv_port);
  } else if (auto scheduler = from_scheduler(getenv, default_rdzv_port)) {
    t = std::move(*scheduler);
    if (t.source != "torchrun env") prefer_master_env(t, getenv, default_rdzv_port);
    apply_request(t, request, default_rdzv_port);
  } else if (asks_multi_node(request)) {
    t = from_request(request, getenv, default_rdzv_port);
  } else {
    t = single_node(request);
  }
  validate(t);
  list_missing(t);
  refuse_any_port_beyond_one_node(t, request);
  return t;
}

void require_complete_topology(const DetectedTopology& t) {
  if (t.missing.empty()) return;
  // One line, as UsageError messages are: what is missing first, then what
  // was found, so the user sees which variables were read.
  std::string message = fmt::format("multi-node job (source: {}) is missing ", t.source);
  for (std::size_t i = 0; i < t.missing.size(); ++i) message += (i ? "; " : "") + t.missing[i];
  for (std::size_t i = 0; i < t.notes.size(); ++i) message += (i ? "; " : " (found: ") + t.notes[i];
  if (!t.notes.empty()) message += ")";
  throw UsageError(message);
}


}  // namespace ddp
