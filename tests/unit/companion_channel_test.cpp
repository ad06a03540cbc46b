// The Python companion's side of the agent: its messages (outside input, so
// every malformed shape is tried), the board that carries requests for stacks
// and answers, and the channel itself over a real Unix socket.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "agent/worker_health_board.h"
#include "announcement_writer.h"
#include "companion/companion_channel.h"
#include "companion/companion_messages.h"
#include "health/heartbeat_proto.h"
#include "stacks/process_state.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

const char* kHello =
    R"j({"type":"hello","version":1,"job_id":"job","token":"tok","rank":4,"local_rank":0,"generation":2,"pid":7,"python":"3.11.2","torch":"1.13.0"})j";

TEST(CompanionMessages, HelloIsParsed) {
  const auto h = parse_companion_hello(kHello);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->job_id, "job");
  EXPECT_EQ(h->token, "tok");
  EXPECT_EQ(h->rank, 4);
  EXPECT_EQ(h->generation, 2);
  EXPECT_EQ(h->torch, "1.13.0");
  EXPECT_EQ(companion_message_kind(kHello), CompanionMessageKind::kHello);
}

TEST(CompanionMessages, MalformedInputYieldsNothing) {
  for (const char* text : {"", "[]", "nul", "{\"type\":\"hello\"}", R"j({"type":"hello","rank":"4","generation":0})j",
                           R"j({"type":"hello","rank":-1,"generation":0})j", R"j({"type":"hello","rank":99999999999,"generation":0})j",
                           R"j({"type":"hello","rank":0,"local_rank":-2,"generation":0})j",
                           R"j({"type":"hello","rank":0,"local_rank":-2147483648,"generation":0})j",
                           R"j({"type":"heartbeat"})j"}) {
    EXPECT_FALSE(parse_companion_hello(text)) << text;
  }
  // Left out, local_rank reads as -1 (unknown); given, it is a local rank.
  const auto without = parse_companion_hello(R"j({"type":"hello","rank":0,"generation":0})j");
  ASSERT_TRUE(without);
  EXPECT_EQ(without->local_rank, -1);
  const auto given = parse_companion_hello(R"j({"type":"hello","rank":3,"local_rank":1,"generation":0})j");
  ASSERT_TRUE(given);
  EXPECT_EQ(given->local_rank, 1);
  EXPECT_EQ(companion_message_kind("{not json"), CompanionMessageKind::kUnknown);
  EXPECT_EQ(companion_message_kind(R"j({"type":5})j"), CompanionMessageKind::kUnknown);
}

TEST(CompanionMessages, HeartbeatBecomesARankReport) {
  const auto hello = parse_companion_hello(kHello);
  const auto r = parse_companion_heartbeat(
      R"j({"type":"heartbeat","step":21,"phase":"collective","step_seconds":0.25,"busy_seconds":0.125,
          "sync_seconds":0.0625,"last_enqueued":47,"last_started":47,"last_completed":46,
          "recent":[{"sequence":46,"op":"all_reduce","bytes":0,"dtype":"","state":"completed","age_ms":30},
                    {"sequence":47,"op":"all_reduce","bytes":4,"dtype":"float32","state":"started","age_ms":12}],
          "exiting":false,"announced":12,"activity":305})j",
      *hello, 1234, 1, "node-a");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rank, 4);
  EXPECT_EQ(r->pid, 1234) << "the kernel's pid, not the message's";
  EXPECT_EQ(r->node_rank, 1);
  EXPECT_EQ(r->host, "node-a");
  EXPECT_EQ(r->step, 21);
  EXPECT_EQ(r->phase, WorkerPhase::kCollective);
  EXPECT_DOUBLE_EQ(r->busy_seconds, 0.125);
  EXPECT_DOUBLE_EQ(r->sync_seconds, 0.0625);
  EXPECT_EQ(r->last_completed, 46u);
  ASSERT_EQ(r->recent.size(), 2u);
  EXPECT_EQ(r->recent[1].bytes, 4);
  EXPECT_EQ(r->recent[1].age, 12ms);
  EXPECT_EQ(r->announced, 12u);
  EXPECT_EQ(r->activity, 305u);
  ::ddplaunch::v1::WorkerHeartbeat hb;   // what the agent forwards to the coordinator
  to_proto(*r, Duration::zero(), hb);
  const RankReport forwarded = from_proto(hb, 1, "node-a");
  EXPECT_EQ(forwarded.activity, 305u);
  EXPECT_DOUBLE_EQ(forwarded.sync_seconds, 0.0625);
}

TEST(CompanionMessages, HeartbeatCarriesTheSubgroupsCounts) {
  const auto hello = parse_companion_hello(kHello);
  const auto r = parse_companion_heartbeat(
      R"j({"type":"heartbeat","step":3,"phase":"collective","last_enqueued":9,"last_completed":9,
          "groups":[{"group":"1","ranks":[2,0],"last_enqueued":4,"last_completed":4},
                    {"group":"2","ranks":[0,1],"last_enqueued":7,"last_completed":6,
                     "open":{"sequence":7,"op":"all_reduce","bytes":12,"dtype":"float32","state":"started","age_ms":40},
                     "recent":[{"sequence":6,"op":"broadcast","bytes":8,"dtype":"int64","state":"completed","age_ms":90},
                               {"sequence":7,"op":"all_reduce","bytes":12,"dtype":"float32","state":"started","age_ms":40}]},
                    {"group":"bad","ranks":[-1],"last_enqueued":1},
                    {"group":"none","ranks":[]},
                    {"group":"over","ranks":[1],"last_enqueued":2,"last_completed":5}]})j",
      *hello, 1234, 1, "node-a");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->subgroups.size(), 3u) << "groups without valid members are left out";
  EXPECT_EQ(r->subgroups[0].group, "1");
  EXPECT_EQ(r->subgroups[0].ranks, std::vector<int>({0, 2}));
  EXPECT_FALSE(r->subgroups[0].open);
  const SubgroupProgress& g = r->subgroups[1];
  EXPECT_EQ(g.ranks, std::vector<int>({0, 1}));
  EXPECT_EQ(g.last_enqueued, 7u);
  EXPECT_EQ(g.last_completed, 6u);
  ASSERT_TRUE(g.open);
  EXPECT_EQ(g.open->sequence, 7u);
  EXPECT_EQ(g.open->bytes, 12);
  EXPECT_EQ(g.open->age, 40ms);
  ASSERT_EQ(g.recent.size(), 2u);
  EXPECT_EQ(g.recent[0].sequence, 6u);
  EXPECT_EQ(g.recent[0].op, "broadcast");
  EXPECT_EQ(g.recent[0].dtype, "int64");
  EXPECT_EQ(g.recent[0].state, "completed");
  EXPECT_EQ(g.recent[0].age, 90ms);
  EXPECT_TRUE(r->subgroups[0].recent.empty());
  EXPECT_EQ(r->subgroups[2].last_completed, 2u) << "never more finished than entered";
  EXPECT_EQ(subgroup_completed(*r), 4u + 6u + 2u);
  EXPECT_EQ(r->last_enqueued, 9u) << "the default group's numbers stay its own";

  // What the agent forwards to the coordinator says the same.
  ::ddplaunch::v1::WorkerHeartbeat hb;
  to_proto(*r, Duration::zero(), hb);
  const RankReport back = from_proto(hb, 1, "node-a");
  ASSERT_EQ(back.subgroups.size(), 3u);
  EXPECT_EQ(back.subgroups[1].group, "2");
  EXPECT_EQ(back.subgroups[1].ranks, std::vector<int>({0, 1}));
  EXPECT_EQ(back.subgroups[1].last_completed, 6u);
  ASSERT_TRUE(back.subgroups[1].open);
  EXPECT_EQ(back.subgroups[1].open->op, "all_reduce");
  EXPECT_EQ(back.subgroups[1].open->age, 40ms);
  ASSERT_EQ(back.subgroups[1].recent.size(), 2u);
  EXPECT_EQ(back.subgroups[1].recent[0].dtype, "int64");
  EXPECT_EQ(back.subgroups[1].recent[0].age, 90ms);
  EXPECT_EQ(back.subgroups[1].recent[1].sequence, 7u);
  EXPECT_FALSE(back.subgroups[0].open);
}

TEST(CompanionMessages, SendsAndReceivesInFlightReachTheCoordinator) {
  const auto hello = parse_companion_hello(kHello);
  const auto r = parse_companion_heartbeat(
      R"j({"type":"heartbeat","step":20,"phase":"other",
          "peer_waits":[{"op":"recv","peer":0,"bytes":2048,"age_ms":5200},
                        {"op":"irecv","peer":-1,"bytes":4,"age_ms":10},
                        {"op":"send","peer":-2,"bytes":4},{"peer":1},"x",
                        {"op":"isend","peer":3,"bytes":-7,"age_ms":-1}],"peer_done":12})j",
      *hello, 1234, 1, "node-a");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->peer_waits.size(), 3u) << "no op, or a peer below -1 (any source): left out";
  EXPECT_EQ(r->peer_waits[0].op, "recv");
  EXPECT_EQ(r->peer_waits[0].peer, 0);
  EXPECT_EQ(r->peer_waits[0].bytes, 2048);
  EXPECT_EQ(r->peer_waits[0].age, 5200ms);
  EXPECT_EQ(r->peer_waits[1].peer, -1);
  EXPECT_EQ(r->peer_waits[2].bytes, 0);
  EXPECT_EQ(r->peer_waits[2].age, 0ms);
  EXPECT_EQ(r->peer_calls_done, 12u);

  ::ddplaunch::v1::WorkerHeartbeat hb;
  to_proto(*r, Duration::zero(), hb);
  const RankReport back = from_proto(hb, 1, "node-a");
  ASSERT_EQ(back.peer_waits.size(), 3u);
  EXPECT_EQ(back.peer_waits[0].op, "recv");
  EXPECT_EQ(back.peer_waits[0].peer, 0);
  EXPECT_EQ(back.peer_waits[0].bytes, 2048);
  EXPECT_EQ(back.peer_waits[0].age, 5200ms);
  EXPECT_EQ(back.peer_waits[1].peer, -1);
  EXPECT_EQ(back.peer_calls_done, 12u);
}

TEST(CompanionMessages, HeartbeatFieldsOfTheWrongTypeOrRangeAreIgnored) {
  const auto hello = parse_companion_hello(kHello);
  const auto r = parse_companion_heartbeat(
      R"j({"type":"heartbeat","step":"x","phase":7,"step_seconds":-3,"last_enqueued":-5,"activity":-2,
          "busy_seconds":0.5,"sync_seconds":9,
          "recent":[5,{"sequence":"a","bytes":-9,"age_ms":-1}]})j",
      *hello, 1, 0, "h");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->step, -1);
  EXPECT_EQ(r->phase, WorkerPhase::kUnknown);
  EXPECT_EQ(r->step_seconds, 0);
  EXPECT_EQ(r->sync_seconds, 0.5) << "a part of busy_seconds: never more";
  EXPECT_EQ(r->last_enqueued, 0u);
  EXPECT_EQ(r->activity, 0u);
  ASSERT_EQ(r->recent.size(), 1u);
  EXPECT_EQ(r->recent[0].sequence, 0u);
  EXPECT_EQ(r->recent[0].bytes, 0);
}

TEST(CompanionMessages, AHugeAgeIsClampedNotOverflowed) {
  // 2^63-1 ms overflowed the conversion to Duration's nanoseconds (undefined
  // behaviour, caught by the fuzz target's sanitizers).
  const auto hello = parse_companion_hello(kHello);
  const auto r = parse_companion_heartbeat(
      R"j({"type":"heartbeat","recent":[{"sequence":1,"age_ms":9223372036854775807}]})j", *hello, 1, 0, "h");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->recent.size(), 1u);
  EXPECT_EQ(r->recent[0].age, std::chrono::milliseconds(1'000'000'000'000));
}

TEST(CompanionMessages, LongTextIsCutBetweenCharacters) {
  // Cutting at 4096 bytes split this "é", and the invalid UTF-8 left would be
  // refused by protobuf and JSON further on.
  const std::string name = std::string(4095, 'a') + "\xc3\xa9";
  const auto s = parse_companion_stacks(R"j({"type":"stacks","threads":[{"name":")j" + name + R"j("}]})j", 4);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->threads.size(), 1u);
  EXPECT_EQ(s->threads[0].name, std::string(4095, 'a'));
  const std::string fits = std::string(4094, 'a') + "\xc3\xa9";
  const auto f = parse_companion_stacks(R"j({"type":"stacks","threads":[{"name":")j" + fits + R"j("}]})j", 4);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->threads[0].name, fits);
}

TEST(CompanionMessages, LongListsKeepTheirNewestEntries) {
  const auto hello = parse_companion_hello(kHello);
  std::string recent;
  for (int i = 1; i <= 200; ++i) recent += (i > 1 ? "," : "") + std::string(R"j({"sequence":)j") + std::to_string(i) + "}";
  const auto r = parse_companion_heartbeat(R"j({"type":"heartbeat","recent":[)j" + recent + "]}", *hello, 1, 0, "h");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->recent.size(), 64u);
  EXPECT_EQ(r->recent.back().sequence, 200u);
}

TEST(CompanionMessages, StacksAreParsedOutermostFirst) {
  const auto s = parse_companion_stacks(
      R"j({"type":"stacks","threads":[{"name":"MainThread","main":true,"frames":[
          {"function":"<module>","file":"/w/train.py","line":50,"code":"main()"},
          {"function":"load","file":"/w/data.py","line":12,"code":"time.sleep(100)"}]},
          {"name":"pin","frames":"bad"}, 3]})j",
      4);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 4);
  EXPECT_EQ(s->language, "python");
  ASSERT_EQ(s->threads.size(), 2u);
  EXPECT_TRUE(s->threads[0].main);
  ASSERT_EQ(s->threads[0].frames.size(), 2u);
  EXPECT_EQ(s->threads[0].frames[1].function, "load");
  EXPECT_EQ(s->threads[0].frames[1].line, 12);
  EXPECT_TRUE(s->threads[1].frames.empty());
}

TEST(ProcessState, EachStateIsDescribed) {
  EXPECT_NE(describe_process_state('T', "do_signal_stop").find("stopped by a signal (state T"), std::string::npos);
  EXPECT_NE(describe_process_state('D', "nfs_wait").find("uninterruptible"), std::string::npos);
  EXPECT_NE(describe_process_state('D', "nfs_wait").find("nfs_wait"), std::string::npos);
  EXPECT_NE(describe_process_state('S', "0").find("GIL"), std::string::npos);
  EXPECT_EQ(describe_process_state('S', "0").find("kernel wait"), std::string::npos);
  EXPECT_EQ(describe_process_state(0, ""), "its process is gone");
}

TEST(ProcessState, AStoppedChildIsSeenStopped) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  kill(child, SIGSTOP);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, WUNTRACED), child);  // the kernel says it has stopped
  EXPECT_NE(describe_unanswering_process(child).find("state T"), std::string::npos);
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  EXPECT_EQ(describe_unanswering_process(child), "its process is gone");
}

TEST(WorkerHealthBoard, ARequestIsDeliveredOnceAndAnsweredOnce) {
  FakeClock clock;
  int notified = 0;
  WorkerHealthBoard board(clock, 2s, [](int) { return std::string("unused"); });
  board.set_stacks_listener([&] { ++notified; });
  board.record_stacks({3, "python", {}, "unasked"});
  EXPECT_TRUE(board.take_stacks().empty()) << "an answer nobody asked for is dropped";
  board.request_stack_dumps({3});
  EXPECT_TRUE(board.take_stack_dump_request(3));
  EXPECT_FALSE(board.take_stack_dump_request(3));
  EXPECT_FALSE(board.take_stack_dump_request(4));
  board.record_stacks({3, "python", {}, ""});
  EXPECT_EQ(notified, 1);
  const auto answers = board.take_stacks();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].rank, 3);
  board.record_stacks({3, "python", {}, "again"});
  EXPECT_TRUE(board.take_stacks().empty());
}

TEST(WorkerHealthBoard, AWorkerThatDoesNotAnswerIsDescribedByItsProcess) {
  FakeClock clock;
  std::vector<int> described;
  WorkerHealthBoard board(
      clock, 2s,
      [&](int pid) {
        described.push_back(pid);
        return std::string("stopped by a signal (state T)");
      },
      [](int) { return std::nullopt; });
  board.set_worker_pid(5, 4242);
  board.request_stack_dumps({5, 6});
  clock.advance(1s);
  EXPECT_TRUE(board.take_stacks().empty());
  clock.advance(1s);
  const auto answers = board.take_stacks();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0].rank, 5);
  EXPECT_EQ(answers[0].language, "process");
  EXPECT_EQ(answers[0].note, "stopped by a signal (state T)");
  EXPECT_EQ(answers[1].note, "did not answer, and its process is not known here");
  EXPECT_EQ(described, (std::vector<int>{4242}));
  EXPECT_TRUE(board.take_stacks().empty());
}

TEST(WorkerHealthBoard, AWorkerThatDoesNotAnswerGivesItsStacksBySignalWhereItCan) {
  FakeClock clock;
  std::vector<int> signalled;
  WorkerHealthBoard board(
      clock, 2s, [](int) { return std::string("running (state R) but did not answer"); },
      [&](int pid) -> std::optional<std::vector<ThreadStack>> {
        signalled.push_back(pid);
        if (pid != 4242) return std::nullopt;
        ThreadStack main{"thread 0x1", true, {{"load", "/home/u/train.py", 12, "decode(blob)"}}};
        return std::vector<ThreadStack>{main};
      });
  board.set_worker_pid(5, 4242);
  board.set_worker_pid(6, 4343);
  board.request_stack_dumps({5, 6});
  clock.advance(2s);
  const auto answers = board.take_stacks();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0].language, "python");
  ASSERT_EQ(answers[0].threads.size(), 1u);
  EXPECT_EQ(answers[0].threads[0].frames[0].code, "decode(blob)");
  EXPECT_EQ(answers[0].note,
            "its companion did not answer (running (state R) but did not answer); stacks by faulthandler on a signal");
  EXPECT_EQ(answers[1].language, "process");
  EXPECT_TRUE(answers[1].threads.empty());
  EXPECT_EQ(answers[1].note, "running (state R) but did not answer");
  EXPECT_EQ(signalled, (std::vector<int>{4242, 4343}));
}

// A board whose rank's announcements come from `writer`'s file.
class BoardWithAnnouncements : public ::testing::Test {
 protected:
  FakeClock clock;
  MappedAnnouncements file;
  AnnouncementWriter& writer = file.writer;
  WorkerHealthBoard board{clock};
};

TEST_F(BoardWithAnnouncements, AnnouncedCollectivesJoinTheLatestReport) {
  board.attach_announcements(2, file.reader);
  writer.write(5, "all_reduce", 4, "float32", clock.now());
  EXPECT_TRUE(board.latest().empty()) << "nothing is known of a rank before its first heartbeat";
  RankReport r;
  r.rank = 2;
  r.last_enqueued = r.last_started = r.last_completed = 26;
  r.recent = {{25, "all_reduce", 4, "float32", "completed", 10ms}, {26, "barrier", 0, "", "completed", 3ms}};
  r.announced = 1;  // the heartbeat was made after announcement 1
  board.record(r);
  clock.advance(400ms);
  writer.write(26, "barrier", 0, "", clock.now() - 100ms);  // the heartbeat holds #26 already
  writer.write(27, "all_reduce", 4000, "float32", clock.now() - 50ms);
  clock.advance(50ms);
  const auto latest = board.latest();
  ASSERT_EQ(latest.size(), 1u);
  EXPECT_EQ(latest[0].held, 100ms) << "dated by its newest announcement, not its older heartbeat";
  const RankReport& now = latest[0].report;
  EXPECT_EQ(now.last_enqueued, 27u);
  EXPECT_EQ(now.last_started, 27u);
  EXPECT_EQ(now.last_completed, 26u);
  EXPECT_EQ(now.phase, WorkerPhase::kCollective);
  ASSERT_EQ(now.recent.size(), 3u);
  EXPECT_EQ(now.recent[0].age, 360ms) << "ages restated as of the report's new date";
  EXPECT_EQ(now.recent[2].sequence, 27u);
  EXPECT_EQ(now.recent[2].bytes, 4000);
  EXPECT_EQ(now.recent[2].state, "started");
  EXPECT_EQ(now.recent[2].age, Duration::zero());
  board.clear();
  board.record(r);
  EXPECT_EQ(board.latest()[0].report.last_enqueued, 26u) << "a new generation forgets the old announcements";
}

// A rank that reads its data most of the time and all-reduces once a step:
// a heartbeat made while it read is forwarded after that step's all-reduce
// returned. It is still reading (or at it again), not waiting in a collective.
TEST_F(BoardWithAnnouncements, AnnouncedCollectivesThatReturnedLeaveThePhase) {
  board.attach_announcements(2, file.reader);
  RankReport r;
  r.rank = 2;
  r.phase = WorkerPhase::kData;
  r.last_enqueued = r.last_started = r.last_completed = 26;
  r.announced = 0;
  board.record(r);
  clock.advance(300ms);
  writer.write(27, "all_reduce", 4, "float32", clock.now() - 50ms);
  writer.returned(1);
  writer.write(28, "all_reduce", 4, "float32", clock.now() - 20ms);
  writer.returned(2);
  auto latest = board.latest();
  ASSERT_EQ(latest.size(), 1u);
  const RankReport& now = latest[0].report;
  EXPECT_EQ(now.phase, WorkerPhase::kData);
  EXPECT_EQ(now.last_enqueued, 28u);
  EXPECT_EQ(now.last_completed, 28u);
  ASSERT_EQ(now.recent.size(), 2u);
  EXPECT_EQ(now.recent[1].state, "completed");
  EXPECT_EQ(activity_of(now), WorkerPhase::kData);
  // One that is still running puts it in that collective; completed stops before it.
  writer.write(29, "broadcast", 8, "int64", clock.now());
  latest = board.latest();
  EXPECT_EQ(latest[0].report.phase, WorkerPhase::kCollective);
  EXPECT_EQ(latest[0].report.last_completed, 28u);
  EXPECT_EQ(latest[0].report.last_enqueued, 29u);
  // On another group, one that returned is no open collective either.
  writer.write(4, "all_gather", 64, "float32", clock.now(), "1");
  writer.returned(4);  // the fourth announcement
  latest = board.latest();
  ASSERT_EQ(latest[0].report.subgroups.size(), 1u);
  const SubgroupProgress& group = latest[0].report.subgroups[0];
  EXPECT_FALSE(group.open);
  EXPECT_EQ(group.last_enqueued, 4u);
  EXPECT_EQ(group.last_completed, 4u);
  EXPECT_EQ(group.recent.at(0).state, "completed");
}

TEST_F(BoardWithAnnouncements, AnnouncedCollectivesOfOtherGroupsOpenThere) {
  board.attach_announcements(1, file.reader);
  RankReport r;
  r.rank = 1;
  r.last_enqueued = r.last_started = r.last_completed = 30;
  SubgroupProgress pair;
  pair.group = "1";
  pair.ranks = {0, 1};
  pair.last_enqueued = 10;
  pair.last_completed = 9;
  pair.open = CollectiveSeen{10, "all_reduce", 4, "float32", "started", 1ms};  // returned since
  pair.recent = {*pair.open};
  r.subgroups = {pair};
  board.record(r);
  clock.advance(300ms);
  writer.write(11, "all_reduce", 4000, "float32", clock.now() - 20ms, "1");
  writer.write(1, "broadcast", 8, "int64", clock.now() - 10ms, "7");  // a group the heartbeat did not name
  const auto latest = board.latest();
  ASSERT_EQ(latest.size(), 1u);
  const RankReport& now = latest[0].report;
  EXPECT_EQ(now.last_enqueued, 30u) << "the default group's count is not touched";
  EXPECT_EQ(now.phase, WorkerPhase::kCollective);
  EXPECT_EQ(latest[0].held, 10ms);
  ASSERT_EQ(now.subgroups.size(), 2u);
  EXPECT_EQ(now.subgroups[0].last_enqueued, 11u);
  EXPECT_EQ(now.subgroups[0].last_completed, 9u) << "left as the heartbeat knew it";
  ASSERT_TRUE(now.subgroups[0].open);
  EXPECT_EQ(now.subgroups[0].open->sequence, 11u) << "the one it entered last, not the heartbeat's";
  EXPECT_EQ(now.subgroups[0].open->bytes, 4000);
  EXPECT_EQ(now.subgroups[0].open->age, 10ms) << "as of the newest announcement";
  ASSERT_EQ(now.subgroups[0].recent.size(), 2u) << "and added to the group's last calls";
  EXPECT_EQ(now.subgroups[0].recent[0].sequence, 10u);
  EXPECT_EQ(now.subgroups[0].recent[0].age, 1ms + 300ms - 10ms) << "restated as of the report's new date";
  EXPECT_EQ(now.subgroups[0].recent[1].sequence, 11u);
  EXPECT_EQ(now.subgroups[0].recent[1].bytes, 4000);
  EXPECT_EQ(now.subgroups[1].group, "7");
  EXPECT_TRUE(now.subgroups[1].ranks.empty()) << "members unknown until a heartbeat names them";
  EXPECT_EQ(now.subgroups[1].last_completed, 0u);
  ASSERT_TRUE(now.subgroups[1].open);
  EXPECT_EQ(now.subgroups[1].open->op, "broadcast");
}

// A companion's end of the channel: a connected SOCK_SEQPACKET socket.
class FakeCompanion {
 public:
  explicit FakeCompanion(const std::string& path) : fd_(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~FakeCompanion() { close(fd_); }
  bool connected() const { return connected_; }
  void send_text(const std::string& text) { ASSERT_EQ(send(fd_, text.data(), text.size(), 0), static_cast<ssize_t>(text.size())); }
  /// The next message, or "" when the agent closed the connection (or 5 s passed).
  std::string receive() {
    char buffer[4096];
    const ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
  }

 private:
  int fd_;
  bool connected_ = false;
};

bool eventually(const std::function<bool()>& condition) {
  for (int i = 0; i < 500; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

class CompanionChannelTest : public ::testing::Test {
 protected:
  CompanionChannelTest()
      : path_(std::filesystem::temp_directory_path() / ("ddp-channel-" + std::to_string(getpid()) + ".sock")),
        board_(SystemClock::instance()),
        channel_(path_.string(), board_, "job", "tok") {
    LocalLayout layout;
    layout.assignment.rank_start = 4;
    layout.assignment.generation = 2;
    layout.assignment.node_rank = 1;
    layout.assignment.host = "node-a";
    layout.nproc = 2;
    channel_.set_layout(layout);
  }

  std::filesystem::path path_;
  WorkerHealthBoard board_;
  CompanionChannel channel_;
};

TEST_F(CompanionChannelTest, TheSocketIsTheOwnersOnly) {
  EXPECT_EQ(std::filesystem::status(path_).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write | std::filesystem::perms::owner_exec);
}

TEST_F(CompanionChannelTest, HeartbeatsOfAGreetedRankReachTheBoard) {
  FakeCompanion c(path_.string());
  ASSERT_TRUE(c.connected());
  c.send_text(kHello);
  c.send_text(R"j({"type":"heartbeat","step":3,"phase":"forward"})j");
  ASSERT_TRUE(eventually([&] { return !board_.latest().empty(); }));
  const RankReport r = board_.latest().front().report;
  EXPECT_EQ(r.rank, 4);
  EXPECT_EQ(r.step, 3);
  EXPECT_EQ(r.pid, getpid()) << "the pid the kernel gives for the peer";
  EXPECT_EQ(r.host, "node-a");
  EXPECT_EQ(r.node_rank, 1);
}

TEST_F(CompanionChannelTest, ACollectiveAnnouncedJustBeforeTheRankDiesIsKept) {
  const auto ann_path = path_.parent_path() / ("ddp-channel-" + std::to_string(getpid()) + ".7.ann");
  {
    AnnouncementWriter writer(ann_path.string());
    FakeCompanion c(path_.string());
    std::string hello = kHello;
    hello.insert(hello.size() - 1, R"j(,"announcements":")j" + ann_path.string() + "\"");
    c.send_text(hello);
    c.send_text(R"j({"type":"heartbeat","step":9,"last_enqueued":26,"last_started":26,"last_completed":26})j");
    ASSERT_TRUE(eventually([&] { return !std::filesystem::exists(ann_path); })) << "mapped, and its name removed";
    writer.write(27, "all_reduce", 4000, "float32", SystemClock::instance().now());
  }  // the process is gone: what it announced is still read
  ASSERT_TRUE(eventually([&] { return !board_.latest().empty(); }));
  const RankReport r = board_.latest().front().report;
  EXPECT_EQ(r.last_started, 27u);
  ASSERT_FALSE(r.recent.empty());
  EXPECT_EQ(r.recent.back().op, "all_reduce");
  EXPECT_EQ(r.recent.back().bytes, 4000);
}

TEST_F(CompanionChannelTest, AnAnnouncementFileOutsideTheAgentsFolderIsNotOpened) {
  TempFolder elsewhere;
  AnnouncementWriter writer(elsewhere.file("x.ann"));
  FakeCompanion c(path_.string());
  std::string hello = kHello;
  hello.insert(hello.size() - 1, R"j(,"announcements":")j" + writer.path() + "\"");
  c.send_text(hello);
  c.send_text(R"j({"type":"heartbeat","step":1,"last_enqueued":3})j");
  writer.write(4, "all_reduce", 8, "float32", SystemClock::instance().now());
  ASSERT_TRUE(eventually([&] { return !board_.latest().empty(); }));
  EXPECT_EQ(board_.latest().front().report.last_enqueued, 3u);
  EXPECT_TRUE(std::filesystem::exists(writer.path())) << "not ours to remove";
}

TEST_F(CompanionChannelTest, AWrongTokenIsRefused) {
  FakeCompanion c(path_.string());
  std::string hello = kHello;
  hello.replace(hello.find("\"tok\""), 5, "\"bad\"");
  c.send_text(hello);
  EXPECT_EQ(c.receive(), "") << "the agent closes the connection";
  EXPECT_TRUE(board_.latest().empty());
}

TEST_F(CompanionChannelTest, ARankOfAnotherGenerationOrNodeIsRefused) {
  for (const std::string& hello : {std::string(R"j({"type":"hello","job_id":"job","token":"tok","rank":4,"generation":1})j"),
                                   std::string(R"j({"type":"hello","job_id":"job","token":"tok","rank":6,"generation":2})j")}) {
    FakeCompanion c(path_.string());
    c.send_text(hello);
    EXPECT_EQ(c.receive(), "") << hello;
  }
}

TEST_F(CompanionChannelTest, AStackRequestGoesOutAndTheAnswerComesBack) {
  FakeCompanion c(path_.string());
  c.send_text(kHello);
  c.send_text(R"j({"type":"heartbeat","step":3})j");
  ASSERT_TRUE(eventually([&] { return !board_.latest().empty(); }));
  board_.request_stack_dumps({4});
  EXPECT_EQ(c.receive(), R"j({"type":"dump_stacks"})j");
  c.send_text(R"j({"type":"stacks","threads":[{"name":"MainThread","main":true,"frames":[{"function":"f","file":"/a.py","line":3}]}]})j");
  std::vector<RankStacks> answers;
  ASSERT_TRUE(eventually([&] {
    auto more = board_.take_stacks();
    answers.insert(answers.end(), more.begin(), more.end());
    return !answers.empty();
  }));
  EXPECT_EQ(answers[0].rank, 4);
  ASSERT_EQ(answers[0].threads.size(), 1u);
  EXPECT_EQ(answers[0].threads[0].frames[0].function, "f");
}

}  // namespace
}  // namespace ddp
