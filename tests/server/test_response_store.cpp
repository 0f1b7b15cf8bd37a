#include <gtest/gtest.h>

#include <string>

#include "server/response_store.h"

namespace coda {
namespace {

nlohmann::ordered_json turns(size_t text_bytes) {
  return nlohmann::ordered_json::array({{{"role", "user"}, {"content", std::string(text_bytes, 'a')}}});
}

TEST(ResponseStore, KeepsWhatFitsAndDropsTheLeastRecentlyUsedFirst) {
  // Each entry of 1,000 characters counts about 1,100 bytes (its JSON, its id twice, the entry), so
  // a 4,000-byte budget holds three.
  ResponseStore store(4000);
  ASSERT_TRUE(store.put("resp_a", turns(1000)));
  ASSERT_TRUE(store.put("resp_b", turns(1000)));
  ASSERT_TRUE(store.put("resp_c", turns(1000)));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_LE(store.bytes(), store.budget());
  // Reading a marks it recently used, so the next put drops b, not a.
  ASSERT_TRUE(store.get("resp_a").has_value());
  ASSERT_TRUE(store.put("resp_d", turns(1000)));
  EXPECT_TRUE(store.get("resp_a").has_value());
  EXPECT_FALSE(store.get("resp_b").has_value());
  EXPECT_TRUE(store.get("resp_c").has_value());
  EXPECT_TRUE(store.get("resp_d").has_value());
  EXPECT_EQ((*store.get("resp_d"))[0]["content"], std::string(1000, 'a'));
  EXPECT_LE(store.bytes(), store.budget());
}

TEST(ResponseStore, AnEntryOverTheWholeBudgetIsNotKeptAndEvictsNothing) {
  ResponseStore store(4000);
  ASSERT_TRUE(store.put("resp_a", turns(1000)));
  EXPECT_FALSE(store.put("resp_big", turns(5000)));
  EXPECT_FALSE(store.get("resp_big").has_value());
  EXPECT_TRUE(store.get("resp_a").has_value());
}

TEST(ResponseStore, ThousandsOfPutsStayWithinTheBudget) {
  // A client flooding the route: the total never passes the budget, and the newest survive.
  ResponseStore store(100000);
  for (int i = 0; i < 5000; ++i) {
    ASSERT_TRUE(store.put("resp_" + std::to_string(i), turns(static_cast<size_t>(100 + i % 900))));
    ASSERT_LE(store.bytes(), store.budget());
  }
  EXPECT_TRUE(store.get("resp_4999").has_value());
  EXPECT_FALSE(store.get("resp_0").has_value());
  // Replacing an id counts it once.
  const size_t before = store.bytes();
  ASSERT_TRUE(store.put("resp_4999", turns(100 + 4999 % 900)));
  EXPECT_EQ(store.bytes(), before);
  EXPECT_TRUE(store.erase("resp_4999"));
  EXPECT_FALSE(store.erase("resp_4999"));
  EXPECT_LT(store.bytes(), before);
}

}  // namespace
}  // namespace coda
