// The reader of the Python companion's collective announcements: a file
// another process writes, so every way it can be wrong or half-written is tried.
#include "companion/collective_announcements.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "announcement_writer.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

// A file already mapped: its writer w and reader a, at a fixed now.
class MappedAnnouncementFile : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(a); }
  MappedAnnouncements file;
  AnnouncementWriter& w = file.writer;
  const std::shared_ptr<const CollectiveAnnouncements>& a = file.reader;
  const SteadyTime now = SystemClock::instance().now();
};

TEST(CollectiveAnnouncements, ReadsWhatWasAnnouncedAfterACount) {
  TempFolder folder;
  AnnouncementWriter w(folder.file("r.ann"));
  const SteadyTime now = SystemClock::instance().now();
  w.write(7, "all_reduce", 4000, "float32", now - 2s);
  w.write(8, "barrier", 0, "", now - 1s);
  auto a = open_announcements(w.path(), folder.path());
  ASSERT_TRUE(a);
  EXPECT_FALSE(std::filesystem::exists(w.path())) << "the name is removed once mapped";
  EXPECT_EQ(a->count(), 2u);
  const auto all = a->since(0, now);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].sequence, 7u);
  EXPECT_EQ(all[0].op, "all_reduce");
  EXPECT_EQ(all[0].bytes, 4000);
  EXPECT_EQ(all[0].dtype, "float32");
  EXPECT_EQ(all[0].state, "started");
  EXPECT_EQ(all[0].age, 2s);
  EXPECT_EQ(all[1].op, "barrier");
  EXPECT_EQ(all[1].dtype, "");
  ASSERT_EQ(a->since(1, now).size(), 1u);
  EXPECT_TRUE(a->since(2, now).empty());
  w.write(9, "broadcast", 8, "int64", now);
  EXPECT_EQ(a->since(2, now).at(0).sequence, 9u) << "later writes show through the mapping";
  EXPECT_EQ(a->since(2, now).at(0).group, "") << "the default group";
}

TEST_F(MappedAnnouncementFile, AReturnedCallIsCompleted) {
  w.write(3, "all_reduce", 16, "float32", now);
  w.write(4, "barrier", 0, "", now);
  w.returned(1);  // announcement 1: sequence 3
  const auto kept = a->since(0, now);
  ASSERT_EQ(kept.size(), 2u) << "the mark is not taken for a torn entry";
  EXPECT_EQ(kept[0].sequence, 3u);
  EXPECT_EQ(kept[0].state, "completed");
  EXPECT_EQ(kept[1].state, "started");
}

TEST_F(MappedAnnouncementFile, ACollectiveOfAnotherGroupNamesIt) {
  const std::string hashed(40, 'f');  // torch 2.x names some groups by a 40-digit hash
  w.write(3, "all_reduce", 16, "float32", now, "1");
  w.write(4, "broadcast", 8, "int64", now, hashed);
  w.write(5, "all_reduce", 4, "float32", now, "pair group");  // not a plain name: dropped, not taken as the default group
  const auto kept = a->since(0, now);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].group, "1");
  EXPECT_EQ(kept[0].sequence, 3u);
  EXPECT_EQ(kept[1].group, hashed);
}

TEST_F(MappedAnnouncementFile, OnlyTheLastSlotsSurviveAndTornEntriesAreSkipped) {
  for (uint64_t s = 1; s <= 20; ++s) w.write(s, "all_reduce", 4, "float32", now);
  auto kept = a->since(0, now);
  ASSERT_EQ(kept.size(), CollectiveAnnouncements::kSlots);
  EXPECT_EQ(kept.front().sequence, 5u);
  EXPECT_EQ(kept.back().sequence, 20u);
  w.tear(19);
  kept = a->since(17, now);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].sequence, 18u);
  EXPECT_EQ(kept[1].sequence, 20u);
}

TEST_F(MappedAnnouncementFile, StrangeNamesAndStampsAreNotTrusted) {
  w.write(1, "all\"reduce", 4, "float32", now);        // not a plain name: dropped
  w.write(0, "all_reduce", 4, "float32", now);         // no sequence: dropped
  w.write(3, "all_reduce", -5, "float\n32", now + 1h);  // a future stamp, negative bytes, odd dtype
  const auto kept = a->since(0, now);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].sequence, 3u);
  EXPECT_EQ(kept[0].bytes, 0);
  EXPECT_EQ(kept[0].dtype, "");
  EXPECT_EQ(kept[0].age, Duration::zero());
}

TEST(CollectiveAnnouncements, OnlyAPlainFileOfThisLayoutInTheFolderIsOpened) {
  TempFolder folder;
  TempFolder other;
  std::string error;
  AnnouncementWriter outside(other.file("o.ann"));
  EXPECT_FALSE(CollectiveAnnouncements::open(outside.path(), folder.path(), &error));
  EXPECT_EQ(error, "not in the agent's runtime folder");
  EXPECT_FALSE(CollectiveAnnouncements::open(folder.path() + "/../" + std::filesystem::path(other.path()).filename().string() + "/o.ann", folder.path(), &error));
  EXPECT_TRUE(std::filesystem::exists(outside.path()));

  ASSERT_EQ(symlink(outside.path().c_str(), folder.file("link.ann").c_str()), 0);
  EXPECT_FALSE(CollectiveAnnouncements::open(folder.file("link.ann"), folder.path(), &error)) << "a symlink";
  EXPECT_FALSE(CollectiveAnnouncements::open(folder.file("missing.ann"), folder.path(), &error));
  EXPECT_FALSE(CollectiveAnnouncements::open(folder.path(), std::filesystem::path(folder.path()).parent_path().string(), &error))
      << "a folder";

  AnnouncementWriter small(folder.file("small.ann"), "DDPA", 2, 100);
  EXPECT_FALSE(CollectiveAnnouncements::open(small.path(), folder.path(), &error));
  EXPECT_EQ(error, "too small");
  AnnouncementWriter magic(folder.file("magic.ann"), "XXXX", 2);
  EXPECT_FALSE(CollectiveAnnouncements::open(magic.path(), folder.path(), &error));
  AnnouncementWriter version(folder.file("version.ann"), "DDPA", 1);  // the layout before groups
  EXPECT_FALSE(CollectiveAnnouncements::open(version.path(), folder.path(), &error));
  EXPECT_EQ(error, "not an announcement file of this version");
}

}  // namespace
}  // namespace ddp
