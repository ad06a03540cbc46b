#pragma once
// Where a multi-node job's shape comes from: the command line, torchrun's
// environment, or whichever scheduler started this ddplaunch (Slurm, Open MPI,
// a Kubernetes Indexed Job or JobSet). Users start one ddplaunch per node with
// the same command line everywhere (`srun ddplaunch ...`, `mpirun -npernode 1
// ddplaunch ...`, one per pod), so each agent must work out for itself how many
// nodes there are, which one it is, and where node 0's coordinator listens.
// Pure: it reads the environment only through the injected GetEnv.
//
// Precedence, as implemented by detect_topology():
//
//  0. What the user asked for, field by field: each command-line flag, else
//     torchrun's PET_* default for it (torchrun reads PET_<OPTION> when
//     --<option> is absent): --nnodes / PET_NNODES, --node-rank /
//     PET_NODE_RANK, --rdzv-endpoint / PET_RDZV_ENDPOINT / PET_MASTER_ADDR
//     [:PET_MASTER_PORT], --rdzv-id / PET_RDZV_ID.
//  1. That alone describes the job: a node count of 1 (single node, scheduler
//     variables ignored), or a count above 1 with a node rank and an endpoint.
//     source: "flags", or "torchrun env" when any of it came from PET_*.
//  2. Otherwise the first scheduler source that applies supplies the shape:
//     a. "torchrun env": MASTER_ADDR together with NODE_RANK or GROUP_RANK (a
//        torch.distributed.launch-style script). node rank: NODE_RANK, else
//        GROUP_RANK; nnodes: GROUP_WORLD_SIZE; endpoint:
//        MASTER_ADDR[:MASTER_PORT].
//     b. "slurm": SLURM_JOB_ID (or the older SLURM_JOBID) is set. Inside an
//        srun step (SLURM_STEP_NUM_NODES or SLURM_STEP_NODELIST set) the step
//        variables give nnodes and the node list, else the job's
//        (SLURM_JOB_NUM_NODES, SLURM_NNODES, SLURM_JOB_NODELIST, SLURM_NODELIST).
//        node rank: SLURM_NODEID; rendezvous host: the first host of the
//        expanded node list (Slurm numbers nodes in node-list order); job id:
//        SLURM_JOB_ID. Several tasks per node in a step are refused (they would
//        share one SLURM_NODEID).
//     c. "openmpi": OMPI_COMM_WORLD_SIZE and OMPI_COMM_WORLD_RANK are set; one
//        ddplaunch per node, so size = nnodes and rank = node rank. Open MPI
//        names no address: the endpoint comes from MASTER_ADDR[:MASTER_PORT]
//        or rule 0 (a note says so). No job id.
//     d. "kubernetes jobset": JOBSET_NAME and JOB_COMPLETION_INDEX are set;
//        REPLICATED_JOB_NAME and JOB_INDEX are then required. JobSet puts these
//        on the pod as labels/annotations (jobset.sigs.k8s.io/jobset-name,
//        replicatedjob-name, job-index); the manifest exposes them with the
//        downward API under these names. node rank = JOB_INDEX * pods-per-job
//        + JOB_COMPLETION_INDEX, pods-per-job from DDPLAUNCH_K8S_PODS_PER_JOB,
//        else nnodes / REPLICATED_JOB_REPLICAS (label
//        jobset.sigs.k8s.io/replicatedjob-replicas); with JOB_INDEX 0 it is not
//        needed, otherwise without it the rank is left unset. nnodes:
//        PET_NNODES, else DDPLAUNCH_NNODES, else pods-per-job times
//        REPLICATED_JOB_REPLICAS. Host of rank 0:
//        <JOBSET_NAME>-<REPLICATED_JOB_NAME>-0-0.<subdomain>, the subdomain
//        from DDPLAUNCH_K8S_SUBDOMAIN, else JobSet's default, the JobSet name.
//        job id: JOBSET_NAME. One replicated job holds all training nodes.
//     e. "kubernetes": JOB_COMPLETION_INDEX alone (Indexed Job) gives the node
//        rank; nnodes from PET_NNODES, else DDPLAUNCH_NNODES (the Job's
//        completions). The pod hostname is <job-name>-<index>, so the host of
//        rank 0 is HOSTNAME minus "-<index>" plus "-0", then "." and the
//        subdomain: DDPLAUNCH_K8S_SUBDOMAIN, else by convention the Job name
//        (a headless Service named like the Job, set as the pod template's
//        subdomain). job id: the Job name.
//  3. Whatever rule 0 found overrides the same field of that source, field by
//     field, each override with a note; `source` stays the scheduler's. E.g.
//     --rdzv-endpoint under Slurm: Slurm gives nnodes and the node rank, the
//     flag the endpoint; PET_RDZV_ENDPOINT in a Kubernetes manifest likewise.
//  4. For sources b-e, an exported MASTER_ADDR[:MASTER_PORT] beats the host
//     the scheduler implies (the user chose it); rule 0's endpoint beats both.
//  5. No scheduler applies: rule 0's partial answer if it asked for more than
//     one node ("flags" / "torchrun env"; MASTER_ADDR may supply the endpoint;
//     what is still lacking is listed in `missing`), else "single node". An
//     endpoint alone asks for more than one node unless it is on loopback
//     (`--rdzv-endpoint=localhost:0`, torchrun's way to keep single-node jobs
//     on one machine apart: its default --nnodes is 1).
//
// Port 0 in --rdzv-endpoint / PET_RDZV_ENDPOINT means any free port, as in
// torchrun; it is refused (UsageError) for a job of more than one node.
//
// A rendezvous port missing from an endpoint is default_rdzv_port (torchrun's
// 29400). A missing node rank is allowed: the coordinator assigns it at join,
// as torchrun's dynamic rendezvous does; the coordinator then runs on the node
// whose address is the endpoint's host.

#include <optional>
#include <string>
#include <vector>

#include "topology/launch_plan.h"  // GetEnv

namespace ddp {

/// Where the job's shape came from, printed at start ("source: slurm").
struct DetectedTopology {
  std::string source;  // "flags", "torchrun env", "slurm", "openmpi", "kubernetes", "kubernetes jobset", "single node"
  std::optional<int> nnodes;      // the most nodes (MAX of an elastic MIN:MAX)
  std::optional<int> min_nnodes;  // set only for an elastic range (MIN < MAX)
  std::optional<int> node_rank;
  std::optional<std::string> rdzv_host;  // host of the coordinator (node rank 0's agent)
  std::optional<int> rdzv_port;          // set whenever rdzv_host is
  std::optional<std::string> job_id;
  // One-line explanations, e.g. "SLURM_JOB_NODELIST node[01-04] -> rendezvous host node01".
  std::vector<std::string> notes;
  /// What a multi-node job still lacks, each with how to supply it (e.g. "the
  /// rendezvous endpoint: pass --rdzv-endpoint=HOST[:PORT] or set MASTER_ADDR");
  /// empty when the job can start. require_complete_topology() turns it into
  /// a UsageError.
  std::vector<std::string> missing;
};

/// What the user gave on the command line (unset = not given). Only the
/// command line: PET_* defaults are read by detect_topology itself (rule 0), so
/// that `source` can tell them apart; a caller that folds PET_* into these
/// values only changes the label "torchrun env" into "flags".
struct TopologyFlags {
  std::optional<int> nnodes;      // N, or MAX of --nnodes=MIN:MAX
  std::optional<int> min_nnodes;  // MIN of --nnodes=MIN:MAX
  std::optional<int> node_rank;
  std::optional<std::string> rdzv_endpoint;  // HOST[:PORT], [IPv6][:PORT]
  std::optional<std::string> rdzv_id;
};

/// --nnodes and PET_NNODES: N, or an elastic MIN:MAX (N is N:N).
struct NodeCount {
  int min = 1;
  int max = 1;
};
/// Throws UsageError naming `what` unless text is N or MIN:MAX, 1 <= MIN <= MAX.
NodeCount parse_node_count(const std::string& text, const std::string& what);

/// Applies the precedence above. Throws UsageError naming the variable when a
/// value cannot be right: not a number, a node rank outside [0, nnodes), a
/// malformed endpoint or Slurm node list, an incomplete JobSet environment.
DetectedTopology detect_topology(const TopologyFlags& flags, const GetEnv& getenv, int default_rdzv_port = 29400);

/// Throws UsageError listing topology.missing (with the source and its notes'
/// hints) when it is not empty; the caller runs it before starting anything.
void require_complete_topology(const DetectedTopology& topology);


}  // namespace ddp
