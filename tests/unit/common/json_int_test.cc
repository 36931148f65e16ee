// common/json_int.h: integers from outside JSON read in their type's range, never cast blindly
// (the fuzz findings in docs/fuzzing.md: a float past int64 cast, a crc32c of 2^32 wrapped to 0).
#include "common/json_int.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace eft {
namespace {

using nlohmann::json;

TEST(JsonIntTest, IntegersInRangeAndWholeFloatsAreRead) {
  EXPECT_EQ(TryJsonInt<int64_t>(json(-5)), -5);
  EXPECT_EQ(TryJsonInt<uint32_t>(json(4294967295u)), 4294967295u);
  EXPECT_EQ(TryJsonInt<int64_t>(json(3.0)), 3);
  EXPECT_EQ(TryJsonInt<int64_t>(json::parse("9223372036854775807")), INT64_MAX);
  EXPECT_EQ(TryJsonInt<int64_t>(json::parse("-9223372036854775808")), INT64_MIN);
}

TEST(JsonIntTest, WhatDoesNotFitIsRefusedWithTheReason) {
  std::string why;
  EXPECT_EQ(TryJsonInt<uint32_t>(json(4294967296ull), &why), std::nullopt);
  EXPECT_EQ(why, "number 4294967296 is out of range");
  EXPECT_EQ(TryJsonInt<int64_t>(json::parse("1e20"), &why), std::nullopt);
  EXPECT_NE(why.find("out of range"), std::string::npos);
  EXPECT_EQ(TryJsonInt<int64_t>(json::parse("9223372036854775808"), &why), std::nullopt);  // unsigned, one past
  EXPECT_EQ(TryJsonInt<uint32_t>(json(-1), &why), std::nullopt);
  EXPECT_EQ(TryJsonInt<int64_t>(json(2.5), &why), std::nullopt);
  EXPECT_EQ(why, "number 2.5 is not a whole number");
  EXPECT_EQ(TryJsonInt<int64_t>(json(std::nan("")), &why), std::nullopt);
  EXPECT_EQ(TryJsonInt<int64_t>(json("7"), &why), std::nullopt);
  EXPECT_EQ(why, "expected a number, got string");
  EXPECT_THROW(JsonInt<uint32_t>(json(4294967296ull)), std::out_of_range);
}

TEST(JsonIntTest, AMissingKeyIsTheFallbackAPresentBadValueIsNot) {
  const json obj = {{"step", 12}, {"bad", 1e30}};
  EXPECT_EQ(JsonIntOr<int64_t>(obj, "step", -1), 12);
  EXPECT_EQ(JsonIntOr<int64_t>(obj, "missing", -1), -1);
  EXPECT_THROW(JsonIntOr<int64_t>(obj, "bad", -1), std::out_of_range);
  EXPECT_EQ(TryJsonIntOr<int64_t>(obj, "step", -1), 12);
  EXPECT_EQ(TryJsonIntOr<int64_t>(obj, "missing", -1), -1);
  EXPECT_EQ(TryJsonIntOr<int64_t>(obj, "bad", -1), std::nullopt);
}

}  // namespace
}  // namespace eft
