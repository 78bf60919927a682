// SmallVector (shapes, masks, a tracker's views): the std::vector operations the engine uses,
// checked against std::vector inline and past the inline capacity, and for elements that own
// memory (Views hold SmallVectors themselves).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/shape/small_vector.h"
#include "engine/shape/view.h"

using namespace tiny;

namespace {

template <class V>
std::vector<typename V::value_type> as_std(const V& v) {
  return std::vector<typename V::value_type>(v.begin(), v.end());
}

}  // namespace

TEST(SmallVector, MatchesStdVectorInlineAndOnTheHeap) {
  for (int n : {0, 1, 3, 4, 5, 9, 40}) {
    SmallVector<int64_t, 4> s;
    std::vector<int64_t> v;
    for (int i = 0; i < n; i++) {
      s.push_back(i * 7);
      v.push_back(i * 7);
    }
    EXPECT_EQ(as_std(s), v);
    s.insert(s.begin(), -1);
    v.insert(v.begin(), -1);
    s.insert(s.begin() + long(s.size() / 2), size_t(3), int64_t(5));
    v.insert(v.begin() + long(v.size() / 2), size_t(3), int64_t(5));
    EXPECT_EQ(as_std(s), v);
    s.erase(s.begin() + 1, s.begin() + 3);
    v.erase(v.begin() + 1, v.begin() + 3);
    EXPECT_EQ(as_std(s), v);
    // a range of the vector itself, inserted into it (it may move while growing)
    s.insert(s.end(), s.begin(), s.end());
    const std::vector<int64_t> before = v;
    v.insert(v.end(), before.begin(), before.end());
    EXPECT_EQ(as_std(s), v);
    s.resize(2);
    v.resize(2);
    EXPECT_EQ(as_std(s), v);
    s.resize(11, 8);
    v.resize(11, 8);
    EXPECT_EQ(as_std(s), v);
    EXPECT_EQ(s.back(), 8);
    EXPECT_THROW(s.at(11), std::out_of_range);
  }
}

TEST(SmallVector, CopiesAndMovesKeepTheirElements) {
  for (int n : {2, 9}) {  // inline, then on the heap
    SmallVector<std::string, 3> a;
    for (int i = 0; i < n; i++) a.push_back(std::string(30, char('a' + i)));  // (each on the heap)
    SmallVector<std::string, 3> copy = a;
    EXPECT_TRUE(copy == a);
    SmallVector<std::string, 3> moved = std::move(a);
    EXPECT_TRUE(moved == copy);
    EXPECT_TRUE(a.empty());
    a = moved;  // reusable after a move
    a.push_back(a.front());  // an element of the vector itself, as it grows
    EXPECT_EQ(a.back(), copy.front());
    a.erase(a.begin());
    EXPECT_EQ(a.front(), n > 1 ? copy[1] : copy[0]);
    // its own elements inserted into it: read before any of them moves
    const std::vector<std::string> before(a.begin(), a.end());
    a.insert(a.begin() + 1, a.begin(), a.end());
    std::vector<std::string> expected = before;
    expected.insert(expected.begin() + 1, before.begin(), before.end());
    EXPECT_EQ(std::vector<std::string>(a.begin(), a.end()), expected);
    a.erase(a.begin() + 1, a.begin() + 1 + long(before.size()));
    moved = std::move(a);
    EXPECT_EQ(moved.size(), size_t(n));
  }
}

TEST(SmallVector, ShapeTrackersWithSeveralViews) {
  // views past the tracker's one inline view: a padded then reshaped tensor takes two
  ShapeTracker st = ShapeTracker::from_shape({4, 6}).pad({{1, 1}, {0, 2}}).reshape({48});
  ASSERT_EQ(st.views().size(), 2u);
  ShapeTracker copy = st;
  EXPECT_TRUE(copy == st);
  for (int64_t i = 0; i < 48; i++) EXPECT_EQ(copy.eval_index({i}), st.eval_index({i}));
  // row 0 and column 6 onwards are padding (-1), the rest reads the base row-major
  EXPECT_EQ(st.eval_index({0}), -1);
  EXPECT_EQ(st.eval_index({8}), 0);
  EXPECT_EQ(st.eval_index({9}), 1);
  EXPECT_EQ(st.eval_index({14}), -1);
}
